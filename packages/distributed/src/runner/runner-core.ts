/**
 * The runner's lifecycle: the one state (`new` -> `starting` -> `ready` <-> `busy` ->
 * `unusable` -> `shutdown`), `start()` (the launch plan, then the rank group), the routing of
 * every rank message, the failures and the stop. `DistributedRunner` is the facade over it;
 * with rank reuse a core outlives its first facade and serves the next one.
 * @internal
 */
import { AsyncResource } from 'node:async_hooks';
import { randomBytes } from 'node:crypto';
import type { EventEmitter } from 'node:events';
import type { Logger } from '@reactor/log';
import {
  CallAbortedError,
  type CrashPhase,
  DistributedErrorCode,
  OWN_ERROR_CLASSES,
  RunnerStateError,
  RunnerUnusableError,
  WorkerCrashedError,
  WorkerTimeoutError,
} from '../errors.js';
import type { ExitInfo } from '../process/worker-process.js';
import { type CallOp, type ChildMessage, type Payload, type ShmBackendKind, expectChildMessage } from '../protocol.js';
import { type ResolvedPythonWorker, unsendableError, unsendableToPython } from '../python/python-worker.js';
import { encodeValue } from '../shm/codec.js';
import { processSegmentPrefix, sweepStaleSegments, toPayload } from '../shm/segments.js';
import { transition } from '../state-machine.js';
import type { WorkerClass } from '../worker/distributed-worker.js';
import { type ErrorClass, collectErrorClasses, reviveError } from '../worker/error-codec.js';
import { type WorkerLocation, exportNameOf, staleBuild } from '../worker/locate.js';
import { CallTracker, type CallHost, clampTimer, finishedWhileWaiting } from './call-tracker.js';
import type { DeviceAssignment } from './devices.js';
import { type LaunchNotice, type LaunchWorker, planLaunch } from './launch-plan.js';
import { childMainPath, freePort, probeMachine } from './machine-facts.js';
import type { ResolvedOptions } from './options.js';
import { RankGroup } from './rank-group.js';
import { callChannel, gpuChannel, progressChannel, type RankGpuBusy, type RunnerLoadProgress } from './runner-channels.js';
import { RUNNER_TRANSITIONS, type DistributedRunnerEvents, type RunnerStateName, type StallInfo } from './runner-types.js';

/** A rank's GPU busy report counts for this long (it reports once a second), ms. */
export const GPU_BUSY_STALE_MS = 3000;

interface StartPhase {
  loaded: Set<number>;
  /** Each rank's last load-progress report (ratio, stage). */
  reports: ({ ratio: number; stage: string } | undefined)[];
  timer: NodeJS.Timeout | null;
  resolve(): void;
  reject(err: unknown): void;
}

/** The runner's state and what only that state has. */
type RunnerState =
  | { name: 'new' }
  | { name: 'starting'; start: StartPhase | null }
  | { name: 'ready' }
  | { name: 'busy' }
  | { name: 'unusable'; reason: string; cause: unknown }
  | { name: 'shutdown'; reason: string; cause: unknown };

/** What a runner that takes over parked ranks brings: the worker as the app names it now. */
export type Adopted = { kind: 'typescript'; location: WorkerLocation } | { kind: 'python'; errors: ReadonlyMap<string, ErrorClass> };

export type CoreWorker = { kind: 'typescript'; cls: WorkerClass; location: WorkerLocation } | { kind: 'python'; python: ResolvedPythonWorker };

let runnerSeq = 0;
/** Each notice is logged once per process. */
const noticesShown = new Set<LaunchNotice['key']>();

export class RunnerCore implements CallHost {
  readonly prefix = `${processSegmentPrefix()}-${++runnerSeq}-${randomBytes(3).toString('hex')}`;
  readonly group: RankGroup;
  private readonly tracker: CallTracker;
  private state: RunnerState = { name: 'new' };
  /** This start's first load() failure logged (the rank's number taken out): a peer's same one is said in a short line. */
  private loggedLoadFailure: string | undefined;
  errorClasses: ReadonlyMap<string, ErrorClass> = new Map();
  private backend: ShmBackendKind = 'native';
  /** The async context of `start()`'s caller: progress and GPU samples are published in it, so the app host that started this runner gets them. */
  private scope: AsyncResource | undefined;
  /** Each rank's last GPU busy report and when it came (performance.now()). */
  private readonly gpu: ({ ratio: number; at: number } | undefined)[] = [];

