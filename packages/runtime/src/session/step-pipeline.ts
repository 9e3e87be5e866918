/**
 * The step loop with steps in flight (issue 39: `ReactorApp.inFlight` > 1). Step k+1's
 * `processInput` -> `generate` dispatch starts before step k's `generate` has returned, so a
 * `DistributedRunner` with `maxInFlight` keeps its pipeline full; outcomes are processed
 * (`processOutput`, frames pushed) strictly in dispatch order.
 *
 * One lock turn dispatches a step (while fewer than `depth` are in flight) and then, once
 * `depth` are in flight (or no step could be dispatched), processes the oldest: in the steady
 * state `depth - 1` calls are in flight between turns, while commands run. What must happen
 * between calls (docs/decisions.md, "Issue 39: steps in flight"):
 * - a setter runs between turns with the calls in flight (its change is read by the next
 *   dispatch: `session.steps + session.inFlight + 1`, what `applied` acks wait for);
 * - every other task (an event, a rewind, a hook) first drains: the calls in flight are
 *   processed and their frames pushed (`HostCore.drainSteps`), then it runs; a session's end
 *   cancels them instead (their restart switch aborts; nothing of them is processed);
 * - a snapshot is due: drained in the turn, then taken;
 * - an urgent command (a field's setter or an event, `urgent: true`) cancels every call in
 *   flight (one restart switch shared by them: an urgent event's drain then drops them
 *   unprocessed, and its handler runs with nothing in flight), and a
 *   refused or failed outcome drops the calls behind it the same way (their frames would come
 *   out of order); a runner crash fails every call in flight at once, the session ends as at depth 1.
 */
import { StepOutcome } from '../app/step-outcome.js';
import { ApplicationError, BufferClosedError, BufferTimeoutError, HostOptionError } from '../errors/errors.js';
import { stepInterrupt } from '../input/input-buffer.js';
import { MAX_IN_FLIGHT } from '../app/reactor-app.js';
import type { Output } from '../output/output.js';
import type { HostSession } from './host-client.js';
import { type BetweenCalls, type HostCore, stepGaveWay } from './host-core.js';
import { type Chunk, normalizeOutput } from './normalize.js';
import { StepPacer } from './step-pacer.js';
import type { Snapshots } from './snapshots.js';
import type { RunnerCallCollector, StepSample } from './step-stages.js';
import type { StepSpan, StepTracing } from './step-tracing.js';

/**
 * Checks an app's {@link ReactorApp.inFlight} once its `load()` set it.
 * @throws HostOptionError (`invalid_host_option`) unless an integer 1..8
 */
export function checkInFlight(value: unknown, app: string): void {
  if (Number.isInteger(value) && (value as number) >= 1 && (value as number) <= MAX_IN_FLIGHT) return;
  throw new HostOptionError(`${app}.inFlight must be an integer 1..${MAX_IN_FLIGHT} (steps in flight), got ${JSON.stringify(value)}`);
}

/** What the pipelined loop uses of its `StepLoop` (an interface: no import cycle). */
export interface PipelineLoop {
  readonly snapshots?: Snapshots;
  readonly ackTrack: number;
  readonly refusalBackoffMs: number;
  /** The runner calls of each step in flight (for its sample's `runner` stages). */
  readonly runnerCalls: RunnerCallCollector;
  refuse(session: HostSession, reason: string, tell?: boolean): 'refused';
  restarted(session: HostSession): 'refused';
  failSession(session: HostSession, where: string, err: unknown): Promise<void>;
  withAcks(session: HostSession, chunk: Chunk, shows: number): Chunk;
  readonly tracing: StepTracing;
  emitSample(sample: StepSample): void;
  clearRefusal(session: HostSession): void;
}

/** A call's outcome and when it came (performance.now()). */
type Settled = ({ ok: true; result: unknown } | { ok: false; error: unknown }) & { at: number };

/** A step whose `generate()` was dispatched and whose outcome is not processed yet. */
interface InFlightStep {
  /** performance.now() when its processInput began, and when generate was called. */
  readonly startMs: number;
  readonly t0: number;
  readonly settled: Promise<Settled>;
  readonly interrupt: AbortController;
  /** Its trace span (OpenTelemetry installed and a provider registered). */
  readonly span: StepSpan | undefined;
}

/** What a turn did: frames to push, a refusal (the loop waits for a change), or nothing. */
type TurnResult = { chunks: Chunk[]; refused: boolean };

export class StepPipeline {
  private readonly queue: InFlightStep[] = [];
  /** The restart switch of the calls in flight (`ReactorApp.restartSignal` while they run). */
  private restart: AbortController | undefined;
  /** Frames leave in order, whether the loop or a drain pushes them. */
  private pushTail: Promise<void> = Promise.resolve();
  /** When the previous call's outcome came (performance.now()). */
  private lastResultAt = 0;
  private readonly drainFn = (mode: BetweenCalls): Promise<void> => (mode === 'cancel' ? this.dropAll(new Error('the session ends')) : this.drain());

