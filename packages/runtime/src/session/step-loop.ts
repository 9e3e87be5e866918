/**
 * The step loop of a streaming session: `processInput` -> `generate` -> `processOutput` under
 * the step lock, one step after another; a refused step waits for a change (or the backoff),
 * a failed one ends the session; the media of each step goes to playout outside the lock.
 */
import type { ErrorBody } from '@reactor/protocol';
import { StepOutcome } from '../app/step-outcome.js';
import { hostContext } from '../app/weights.js';
import { ApplicationError, BufferClosedError, BufferTimeoutError, RuntimeErrorCode } from '../errors/errors.js';
import { stepInterrupt } from '../input/input-buffer.js';
import type { Output } from '../output/output.js';
import type { Broadcast } from './broadcast.js';
import type { HostSession } from './host-client.js';
import { errorText, type HostCore, stepGaveWay } from './host-core.js';
import { withTraceback } from './error-report.js';
import { type Chunk, clockTrack, normalizeOutput } from './normalize.js';
import { StepPacer } from './step-pacer.js';
import { StepPipeline } from './step-pipeline.js';
import { RunnerCallCollector, type StepSample } from './step-stages.js';
import { StepTracing } from './step-tracing.js';
import type { Snapshots } from './snapshots.js';

/** A host's step loops (one per session while it streams) and their listeners. */
export class StepLoop {
  private readonly stepListeners = new Set<(step: StepSample) => void>();
  private readonly loops = new Set<Promise<void>>();
  /** The chunk index of the track `applied` messages name (see `applied.ts`). */
  /** @internal */
  readonly ackTrack: number;
  private readonly ackOnVideo: boolean;
  /** The runner calls of the step in flight (subscribed while a step listener exists). */
  /** @internal the pipelined loop's too (its steps' calls, by interrupt signal) */
  readonly runnerCalls = new RunnerCallCollector();
  /** OpenTelemetry spans, when the API is installed and a provider registered. @internal the pipelined loop's too */
  readonly tracing = new StepTracing();
  /** The sample of the step in flight (one object, reused: listeners read it during their call). */
  private readonly sample: StepSample = { elapsedMs: 0, failed: false, processInputMs: 0, processOutputMs: undefined, runner: undefined };
  private sampled = false;

  constructor(
    private readonly core: HostCore,
    private readonly broadcast: Broadcast,
    /** Whether the host is `ready` (a loop starts only then). */
    private readonly ready: () => boolean,
    /** Ends a session whose step failed (the host's `endSession`, under the lock). */
    private readonly endSession: (session: HostSession, error: ErrorBody) => Promise<void>,
    /** Retry delay after a refused step when nothing changes, ms. */
    readonly refusalBackoffMs: number,
    /** The rewind ring (an app with snapshots): a snapshot is taken between steps, under the lock. */
    /** @internal the pipelined loop's too */
    readonly snapshots?: Snapshots,
  ) {
    this.ackTrack = clockTrack(core.def.tracks);
    this.ackOnVideo = core.def.tracks[this.ackTrack]?.kind === 'video';
  }

  /**
   * Calls `listener` after every step that ran `generate()` (failed steps too) with its stage
   * times ({@link StepSample}: model time, processInput, processOutput, the runner's part);
   * returns the unsubscribe function.
   */
  onStep(listener: (step: StepSample) => void): () => void {
    this.stepListeners.add(listener);
    this.runnerCalls.attach();
    return () => {
      this.stepListeners.delete(listener);
      if (this.stepListeners.size === 0) this.runnerCalls.detach();
    };
  }

  /** Resolves once every loop has stopped. */
  async stopped(): Promise<void> {
    await Promise.all([...this.loops]);
  }

  ensureLoop(session: HostSession): void {
    if (session.loop || !this.ready()) return;
    // The handle is in place before the loop starts, so the loop can clear it the moment it stops.
    const handle = {};
    session.loop = handle;
    const p = hostContext.run(this.core.ctx, () => this.runLoop(session, handle));
    this.loops.add(p);
    void p.finally(() => this.loops.delete(p));
  }

  private async runLoop(session: HostSession, handle: object): Promise<void> {
    try {
      await this.loopSteps(session);
    } finally {
      if (session.loop === handle) session.loop = undefined;
    }
  }

