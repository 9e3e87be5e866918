import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { Logger } from '@reactor/log';
import { CollectiveHub } from '../collectives/collective-hub.js';
import {
  CallAbortedError,
  type CrashPhase,
  DistributedError,
  DistributedErrorCode,
  OWN_ERROR_CLASSES,
  RankDesyncError,
  RunnerStateError,
  RunnerUnusableError,
  WorkerCrashedError,
  WorkerStalledError,
  WorkerTimeoutError,
} from '../errors.js';
import { type CallOp, type ChildMessage, PROTOCOL_VERSION, type Payload, type ShmBackendKind, type WireError, expectChildMessage } from '../protocol.js';
import { encodeValue } from '../shm/codec.js';
import { type ProgressPhase, ProgressReader, type ProgressReading } from '../shm/progress.js';
import {
  INITIAL_SEGMENT_BYTES,
  SegmentReader,
  SegmentWriter,
  checkFits,
  fromPayload,
  loadNativeShm,
  nativeShmLoadError,
  processSegmentPrefix,
  shmFreeBytes,
  sweepStaleSegments,
  toPayload,
  unlinkSegments,
} from '../shm/segments.js';
import { type TransitionTable, transition } from '../state-machine.js';
import { type ExitInfo, WorkerProcess } from '../process/worker-process.js';
import type { DistributedWorker, WorkerClass } from '../worker/distributed-worker.js';
import { type ErrorClass, collectErrorClasses, reviveError } from '../worker/error-codec.js';
import { compiledSibling, exportNameOf, locateWorker, staleBuild, type WorkerLocation } from '../worker/locate.js';
import { type DeviceAssignment, type VulkanBinding, assignDevices, rankEnvironment } from './devices.js';
import { detectGpuCount } from './gpu-count.js';
import { findDeviceSelectLayer, nvidiaPciAddresses } from './vulkan-device-select.js';
import {
  type PythonWorkerSpec,
  type ResolvedPythonWorker,
  isPythonWorkerSpec,
  pythonRankCommand,
  pythonRankEnv,
  resolvePythonWorker,
  unsendableError,
  unsendableToPython,
} from '../python/python-worker.js';
import { registerExitHook, unregisterExitHook } from './exit-hooks.js';
import { type DistributedRunnerOptions, type ResolvedOptions, resolveOptions } from './options.js';
import { argsFingerprint, moduleKeyOf, moduleTreeHash, parkRunner, rankReuseEnabled, releaseBeforeStart, takeParkedRunner } from './rank-reuse.js';

/** Where the runner is in its life. */
export type RunnerStateName = 'new' | 'starting' | 'ready' | 'busy' | 'unusable' | 'shutdown';

/**
 * Every edge of the runner's lifecycle:
 * ```
 * new --start()--> starting --every rank loaded--> ready <--call / answer--> busy
 *                     |                              |                         |
 *                     | start() failed               | crash, desync, timeout, stall, failed cancel
 *                     v                              v                         v
 *                  shutdown <----shutdown()------ unusable <-------------------'
 * ```
 * (`shutdown()` reaches `shutdown` from every state.)
 */
export const RUNNER_TRANSITIONS: TransitionTable<RunnerStateName> = {
  new: ['starting', 'shutdown'],
  starting: ['ready', 'shutdown'],
  ready: ['busy', 'unusable', 'shutdown'],
  busy: ['ready', 'unusable', 'shutdown'],
  unusable: ['shutdown'],
  shutdown: [],
};

/** A rank that made no progress for `stallMs` during a call (the `stall` event, `stalledRanks`). */
export interface StallInfo {
  rank: number;
  /** What the rank was doing when it stopped advancing: `generate`, `reset`, ... */
  phase: ProgressPhase;
  /** Milliseconds since its last progress, when reported. */
  sinceMs: number;
}

/** A rank process that exited without being asked (the `rankExit` event). */
export interface RankExitInfo {
  rank: number;
  pid: number;
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** What the runner was doing. */
  during: CrashPhase;
}

/**
 * The runner's events (it is an `EventEmitter`; there is no `error` event, so an unhandled
 * event never throws):
 * - `unhealthy` (error): the runner became unusable: a rank crashed (also between calls), a
 *   desync, a timeout, a stall past `stallTimeoutMs`, a cancel not acknowledged. Emitted once,
 *   at once; the teardown follows. Not emitted by `shutdown()`.
 * - `rankExit` (info): a rank process exited without being asked, whatever the runner was doing.
 * - `stall` (info): a rank made no progress for `stallMs` during a call.
 * - `stallCleared` (rank): a stalled rank advanced again (or its call ended).
 */
export interface DistributedRunnerEvents {
  unhealthy: [error: Error];
  rankExit: [info: RankExitInfo];
  stall: [info: StallInfo];
  stallCleared: [rank: number];
}

/**
 * A zero-copy result from {@link DistributedRunner.generateView}: the typed arrays in `value`
 * are views into rank 0's shared-memory block, which the runner's next `generate()` or
 * `generateView()` overwrites. Use `value` while `valid` is true; `copy()` gives a result the
 * caller owns (what `generate()` returns).
 */
export interface SharedResult<T> {
  /** The result; its typed arrays are valid only while {@link SharedResult.valid} is true. */
  readonly value: T;
  /** False once a later `generate()`/`generateView()` has started: the memory holds another result now. */
  readonly valid: boolean;
  /**
   * The result with every typed array copied out of shared memory (one copy).
   * @throws {@link RunnerStateError} (`runner_state`) once `valid` is false
   */
  copy(): T;
}

/** Options of one `generate()` call. */
export interface CallOptions {
  /** Cancels the call: the ranks see `this.signal` aborted; the call rejects with `CallAbortedError` (`name` `AbortError`). */
  signal?: AbortSignal;
}

type Outcome = { ok: true; value: Payload | null; inputHash?: string } | { ok: false; error: WireError; transport: boolean; inputHash?: string };

/** The progress watch of one rank during a call. */
interface Watch {
  reader: ProgressReader;
  counter: number | null;
  lastChange: number;
  stalled: boolean;
}