  constructor(
    private readonly loop: PipelineLoop,
    private readonly core: HostCore,
    private readonly session: HostSession,
    private readonly depth: number,
  ) {}

  private get live(): boolean {
    return this.session.lifecycle.is('streaming') && this.core.session === this.session;
  }

  async run(): Promise<void> {
    const { core, session } = this;
    const pacer = core.def.pacing === 'just-in-time' ? new StepPacer() : undefined;
    core.drainSteps = this.drainFn;
    try {
      while (this.live) {
        const heldFrom = performance.now();
        if (pacer && this.queue.length > 0) await session.playout.untilNeeded(pacer.lead());
        const startMs = performance.now();
        const delayed = startMs - heldFrom > 0.5;
        const version = core.changeVersion;
        let turn: TurnResult = { chunks: [], refused: false };
        await core.lock.run(async () => {
          if (!session.lifecycle.is('streaming')) return;
          turn = await this.turn();
        }, 'step');
        if (turn.refused) {
          await core.waitForChange(version, this.loop.refusalBackoffMs);
          await yieldToEventLoop();
          continue;
        }
        if (turn.chunks.length > 0) {
          const readyMs = performance.now();
          pacer?.record(readyMs - startMs, session.playout.lateBy(readyMs), delayed);
          await this.push(turn.chunks);
        }
        await yieldToEventLoop();
      }
    } finally {
      if (core.drainSteps === this.drainFn) core.drainSteps = undefined;
      await this.dropAll(new Error('the session ended with steps in flight'));
    }
  }

  /** One turn under the lock: a snapshot that is due (after a drain), a dispatch, then the oldest outcome once the pipeline is full. */
  private async turn(): Promise<TurnResult> {
    const chunks: Chunk[] = [];
    const snapshots = this.loop.snapshots;
    if (snapshots?.due(this.session)) {
      while (this.queue.length > 0 && this.live) {
        const r = await this.completeOldest();
        if (r === 'refused') return { chunks, refused: true };
        if (r) chunks.push(r);
      }
      if (!this.live) return { chunks, refused: false };
      await snapshots.take(this.session);
    }
    let dispatched = false;
    if (this.queue.length < this.depth) {
      const d = await this.dispatch();
      if (d === 'ended') return { chunks, refused: false };
      if (d === 'restarted') {
        this.loop.restarted(this.session);
        await this.dropAll(new Error('an urgent change supersedes the steps in flight'));
        return { chunks, refused: true };
      }
      if (typeof d === 'object' && this.queue.length === 0) {
        this.loop.refuse(this.session, d.reason, d.tell);
        return { chunks, refused: true };
      }
      dispatched = d === 'ok';
    }
    // Fill the pipeline first (a turn each, so commands run between); then one outcome a turn.
    if (this.queue.length === 0 || (dispatched && this.queue.length < this.depth)) return { chunks, refused: false };
    const r = await this.completeOldest();
    if (r === 'refused') return { chunks, refused: true };
    if (r) chunks.push(r);
    return { chunks, refused: false };
  }

  /** processInput and the generate() call, not awaited. */
  private async dispatch(): Promise<'ok' | 'ended' | 'restarted' | { reason: string; tell: boolean }> {
    const { core, session } = this;
    const interrupt = new AbortController();
    if (core.tasksWaiting > 0) interrupt.abort(stepGaveWay());
    if (!this.restart) {
      this.restart = new AbortController();
      // A granted urgent change queued before this turn took the lock: this step reads the old value.
      if (session.urgentPending > 0) this.restart.abort(new Error('an urgent change waits to run'));
    }
    session.urgentRestart = this.restart;
    session.stepInterrupt = interrupt;
    const startMs = performance.now();
    const span = this.loop.tracing.begin(startMs, core.def.appClass.name, session.id);
    const traced = <T>(fn: () => T): T => (span ? span.run(fn) : fn());
    let input: unknown;
    try {
      input = await traced(() => stepInterrupt.run(interrupt.signal, () => core.app.processInput()));
    } catch (err) {
      span?.drop('processInput');
      if (err instanceof ApplicationError || isInputUnavailable(err)) return { reason: (err as Error).message, tell: err !== interrupt.signal.reason };
      await this.loop.failSession(session, 'processInput', err);
      return 'ended';
    } finally {
      session.stepInterrupt = undefined;
    }
    if (this.restart.signal.aborted) {
      span?.drop('urgent');
      return 'restarted';
    }
    const t0 = performance.now();
    let call: Promise<unknown>;
    // Its runner calls are published synchronously in its async context (the interrupt signal).
    this.loop.runnerCalls.beginInFlight(interrupt.signal);
    try {
      // Called now (its runner call is dispatched before this returns), awaited in order later.
      call = Promise.resolve(traced(() => stepInterrupt.run(interrupt.signal, () => core.app.generate(input))));
    } catch (err) {
      call = Promise.reject(err);
    }
    const settled = call.then(
      (result): Settled => ({ ok: true, result, at: performance.now() }),
      (error: unknown): Settled => ({ ok: false, error, at: performance.now() }),
    );
    this.queue.push({ startMs, t0, settled, interrupt, span });
    session.inFlight++;
    return 'ok';
  }

