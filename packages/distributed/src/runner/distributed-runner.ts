import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { CollectiveHub } from '../collectives/collective-hub.js';
import {
  DistributedError,
  OWN_ERROR_CLASSES,
  RankDesyncError,
  RunnerStateError,
  RunnerUnusableError,
  WorkerCrashedError,
  WorkerTimeoutError,
} from '../errors.js';
import {
  type CallOp,
  type ChildMessage,
  PROTOCOL_VERSION,
  type ShmBackendKind,
  type Payload,
  type WireError,
  expectChildMessage,
} from '../protocol.js';
import { encodeValue } from '../shm/codec.js';
import {
  INITIAL_SEGMENT_BYTES,
  processSegmentPrefix,
  SegmentReader,
  SegmentWriter,
  checkFits,
  fromPayload,
  toPayload,
  loadNativeShm,
  nativeShmLoadError,
  shmFreeBytes,
  sweepStaleSegments,
  unlinkSegments,
} from '../shm/segments.js';
import { EXIT_REQUEST_GRACE_MS, type ExitInfo, WorkerProcess } from '../process/worker-process.js';
import type { DistributedWorker, WorkerClass } from '../worker/distributed-worker.js';
import { type ErrorClass, collectErrorClasses, reviveError } from '../worker/error-codec.js';
import { compiledSibling, exportNameOf, locateWorker, type WorkerLocation } from '../worker/locate.js';
import { type DeviceAssignment, type DeviceRequest, type VulkanBinding, assignDevices, detectGpuCount, rankEnvironment } from './devices.js';
import { findDeviceSelectLayer, nvidiaPciAddresses } from './vulkan-device-select.js';
import { registerExitHook, unregisterExitHook } from './exit-hooks.js';

/** Default `callTimeoutMs` (the original's 30 s). */
export const DEFAULT_CALL_TIMEOUT_MS = 30_000;
/** Default `startTimeoutMs` (the original's 3600 s: loading weights can be slow). */
export const DEFAULT_START_TIMEOUT_MS = 3_600_000;

/** Where runner notices and rank output go. */
export interface RunnerLogger {
  /** Rank 0's stdout (`[rank 0] ...`) and runner notices. */
  info(message: string): void;
  /** Every rank's stderr (`[rank N] ...`) and runner warnings. */
  warn(message: string): void;
}

/** Options of {@link DistributedRunner}. */
export interface DistributedRunnerOptions<TArgs = unknown> {
  /** Number of rank processes (a positive integer; never read from the machine). */
  worldSize: number;
  /** Passed to every rank's `load()`; structured-clone data (typed arrays travel through shared memory). */
  loadArgs?: TArgs;
  /** Deadline of each `generate()`/`reset()`, in ms (default 30 000). */
  callTimeoutMs?: number;
  /** Deadline of `start()` (spawn + every `load()`), in ms (default 3 600 000). */
  startTimeoutMs?: number;
  /** `'auto'` (default): one GPU per rank, or CPU ranks on a machine without GPUs. `'cpu'`: CPU ranks. An array: each rank's GPU index. */
  devices?: DeviceRequest;
  /**
   * Shared-memory implementation: `'native'` (POSIX shm via `shm-typed-array`), `'file'` (pure
   * Node, files in /dev/shm), or `'auto'` (default: native, falling back to files with a notice).
   * The `REACTOR_SHM_BACKEND` environment variable sets the default.
   */
  shm?: 'auto' | ShmBackendKind;
  /** Largest shared-memory block the runner may create, in bytes (default: no cap beyond /dev/shm's free space). */
  maxShmBytes?: number;
  /** How long `shutdown()` waits for ranks to exit after asking, before SIGTERM (default 5000 ms). */
  shutdownGraceMs?: number;
  /** Extra environment variables for every rank. */
  env?: Record<string, string>;
  /** Where rank output and notices go (default: process stdout/stderr). */
  logger?: RunnerLogger;
}

type RunnerState = 'new' | 'starting' | 'ready' | 'busy' | 'unusable' | 'shutdown';

type Outcome = { ok: true; value: Payload | null } | { ok: false; error: WireError; transport: boolean };

interface InFlight {
  op: string;
  id: number;
  outcomes: (Outcome | undefined)[];
  done: number;
  timer: NodeJS.Timeout | null;
  resolve(value: unknown): void;
  reject(err: unknown): void;
}