interface InFlight {
  op: string;
  callOp: CallOp;
  /** generateView(): resolve with a SharedResult of views instead of an owned copy. */
  view: boolean;
  id: number;
  outcomes: (Outcome | undefined)[];
  done: number;
  timer: NodeJS.Timeout;
  progressTimer: NodeJS.Timeout | null;
  /** Set once the caller cancelled: the reason and the acknowledgement deadline. */
  cancel: { reason: unknown; timer: NodeJS.Timeout } | null;
  detachSignal: () => void;
  resolve(value: unknown): void;
  reject(err: unknown): void;
}

interface StartPhase {
  loaded: Set<number>;
  timer: NodeJS.Timeout | null;
  resolve(): void;
  reject(err: unknown): void;
}

/** The runner's state and what only that state has. */
type RunnerState =
  | { name: 'new' }
  | { name: 'starting'; start: StartPhase | null }
  | { name: 'ready' }
  | { name: 'busy'; call: InFlight }
  | { name: 'unusable'; reason: string; cause: unknown }
  | { name: 'shutdown'; reason: string; cause: unknown };

let runnerSeq = 0;
let vulkanNoticeShown = false;
let cpuNoticeShown = false;
let shmNoticeShown = false;

/**
 * Runs one {@link DistributedWorker} per rank, each in its own child process, in lockstep: the
 * same input to every rank, wait for all, return rank 0's result.
 *
 * Outcome policy: every rank succeeds -> rank 0's result. Every rank throws the same error type
 * -> rank 0's error is thrown (an instance of the worker module's exported class when it exports
 * one) and the runner stays healthy. Anything else -> {@link RankDesyncError}, unusable. A rank
 * that dies -> {@link WorkerCrashedError} within milliseconds (between calls: the `unhealthy`
 * event at once); no answer in time -> {@link WorkerTimeoutError}; all leave the runner unusable
 * and tear it down. It never restarts ranks or replays calls.
 *
 * Results: `generate()` returns data the caller owns (typed arrays copied out of shared memory
 * once). `generateView()` returns a {@link SharedResult} whose typed arrays are zero-copy views
 * into shared memory, valid until the next call on this runner (rank 0 writes its next result
 * there); they never point at unmapped memory, even after `shutdown()`.
 *
 * @example
 * ```ts
 * const runner = new DistributedRunner(VideoWorker, { worldSize: 2, loadArgs: { weightsRoot } });
 * runner.on('unhealthy', (err) => rebuild(err));
 * await runner.start();
 * const { frames } = await runner.generate({ prompt: 'a forest' });
 * await runner.shutdown();
 * ```
 */
export class DistributedRunner<TInput = unknown, TResult = unknown, TArgs = unknown> extends EventEmitter<DistributedRunnerEvents> {
  /** Number of ranks. */
  readonly worldSize: number;
  /** A TypeScript worker's class and module (null for a Python worker). */
  private readonly cls: WorkerClass | null;
  private readonly location: WorkerLocation | null;
  /** A Python worker (null for a TypeScript worker). */
  private readonly python: ResolvedPythonWorker | null;
  private readonly loadArgs: TArgs | undefined;
  private readonly opts: ResolvedOptions;
  private readonly logger: Logger;
  private readonly assignments: DeviceAssignment[];
  private readonly prefix: string;

  private state: RunnerState = { name: 'new' };
  private procs: WorkerProcess[] = [];
  private watches: Watch[] = [];
  private hub: CollectiveHub | null = null;
  private input: SegmentWriter | null = null;
  private reader: SegmentReader | null = null;
  private errorClasses: ReadonlyMap<string, ErrorClass> = new Map();
  private backend: ShmBackendKind = 'native';
  private callId = 0;
  /** Counts generate() calls: a SharedResult is valid while this equals its call's number. */
  private resultGeneration = 0;
  private teardownPromise: Promise<void> | null = null;
  private readonly hook = { killNow: () => this.killNow(), terminate: () => this.stop(false) };
  /** With rank reuse on (`reactor dev`): what decides whether a parked runner may serve this one, and its worker module. */
  private reuse: { key: string; moduleKey: string } | null = null;
  /** Handed back from the pool by the constructor: `start()` has nothing to start. */
  private adopted: WorkerLocation | null = null;

