/**
 * When a session's next step should start: just in time for its frames. The step loop waits
 * until the frames already queued play out within {@link StepPacer.lead} ms, so each step reads
 * the newest commands and input and its frames are due soon after they are made, instead of the
 * model running `bufferSize` frames ahead (see docs/decisions.md, "Just-in-time steps").
 *
 * The lead is the step's expected duration (a smoothed mean plus four mean deviations, the way
 * TCP estimates a round trip) plus a margin for what the estimate misses (timers that fire late,
 * a busy event loop): the margin grows by how late a delayed step's frames were and shrinks
 * slowly while they are on time. Pure logic: the loop feeds it what it measured.
 */

/** The least margin: a timer's granularity and the loop's turn of the event loop. */
const MIN_MARGIN_MS = 2;
/** The most margin; beyond it the step starts at once anyway (the queue rarely holds more). */
const MAX_MARGIN_MS = 200;
/** Share of the margin kept after each on-time step (halves in ~35 steps, about a second at 30 fps). */
const MARGIN_DECAY = 0.98;

export class StepPacer {
  #mean: number | undefined;
  #dev = 0;
  #margin = MIN_MARGIN_MS;

  /** How long before the queue runs dry the next step should start, ms (Infinity until a step was measured: start at once). */
  lead(): number {
    return this.#mean === undefined ? Infinity : this.#mean + 4 * this.#dev + this.#margin;
  }

  /** The current margin, ms (for tests and stats). */
  get margin(): number {
    return this.#margin;
  }

  /**
   * One step's figures: `stepMs` from its start to its media ready; `lateMs` how long after its
   * frames were due they were ready (0 when on time); `delayed` whether the pacer held this step
   * back (lateness of a step that started at once is the model's speed, not the pacer's margin).
   */
  record(stepMs: number, lateMs: number, delayed: boolean): void {
    if (this.#mean === undefined) {
      this.#mean = stepMs;
      this.#dev = stepMs / 2;
    } else {
      const err = stepMs - this.#mean;
      this.#mean += err / 8;
      this.#dev += (Math.abs(err) - this.#dev) / 4;
    }
    if (delayed && lateMs > 0.5) this.#margin = Math.min(MAX_MARGIN_MS, this.#margin + lateMs);
    else this.#margin = Math.max(MIN_MARGIN_MS, this.#margin * MARGIN_DECAY);
  }
}