  /** Awaits the oldest call and processes its outcome: its frames, `'refused'` (dropped with those behind it), or undefined. */
  private async completeOldest(): Promise<Chunk | 'refused' | undefined> {
    const { core, session, loop } = this;
    const step = this.queue[0]!;
    session.stepInterrupt = step.interrupt;
    let o: Settled;
    try {
      o = await step.settled;
    } finally {
      session.stepInterrupt = undefined;
    }
    this.queue.shift();
    session.inFlight--;
    if (this.restart?.signal.aborted) {
      step.span?.drop('urgent');
      loop.runnerCalls.forget(step.interrupt.signal);
      loop.restarted(session);
      await this.dropAll(new Error('an urgent change supersedes the steps in flight'));
      return 'refused';
    }
    let error: unknown;
    if (!o.ok) {
      const err = o.error;
      const gaveWay = step.interrupt.signal.aborted && err === step.interrupt.signal.reason;
      if (isInputUnavailable(err) || gaveWay) {
        step.span?.drop('refused');
        loop.runnerCalls.forget(step.interrupt.signal);
        loop.refuse(session, (err as Error).message, !gaveWay);
        await this.dropAll(new Error('a step before these was refused'));
        return 'refused';
      }
      error = err ?? new Error('generate() threw a nullish value');
      core.counters.modelErrors++;
    }
    session.urgentReady = true;
    loop.clearRefusal(session);
    const t1 = performance.now();
    // The model's time for this step as the pipeline delivers it: from its dispatch or the
    // previous result, whichever came later (not from dispatch: that counts the wait behind the
    // call before it, and playout spreads a step's frames over this time when the track has no fps).
    const elapsedMs = Math.max(0, o.at - Math.max(step.t0, this.lastResultAt));
    const { stages: runner, calls } = loop.runnerCalls.endInFlight(step.interrupt.signal, this.lastResultAt);
    this.lastResultAt = o.at;
    session.steps++;
    session.windowSteps++;
    session.windowModelMs += elapsedMs;
    core.counters.steps++;
    const sample: StepSample = {
      elapsedMs,
      failed: error !== undefined,
      processInputMs: step.t0 - step.startMs,
      processOutputMs: undefined,
      runner,
    };
    // Its span's generate runs from its call to its outcome (not elapsedMs, which is the pipeline's share).
    const endSpan = (): void => step.span?.end(step.startMs, { ...sample, elapsedMs: o.at - step.t0 }, calls, t1);
    let output: Output | null | undefined;
    let chunk: Chunk | undefined;
    try {
      const outcome = new StepOutcome(o.ok ? o.result : undefined, error, elapsedMs, session.steps);
      output = await (step.span ? step.span.run(() => core.app.processOutput(outcome)) : core.app.processOutput(outcome));
      if (output !== null && output !== undefined)
        chunk = loop.withAcks(session, normalizeOutput(core.def, output, elapsedMs), output.inputStep ?? session.steps);
    } catch (err) {
      sample.processOutputMs = performance.now() - t1;
      loop.emitSample(sample);
      endSpan();
      await this.dropAll(new Error('a step before these failed'));
      await loop.failSession(session, 'processOutput', err);
      return undefined;
    }
    sample.processOutputMs = performance.now() - t1;
    loop.emitSample(sample);
    endSpan();
    if (this.live) loop.snapshots?.stepped(session, chunk, loop.ackTrack);
    return chunk;
  }

  /** Under the lock, for a task that needs the model between calls: every call in flight processed, its frames pushed. */
  private async drain(): Promise<void> {
    while (this.queue.length > 0) {
      if (!this.live) return this.dropAll(new Error('the session ended with steps in flight'));
      const r = await this.completeOldest();
      if (r && r !== 'refused') await this.push([r]);
    }
  }

  /** Cancels the calls in flight (their restart switch) and waits until each settled; nothing of them is processed. */
  private async dropAll(reason: Error): Promise<void> {
    const restart = this.restart;
    this.restart = undefined;
    if (restart && !restart.signal.aborted) restart.abort(reason);
    const dropped = this.queue.splice(0);
    this.session.inFlight -= dropped.length;
    for (const s of dropped) {
      this.loop.runnerCalls.forget(s.interrupt.signal);
      s.span?.drop(reason.message);
    }
    this.session.urgentRestart = undefined;
    await Promise.all(dropped.map((s) => s.settled));
  }

  private push(chunks: Chunk[]): Promise<void> {
    const { session } = this;
    const next = this.pushTail.then(async () => {
      for (const c of chunks) await session.playout.push(c);
    });
    this.pushTail = next.catch(() => undefined);
    return next;
  }
}

function isInputUnavailable(err: unknown): err is BufferClosedError | BufferTimeoutError {
  return err instanceof BufferClosedError || err instanceof BufferTimeoutError;
}

function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