  /**
   * Checks everything that can be checked without starting a process.
   * @param WorkerClass a {@link DistributedWorker} subclass with `static moduleUrl = import.meta.url`, exported from that module;
   *   or a Python worker, `pythonWorker('module:Class', { interpreter, path, errors })` (docs/runner.md, "Python workers")
   * @throws TypeError when the class lacks `load`/`generate`/`reset`, cannot be located by a child process, or `loadArgs` cannot be cloned
   * @throws `PythonWorkerError` (`python_not_found`, `python_value`) for a Python worker whose interpreter is missing or whose `loadArgs` cannot reach Python
   * @throws RangeError when `worldSize` is not a positive integer, a timeout is not positive, a fault is malformed, or there are more ranks than GPUs
   */
  constructor(
    WorkerClass: ((abstract new () => DistributedWorker<TInput, TResult, TArgs>) & { readonly moduleUrl: string }) | PythonWorkerSpec<TInput, TResult, TArgs>,
    options: DistributedRunnerOptions<TArgs>,
  ) {
    super();
    if (isPythonWorkerSpec(WorkerClass)) {
      this.opts = resolveOptions(options as DistributedRunnerOptions<unknown>);
      this.python = resolvePythonWorker(WorkerClass, { ...process.env, ...this.opts.env });
      const args = options.loadArgs as unknown;
      if (args !== undefined && (typeof args !== 'object' || args === null || Array.isArray(args) || ArrayBuffer.isView(args))) {
        throw new TypeError(
          `options.loadArgs of a Python worker reach load(**kwargs) as keyword arguments, so they must be an object ({ weights_root: '...' }), got ${Array.isArray(args) ? 'an array' : typeof args}.`,
        );
      }
      const bad = args === undefined ? null : unsendableToPython(args, 'options.loadArgs');
      if (bad) throw unsendableError('options.loadArgs', bad);
      this.cls = null;
      this.location = null;
      this.assignments = assignDevices(this.opts.worldSize, this.opts.devices, detectGpuCount());
      this.worldSize = this.opts.worldSize;
      // No loadArgs: load() is called without keyword arguments.
      this.loadArgs = options.loadArgs ?? ({} as TArgs);
      this.logger = this.opts.logger;
      this.prefix = `${processSegmentPrefix()}-${++runnerSeq}-${randomBytes(3).toString('hex')}`;
      return;
    }
    this.python = null;
    const cls = WorkerClass as unknown as WorkerClass;
    if (typeof cls !== 'function' || typeof cls.prototype !== 'object') {
      throw new TypeError(`DistributedRunner needs a worker class (a DistributedWorker subclass), got ${typeof WorkerClass}.`);
    }
    const name = cls.name || '<anonymous class>';
    for (const method of ['load', 'generate', 'reset'] as const) {
      if (typeof (cls.prototype as Record<string, unknown>)[method] !== 'function') {
        throw new TypeError(`Worker class ${name} has no ${method}() method. A DistributedWorker implements load(args), generate(input) and reset().`);
      }
    }
    this.opts = resolveOptions(options as DistributedRunnerOptions<unknown>);
    const location = locateWorker(cls);
    this.location = location;
    try {
      encodeValue(options.loadArgs);
    } catch (err) {
      throw new TypeError(
        `options.loadArgs cannot be sent to a rank process: ${(err as Error).message} ` +
          `Pass plain data (objects, arrays, strings, numbers, typed arrays); build functions, sockets and handles inside load().`,
      );
    }
    this.assignments = assignDevices(this.opts.worldSize, this.opts.devices, detectGpuCount());
    this.cls = cls;
    this.worldSize = this.opts.worldSize;
    this.loadArgs = options.loadArgs;
    this.logger = this.opts.logger;
    this.prefix = `${processSegmentPrefix()}-${++runnerSeq}-${randomBytes(3).toString('hex')}`;
    if (rankReuseEnabled()) {
      const { logger: _logger, ...opts } = this.opts;
      const moduleKey = moduleKeyOf(location.runnableUrl);
      const key = JSON.stringify([moduleKey, moduleTreeHash(location.runnableUrl), cls.name, opts, argsFingerprint(options.loadArgs)]);
      this.reuse = { key, moduleKey };
      const parked = takeParkedRunner(key)?.target as DistributedRunner<TInput, TResult, TArgs> | undefined;
      if (parked) {
        // The loaded ranks serve the new instance: `new` yields the parked runner, started.
        parked.adopted = location;
        return parked;
      }
    }
  }

  /** The one place the state changes. @throws IllegalTransitionError on an edge {@link RUNNER_TRANSITIONS} does not have */
  private go(next: RunnerState): void {
    const from = this.state.name;
    transition('DistributedRunner', RUNNER_TRANSITIONS, from, next.name);
    this.state = next;
    if (next.name === 'unusable' && (from === 'ready' || from === 'busy')) this.emit('unhealthy', next.cause as Error);
    if (next.name === 'ready') this.startIdleWatch();
    else this.stopIdleWatch();
  }

  // ---- idle watch: ranks without a call are checked too ----------------------------------------

  /** Reads every rank's progress block while no call runs, so a frozen idle rank shows in `stalledRanks` within `stallMs`. */
  private idleTimer: NodeJS.Timeout | null = null;

  private startIdleWatch(): void {
    if (this.idleTimer) return;
    const now = performance.now();
    for (const w of this.watches) {
      w.counter = w.reader.read()?.counter ?? w.counter;
      w.lastChange = now;
    }
    this.idleTimer = setInterval(() => this.checkIdle(), Math.max(10, Math.min(250, this.opts.stallMs / 4)));
    this.idleTimer.unref();
  }

  private stopIdleWatch(): void {
    if (this.idleTimer) clearInterval(this.idleTimer);
    this.idleTimer = null;
  }

  /** The idle counterpart of {@link checkProgress}: a rank's event loop advances its block every 100 ms even with nothing to do. */
  private checkIdle(): void {
    if (this.state.name !== 'ready') return;
    const now = performance.now();
    for (const [rank, w] of this.watches.entries()) {
      const reading = w.reader.read();
      if (reading !== null) this.observeProgress(rank, w, reading, now, undefined);
    }
  }

  /**
   * One look at a rank's progress block, idle (`op` undefined) or during a call: a change clears
   * a reported stall; standing still for `stallMs` reports one (log line, `stall` event).
   * Returns the ms since the counter last changed (0 when it just did).
   */
  private observeProgress(rank: number, w: Watch, reading: ProgressReading, now: number, op: string | undefined): number {
    if (reading.counter !== w.counter) {
      w.counter = reading.counter;
      w.lastChange = now;
      if (w.stalled) {
        w.stalled = false;
        this.logger.info(`Rank ${rank} makes progress again after a stall${op === undefined ? ' (idle)' : ''}.`);
        this.emit('stallCleared', rank);
      }
      return 0;
    }
    const since = now - w.lastChange;
    if (!w.stalled && since >= this.opts.stallMs) {
      w.stalled = true;
      const info: StallInfo = { rank, phase: reading.phase, sinceMs: Math.round(since) };
      const where = op === undefined ? 'while idle' : `in ${reading.phase} during ${op}`;
      this.logger
        .child({ rank })
        .warn(
          `Rank ${rank} (pid ${this.procs[rank]?.pid}) made no progress for ${info.sinceMs} ms ${where}: stopped, blocked in synchronous code, or deadlocked.`,
        );
      this.emit('stall', info);
    }
    return since;
  }

  /** Where the runner is in its life (`new`, `starting`, `ready`, `busy`, `unusable`, `shutdown`). */
  get stateName(): RunnerStateName {
    return this.state.name;
  }

  /** True once `start()` succeeded and until a crash, timeout, desync, stall timeout or shutdown made the runner unusable. */
  get healthy(): boolean {
    return this.state.name === 'ready' || this.state.name === 'busy';
  }