const defaultLogger: RunnerLogger = {
  info: (m) => process.stdout.write(`${m}\n`),
  warn: (m) => process.stderr.write(`${m}\n`),
};

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
 * that dies -> {@link WorkerCrashedError} within milliseconds; no answer in time ->
 * {@link WorkerTimeoutError}; both leave the runner unusable and tear it down. It never restarts
 * ranks or replays calls.
 *
 * Results: typed arrays in rank 0's result are zero-copy views into shared memory, valid until
 * the next `generate()` call on this runner (rank 0 writes its next result there). Copy
 * (`.slice()`) anything you keep longer. They never point at unmapped memory, even after
 * `shutdown()`.
 *
 * @example
 * ```ts
 * const runner = new DistributedRunner(VideoWorker, { worldSize: 2, loadArgs: { weightsRoot } });
 * await runner.start();
 * const { frames } = await runner.generate({ prompt: 'a forest' });
 * await runner.shutdown();
 * ```
 */
export class DistributedRunner<TInput = unknown, TResult = unknown, TArgs = unknown> {
  /** Number of ranks. */
  readonly worldSize: number;
  private readonly cls: WorkerClass;
  private readonly location: WorkerLocation;
  private readonly loadArgs: TArgs | undefined;
  private readonly callTimeoutMs: number;
  private readonly startTimeoutMs: number;
  private readonly shmRequest: 'auto' | ShmBackendKind;
  private readonly maxShmBytes: number | null;
  private readonly shutdownGraceMs: number;
  private readonly extraEnv: Record<string, string>;
  private readonly logger: RunnerLogger;
  private readonly assignments: DeviceAssignment[];
  private readonly devicesRequest: DeviceRequest;
  private readonly prefix: string;

  private state: RunnerState = 'new';
  private unusableReason = '';
  private unusableCause: unknown;
  private procs: WorkerProcess[] = [];
  private hub: CollectiveHub | null = null;
  private input: SegmentWriter | null = null;
  private reader: SegmentReader | null = null;
  private errorClasses: ReadonlyMap<string, ErrorClass> = new Map();
  private backend: ShmBackendKind = 'native';
  private callId = 0;
  private inFlight: InFlight | null = null;
  private teardownPromise: Promise<void> | null = null;
  private readonly hook = { killNow: () => this.killNow(), terminate: () => this.stop(false) };

  /**
   * Checks everything that can be checked without starting a process.
   * @param WorkerClass a {@link DistributedWorker} subclass with `static moduleUrl = import.meta.url`, exported from that module
   * @throws TypeError when the class lacks `load`/`generate`/`reset`, cannot be located by a child process, or `loadArgs` cannot be cloned
   * @throws RangeError when `worldSize` is not a positive integer, a timeout is not positive, or there are more ranks than GPUs
   */
  constructor(WorkerClass: abstract new () => DistributedWorker<TArgs, TInput, TResult>, options: DistributedRunnerOptions<TArgs>) {
    const cls = WorkerClass as unknown as WorkerClass;
    if (typeof cls !== 'function' || typeof cls.prototype !== 'object') {
      throw new TypeError(`DistributedRunner needs a worker class (a DistributedWorker subclass), got ${typeof WorkerClass}.`);
    }
    const name = cls.name || '<anonymous class>';
    for (const method of ['load', 'generate', 'reset'] as const) {
      if (typeof (cls.prototype as Record<string, unknown>)[method] !== 'function') {
        throw new TypeError(
          `Worker class ${name} has no ${method}() method. A DistributedWorker implements load(args), generate(input) and reset().`,
        );
      }
    }
    if (typeof options !== 'object' || options === null) throw new TypeError('DistributedRunner needs an options object with worldSize.');
    const { worldSize } = options;
    if (typeof worldSize !== 'number' || !Number.isInteger(worldSize) || worldSize < 1) {
      throw new RangeError(`options.worldSize must be a positive integer, got ${String(worldSize)}.`);
    }
    this.callTimeoutMs = positiveMs(options.callTimeoutMs, DEFAULT_CALL_TIMEOUT_MS, 'callTimeoutMs');
    this.startTimeoutMs = positiveMs(options.startTimeoutMs, DEFAULT_START_TIMEOUT_MS, 'startTimeoutMs');
    this.shutdownGraceMs = positiveMs(options.shutdownGraceMs, EXIT_REQUEST_GRACE_MS, 'shutdownGraceMs');
    if (options.maxShmBytes !== undefined && !(Number.isInteger(options.maxShmBytes) && options.maxShmBytes > 0)) {
      throw new RangeError(`options.maxShmBytes must be a positive integer number of bytes, got ${String(options.maxShmBytes)}.`);
    }
    this.maxShmBytes = options.maxShmBytes ?? null;
    const shm = options.shm ?? (process.env.REACTOR_SHM_BACKEND as 'auto' | ShmBackendKind | undefined) ?? 'auto';
    if (shm !== 'auto' && shm !== 'native' && shm !== 'file') {
      throw new RangeError(`options.shm (or REACTOR_SHM_BACKEND) must be 'auto', 'native' or 'file', got ${JSON.stringify(shm)}.`);
    }
    this.shmRequest = shm;
    this.location = locateWorker(cls);
    try {
      encodeValue(options.loadArgs);
    } catch (err) {
      throw new TypeError(
        `options.loadArgs cannot be sent to a rank process: ${(err as Error).message} ` +
          `Pass plain data (objects, arrays, strings, numbers, typed arrays); build functions, sockets and handles inside load().`,
      );
    }
    this.devicesRequest = options.devices ?? 'auto';
    this.assignments = assignDevices(worldSize, this.devicesRequest, detectGpuCount());
    this.cls = cls;
    this.worldSize = worldSize;
    this.loadArgs = options.loadArgs;
    this.extraEnv = { ...(options.env ?? {}) };
    this.logger = options.logger ?? defaultLogger;
    this.prefix = `${processSegmentPrefix()}-${++runnerSeq}-${randomBytes(3).toString('hex')}`;
  }