  private async loopSteps(session: HostSession): Promise<void> {
    const { core } = this;
    // Steps in flight (ReactorApp.inFlight > 1): the pipelined loop; depth 1 stays this one.
    if (core.app.inFlight > 1) return new StepPipeline(this, core, session, core.app.inFlight).run();
    const pacer = core.def.pacing === 'just-in-time' ? new StepPacer() : undefined;
    while (session.lifecycle.is('streaming') && core.session === session) {
      // Just in time: wait (outside the lock: commands run meanwhile) until the queued frames
      // play out within the step's expected duration, so its frames are due soon after they exist.
      const heldFrom = performance.now();
      if (pacer) await session.playout.untilNeeded(pacer.lead());
      const startMs = performance.now();
      const delayed = startMs - heldFrom > 0.5;
      const version = core.changeVersion;
      let chunk: Chunk | undefined;
      let refused = false;
      await core.lock.run(async () => {
        if (!session.lifecycle.is('streaming')) return;
        if (this.snapshots?.due(session)) await this.snapshots.take(session);
        const r = await this.step(session);
        if (r === 'refused') refused = true;
        else chunk = r;
        if (r !== 'refused' && session.lifecycle.is('streaming')) this.snapshots?.stepped(session, chunk, this.ackTrack);
      }, 'step');
      if (refused) {
        await core.waitForChange(version, this.refusalBackoffMs);
        // Whatever woke it, let I/O and timers run before the next try.
        await yieldToEventLoop();
        continue;
      }
      if (chunk) {
        const readyMs = performance.now();
        pacer?.record(readyMs - startMs, session.playout.lateBy(readyMs), delayed);
        // Media leaves outside the lock: commands run while this waits for room.
        await session.playout.push(chunk);
      }
      // A model that answers synchronously would otherwise keep the loop in microtasks and
      // starve I/O (sockets, timers): give the event loop one turn per step.
      await yieldToEventLoop();
    }
  }

  /** One step, under the lock. Returns the media to emit, `'refused'`, or undefined (nothing / session ended). */
  private async step(session: HostSession): Promise<Chunk | 'refused' | undefined> {
    const interrupt = new AbortController();
    // Tasks queued behind this step: a read that would wait gives way at once.
    if (this.core.tasksWaiting > 0) interrupt.abort(stepGaveWay());
    session.stepInterrupt = interrupt;
    // An urgent change aborts it (the app passes it on as `this.restartSignal`): at most once a chunk.
    session.urgentRestart = new AbortController();
    // A granted urgent change queued before this step took the lock: this step reads the old value.
    if (session.urgentPending > 0) session.urgentRestart.abort(new Error('an urgent change waits to run'));
    const startMs = performance.now();
    const span = this.tracing.begin(startMs, this.core.def.appClass.name, session.id);
    this.sampled = false;
    try {
      const run = () => stepInterrupt.run(interrupt.signal, () => this.runStep(session, startMs));
      return await (span ? span.run(run) : run());
    } finally {
      session.stepInterrupt = undefined;
      session.urgentRestart = undefined;
      span?.end(startMs, this.sampled ? this.sample : undefined, this.runnerCalls.lastCalls);
    }
  }

  private async runStep(session: HostSession, startMs: number): Promise<Chunk | 'refused' | undefined> {
    const { app, counters } = this.core;
    let input: unknown;
    try {
      input = await app.processInput();
    } catch (err) {
      if (err instanceof ApplicationError || isInputUnavailable(err)) return this.refuse(session, err.message);
      await this.failSession(session, 'processInput', err);
      return undefined;
    }
    // Superseded before the model ran (an urgent change came meanwhile): no call at all.
    if (session.urgentRestart?.signal.aborted) return this.restarted(session);
    const t0 = performance.now();
    let result: unknown;
    let error: unknown;
    this.runnerCalls.begin(session.stepInterrupt?.signal);
    try {
      result = await app.generate(input);
    } catch (err) {
      // A model that reads a closed (or silent) input track is waiting for a publisher, not broken.
      if (isInputUnavailable(err)) return this.refuse(session, err.message);
      if (session.stepInterrupt?.signal.aborted && err === session.stepInterrupt.signal.reason) return this.refuse(session, (err as Error).message, false);
      if (session.urgentRestart?.signal.aborted) return this.restarted(session);
      error = err ?? new Error('generate() threw a nullish value');
      counters.modelErrors++;
    }
    // Superseded by an urgent change while it ran: its frames show the old value (and an app that
    // did not pass restartSignal on has made them anyway): dropped, the step runs again.
    if (session.urgentRestart?.signal.aborted) return this.restarted(session);
    session.urgentReady = true;
    if (session.lastRefusal !== undefined) {
      session.lastRefusal = undefined;
      this.broadcast.publishStatus();
    }
    const t1 = performance.now();
    const elapsedMs = t1 - t0;
    const runner = this.runnerCalls.end();
    session.steps++;
    session.windowSteps++;
    session.windowModelMs += elapsedMs;
    counters.steps++;
    const sample = this.sample;
    sample.elapsedMs = elapsedMs;
    sample.failed = error !== undefined;
    sample.processInputMs = t0 - startMs;
    sample.processOutputMs = undefined;
    sample.runner = runner;
    this.sampled = true;
    let output: Output | null | undefined;
    try {
      output = await app.processOutput(new StepOutcome(result, error, elapsedMs, session.steps));
      if (output === null || output === undefined) return undefined;
      return this.withAcks(session, normalizeOutput(this.core.def, output, elapsedMs), output.inputStep ?? session.steps);
    } catch (err) {
      this.emitStep(t1);
      await this.failSession(session, 'processOutput', err);
      return undefined;
    } finally {
      if (sample.processOutputMs === undefined) this.emitStep(t1);
    }
  }