  /** Ranks that made no progress for `stallMs`, during the call in flight or while idle: for readiness checks. */
  get stalledRanks(): StallInfo[] {
    if (this.state.name !== 'busy' && this.state.name !== 'ready') return [];
    const now = performance.now();
    return this.watches.flatMap((w, rank) => (w.stalled ? [{ rank, phase: w.reader.read()?.phase ?? 'idle', sinceMs: Math.round(now - w.lastChange) }] : []));
  }

  /** Name prefix of this runner's shared-memory segments in /dev/shm (and of its ranks' command lines). */
  get segmentPrefix(): string {
    return this.prefix;
  }

  /** Process ids of the ranks, by rank (empty before `start()`). */
  get pids(): number[] {
    return this.procs.map((p) => p.pid);
  }

  /** Which shared-memory implementation the runner uses (known after `start()`). */
  get shmBackend(): ShmBackendKind {
    return this.backend;
  }

  /**
   * The Vulkan binding of GPU ranks: PCI addresses and Mesa's device-select layer. Without the
   * layer, CUDA users are still bound (`CUDA_VISIBLE_DEVICES`) but every WebGPU rank would take
   * the first GPU, so that is said once.
   */
  private vulkanBinding(env: NodeJS.ProcessEnv): VulkanBinding | undefined {
    const gpuRanks = this.assignments.filter((a) => a.gpuIndex !== null).length;
    if (gpuRanks === 0) return undefined;
    const binding: VulkanBinding = { pciAddresses: nvidiaPciAddresses(), layer: findDeviceSelectLayer(env) };
    if (gpuRanks > 1 && !binding.layer && !vulkanNoticeShown) {
      vulkanNoticeShown = true;
      this.logger.warn(
        `Mesa's Vulkan device-select layer was not found: ranks using Vulkan/WebGPU will all take the first GPU ` +
          `(CUDA_VISIBLE_DEVICES still binds CUDA users). Install mesa-vulkan-drivers or set REACTOR_VK_LAYER_PATH (the GPU bundle does; see docs/deploy.md).`,
      );
    }
    return binding;
  }