  /** False once a crash, timeout, desync or shutdown made the runner unusable. */
  get healthy(): boolean {
    return this.state !== 'unusable' && this.state !== 'shutdown';
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
        `[reactor/distributed] Mesa's Vulkan device-select layer was not found: ranks using Vulkan/WebGPU will all take the first GPU ` +
          `(CUDA_VISIBLE_DEVICES still binds CUDA users). Install mesa-vulkan-drivers or set REACTOR_VK_LAYER_PATH (the GPU bundle does; see docs/deploy.md).`,
      );
    }
    return binding;
  }

  /**
   * Starts one process per rank and runs `load(loadArgs)` in each. Any failure tears everything
   * down before it is thrown.
   * @throws the rank's own error when a `load()` throws
   * @throws {@link WorkerCrashedError} (`ERR_WORKER_CRASHED`) when a rank exits during load
   * @throws {@link WorkerTimeoutError} (`ERR_WORKER_TIMEOUT`) after `startTimeoutMs`
   * @throws {@link ProtocolError} (`ERR_PROTOCOL`) at once when a rank sends a message the protocol does not know
   * @throws {@link SharedMemoryCapacityError} (`ERR_SHM_CAPACITY`) when /dev/shm is too small
   * @throws {@link RunnerStateError} (`ERR_RUNNER_STATE`) on a second `start()`
   */
  async start(): Promise<void> {
    if (this.state !== 'new') {
      throw new RunnerStateError(
        'ERR_RUNNER_STATE',
        this.state === 'shutdown' || this.state === 'unusable'
          ? 'start() on a runner that was shut down: a runner starts once; construct a new DistributedRunner.'
          : 'start() was already called: a runner starts once.',
      );
    }
    this.state = 'starting';
    try {
      await this.startRanks();
    } catch (err) {
      // Later calls say why (unless shutdown() ended start(): then "it was shut down" is the reason).
      if (this.state === 'starting') {
        this.unusableReason = `start() failed: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`;
        this.unusableCause = err;
      }
      await this.teardown(false);
      this.state = 'shutdown';
      throw err;
    }
  }

  private async startRanks(): Promise<void> {
    sweepStaleSegments();
    // The parent imports the worker module as the application sees it: to know the export name,
    // and to rebuild the module's own error classes so `instanceof` works on rethrown errors.
    const mod = (await import(this.location.sourceUrl)) as Record<string, unknown>;
    this.assertStillStarting();
    const exportName = exportNameOf(this.cls, mod, this.location.sourceUrl);
    this.errorClasses = new Map([...OWN_ERROR_CLASSES, ...collectErrorClasses(mod)]);
    this.backend = this.chooseBackend();
    const env = { backend: this.backend, maxShmBytes: this.maxShmBytes };
    // Up front: the input block, rank 0's result block and two collective slots per rank.
    const upFront = INITIAL_SEGMENT_BYTES * (2 + 2 * this.worldSize);
    const fits = checkFits(`${this.worldSize} ranks' initial blocks`, upFront, shmFreeBytes(), null);
    if (fits) throw fits;
    this.input = new SegmentWriter(env, `${this.prefix}-in`, 'the runner input');
    this.reader = new SegmentReader(env);
    registerExitHook(this.hook);
    const args = toPayload(encodeValue(this.loadArgs), this.input);
    const masterPort = await freePort();
    this.assertStillStarting();
    if (this.devicesRequest === 'auto' && this.assignments.every((a) => a.gpuIndex === null) && !cpuNoticeShown) {
      cpuNoticeShown = true;
      this.logger.info(`[reactor/distributed] No GPU found on this machine: ${this.worldSize} rank${this.worldSize > 1 ? 's run' : ' runs'} on CPU.`);
    }
    this.hub = new CollectiveHub(
      this.worldSize,
      (rank, msg) => this.procs[rank]?.send(msg),
      (detail) => this.failDesync(detail),
    );
    const childPath = childMainPath();
    const baseEnv = { ...process.env, ...this.extraEnv };
    const vulkan = this.vulkanBinding(baseEnv);
    await new Promise<void>((resolve, reject) => {
      const loaded = new Set<number>();
      const timer = setTimeout(() => {
        const silent = this.assignments.map((a) => a.rank).filter((r) => !loaded.has(r));
        for (const r of silent) this.procs[r]?.killGroup('SIGKILL');
        reject(new WorkerTimeoutError('start()', silent, this.startTimeoutMs, 'startTimeoutMs'));
      }, clampTimer(this.startTimeoutMs));
      const fail = (err: unknown) => {
        clearTimeout(timer);
        reject(err);
      };
      this.startWaiter = {
        loaded: (rank) => {
          loaded.add(rank);
          this.procs[rank]!.state = 'ready';
          if (loaded.size === this.worldSize) {
            clearTimeout(timer);
            resolve();
          }
        },
        fail,
        finished: () => [...loaded].sort((x, y) => x - y),
      };
      for (const a of this.assignments) {
        const proc = new WorkerProcess({
          rank: a.rank,
          childMain: childPath,
          prefix: this.prefix,
          env: rankEnvironment(baseEnv, a, this.worldSize, masterPort, vulkan),
          onLine: (stream, line) => (stream === 'stdout' ? this.logger.info(`[rank ${a.rank}] ${line}`) : this.logger.warn(`[rank ${a.rank}] ${line}`)),
          onMessage: (msg) => this.onMessage(a.rank, msg),
          onExit: (info) => this.onExit(info),
        });
        this.procs.push(proc);
        proc.send({
          t: 'init',
          version: PROTOCOL_VERSION,
          rank: a.rank,
          worldSize: this.worldSize,
          device: a.device,
          moduleUrl: this.location.runnableUrl,
          exportName,
          prefix: this.prefix,
          backend: this.backend,
          maxShmBytes: this.maxShmBytes,
          args,
        });
      }
    }).finally(() => {
      this.startWaiter = null;
    });
    this.state = 'ready';
    for (const p of this.procs) p.setRef(false);
  }

  /** shutdown() may run while start() awaits; nothing may be spawned after it. */
  private assertStillStarting(): void {
    if (this.state !== 'starting') throw new RunnerUnusableError('finish start()', 'shutdown() was called while it was in flight');
  }

  private startWaiter: { loaded(rank: number): void; fail(err: unknown): void; finished(): number[] } | null = null;

  private chooseBackend(): ShmBackendKind {
    if (this.shmRequest === 'file') return 'file';
    if (loadNativeShm()) return 'native';
    const why = nativeShmLoadError() ?? 'unknown reason';
    if (this.shmRequest === 'native') {
      throw new DistributedError(
        'ERR_SHM_NATIVE_UNAVAILABLE',
        `options.shm is 'native' but the shm-typed-array binding cannot load (${why}). Rebuild it (pnpm rebuild shm-typed-array) or use shm: 'auto'.`,
      );
    }
    if (!shmNoticeShown) {
      shmNoticeShown = true;
      this.logger.warn(
        `[reactor/distributed] The native shared-memory binding (shm-typed-array) cannot load (${why}); ` +
          `using files in /dev/shm instead (each large payload costs an extra copy). Rebuild it with pnpm rebuild shm-typed-array.`,
      );
    }
    return 'file';
  }

  /**
   * Runs `generate(input)` on every rank and returns rank 0's result. Typed arrays in the result
   * are views into shared memory, valid until the next `generate()` call.
   * @throws the model's own error (healthy) when every rank throws the same error type
   * @throws {@link RankDesyncError} (`ERR_RANK_DESYNC`), {@link WorkerCrashedError} (`ERR_WORKER_CRASHED`), {@link WorkerTimeoutError} (`ERR_WORKER_TIMEOUT`): unusable afterwards
   * @throws {@link RunnerStateError} (`ERR_RUNNER_BUSY`) while another call is in flight; {@link RunnerUnusableError} (`ERR_RUNNER_UNUSABLE`) on an unusable runner
   * @throws {@link SharedMemoryCapacityError} (`ERR_SHM_CAPACITY`) when the input or result does not fit (the runner stays healthy)
   */
  generate(input: TInput): Promise<TResult> {
    return this.call('generate', input) as Promise<TResult>;
  }

  /** Runs `reset()` on every rank, with the same outcome policy as {@link DistributedRunner.generate}. */
  async reset(): Promise<void> {
    await this.call('reset', undefined);
  }

  private call(op: CallOp, input: unknown): Promise<unknown> {
    const name = `${op}()`;
    switch (this.state) {
      case 'new':
      case 'starting':
        return Promise.reject(new RunnerStateError('ERR_RUNNER_STATE', `${name} called before start() finished: await runner.start() first.`));
      case 'busy':
        return Promise.reject(
          new RunnerStateError(
            'ERR_RUNNER_BUSY',
            `${name} called while ${this.inFlight?.op ?? 'another call'} is in flight: the runner runs one call at a time; await the previous call first.`,
          ),
        );
      case 'unusable':
        return Promise.reject(new RunnerUnusableError(`call ${name}`, this.unusableReason, this.unusableCause));
      case 'shutdown':
        return Promise.reject(new RunnerUnusableError(`call ${name}`, this.unusableReason || 'it was shut down', this.unusableCause));
      case 'ready':
        break;
    }
    let ref: Payload | null = null;
    try {
      if (op === 'generate') ref = toPayload(encodeValue(input), this.input!);
    } catch (err) {
      return Promise.reject(err);
    }
    const id = ++this.callId;
    this.state = 'busy';
    // The call's deadline timer keeps the event loop alive while the call is in flight.
    for (const p of this.procs) p.state = 'busy';
    return new Promise((resolve, reject) => {
      const flight: InFlight = {
        op: name,
        id,
        outcomes: new Array<Outcome | undefined>(this.worldSize).fill(undefined),
        done: 0,
        timer: null,
        resolve,
        reject,
      };
      flight.timer = setTimeout(() => this.onCallTimeout(flight), clampTimer(this.callTimeoutMs));
      this.inFlight = flight;
      for (const p of this.procs) p.send({ t: 'call', id, op, input: ref });
    });
  }

  private finishCall(): InFlight | null {
    const f = this.inFlight;
    if (!f) return null;
    this.inFlight = null;
    if (f.timer) clearTimeout(f.timer);
    if (this.state === 'busy') {
      this.state = 'ready';
      for (const p of this.procs) p.state = 'ready';
    }
    return f;
  }

  private onMessage(rank: number, raw: unknown): void {
    let msg: ChildMessage;
    try {
      msg = expectChildMessage(raw, rank);
    } catch (err) {
      this.failUnusable(err as Error, true);
      return;
    }
    switch (msg.t) {
      case 'loaded': {
        const stuck = this.hub?.waitingWithout(rank);
        if (stuck) {
          this.failDesync(
            `rank ${rank} finished load() while rank${stuck.waiting.length > 1 ? 's' : ''} ${stuck.waiting.join(', ')} ` +
              `wait${stuck.waiting.length > 1 ? '' : 's'} for it in ${stuck.op}() (collective #${stuck.seq})`,
          );
          return;
        }
        this.startWaiter?.loaded(rank);
        return;
      }
      case 'loadFailed':
        this.startWaiter?.fail(reviveError(msg.error, rank, this.errorClasses));
        return;
      case 'coll': {
        // A rank that already finished this phase can never join: fail now instead of at the deadline.
        const finished = this.finishedRanks();
        if (finished.length > 0 && !finished.includes(rank)) {
          const phase = this.startWaiter ? 'load()' : (this.inFlight?.op ?? 'the call');
          const waiting = [...(this.hub?.arrivedAt(msg.seq) ?? []), rank].sort((a, b) => a - b);
          this.failDesync(
            `rank${finished.length > 1 ? 's' : ''} ${finished.join(', ')} finished ${phase} while ` +
              `rank${waiting.length > 1 ? 's' : ''} ${waiting.join(', ')} wait${waiting.length > 1 ? '' : 's'} for ${finished.length > 1 ? 'them' : 'it'} in ${msg.op}() (collective #${msg.seq})`,
          );
          return;
        }
        this.hub?.arrive(rank, msg);
        return;
      }
      case 'fatal': {
        const err = reviveError(msg.error, rank, OWN_ERROR_CLASSES);
        if (this.startWaiter) this.startWaiter.fail(err);
        else this.failUnusable(err, true);
        return;
      }
      case 'result':
      case 'failed':
        this.onOutcome(rank, msg.id, msg.t === 'result' ? { ok: true, value: msg.value } : { ok: false, error: msg.error, transport: msg.transport === true });
        return;
    }
  }

  /** Ranks that finished the current phase (load in start(), or the call in flight). */
  private finishedRanks(): number[] {
    if (this.startWaiter) return this.startWaiter.finished();
    if (!this.inFlight) return [];
    return this.inFlight.outcomes.flatMap((o, r) => (o ? [r] : []));
  }

  private onOutcome(rank: number, id: number, outcome: Outcome): void {
    const f = this.inFlight;
    if (!f || f.id !== id || f.outcomes[rank]) return;
    f.outcomes[rank] = outcome;
    f.done++;
    const stuck = this.hub?.waitingWithout(rank);
    if (stuck) {
      this.failDesync(
        `rank ${rank} finished ${f.op} while rank${stuck.waiting.length > 1 ? 's' : ''} ${stuck.waiting.join(', ')} ` +
          `wait${stuck.waiting.length > 1 ? '' : 's'} for it in ${stuck.op}() (collective #${stuck.seq})`,
      );
      return;
    }
    if (f.done < this.worldSize) return;
    const outcomes = f.outcomes as Outcome[];
    const failures = outcomes.map((o, r) => ({ o, r })).filter((x): x is { o: Extract<Outcome, { ok: false }>; r: number } => !x.o.ok);
    if (failures.length === 0) {
      this.finishCall();
      const ref = (outcomes[0] as Extract<Outcome, { ok: true }>).value;
      let value: unknown;
      try {
        value = ref ? fromPayload(ref, this.reader!) : undefined;
      } catch (err) {
        f.reject(err);
        return;
      }
      f.resolve(value);
      return;
    }
    const first = failures[0]!;
    // Rank 0's model succeeded everywhere but its result could not be delivered: not a desync.
    if (failures.length === 1 && first.r === 0 && first.o.transport) {
      this.finishCall();
      f.reject(reviveError(first.o.error, 0, this.errorClasses));
      return;
    }
    const sameType = failures.length === this.worldSize && failures.every((x) => x.o.error.type === first.o.error.type);
    if (sameType) {
      this.finishCall();
      f.reject(reviveError(outcomes[0]!.ok ? first.o.error : (outcomes[0] as Extract<Outcome, { ok: false }>).error, 0, this.errorClasses));
      return;
    }
    const detail =
      failures.length < this.worldSize
        ? `${failures.length} of ${this.worldSize} ranks failed`
        : `ranks failed with different error types`;
    this.failDesync(detail);
  }

  private describeOutcomes(f: InFlight): string[] {
    return f.outcomes.map((o, r) => {
      if (!o) return `rank ${r}: no answer yet`;
      if (o.ok) return `rank ${r}: ok`;
      return `rank ${r}: threw ${o.error.type}: ${o.error.message.split('\n')[0]}`;
    });
  }

  private failDesync(detail: string): void {
    if (this.startWaiter) {
      this.startWaiter.fail(new RankDesyncError('start()', detail, [], undefined));
      return;
    }
    const f = this.inFlight;
    const op = f?.op ?? 'a collective';
    const outcomes = f ? this.describeOutcomes(f) : [];
    const firstFailure = f?.outcomes.map((o, r) => ({ o, r })).find((x) => x.o && !x.o.ok);
    const cause =
      firstFailure && firstFailure.o && !firstFailure.o.ok ? reviveError(firstFailure.o.error, firstFailure.r, this.errorClasses) : undefined;
    this.failUnusable(new RankDesyncError(op, detail, outcomes, cause), true);
  }

  /**
   * Makes the runner unusable, rejects the call in flight, and tears down. During start() it
   * fails start() instead (which tears down and rejects with `err` at once).
   */
  private failUnusable(err: Error, awaitTeardown: boolean): void {
    if (this.startWaiter) {
      this.startWaiter.fail(err);
      return;
    }
    if (this.state === 'unusable' || this.state === 'shutdown') return;
    const f = this.finishCall();
    this.state = 'unusable';
    this.unusableReason = `${err.name}: ${err.message.split('\n')[0]}`;
    this.unusableCause = err;
    const done = this.teardown(false);
    if (!f) {
      this.logger.warn(`[reactor/distributed] ${err.message}`);
      return;
    }
    if (awaitTeardown) void done.then(() => f.reject(err));
    else f.reject(err);
  }

  private onCallTimeout(f: InFlight): void {
    if (this.inFlight !== f) return;
    const silent = f.outcomes.map((o, r) => (o ? -1 : r)).filter((r) => r >= 0);
    for (const r of silent) this.procs[r]?.killNow();
    this.failUnusable(new WorkerTimeoutError(f.op, silent, this.callTimeoutMs, 'callTimeoutMs'), true);
  }

  private onExit(info: ExitInfo): void {
    if (info.expected) return;
    const during = this.startWaiter ? 'start()' : (this.inFlight?.op ?? 'idle (between calls)');
    const err = new WorkerCrashedError({ ...info, during });
    if (this.startWaiter) {
      this.startWaiter.fail(err);
      return;
    }
    if (this.state === 'shutdown' || this.teardownPromise) return;
    // The headline promise: a dead rank is reported at once; the teardown of the others follows.
    this.failUnusable(err, false);
  }

  /**
   * Stops every rank and unlinks every shared-memory block. Idempotent and safe mid-call (the
   * call in flight rejects with `ERR_RUNNER_UNUSABLE`). A healthy, idle runner asks its ranks to
   * exit and waits `shutdownGraceMs`; otherwise, and after that, SIGTERM then SIGKILL go to each
   * rank's process group. Also runs on process exit and on SIGINT/SIGTERM/SIGHUP.
   */
  shutdown(): Promise<void> {
    // Only a healthy, idle runner is asked: a busy or broken rank may never read the request.
    return this.stop(this.state === 'ready');
  }

  private async stop(ask: boolean): Promise<void> {
    if (this.state === 'new') {
      this.state = 'shutdown';
      return;
    }
    this.startWaiter?.fail(new RunnerUnusableError('finish start()', 'shutdown() was called while it was in flight'));
    const f = this.finishCall();
    if (this.state !== 'unusable' && this.state !== 'shutdown') {
      this.state = 'shutdown';
      this.unusableReason = 'it was shut down';
    }
    const done = this.teardown(ask);
    if (f) f.reject(new RunnerUnusableError(`finish ${f.op}`, 'shutdown() was called while it was in flight'));
    await done;
    this.state = 'shutdown';
  }

  private teardown(ask: boolean): Promise<void> {
    if (!this.teardownPromise) {
      this.teardownPromise = (async () => {
        await Promise.all(this.procs.map((p) => p.stop(ask, this.shutdownGraceMs)));
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

/** The compiled rank entry point (tests run this module from src/, ranks always run dist/). */
function childMainPath(): string {
  const here = import.meta.url;
  const url = compiledSibling(new URL(here.endsWith('.ts') ? '../process/child-main.ts' : '../process/child-main.js', here).href);
  const path = url ? fileURLToPath(url) : '';
  if (!url || !existsSync(path)) {
    throw new DistributedError(
      'ERR_NOT_BUILT',
      `The rank entry point ${path || 'dist/process/child-main.js'} does not exist: build @reactor/distributed (pnpm --filter @reactor/distributed build).`,
    );
  }
  return path;
}

function positiveMs(v: number | undefined, dflt: number, name: string): number {
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || Number.isNaN(v) || v <= 0) {
    throw new RangeError(`options.${name} must be a positive number of milliseconds (or Infinity), got ${String(v)}.`);
  }
  return v;
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