  /**
   * @param events where the events go (the facade; {@link attach} moves them to another)
   * @param beforeStart awaited once the runner is `starting`, before anything is spawned (rank reuse: stop the parked runners of the same worker)
   */
  constructor(
    private events: EventEmitter<DistributedRunnerEvents>,
    private readonly worker: CoreWorker,
    private readonly loadArgs: unknown,
    readonly opts: ResolvedOptions,
    private readonly gpuCount: number,
    private readonly assignments: DeviceAssignment[],
    private readonly beforeStart: () => Promise<void>,
  ) {
    this.group = new RankGroup(this.prefix, opts.worldSize, () => this.stop(false));
    this.tracker = new CallTracker(this);
  }

  get logger(): Logger {
    return this.opts.logger;
  }

  /** The facade that gets the events from now on. */
  attach(events: EventEmitter<DistributedRunnerEvents>): void {
    this.events = events;
  }

  emit<K extends keyof DistributedRunnerEvents>(event: K, ...args: DistributedRunnerEvents[K]): void {
    (this.events.emit as (e: K, ...a: DistributedRunnerEvents[K]) => boolean)(event, ...args);
  }

  /** The one place the state changes. @throws IllegalTransitionError on an edge {@link RUNNER_TRANSITIONS} does not have */
  private go(next: RunnerState): void {
    const from = this.state.name;
    transition('DistributedRunner', RUNNER_TRANSITIONS, from, next.name);
    this.state = next;
    if (next.name === 'unusable' && (from === 'ready' || from === 'busy')) this.emit('unhealthy', next.cause as Error);
    if (next.name === 'ready') this.tracker.watch.startIdle();
    else this.tracker.watch.stopIdle();
  }

  // ---- CallHost ----------------------------------------------------------------------------------

  enterBusy(): void {
    this.go({ name: 'busy' });
  }

  enterReady(): void {
    this.go({ name: 'ready' });
  }

  // ---- what the facade reads -----------------------------------------------------------------

  get stateName(): RunnerStateName {
    return this.state.name;
  }

  get healthy(): boolean {
    return this.state.name === 'ready' || this.state.name === 'busy';
  }

  get stalledRanks(): StallInfo[] {
    if (this.state.name !== 'busy' && this.state.name !== 'ready') return [];
    return this.tracker.watch.stalledRanks();
  }

  get pids(): number[] {
    return this.group.pids;
  }

  get shmBackend(): ShmBackendKind {
    return this.backend;
  }

  /**
   * Rank reuse: the worker module as the app imports it now (a TypeScript worker), or the
   * `errors` classes the app passes now (a Python worker), rebuild the error classes, so
   * `instanceof` holds.
   */
  async readopt(adopted: Adopted): Promise<void> {
    if (adopted.kind === 'python') {
      this.errorClasses = new Map([...OWN_ERROR_CLASSES, ...adopted.errors]);
      return;
    }
    const mod = (await import(adopted.location.sourceUrl)) as Record<string, unknown>;
    this.errorClasses = new Map([...OWN_ERROR_CLASSES, ...collectErrorClasses(mod)]);
  }

  // ---- start -------------------------------------------------------------------------------------

  async start(): Promise<void> {
    if (this.state.name !== 'new') {
      throw new RunnerStateError(
        DistributedErrorCode.RunnerState,
        this.state.name === 'shutdown' || this.state.name === 'unusable'
          ? 'start() on a runner that was shut down: a runner starts once; construct a new DistributedRunner.'
          : 'start() was already called: a runner starts once.',
      );
    }
    this.go({ name: 'starting', start: null });
    this.scope = new AsyncResource('reactor.runner');
    this.publishProgress({ ratio: 0, stage: 'starting ranks', rank: undefined });
    try {
      await this.beforeStart();
      this.assertStillStarting();
      await this.startRanks();
    } catch (err) {
      // Later calls say why (unless shutdown() ended start(): then "it was shut down" is the reason).
      const failed = this.stateName === 'starting';
      await this.teardown(false);
      if (failed) this.go({ name: 'shutdown', reason: `start() failed: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`, cause: err });
      throw err;
    }
  }

