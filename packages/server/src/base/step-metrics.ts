/**
 * The step figures of `GET /metrics`: each step's times from the host's per-step listener, or,
 * for a host without one, the step statistics seen on their way to clients.
 */
import type { StatsMessage } from '@reactor/protocol';
import type { ServerMetrics } from './metrics.js';
import type { StepSample } from './servable-host.js';

/** Step times into `reactor_step_duration_seconds` and `reactor_step_stage_seconds`. */
export class StepMetrics {
  readonly #metrics: ServerMetrics;
  #statsSteps = 0;

  constructor(metrics: ServerMetrics) {
    this.#metrics = metrics;
  }

  /** The steps counted from `stats` messages (for a host without step counters). */
  get statsSteps(): number {
    return this.#statsSteps;
  }

  /** One step's times into `reactor_step_duration_seconds` and `reactor_step_stage_seconds`. */
  observeStep(s: StepSample): void {
    const m = this.#metrics;
    m.stepSeconds.observe(s.elapsedMs / 1000);
    m.stage.generate.observe(s.elapsedMs / 1000);
    if (s.processInputMs !== undefined) m.stage.processInput.observe(s.processInputMs / 1000);
    if (s.processOutputMs !== undefined) m.stage.processOutput.observe(s.processOutputMs / 1000);
    const r = s.runner;
    if (r) {
      m.stage.runnerDispatch.observe(r.dispatchMs / 1000);
      m.stage.runnerRanks.observe(r.ranksMs / 1000);
      m.stage.runnerHandback.observe(r.handbackMs / 1000);
    }
  }

  /**
   * Step statistics seen on their way to clients. Without a per-step listener on the host
   * (`perStep` false), each new step of the window is recorded at the window's mean model time.
   */
  onStats(msg: StatsMessage, perStep: boolean): void {
    if (msg.steps < this.#statsSteps) this.#statsSteps = 0; // a new session restarted the count
    const fresh = msg.steps - this.#statsSteps;
    if (fresh <= 0) return;
    this.#statsSteps = msg.steps;
    if (perStep) return;
    for (let i = 0; i < Math.min(fresh, 10_000); i++) this.#metrics.stepSeconds.observe(msg.stepMs / 1000);
  }
}