  /**
   * Starts one process per rank and runs `load(loadArgs)` in each. Any failure tears everything
   * down before it is thrown. `healthy` becomes true only when this resolves.
   * @throws the rank's own error when a `load()` throws
   * @throws {@link WorkerCrashedError} (`worker_crashed`) when a rank exits during load
   * @throws {@link WorkerTimeoutError} (`worker_timeout`) after `startTimeoutMs`
   * @throws {@link ProtocolError} (`ipc_protocol`) at once when a rank sends a message the protocol does not know
   * @throws {@link SharedMemoryCapacityError} (`shm_capacity`) when /dev/shm is too small
   * @throws {@link RunnerStateError} (`runner_state`) on a second `start()`
   */
  async start(): Promise<void> {
    if (this.adopted) {
      const location = this.adopted;
      this.adopted = null;
      // Errors are rebuilt as the classes of the module the app imports now, so `instanceof` holds.
      const mod = (await import(location.sourceUrl)) as Record<string, unknown>;
      this.errorClasses = new Map([...OWN_ERROR_CLASSES, ...collectErrorClasses(mod)]);
      this.logger.info(
        `reusing the ${this.worldSize} loaded rank${this.worldSize > 1 ? 's' : ''} (pid ${this.pids.join(', ')}): the model half did not change`,
      );
      return;
    }
    if (this.state.name !== 'new') {
      throw new RunnerStateError(
        DistributedErrorCode.RunnerState,
        this.state.name === 'shutdown' || this.state.name === 'unusable'
          ? 'start() on a runner that was shut down: a runner starts once; construct a new DistributedRunner.'
          : 'start() was already called: a runner starts once.',
      );
    }
    this.go({ name: 'starting', start: null });
    try {
      if (this.reuse) await releaseBeforeStart(this.reuse.moduleKey);
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
    const { moduleUrl, exportName } = await this.prepareWorkerModule();
    this.backend = this.chooseBackend();
    const env = { backend: this.backend, maxShmBytes: this.opts.maxShmBytes };
    // Up front: the input block, rank 0's result block and each rank's collective block.
    const upFront = INITIAL_SEGMENT_BYTES * (2 + this.worldSize);
    const fits = checkFits(`${this.worldSize} ranks' initial blocks`, upFront, shmFreeBytes(), null);
    if (fits) throw fits;
    this.input = new SegmentWriter(env, `${this.prefix}-in`, 'the runner input');
    this.reader = new SegmentReader(env);
    registerExitHook(this.hook);
    const args = toPayload(encodeValue(this.loadArgs), this.input);
    const masterPort = await freePort();
    this.assertStillStarting();
    if (this.opts.devices === 'auto' && this.assignments.every((a) => a.gpuIndex === null) && !cpuNoticeShown) {
      cpuNoticeShown = true;
      this.logger.info(`No GPU found on this machine: ${this.worldSize} rank${this.worldSize > 1 ? 's run' : ' runs'} on CPU.`);
    }
    this.hub = new CollectiveHub(
      this.worldSize,
      (rank, msg) => this.procs[rank]?.send(msg),
      (detail) => this.failDesync(detail),
    );
    const childPath = this.python ? '' : childMainPath();
    const python = this.python;
    const baseEnv = { ...process.env, ...this.opts.env };
    const vulkan = this.vulkanBinding(baseEnv);
    const state = this.state;
    if (state.name !== 'starting') return;
    await new Promise<void>((resolve, reject) => {
      const phase: StartPhase = { loaded: new Set(), timer: null, resolve, reject };
      phase.timer = setTimeout(() => {
        const silent = this.assignments.map((a) => a.rank).filter((r) => !phase.loaded.has(r));
        for (const r of silent) this.procs[r]?.killGroup('SIGKILL');
        reject(new WorkerTimeoutError('start()', silent, this.opts.startTimeoutMs, 'startTimeoutMs'));
      }, clampTimer(this.opts.startTimeoutMs));
      state.start = phase;
      for (const a of this.assignments) {
        const rankLog = this.logger.child({ rank: a.rank });
        const rankEnv = rankEnvironment(baseEnv, a, this.worldSize, masterPort, vulkan);
        const proc = new WorkerProcess({
          rank: a.rank,
          childMain: childPath,
          prefix: this.prefix,
          env: python ? { ...rankEnv, ...pythonRankEnv(python) } : rankEnv,
          ...(python && { command: pythonRankCommand(python, this.prefix, a.rank), pipeAllStdout: true }),
          onLine: (stream, line) => (stream === 'stdout' ? rankLog.info(line) : rankLog.warn(line)),
          onMessage: (msg) => this.onMessage(a.rank, msg),
          onExit: (info) => this.onExit(info),
        });
        this.procs.push(proc);
        this.watches.push({ reader: new ProgressReader(this.prefix, a.rank), counter: null, lastChange: 0, stalled: false });
        proc.send({
          t: 'init',
          version: PROTOCOL_VERSION,
          rank: a.rank,
          worldSize: this.worldSize,
          device: a.device,
          moduleUrl,
          exportName,
          prefix: this.prefix,
          backend: this.backend,
          maxShmBytes: this.opts.maxShmBytes,
          args,
          faults: this.opts.faults.filter((f) => f.rank === a.rank),
          verifyInputs: this.opts.verifyInputs,
        });
      }
    }).finally(() => {
      if (state.start?.timer) clearTimeout(state.start.timer);
      state.start = null;
    });
    this.assertStillStarting();
    this.go({ name: 'ready' });
    for (const p of this.procs) p.setRef(false);
  }

  /**
   * What the ranks load: a TypeScript worker's compiled module and export (the parent imports
   * the module as the application sees it, to know the export name and to rebuild the module's
   * own error classes so `instanceof` works on rethrown errors), or a Python worker's module and class.
   */
  private async prepareWorkerModule(): Promise<{ moduleUrl: string; exportName: string }> {
    if (this.python) {
      this.errorClasses = new Map([...OWN_ERROR_CLASSES, ...this.python.errors]);
      return { moduleUrl: this.python.module, exportName: this.python.className };
    }
    const location = this.location!;
    const mod = (await import(location.sourceUrl)) as Record<string, unknown>;
    this.assertStillStarting();
    const stale = staleBuild(location);
    if (stale) {
      this.logger.warn(
        `STALE BUILD: the ranks will run ${stale.compiled}, which is older than ${stale.newestSource} (changed since the last build). ` +
          `The ranks run the old code while this process imports the new: run pnpm build.`,
      );
    }
    const exportName = exportNameOf(this.cls!, mod, location.sourceUrl);
    this.errorClasses = new Map([...OWN_ERROR_CLASSES, ...collectErrorClasses(mod)]);
    return { moduleUrl: location.runnableUrl, exportName };
  }

  /** shutdown() may run while start() awaits; nothing may be spawned after it. */
  private assertStillStarting(): void {
    if (this.state.name !== 'starting') throw new RunnerUnusableError('finish start()', 'shutdown() was called while it was in flight');
  }

  /** Fails `start()` (it tears down and rethrows), when it is in flight. */
  private failStart(err: unknown): boolean {
    if (this.state.name !== 'starting') return false;
    this.state.start?.reject(err);
    return true;
  }

  private chooseBackend(): ShmBackendKind {
    if (this.opts.shm === 'file') return 'file';
    if (loadNativeShm()) return 'native';
    const why = nativeShmLoadError() ?? 'unknown reason';
    if (this.opts.shm === 'native') {
      throw new DistributedError(
        DistributedErrorCode.ShmNativeUnavailable,
        `options.shm is 'native' but the shm-typed-array binding cannot load (${why}). Rebuild it (pnpm rebuild shm-typed-array) or use shm: 'auto'.`,
      );
    }
    if (!shmNoticeShown) {
      shmNoticeShown = true;
      this.logger.warn(
        `The native shared-memory binding (shm-typed-array) cannot load (${why}); ` +
          `using files in /dev/shm instead (each large payload costs an extra copy). Rebuild it with pnpm rebuild shm-typed-array.`,
      );
    }
    return 'file';
  }

  /**
   * Runs `generate(input)` on every rank and returns rank 0's result, which the caller owns:
   * its typed arrays are copied out of shared memory (one copy; {@link generateView} for none).
   * @param options.signal cancels the call (see {@link CallAbortedError})
   * @throws the model's own error (healthy) when every rank throws the same error type
   * @throws {@link RankDesyncError} (`rank_desync`), {@link WorkerCrashedError} (`worker_crashed`), {@link WorkerTimeoutError} (`worker_timeout`), {@link WorkerStalledError} (`worker_stalled`): unusable afterwards
   * @throws {@link CallAbortedError} (`call_aborted`, name `AbortError`) when `signal` aborts before every rank finished
   * @throws {@link RunnerStateError} (`runner_busy`) while another call is in flight; {@link RunnerUnusableError} (`runner_unusable`) on an unusable runner
   * @throws {@link SharedMemoryCapacityError} (`shm_capacity`) when the input or result does not fit (the runner stays healthy)
   */
  generate(input: TInput, options: CallOptions = {}): Promise<TResult> {
    return this.call('generate', input, options.signal, false) as Promise<TResult>;
  }

  /**
   * {@link generate} without the copy: the result's typed arrays are views into shared memory,
   * valid until the next `generate()`/`generateView()` (see {@link SharedResult}). For callers
   * that consume the result before the next step (encode it, upload it) and want no copy at all.
   * @throws as {@link generate}
   * @example
   * ```ts
   * const r = await runner.generateView(input);
   * encoder.encode(r.value.frames); // before the next call; r.valid turns false then
   * ```
   */
  generateView(input: TInput, options: CallOptions = {}): Promise<SharedResult<TResult>> {
    return this.call('generate', input, options.signal, true) as Promise<SharedResult<TResult>>;
  }

  /** Runs `reset()` on every rank, with the same outcome policy as {@link DistributedRunner.generate}. */
  async reset(): Promise<void> {
    await this.call('reset', undefined, undefined, false);
  }

  private call(op: CallOp, input: unknown, signal: AbortSignal | undefined, view: boolean): Promise<unknown> {
    const name = `${op}()`;
    const state = this.state;
    switch (state.name) {
      case 'new':
      case 'starting':
        return Promise.reject(new RunnerStateError(DistributedErrorCode.RunnerState, `${name} called before start() finished: await runner.start() first.`));
      case 'busy':
        return Promise.reject(
          new RunnerStateError(
            DistributedErrorCode.RunnerBusy,
            `${name} called while ${state.call.op} is in flight: the runner runs one call at a time; await the previous call first.`,
          ),
        );
      case 'unusable':
      case 'shutdown':
        return Promise.reject(new RunnerUnusableError(`call ${name}`, state.reason, state.cause));
      case 'ready':
        break;
    }
    if (signal?.aborted)
      return Promise.reject(new CallAbortedError(name, true, 'the signal was already aborted; nothing was sent to the ranks.', signal.reason));
    let ref: Payload | null = null;
    try {
      if (op === 'generate') {
        const enc = encodeValue(input);
        if (this.python && enc.json === null) throw unsendableError(`The input of ${name}`, unsendableToPython(input) ?? 'it needs the v8 format');
        ref = toPayload(enc, this.input!);
      }
    } catch (err) {
      return Promise.reject(err);
    }
    const id = ++this.callId;
    if (op === 'generate') this.resultGeneration++;
    return new Promise((resolve, reject) => {
      const onAbort = () => this.onCancel(flight, signal!.reason);
      const flight: InFlight = {
        op: name,
        callOp: op,
        view,
        id,
        outcomes: new Array<Outcome | undefined>(this.worldSize).fill(undefined),
        done: 0,
        // The call's deadline timer keeps the event loop alive while the call is in flight.
        timer: setTimeout(() => this.onCallTimeout(flight), clampTimer(this.opts.callTimeoutMs)),
        progressTimer: null,
        cancel: null,
        detachSignal: () => signal?.removeEventListener('abort', onAbort),
        resolve,
        reject,
      };
      this.go({ name: 'busy', call: flight });
      this.hub?.reset();
      const collSeq = this.hub?.nextSeq ?? 0;
      this.startProgressWatch(flight);
      signal?.addEventListener('abort', onAbort, { once: true });
      for (const p of this.procs) {
        p.beginCall();
        p.send({ t: 'call', id, op, input: ref, collSeq });
      }
    });
  }

  /** The call in flight, if `f` is it. */
  private current(f: InFlight): boolean {
    return this.state.name === 'busy' && this.state.call === f;
  }

  /** Ends the call in flight (timers, signal, stall bookkeeping); the runner is ready again unless `next` says otherwise. */
  private finishCall(): InFlight | null {
    if (this.state.name !== 'busy') return null;
    const f = this.state.call;
    clearTimeout(f.timer);
    if (f.progressTimer) clearInterval(f.progressTimer);
    if (f.cancel) clearTimeout(f.cancel.timer);
    f.detachSignal();
    for (const [rank, w] of this.watches.entries()) {
      if (w.stalled) {
        w.stalled = false;
        this.emit('stallCleared', rank);
      }
    }
    return f;
  }

  /** Ends the call in flight with the runner ready for the next one. */
  private settleCall(): InFlight | null {
    const f = this.finishCall();
    if (f) this.go({ name: 'ready' });
    return f;
  }

  // ---- progress watch ------------------------------------------------------------------------

  private startProgressWatch(f: InFlight): void {
    const now = performance.now();
    for (const w of this.watches) {
      w.counter = w.reader.read()?.counter ?? null;
      w.lastChange = now;
      w.stalled = false;
    }
    const every = Math.max(10, Math.min(250, this.opts.stallMs / 4));
    f.progressTimer = setInterval(() => this.checkProgress(f), every);
  }

  private checkProgress(f: InFlight): void {
    if (!this.current(f)) return;
    const now = performance.now();
    const overdue: number[] = [];
    for (const [rank, w] of this.watches.entries()) {
      const reading = w.reader.read();
      if (reading === null || f.outcomes[rank]) continue;
      const since = this.observeProgress(rank, w, reading, now, f.op);
      if (this.opts.stallTimeoutMs !== null && since >= this.opts.stallTimeoutMs) overdue.push(rank);
    }
    if (overdue.length > 0) {
      const phases = overdue.map((r) => this.watches[r]!.reader.read()?.phase ?? 'idle');
      for (const r of overdue) this.procs[r]?.killNow();
      this.failUnusable(new WorkerStalledError(f.op, overdue, phases, this.opts.stallTimeoutMs!), true);
    }
  }

  // ---- cancellation --------------------------------------------------------------------------

  private onCancel(f: InFlight, reason: unknown): void {
    if (!this.current(f) || f.cancel) return;
    f.cancel = {
      reason,
      timer: setTimeout(() => this.onCancelTimeout(f), clampTimer(this.opts.cancelTimeoutMs)),
    };
    for (const [rank, p] of this.procs.entries()) if (!f.outcomes[rank]) p.send({ t: 'cancel', id: f.id });
    // Ranks waiting in a collective for a peer that stops early would wait forever: release them.
    this.hub?.cancelAll();
  }

  private onCancelTimeout(f: InFlight): void {
    if (!this.current(f)) return;
    const silent = f.outcomes.map((o, r) => (o ? -1 : r)).filter((r) => r >= 0);
    for (const r of silent) this.procs[r]?.killNow();
    const err = new CallAbortedError(
      f.op,
      false,
      `rank${silent.length > 1 ? 's' : ''} ${silent.join(', ')} did not stop within ${this.opts.cancelTimeoutMs} ms (options.cancelTimeoutMs) and ` +
        `${silent.length > 1 ? 'were' : 'was'} killed. The runner is unusable: shut it down and construct a new DistributedRunner.`,
      f.cancel?.reason,
    );
    this.failUnusable(err, true);
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
    switch (msg.t) {
      case 'loaded': {
        if (state.name !== 'starting' || !state.start) return;
        const stuck = this.hub?.waitingWithout(rank);
        if (stuck) {
          this.failDesync(finishedWhileWaiting([rank], 'load()', stuck.waiting, stuck.op, stuck.seq));
          return;
        }
        this.procs[rank]!.markLoaded();
        state.start.loaded.add(rank);
        if (state.start.loaded.size === this.worldSize) state.start.resolve();
        return;
      }
      case 'loadFailed': {
        const err = reviveError(msg.error, rank, this.errorClasses);
        // The error is the app's own (its message names neither the rank nor where): the log says both,
        // with the rank's stack, for every app whatever it does with the rejection.
        if (this.state.name === 'starting') {
          this.logger.error(
            `rank ${rank} (pid ${this.procs[rank]?.pid}): load() threw ${err.name}: ${err.message}\n${err.rankStack ?? '(the rank sent no stack)'}`,
          );
        }
        this.failStart(err);
        return;
      }
      case 'coll': {
        if (state.name === 'busy' && state.call.cancel) {
          // The call was cancelled: nobody waits for this collective to complete.
          this.procs[rank]?.send({ t: 'collGo', seq: msg.seq, cancelled: true });
          return;
        }
        // A rank that already finished this phase can never join: fail now instead of at the deadline.
        const finished = this.finishedRanks();
        if (finished.length > 0 && !finished.includes(rank)) {
          const phase = state.name === 'busy' ? state.call.op : 'load()';
          const waiting = [...(this.hub?.arrivedAt(msg.seq) ?? []), rank].sort((a, b) => a - b);
          this.failDesync(finishedWhileWaiting(finished, phase, waiting, msg.op, msg.seq));
          return;
        }
        this.hub?.arrive(rank, msg);
        return;
      }
      case 'fatal': {
        const err = reviveError(msg.error, rank, OWN_ERROR_CLASSES);
        if (!this.failStart(err)) this.failUnusable(err, true);
        return;
      }
      case 'result':
      case 'failed':
        this.onOutcome(
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
    if (state.name !== 'busy') return [];
    return state.call.outcomes.flatMap((o, r) => (o ? [r] : []));
  }

  private onOutcome(rank: number, id: number, outcome: Outcome): void {
    if (this.state.name !== 'busy') return;
    const f = this.state.call;
    if (f.id !== id || f.outcomes[rank]) return;
    f.outcomes[rank] = outcome;
    f.done++;
    this.procs[rank]?.endCall();
    if (f.cancel) {
      // Every answer after a cancel is that rank's acknowledgement, whatever it says.
      this.hub?.cancelAll();
      if (f.done < this.worldSize) return;
      this.settleCall();
      f.reject(new CallAbortedError(f.op, true, 'every rank stopped; the runner is ready for the next call.', f.cancel.reason));
      return;
    }
    const stuck = this.hub?.waitingWithout(rank);
    if (stuck) {
      this.failDesync(finishedWhileWaiting([rank], f.op, stuck.waiting, stuck.op, stuck.seq));
      return;
    }
    if (f.done < this.worldSize) return;
    const outcomes = f.outcomes as Outcome[];
    if (this.opts.verifyInputs && this.checkInputs(f, outcomes)) return;
    const failures = outcomes.map((o, r) => ({ o, r })).filter((x): x is { o: Extract<Outcome, { ok: false }>; r: number } => !x.o.ok);
    if (failures.length === 0) {
      this.settleCall();
      const ref = (outcomes[0] as Extract<Outcome, { ok: true }>).value;
      let value: unknown;
      try {
        value = ref ? fromPayload(ref, this.reader!, !f.view) : undefined;
      } catch (err) {
        f.reject(err);
        return;
      }
      f.resolve(f.view ? this.sharedResult(value, ref) : value);
      return;
    }
    const first = failures[0]!;
    // Rank 0's model succeeded everywhere but its result could not be delivered: not a desync.
    if (failures.length === 1 && first.r === 0 && first.o.transport) {
      this.settleCall();
      f.reject(reviveError(first.o.error, 0, this.errorClasses));
      return;
    }
    const sameType = failures.length === this.worldSize && failures.every((x) => x.o.error.type === first.o.error.type);
    if (sameType) {
      this.settleCall();
      f.reject(reviveError(outcomes[0]!.ok ? first.o.error : (outcomes[0] as Extract<Outcome, { ok: false }>).error, 0, this.errorClasses));
      return;
    }
    const detail = failures.length < this.worldSize ? `${failures.length} of ${this.worldSize} ranks failed` : `ranks failed with different error types`;
    this.failDesync(detail);
  }

  /** Wraps a result of views with its lifetime (see {@link SharedResult}). */
  private sharedResult(value: unknown, ref: Payload | null): SharedResult<unknown> {
    const generation = this.resultGeneration;
    const isValid = () => this.resultGeneration === generation;
    return {
      value,
      get valid() {
        return isValid();
      },
      copy: () => {
        if (!isValid()) {
          throw new RunnerStateError(
            DistributedErrorCode.RunnerState,
            'copy() of a generateView() result after a later generate() started: its shared memory holds another result now. Copy (or use) a result before the next call.',
          );
        }
        return ref ? fromPayload(ref, this.reader!, true) : undefined;
      },
    };
  }

  /** Divergence check: true (and the runner failed) when the ranks decoded different inputs. */
  private checkInputs(f: InFlight, outcomes: Outcome[]): boolean {
    if (f.callOp !== 'generate') return false;
    const groups = new Map<string, number[]>();
    for (const [r, o] of outcomes.entries()) {
      const h = o.inputHash ?? 'none';
      groups.set(h, [...(groups.get(h) ?? []), r]);
    }
    if (groups.size <= 1) return false;
    const reference = outcomes[0]!.inputHash ?? 'none';
    const diverging = outcomes.flatMap((o, r) => ((o.inputHash ?? 'none') === reference ? [] : [r]));
    const detail =
      `rank${diverging.length > 1 ? 's' : ''} ${diverging.join(', ')} decoded a different input than rank 0 (` +
      [...groups].map(([h, ranks]) => `rank${ranks.length > 1 ? 's' : ''} ${ranks.join(', ')}: ${h}`).join('; ') +
      ')';
    this.failDesync(detail, diverging);
    return true;
  }

  private describeOutcomes(f: InFlight): string[] {
    return f.outcomes.map((o, r) => {
      if (!o) return `rank ${r}: no answer yet`;
      if (o.ok) return `rank ${r}: ok`;
      return `rank ${r}: threw ${o.error.type}: ${o.error.message.split('\n')[0]}`;
    });
  }

  private failDesync(detail: string, ranks: number[] = []): void {
    if (this.failStart(new RankDesyncError('start()', detail, [], undefined, ranks))) return;
    if (this.state.name !== 'busy') return;
    const f = this.state.call;
    const outcomes = this.describeOutcomes(f);
    const firstFailure = f.outcomes.map((o, r) => ({ o, r })).find((x) => x.o && !x.o.ok);
    const cause = firstFailure && firstFailure.o && !firstFailure.o.ok ? reviveError(firstFailure.o.error, firstFailure.r, this.errorClasses) : undefined;
    this.failUnusable(new RankDesyncError(f.op, detail, outcomes, cause, ranks), true);
  }

  /**
   * Makes the runner unusable, rejects the call in flight, and tears down. During start() it
   * fails start() instead (which tears down and rejects with `err` at once).
   */
  private failUnusable(err: Error, awaitTeardown: boolean): void {
    if (this.failStart(err)) return;
    if (this.state.name !== 'ready' && this.state.name !== 'busy') return;
    const f = this.finishCall();
    this.go({ name: 'unusable', reason: `${err.name}: ${err.message.split('\n')[0]}`, cause: err });
    const done = this.teardown(false);
    if (!f) {
      this.logger.warn(err.message);
      return;
    }
    if (awaitTeardown) void done.then(() => f.reject(err));
    else f.reject(err);
  }

  private onCallTimeout(f: InFlight): void {
    if (!this.current(f)) return;
    const silent = f.outcomes.map((o, r) => (o ? -1 : r)).filter((r) => r >= 0);
    for (const r of silent) this.procs[r]?.killNow();
    this.failUnusable(new WorkerTimeoutError(f.op, silent, this.opts.callTimeoutMs, 'callTimeoutMs'), true);
  }

  private onExit(info: ExitInfo): void {
    if (info.expected) return;
    const state = this.state;
    const during: CrashPhase = state.name === 'starting' ? 'start' : state.name === 'busy' ? state.call.callOp : 'idle';
    const { expected: _expected, ...facts } = info;
    this.emit('rankExit', { rank: facts.rank, pid: facts.pid, exitCode: facts.exitCode, signal: facts.signal, during });
    const err = new WorkerCrashedError({ ...facts, during });
    if (this.failStart(err)) return;
    if (this.teardownPromise) return;
    // The headline promise: a dead rank is reported at once; the teardown of the others follows.
    this.failUnusable(err, false);
  }

  /**
   * Stops every rank and unlinks every shared-memory block. Idempotent and safe mid-call (the
   * call in flight rejects with `runner_unusable`). A healthy, idle runner asks its ranks to
   * exit and waits `shutdownGraceMs`; otherwise, and after that, SIGTERM then SIGKILL go to each
   * rank's process group. Also runs on process exit and on SIGINT/SIGTERM/SIGHUP.
   */
  shutdown(): Promise<void> {
    if (this.reuse && this.state.name === 'ready' && rankReuseEnabled()) {
      // Parked for the next runner with the same fingerprint; the pool stops it if none comes.
      this.removeAllListeners();
      this.adopted = null;
      parkRunner(this.reuse.key, this.reuse.moduleKey, {
        target: this,
        healthy: () => this.healthy,
        pids: () => this.pids,
        release: () => this.stop(this.state.name === 'ready'),
      });
      return Promise.resolve();
    }
    // Only a healthy, idle runner is asked: a busy or broken rank may never read the request.
    return this.stop(this.state.name === 'ready');
  }

  private async stop(ask: boolean): Promise<void> {
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
    const f = this.finishCall();
    if (this.state.name === 'ready' || this.state.name === 'busy') this.go({ name: 'shutdown', reason: 'it was shut down', cause: undefined });
    const done = this.teardown(ask);
    if (f) f.reject(new RunnerUnusableError(`finish ${f.op}`, 'shutdown() was called while it was in flight'));
    await done;
    if (this.state.name === 'unusable') this.go({ name: 'shutdown', reason: this.state.reason, cause: this.state.cause });
  }

  private teardown(ask: boolean): Promise<void> {
    if (!this.teardownPromise) {
      this.teardownPromise = (async () => {
        await Promise.all(this.procs.map((p) => p.stop(ask, this.opts.shutdownGraceMs)));
        for (const w of this.watches) w.reader.close();
        this.reader?.close();
        this.input?.dispose();
        unlinkSegments(this.prefix);
        unregisterExitHook(this.hook);
      })();
    }
    return this.teardownPromise;
  }

  private killNow(): void {
    for (const p of this.procs) p.killNow();
    unlinkSegments(this.prefix);
  }
}

/** The one wording of "a rank finished while its peers wait for it in a collective". */
function finishedWhileWaiting(finished: number[], phase: string, waiting: number[], op: string, seq: number): string {
  const plural = (n: number[]) => (n.length > 1 ? 's' : '');
  return (
    `rank${plural(finished)} ${finished.join(', ')} finished ${phase} while ` +
    `rank${plural(waiting)} ${waiting.join(', ')} wait${waiting.length > 1 ? '' : 's'} for ${finished.length > 1 ? 'them' : 'it'} in ${op}() (collective #${seq})`
  );
}

/** The compiled rank entry point (tests run this module from src/, ranks always run dist/). */
function childMainPath(): string {
  const here = import.meta.url;
  const url = compiledSibling(new URL(here.endsWith('.ts') ? '../process/child-main.ts' : '../process/child-main.js', here).href);
  const path = url ? fileURLToPath(url) : '';
  if (!url || !existsSync(path)) {
    throw new DistributedError(
      DistributedErrorCode.NotBuilt,
      `The rank entry point ${path || 'dist/process/child-main.js'} does not exist: build @reactor/distributed (pnpm --filter @reactor/distributed build).`,
    );
  }
  return path;
}

/** setTimeout holds at most 2^31-1 ms; longer (or Infinity) means "no deadline" in practice. */
function clampTimer(ms: number): number {
  return Math.min(ms, 2 ** 31 - 1);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}