  private async startRanks(): Promise<void> {
    sweepStaleSegments();
    const launchWorker = await this.prepareWorkerModule();
    const masterPort = await freePort();
    this.assertStillStarting();
    const facts = probeMachine(this.opts, this.gpuCount, this.assignments);
    const plan = planLaunch({ opts: this.opts, worker: launchWorker, prefix: this.prefix, masterPort }, facts);
    this.backend = plan.backend;
    this.logNotices(plan.notices.filter((n) => n.key === 'shm'));
    this.group.openSegments(plan, this.opts.maxShmBytes, this.opts.maxInFlight);
    const args = toPayload(encodeValue(this.loadArgs), this.group.inputs[0]!);
    this.logNotices(plan.notices.filter((n) => n.key !== 'shm'));
    const state = this.state;
    if (state.name !== 'starting') return;
    await new Promise<void>((resolve, reject) => {
      const phase: StartPhase = { loaded: new Set(), reports: [], timer: null, resolve, reject };
      this.loggedLoadFailure = undefined;
      phase.timer = setTimeout(() => {
        const silent = this.assignments.map((a) => a.rank).filter((r) => !phase.loaded.has(r));
        for (const r of silent) this.group.procs[r]?.killGroup('SIGKILL');
        reject(new WorkerTimeoutError('start()', silent, this.opts.startTimeoutMs, 'startTimeoutMs'));
      }, clampTimer(this.opts.startTimeoutMs));
      state.start = phase;
      this.group.spawn(plan, args, this.logger, {
        onMessage: (rank, msg) => this.onMessage(rank, msg),
        onExit: (info) => this.onExit(info),
        onDesync: (detail) => this.tracker.failDesync(detail),
      });
      this.tracker.watch.watchRanks(this.prefix);
    }).finally(() => {
      if (state.start?.timer) clearTimeout(state.start.timer);
      state.start = null;
    });
    this.assertStillStarting();
    this.go({ name: 'ready' });
    for (const p of this.group.procs) p.setRef(false);
    this.publishProgress({ ratio: 1, stage: 'loaded', rank: undefined });
  }

  // ---- progress and GPU busy ------------------------------------------------------------------

  /** The runner's load progress now: the mean over its ranks (a loaded rank counts 1); the stage of the least advanced one. */
  private loadProgress(start: StartPhase, rank: number): RunnerLoadProgress {
    let sum = 0;
    let least: { ratio: number; stage: string; rank: number } | undefined;
    for (let r = 0; r < this.opts.worldSize; r++) {
      const ratio = start.loaded.has(r) ? 1 : (start.reports[r]?.ratio ?? 0);
      sum += ratio;
      if (!start.loaded.has(r) && (!least || ratio < least.ratio)) least = { ratio, stage: start.reports[r]?.stage ?? 'starting', rank: r };
    }
    const ratio = sum / this.opts.worldSize;
    const stage = least ? (this.opts.worldSize > 1 ? `rank ${least.rank}: ${least.stage}` : least.stage) : 'loaded';
    return { ratio, stage, rank };
  }

  private publishProgress(p: RunnerLoadProgress): void {
    this.emit('progress', p);
    if (progressChannel.hasSubscribers) this.scope?.runInAsyncScope(() => progressChannel.publish(p));
  }

  /** Each rank's GPU busy ratio (0..1) from its last report, undefined where unknown or older than {@link GPU_BUSY_STALE_MS}. */
  get gpuBusy(): (number | undefined)[] {
    const now = performance.now();
    return Array.from({ length: this.opts.worldSize }, (_, r) => {
      const g = this.gpu[r];
      return g && now - g.at <= GPU_BUSY_STALE_MS && this.healthy ? g.ratio : undefined;
    });
  }