  /**
   * Puts the commands waiting for a frame on the step's first slot of the ack track, if the step
   * made one there (on a video track, audio alone is no frame of it): see `applied.ts`.
   */
  /** @internal */
  withAcks(session: HostSession, chunk: Chunk, shows: number): Chunk {
    const slots = chunk[this.ackTrack];
    const first = slots?.[0];
    if (!slots || !first || (this.ackOnVideo && first.rgb === undefined)) return chunk;
    const acks = session.acks.take(shows);
    if (acks) slots[0] = { ...first, acks };
    return chunk;
  }

  /** @internal A pipelined step's sample to every step listener. */
  emitSample(sample: StepSample): void {
    for (const l of this.stepListeners) this.core.safe(l, () => l(sample));
  }

  /** @internal A step ran: the refusal the status shows (if any) is over. */
  clearRefusal(session: HostSession): void {
    if (session.lastRefusal === undefined) return;
    session.lastRefusal = undefined;
    this.broadcast.publishStatus();
  }

  /** The step's sample to every step listener, `processOutput` timed from `outputFrom`. */
  private emitStep(outputFrom: number): void {
    this.sample.processOutputMs = performance.now() - outputFrom;
    for (const l of this.stepListeners) this.core.safe(l, () => l(this.sample));
  }

  /** A step an urgent change superseded: dropped without a word to the clients; the next step reads the change. */
  /** @internal */
  restarted(session: HostSession): 'refused' {
    this.core.counters.urgentRestarts++;
    return this.refuse(session, 'restarted: an urgent change supersedes this chunk', false);
  }

  /** Counts a refused step and logs its reason once (until a step runs or the reason changes). */
  /**
   * A refused step: logged, and (unless `tell` is false: a step that gave way to a command) the
   * reason goes into the session status (`refused`) while it lasts, so clients can say why no
   * frame comes (`paused`, a runner that could not be rebuilt, a track with no publisher).
   */
  /** @internal */
  refuse(session: HostSession, reason: string, tell = true): 'refused' {
    this.core.counters.refusedSteps++;
    if (tell) session.acks.refused();
    if (tell && session.lastRefusal !== reason) {
      session.lastRefusal = reason;
      this.core.logger.info(`step refused: ${reason}`);
      this.broadcast.publishStatus();
    }
    return 'refused';
  }

  /** @internal */
  async failSession(session: HostSession, where: string, err: unknown): Promise<void> {
    const code = typeof (err as { code?: unknown })?.code === 'string' ? ` [${(err as { code: string }).code}]` : '';
    // A rank's error (a Python exception, a desync whose cause is one) shows where it was raised:
    // the first line names the file and line, the frames follow (bounded), in the log and the status.
    const message = withTraceback(`${where}() failed: ${errorText(err)}${code}`, err);
    const [first, ...frames] = message.split('\n');
    this.core.logger.error(
      { err },
      [`${this.core.def.appClass.name}.${where}() threw; ending the session: ${first!.slice(`${where}() failed: `.length)}`, ...frames].join('\n'),
    );
    await this.endSession(session, { code: RuntimeErrorCode.SessionFailed, message });
  }
}

/** A step error that means "no input yet" (the track's publisher left, or a read timed out): the step is refused, not failed. */
function isInputUnavailable(err: unknown): err is BufferClosedError | BufferTimeoutError {
  return err instanceof BufferClosedError || err instanceof BufferTimeoutError;
}

function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
