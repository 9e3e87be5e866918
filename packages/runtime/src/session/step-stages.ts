/**
 * Where a step's time goes: `processInput`, `generate` (and, for an app on a
 * `DistributedRunner`, the runner's dispatch, ranks and hand-back inside it) and
 * `processOutput`, one {@link StepSample} per step for the host's step listeners (the server
 * turns it into `reactor_step_stage_seconds`). The runner publishes each call's time on a
 * `diagnostics_channel` (`@reactor/distributed`'s `RUNNER_CALL_CHANNEL`); the app model does not
 * depend on the runner package, so it subscribes by name, and only while a step listener exists.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { stepInterrupt } from '../input/input-buffer.js';

/** The channel `@reactor/distributed` publishes each runner call's time on (its `RUNNER_CALL_CHANNEL`). */
export const RUNNER_CALL_CHANNEL = 'reactor:runner:call';

/** What the runner publishes per call (`RunnerCallTiming` there): filled as the call completes. */
export interface RunnerCallTiming {
  /** performance.now() when the call began. */
  readonly startMs: number;
  readonly dispatchMs: number;
  readonly ranksMs: number;
  readonly handbackMs: number;
  readonly done: boolean;
}

/** The runner's part of a step's `generate`, summed over the step's runner calls, ms. */
export interface RunnerStages {
  dispatchMs: number;
  ranksMs: number;
  handbackMs: number;
  /** Runner calls the step made (and that completed). */
  calls: number;
}

/**
 * One step, as the host's step listeners get it (the same object for every listener of a
 * step: read it, do not keep it).
 */
export interface StepSample {
  /** Model time (`generate`), ms. */
  elapsedMs: number;
  /** Whether `generate` threw. */
  failed: boolean;
  /** `processInput`, ms. */
  processInputMs: number;
  /** `processOutput` and turning its output into frames, ms (undefined when the step ended before it). */
  processOutputMs: number | undefined;
  /** The runner calls inside `generate`, when the app's model runs on a `DistributedRunner` (undefined otherwise). */
  runner: RunnerStages | undefined;
}

/**
 * Collects the runner calls of the step in flight: a call counts for this step when it was sent
 * from inside its `generate` (its async context carries the step's interrupt signal).
 */
export class RunnerCallCollector {
  private readonly calls: RunnerCallTiming[] = [];
  private signal: AbortSignal | undefined;
  private subscribed = false;
  /** The calls of each pipelined step in flight (`inFlight` > 1), by its interrupt signal. */
  private readonly inFlight = new Map<AbortSignal, RunnerCallTiming[]>();
  private readonly onCall = (msg: unknown): void => {
    const store = stepInterrupt.getStore();
    if (store === undefined) return;
    if (this.signal !== undefined && store === this.signal) this.calls.push(msg as RunnerCallTiming);
    else this.inFlight.get(store)?.push(msg as RunnerCallTiming);
  };

  /** Listens to the runner channel (while the host has step listeners). */
  attach(): void {
    if (this.subscribed) return;
    subscribe(RUNNER_CALL_CHANNEL, this.onCall);
    this.subscribed = true;
  }

  detach(): void {
    if (!this.subscribed) return;
    unsubscribe(RUNNER_CALL_CHANNEL, this.onCall);
    this.subscribed = false;
    this.signal = undefined;
    this.calls.length = 0;
    this.inFlight.clear();
  }

  /** The calls of the last step (until the next {@link begin}), for its trace spans. */
  get lastCalls(): readonly RunnerCallTiming[] {
    return this.calls;
  }

  /** `generate` of the step whose interrupt signal is `signal` begins. */
  begin(signal: AbortSignal | undefined): void {
    if (!this.subscribed) return;
    this.signal = signal;
    this.calls.length = 0;
  }

  /** `generate` ended: the sum of its completed runner calls, or undefined when it made none. */
  end(): RunnerStages | undefined {
    this.signal = undefined;
    return sumCalls(this.calls);
  }

  /** A pipelined step's `generate` (its interrupt signal `signal`) is called; others may be in flight. */
  beginInFlight(signal: AbortSignal): void {
    if (this.subscribed) this.inFlight.set(signal, []);
  }

  /** A pipelined step dropped unprocessed (cancelled): its calls are forgotten. */
  forget(signal: AbortSignal): void {
    this.inFlight.delete(signal);
  }

  /**
   * A pipelined step's outcome came: the sum of its completed runner calls, or undefined when it
   * made none (or nobody listens). `from` is when the previous step's outcome came
   * (performance.now()): a call's ranks time counts from its send or from then, whichever came
   * later, because until then the ranks were still on the calls before it (that time is theirs,
   * and counting it twice would make the stages of a pipeline sum to more than its time), as the
   * step's `elapsedMs` counts from its dispatch or the previous result.
   */
  endInFlight(signal: AbortSignal, from: number): { stages: RunnerStages | undefined; calls: readonly RunnerCallTiming[] } {
    const calls = this.inFlight.get(signal);
    this.inFlight.delete(signal);
    return { stages: calls ? sumCalls(calls, from) : undefined, calls: calls ?? [] };
  }
}

/**
 * The sum of the completed calls, or undefined when none completed. With `from`, a call's ranks
 * time counts from its send or from `from`, whichever came later ({@link RunnerCallCollector.endInFlight}).
 */
function sumCalls(calls: readonly RunnerCallTiming[], from?: number): RunnerStages | undefined {
  const sum: RunnerStages = { dispatchMs: 0, ranksMs: 0, handbackMs: 0, calls: 0 };
  for (const c of calls) {
    if (!c.done) continue;
    const sentAt = c.startMs + c.dispatchMs;
    sum.dispatchMs += c.dispatchMs;
    sum.ranksMs += from === undefined ? c.ranksMs : Math.max(0, sentAt + c.ranksMs - Math.max(sentAt, from));
    sum.handbackMs += c.handbackMs;
    sum.calls++;
  }
  return sum.calls > 0 ? sum : undefined;
}