  private logNotices(notices: LaunchNotice[]): void {
    for (const n of notices) {
      if (noticesShown.has(n.key)) continue;
      noticesShown.add(n.key);
      if (n.level === 'warn') this.logger.warn(n.message);
      else this.logger.info(n.message);
    }
  }

  /**
   * What the ranks load: a TypeScript worker's compiled module and export (the parent imports
   * the module as the application sees it, to know the export name and to rebuild the module's
   * own error classes so `instanceof` works on rethrown errors), or a Python worker's module and class.
   */
  private async prepareWorkerModule(): Promise<LaunchWorker> {
    if (this.worker.kind === 'python') {
      this.errorClasses = new Map([...OWN_ERROR_CLASSES, ...this.worker.python.errors]);
      return { kind: 'python', python: this.worker.python };
    }
    const { location, cls } = this.worker;
    const mod = (await import(location.sourceUrl)) as Record<string, unknown>;
    this.assertStillStarting();
    const stale = staleBuild(location);
    if (stale) {
      this.logger.warn(
        `STALE BUILD: the ranks will run ${stale.compiled}, which is older than ${stale.newestSource} (changed since the last build). ` +
          `The ranks run the old code while this process imports the new: run pnpm build.`,
      );
    }
    const exportName = exportNameOf(cls, mod, location.sourceUrl);
    this.errorClasses = new Map([...OWN_ERROR_CLASSES, ...collectErrorClasses(mod)]);
    return { kind: 'typescript', childMain: childMainPath(), moduleUrl: location.runnableUrl, exportName };
  }

  /** shutdown() may run while start() awaits; nothing may be spawned after it. */
  private assertStillStarting(): void {
    if (this.state.name !== 'starting') throw new RunnerUnusableError('finish start()', 'shutdown() was called while it was in flight');
  }

  /** Fails `start()` (it tears down and rethrows), when it is in flight. */
  failStart(err: unknown): boolean {
    if (this.state.name !== 'starting') return false;
    this.state.start?.reject(err);
    return true;
  }

  // ---- calls -------------------------------------------------------------------------------------

  call(op: CallOp, input: unknown, signal: AbortSignal | undefined, view: boolean): Promise<unknown> {
    const name = `${op}()`;
    const state = this.state;
    switch (state.name) {
      case 'new':
      case 'starting':
        return Promise.reject(new RunnerStateError(DistributedErrorCode.RunnerState, `${name} called before start() finished: await runner.start() first.`));
      case 'busy': {
        const n = this.opts.maxInFlight;
        if (this.tracker.inFlightCount < n) break;
        const why =
          n === 1
            ? `${this.tracker.head()?.op} is in flight: the runner runs one call at a time; await the previous call first (or raise options.maxInFlight).`
            : `${n} calls are in flight (options.maxInFlight ${n}): await the oldest one first.`;
        return Promise.reject(new RunnerStateError(DistributedErrorCode.RunnerBusy, `${name} called while ${why}`));
      }
      case 'unusable':
      case 'shutdown':
        return Promise.reject(new RunnerUnusableError(`call ${name}`, state.reason, state.cause));
      case 'ready':
        break;
    }
    if (signal?.aborted)
      return Promise.reject(new CallAbortedError(name, true, 'the signal was already aborted; nothing was sent to the ranks.', signal.reason));
    // Timed only when someone listens (reactor_step_stage_seconds): one performance.now() otherwise skipped.
    const t0 = callChannel.hasSubscribers ? performance.now() : -1;
    let ref: Payload | null = null;
    try {
      if (op === 'generate' || op === 'restore') {
        const enc = encodeValue(input);
        if (this.worker.kind === 'python' && enc.json === null)
          throw unsendableError(`The input of ${name}`, unsendableToPython(input) ?? 'it needs the v8 format');
        ref = toPayload(enc, this.group.inputs[this.tracker.nextSlot()]!);
      }
    } catch (err) {
      return Promise.reject(err);
    }
    return this.tracker.begin(op, ref, signal, view, t0);
  }

  // ---- messages ------------------------------------------------------------------------------

