/**
 * A session's frame-time health (issue 42, `gpu.admit: deadline`): the intervals between the
 * frames playout hands to the clients on the clock track, over a recent window, against the
 * track's frame interval (`1000 / fps`). What the host reports to its session admission each
 * second; the GPU slot lease publishes it for the other instances on the GPU.
 */

/** How often the host reports its session's frame times to the admission, ms. */
export const FRAME_HEALTH_REPORT_MS = 1_000;
/** How far back the frame-time p99 looks, ms. */
export const FRAME_HEALTH_WINDOW_MS = 5_000;
/** Fewer intervals than this in the window: not measured yet (a session that just started, or paused). */
export const FRAME_HEALTH_MIN_INTERVALS = 8;

/** One session's frame times, as its host reports them to the admission. */
export interface SessionFrameHealth {
  /** The session's id. */
  session: string;
  /** The clock track's fps (its frame interval is `1000 / fps`); undefined: the app plays at the model's pace, no deadline. */
  fps: number | undefined;
  /** Intervals between played frames in the window. */
  intervals: number;
  /** The p99 of those intervals, ms; undefined with fewer than {@link FRAME_HEALTH_MIN_INTERVALS}. */
  p99Ms: number | undefined;
  /** The window the figures cover, ms. */
  windowMs: number;
}

/** The played-frame times of one session's clock track (a ring of the last window). */
export class FrameTimes {
  readonly #at: number[] = [];

  constructor(
    readonly session: string,
    readonly fps: number | undefined,
    readonly windowMs = FRAME_HEALTH_WINDOW_MS,
  ) {}

  /** A frame of the clock track was played at `now`. */
  played(now = performance.now()): void {
    this.#at.push(now);
    this.#trim(now);
  }

  /** The window's intervals and their p99 (nearest rank). */
  read(now = performance.now()): SessionFrameHealth {
    this.#trim(now);
    const gaps: number[] = [];
    for (let i = 1; i < this.#at.length; i++) gaps.push(this.#at[i]! - this.#at[i - 1]!);
    // The time since the last frame is a gap too: a session whose model stopped delivering shows it now, not at its next frame.
    const last = this.#at[this.#at.length - 1];
    if (last !== undefined && gaps.length > 0) gaps.push(now - last);
    const measured = gaps.length >= FRAME_HEALTH_MIN_INTERVALS;
    return { session: this.session, fps: this.fps, intervals: gaps.length, p99Ms: measured ? p99(gaps) : undefined, windowMs: this.windowMs };
  }

  #trim(now: number): void {
    const from = now - this.windowMs;
    let k = 0;
    while (k < this.#at.length && this.#at[k]! < from) k++;
    if (k > 0) this.#at.splice(0, k);
  }
}

/** The 0.99 quantile by nearest rank (the value at rank ceil(0.99 n)). */
function p99(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil(0.99 * sorted.length) - 1)]!;
}