  private onMessage(rank: number, raw: unknown): void {
    let msg: ChildMessage;
    try {
      msg = expectChildMessage(raw, rank);
    } catch (err) {
      this.failUnusable(err as Error, true);
      return;
    }
    const state = this.state;
    const hub = this.group.hub;
    switch (msg.t) {
      case 'loaded': {
        if (state.name !== 'starting' || !state.start) return;
        const stuck = hub?.waitingWithout(rank);
        if (stuck) {
          this.tracker.failDesync(finishedWhileWaiting([rank], 'load()', stuck.waiting, stuck.op, stuck.seq));
          return;
        }
        this.group.procs[rank]!.markLoaded();
        state.start.loaded.add(rank);
        if (state.start.loaded.size === this.opts.worldSize) state.start.resolve();
        else this.publishProgress(this.loadProgress(state.start, rank));
        return;
      }
      case 'loadFailed': {
        const err = reviveError(msg.error, rank, this.errorClasses);
        // The error is the app's own (its message names neither the rank nor where): the log says both,
        // with the rank's stack, for every app whatever it does with the rejection.
        if (this.state.name === 'starting') {
          const who = `rank ${rank} (pid ${this.group.procs[rank]?.pid})`;
          // Every rank usually fails the same way (a typo in the module's name): said once in full,
          // whichever rank's report comes first and however close together they arrive.
          const same = `${err.name}: ${err.message.replaceAll(`rank ${rank}`, 'rank N')}`;
          if (this.loggedLoadFailure === same) this.logger.error(`${who}: load() threw the same ${err.name}`);
          else {
            this.loggedLoadFailure = same;
            this.logger.error(`${who}: load() threw ${err.name}: ${err.message}${loadFailureFrames(err)}`);
          }
        }
        this.failStart(err);
        return;
      }
      case 'coll': {
        if (state.name === 'busy' && this.tracker.cancelledAlone()) {
          // The call was cancelled: nobody waits for this collective to complete.
          this.group.send(rank, { t: 'collGo', seq: msg.seq, cancelled: true });
          return;
        }
        // A rank that already finished this phase can never join: fail now instead of at the deadline.
        const finished = this.finishedRanks();
        if (finished.length > 0 && !finished.includes(rank)) {
          const phase = state.name === 'busy' ? (this.tracker.head()?.op ?? 'the call') : 'load()';
          const waiting = [...(hub?.arrivedAt(msg.seq) ?? []), rank].sort((a, b) => a - b);
          this.tracker.failDesync(finishedWhileWaiting(finished, phase, waiting, msg.op, msg.seq));
          return;
        }
        hub?.arrive(rank, msg);
        return;
      }
      case 'progress': {
        if (state.name !== 'starting' || !state.start || state.start.loaded.has(rank)) return;
        state.start.reports[rank] = { ratio: msg.ratio, stage: msg.stage };
        this.publishProgress(this.loadProgress(state.start, rank));
        return;
      }
      case 'gpu': {
        this.gpu[rank] = { ratio: msg.ratio, at: performance.now() };
        if (gpuChannel.hasSubscribers) this.scope?.runInAsyncScope(() => gpuChannel.publish({ rank, ratio: msg.ratio } satisfies RankGpuBusy));
        return;
      }
      case 'fatal': {
        const err = reviveError(msg.error, rank, OWN_ERROR_CLASSES);
        if (!this.failStart(err)) this.failUnusable(err, true);
        return;
      }
      case 'result':
      case 'failed':
        this.tracker.onOutcome(
          rank,
          msg.id,
          msg.t === 'result'
            ? { ok: true, value: msg.value, ...(msg.inputHash !== undefined && { inputHash: msg.inputHash }) }
            : { ok: false, error: msg.error, transport: msg.transport === true, ...(msg.inputHash !== undefined && { inputHash: msg.inputHash }) },
        );
        return;
    }
  }

  /** Ranks that finished the current phase (load in start(), or the call in flight). */
  private finishedRanks(): number[] {
    const state = this.state;
    if (state.name === 'starting') return [...(state.start?.loaded ?? [])].sort((x, y) => x - y);
    return this.tracker.finishedRanks();
  }

  /**
   * Makes the runner unusable, rejects every call in flight with `err` (at once: none waits for
   * its own deadline), and tears down. During start() it fails start() instead (which tears down
   * and rejects with `err` at once).
   */
  failUnusable(err: Error, awaitTeardown: boolean): void {
    if (this.failStart(err)) return;
    if (this.state.name !== 'ready' && this.state.name !== 'busy') return;
    const calls = this.tracker.finishAll();
    this.go({ name: 'unusable', reason: `${err.name}: ${err.message.split('\n')[0]}`, cause: err });
    const done = this.teardown(false);
    if (calls.length === 0) {
      this.logger.warn(err.message);
      return;
    }
    const rejectAll = () => calls.forEach((f) => f.reject(err));
    if (awaitTeardown) void done.then(rejectAll);
    else rejectAll();
  }

  private onExit(info: ExitInfo): void {
    if (info.expected) return;
    const state = this.state;
    const during: CrashPhase = state.name === 'starting' ? 'start' : state.name === 'busy' ? (this.tracker.head()?.callOp ?? 'idle') : 'idle';
    const { expected: _expected, ...facts } = info;
    this.emit('rankExit', { rank: facts.rank, pid: facts.pid, exitCode: facts.exitCode, signal: facts.signal, during });
    const err = new WorkerCrashedError({ ...facts, during });
    if (this.failStart(err)) return;
    if (this.group.tearingDown) return;
    // The headline promise: a dead rank is reported at once; the teardown of the others follows.
    this.failUnusable(err, false);
  }

  // ---- stop ----------------------------------------------------------------------------------

  async stop(ask: boolean): Promise<void> {
    const state = this.state;
    if (state.name === 'new') {
      this.go({ name: 'shutdown', reason: 'it was shut down', cause: undefined });
      return;
    }
    const inFlightErr = new RunnerUnusableError('finish start()', 'shutdown() was called while it was in flight');
    if (state.name === 'starting') {
      state.start?.reject(inFlightErr);
      this.go({ name: 'shutdown', reason: 'it was shut down', cause: undefined });
    }
    const calls = this.tracker.finishAll();
    if (this.state.name === 'ready' || this.state.name === 'busy') this.go({ name: 'shutdown', reason: 'it was shut down', cause: undefined });
    const done = this.teardown(ask);
    for (const f of calls) f.reject(new RunnerUnusableError(`finish ${f.op}`, 'shutdown() was called while it was in flight'));
    await done;
    if (this.state.name === 'unusable') this.go({ name: 'shutdown', reason: this.state.reason, cause: this.state.cause });
  }

  private teardown(ask: boolean): Promise<void> {
    return this.group.teardown(ask, this.opts.shutdownGraceMs, () => this.tracker.watch.close());
  }
}

/** A rank's stack without the line that repeats the error's message (a JavaScript stack's first, a Python traceback's last): the log line says it once. */
/**
 * What the runner's line of a failed load() shows under its first line: the rank's frames, or none
 * when every frame is reactor_worker's own rank loop (an error the rank raised about the app, such
 * as a module-name typo: its message says what to fix, and those frames say nothing about it).
 */
function loadFailureFrames(err: Error & { rankStack?: string }): string {
  if (!err.rankStack) return '\n(the rank sent no stack)';
  const frames = framesOnly(err.rankStack, err);
  const files = [...frames.matchAll(/^\s*File "(.+)", line \d+, in /gm)].map((m) => m[1]!);
  if (files.length > 0 && files.every((f) => /[/\\]reactor_worker[/\\]_rank\.py$/.test(f))) return '';
  return `\n${frames}`;
}

function framesOnly(stack: string, err: Error): string {
  const s = stack.trimEnd();
  const head = `${err.name}: ${err.message}`;
  if (s.startsWith(head)) return s.slice(head.length).replace(/^\n/, '');
  const tail = `: ${err.message}`;
  if (!s.endsWith(tail)) return s;
  return s.slice(0, s.lastIndexOf('\n', s.length - tail.length) + 1).trimEnd();
}
