/**
 * `DistributedRunner`: the facade. It checks its arguments in the constructor and hands the rest
 * to its parts: the lifecycle (`runner-core.ts`), which plans the launch (`launch-plan.ts`),
 * starts the rank group (`rank-group.ts`) and tracks the call in flight (`call-tracker.ts`).
 */
import { EventEmitter } from 'node:events';
import { type PythonWorkerSpec, isPythonWorkerSpec, resolvePythonWorker, unsendableError, unsendableToPython } from '../python/python-worker.js';
import type { ShmBackendKind } from '../protocol.js';
import { encodeValue } from '../shm/codec.js';
import type { DistributedWorker, WorkerClass } from '../worker/distributed-worker.js';
import { locateWorker } from '../worker/locate.js';
import { assignDevices } from './devices.js';
import { detectGpuCount } from './gpu-count.js';
import { type DistributedRunnerOptions, type ResolvedOptions, resolveOptions } from './options.js';
import { type RankReusePool, argsFingerprint, installedRankPool, moduleKeyOf, moduleTreeHash, pythonTreeHash } from './rank-reuse.js';
import { type Adopted, type CoreWorker, RunnerCore } from './runner-core.js';
import type { CallOptions, DistributedRunnerEvents, RunnerStateName, SharedResult, StallInfo } from './runner-types.js';

export { RUNNER_TRANSITIONS } from './runner-types.js';
export type { CallOptions, DistributedRunnerEvents, RankExitInfo, RunnerStateName, SharedResult, StallInfo } from './runner-types.js';

/** A worker class as the constructor takes it, or a Python worker. */
type WorkerArg<TInput, TResult, TArgs> =
  ((abstract new () => DistributedWorker<TInput, TResult, TArgs>) & { readonly moduleUrl: string }) | PythonWorkerSpec<TInput, TResult, TArgs>;

/** What the constructor checked. */
interface RunnerSpec {
  worker: CoreWorker;
  opts: ResolvedOptions;
  loadArgs: unknown;
  gpuCount: number;
  assignments: ReturnType<typeof assignDevices>;
}

/** Every check that can run without starting a process (see the constructor's `@throws`). */
function checkRunner(WorkerClass: unknown, options: DistributedRunnerOptions<unknown>): RunnerSpec {
  if (isPythonWorkerSpec(WorkerClass)) {
    const opts = resolveOptions(options);
    const python = resolvePythonWorker(WorkerClass, { ...process.env, ...opts.env });
    const args = options.loadArgs;
    if (args !== undefined && (typeof args !== 'object' || args === null || Array.isArray(args) || ArrayBuffer.isView(args))) {
      throw new TypeError(
        `options.loadArgs of a Python worker reach load(**kwargs) as keyword arguments, so they must be an object ({ weights_root: '...' }), got ${Array.isArray(args) ? 'an array' : typeof args}.`,
      );
    }
    const bad = args === undefined ? null : unsendableToPython(args, 'options.loadArgs');
    if (bad) throw unsendableError('options.loadArgs', bad);
    const gpuCount = detectGpuCount();
    const assignments = assignDevices(opts.worldSize, opts.devices, gpuCount);
    // No loadArgs: load() is called without keyword arguments.
    return { worker: { kind: 'python', python }, opts, loadArgs: options.loadArgs ?? {}, gpuCount, assignments };
  }
  const cls = WorkerClass as WorkerClass;
  if (typeof cls !== 'function' || typeof cls.prototype !== 'object') {
    throw new TypeError(`DistributedRunner needs a worker class (a DistributedWorker subclass), got ${typeof WorkerClass}.`);
  }
  const name = cls.name || '<anonymous class>';
  for (const method of ['load', 'generate', 'reset'] as const) {
    if (typeof (cls.prototype as Record<string, unknown>)[method] !== 'function') {
      throw new TypeError(`Worker class ${name} has no ${method}() method. A DistributedWorker implements load(args), generate(input) and reset().`);
    }
  }
  const opts = resolveOptions(options);
  const location = locateWorker(cls);
  try {
    encodeValue(options.loadArgs);
  } catch (err) {
    throw new TypeError(
      `options.loadArgs cannot be sent to a rank process: ${(err as Error).message} ` +
        `Pass plain data (objects, arrays, strings, numbers, typed arrays); build functions, sockets and handles inside load().`,
    );
  }
  const gpuCount = detectGpuCount();
  const assignments = assignDevices(opts.worldSize, opts.devices, gpuCount);
  return { worker: { kind: 'typescript', cls, location }, opts, loadArgs: options.loadArgs, gpuCount, assignments };
}

/**
 * The rank reuse fingerprint: what decides whether a parked runner may serve this one, and its
 * worker module. A TypeScript worker: its module tree; a Python worker: the interpreter, the
 * import path and every `.py` file under the import path's folders (`pythonTreeHash`).
 */
function reuseKeyOf(spec: RunnerSpec): { key: string; moduleKey: string; adopted: Adopted } {
  const { logger: _logger, ...opts } = spec.opts;
  const w = spec.worker;
  if (w.kind === 'python') {
    const { python } = w;
    const moduleKey = `python:${python.module}:${python.className}`;
    const key = JSON.stringify([
      moduleKey,
      python.interpreterPath,
      python.pythonPath,
      python.halfPrecision,
      pythonTreeHash(python.pythonPath),
      opts,
      argsFingerprint(spec.loadArgs),
    ]);
    return { key, moduleKey, adopted: { kind: 'python', errors: python.errors } };
  }
  const moduleKey = moduleKeyOf(w.location.runnableUrl);
  const key = JSON.stringify([moduleKey, moduleTreeHash(w.location.runnableUrl), w.cls.name, opts, argsFingerprint(spec.loadArgs)]);
  return { key, moduleKey, adopted: { kind: 'typescript', location: w.location } };
}

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
  /** The lifecycle, the rank group and the call tracker (with rank reuse, one a parked runner had). */
  private core: RunnerCore;
  /** With rank reuse on (`reactor dev`): what decides whether a parked runner may serve this one, its worker module, and the pool. */
  private reuse: { key: string; moduleKey: string; pool: RankReusePool } | null = null;
  /** Ranks handed over from the pool: `start()` has nothing to start. */
  private adopted: Adopted | null = null;
  /** What the runner was made from (rank reuse: to start new ranks in place of changed ones). */
  private readonly spec: RunnerSpec;
  /** A restart in place in flight (`restartIfChanged`): calls wait for it. */
  private restarting: Promise<void> | undefined;

  /**
   * Checks everything that can be checked without starting a process.
   * @param WorkerClass a {@link DistributedWorker} subclass with `static moduleUrl = import.meta.url`, exported from that module;
   *   or a Python worker, `pythonWorker('module:Class', { interpreter, path, errors })` (docs/runner.md, "Python workers")
   * @throws TypeError when the class lacks `load`/`generate`/`reset`, cannot be located by a child process, or `loadArgs` cannot be cloned
   * @throws `PythonWorkerError` (`python_not_found`, `python_value`) for a Python worker whose interpreter is missing or whose `loadArgs` cannot reach Python
   * @throws RangeError when `worldSize` is not a positive integer, a timeout is not positive, a fault is malformed, or there are more ranks than GPUs
   */
  constructor(WorkerClass: WorkerArg<TInput, TResult, TArgs>, options: DistributedRunnerOptions<TArgs>) {
    super();
    const spec = checkRunner(WorkerClass, options as DistributedRunnerOptions<unknown>);
    this.worldSize = spec.opts.worldSize;
    this.spec = spec;
    const pool = installedRankPool();
    if (pool?.enabled) {
      const { key, moduleKey, adopted } = reuseKeyOf(spec);
      this.reuse = { key, moduleKey, pool };
      pool.live.add(this);
      const parked = pool.take(key)?.target as DistributedRunner<TInput, TResult, TArgs> | undefined;
      if (parked) {
        // The loaded ranks serve the new instance: its events come here from now on.
        this.core = parked.core;
        this.core.attach(this);
        this.adopted = adopted;
        return;
      }
    }
    this.core = this.newCore();
  }

  private newCore(): RunnerCore {
    const spec = this.spec;
    return new RunnerCore(this, spec.worker, spec.loadArgs, spec.opts, spec.gpuCount, spec.assignments, () =>
      this.reuse ? this.reuse.pool.releaseBeforeStart(this.reuse.moduleKey) : Promise.resolve(),
    );
  }

  /**
   * Rank reuse (`reactor dev`): when the worker's code changed since the ranks started (a Python
   * worker's `.py` files), stops them once the call in flight ended and starts new ones in their
   * place, under this same object, so the app half keeps running; calls meanwhile wait. A new
   * rank that fails to load leaves the runner unusable (`runner_unusable`, the load error as its
   * cause), as a failed `start()` would.
   * @returns `unchanged` when nothing changed or the runner is not serving; `failed` when the new ranks did not load
   * @internal
   */
  async restartIfChanged(): Promise<'unchanged' | 'restarted' | 'failed'> {
    const reuse = this.reuse;
    if (!reuse || this.restarting || !['ready', 'busy'].includes(this.core.stateName)) return 'unchanged';
    const { key } = reuseKeyOf(this.spec);
    if (key === reuse.key) return 'unchanged';
    reuse.key = key;
    let outcome: 'restarted' | 'failed' = 'restarted';
    this.restarting = (async () => {
      const old = this.core;
      // The call in flight ends first (its result is the old code's, delivered as usual).
      while (old.stateName === 'busy') await new Promise((r) => setTimeout(r, 10));
      const pids = old.pids.join(', ');
      // The old ranks' teardown is not an event of this runner.
      old.attach(new EventEmitter());
      await old.stop(old.stateName === 'ready');
      this.core = this.newCore();
      old.logger.info(
        `the worker's code changed: restarting the ${this.worldSize} rank${this.worldSize > 1 ? 's' : ''} (was pid ${pids}) in place; the app keeps running`,
      );
      await this.core.start().catch(() => (outcome = 'failed'));
    })().finally(() => (this.restarting = undefined));
    await this.restarting;
    return outcome;
  }

  /**
   * Rank reuse's factory (`RankPool.create`): the parked runner with the same fingerprint itself,
   * started, or a new runner.
   * @internal
   */
  static fromPool<TInput, TResult, TArgs>(
    pool: RankReusePool,
    WorkerClass: WorkerArg<TInput, TResult, TArgs>,
    options: DistributedRunnerOptions<TArgs>,
  ): DistributedRunner<TInput, TResult, TArgs> {
    const spec = checkRunner(WorkerClass, options as DistributedRunnerOptions<unknown>);
    if (pool.enabled) {
      const { key, adopted } = reuseKeyOf(spec);
      const parked = pool.take(key)?.target as DistributedRunner<TInput, TResult, TArgs> | undefined;
      if (parked) {
        parked.adopted = adopted;
        pool.live.add(parked);
        return parked;
      }
    }
    return new DistributedRunner(WorkerClass, options);
  }

  /** Where the runner is in its life (`new`, `starting`, `ready`, `busy`, `unusable`, `shutdown`). */
  get stateName(): RunnerStateName {
    return this.core.stateName;
  }

  /** True once `start()` succeeded and until a crash, timeout, desync, stall timeout or shutdown made the runner unusable. */
  get healthy(): boolean {
    return this.core.healthy;
  }

  /** Ranks that made no progress for `stallMs`, during the call in flight or while idle: for readiness checks. */
  get stalledRanks(): StallInfo[] {
    return this.core.stalledRanks;
  }

  /** Name prefix of this runner's shared-memory segments in /dev/shm (and of its ranks' command lines). */
  get segmentPrefix(): string {
    return this.core.prefix;
  }

  /** Process ids of the ranks, by rank (empty before `start()`). */
  get pids(): number[] {
    return this.core.pids;
  }

  /** Which shared-memory implementation the runner uses (known after `start()`). */
  get shmBackend(): ShmBackendKind {
    return this.core.shmBackend;
  }

  /**
   * Each rank's GPU busy ratio (0..1) as it last reported it (a worker's `gpuBusy()`; Python
   * ranks read `torch.cuda.utilization()`), undefined where unknown, stale (3 s) or the runner
   * is not healthy.
   */
  get gpuBusy(): (number | undefined)[] {
    return this.core.gpuBusy;
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
      const adopted = this.adopted;
      this.adopted = null;
      // Errors are rebuilt as the classes the app has now, so `instanceof` holds.
      await this.core.readopt(adopted);
      this.core.logger.info(
        `reusing the ${this.worldSize} loaded rank${this.worldSize > 1 ? 's' : ''} (pid ${this.pids.join(', ')}): the model half did not change`,
      );
      return;
    }
    await this.core.start();
  }

  /**
   * Runs `generate(input)` on every rank and returns the output rank's result (rank 0 by default), which the caller owns:
   * its typed arrays are copied out of shared memory (one copy; {@link generateView} for none).
   * @param options.signal cancels the call (see {@link CallAbortedError})
   * @throws the model's own error (healthy) when every rank throws the same error type
   * @throws {@link RankDesyncError} (`rank_desync`), {@link WorkerCrashedError} (`worker_crashed`), {@link WorkerTimeoutError} (`worker_timeout`), {@link WorkerStalledError} (`worker_stalled`): unusable afterwards
   * @throws {@link CallAbortedError} (`call_aborted`, name `AbortError`) when `signal` aborts before every rank finished
   * @throws {@link RunnerStateError} (`runner_busy`) while another call is in flight; {@link RunnerUnusableError} (`runner_unusable`) on an unusable runner
   * @throws {@link SharedMemoryCapacityError} (`shm_capacity`) when the input or result does not fit (the runner stays healthy)
   */
  generate(input: TInput, options: CallOptions = {}): Promise<TResult> {
    if (this.restarting) return this.restarting.then(() => this.generate(input, options));
    return this.core.call('generate', input, options.signal, false) as Promise<TResult>;
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
    if (this.restarting) return this.restarting.then(() => this.generateView(input, options));
    return this.core.call('generate', input, options.signal, true) as Promise<SharedResult<TResult>>;
  }

  /** Runs `reset()` on every rank, with the same outcome policy as {@link DistributedRunner.generate}. */
  async reset(): Promise<void> {
    if (this.restarting) await this.restarting;
    await this.core.call('reset', undefined, undefined, false);
  }

  /**
   * Runs the worker's `snapshot()` on every rank, between calls, and returns the output rank's value (its
   * typed arrays copied out of shared memory): the model half of a session snapshot
   * (docs/snapshots.md). Same outcome policy as {@link DistributedRunner.generate}.
   * @throws {@link SnapshotUnsupportedError} (`snapshot_unsupported`) when the worker has no `snapshot()`
   */
  snapshot(): Promise<unknown> {
    return this.core.call('snapshot', undefined, undefined, false);
  }

  /**
   * Runs the worker's `restore(value)` on every rank with the same value (a copy each rank owns),
   * between calls. Same outcome policy as {@link DistributedRunner.generate}.
   * @throws {@link SnapshotUnsupportedError} (`snapshot_unsupported`) when the worker has no `restore()`
   */
  async restore(value: unknown): Promise<void> {
    await this.core.call('restore', value, undefined, false);
  }

  /**
   * Stops every rank and unlinks every shared-memory block. Idempotent and safe mid-call (the
   * call in flight rejects with `runner_unusable`). A healthy, idle runner asks its ranks to
   * exit and waits `shutdownGraceMs`; otherwise, and after that, SIGTERM then SIGKILL go to each
   * rank's process group. Also runs on process exit and on SIGINT/SIGTERM/SIGHUP.
   */
  shutdown(): Promise<void> {
    this.reuse?.pool.live.delete(this);
    if (this.restarting) return this.restarting.then(() => this.shutdown());
    const core = this.core;
    if (this.reuse && core.stateName === 'ready' && this.reuse.pool.enabled) {
      // Parked for the next runner with the same fingerprint; the pool stops it if none comes.
      this.removeAllListeners();
      this.adopted = null;
      this.reuse.pool.park(this.reuse.key, this.reuse.moduleKey, {
        target: this,
        healthy: () => core.healthy,
        pids: () => core.pids,
        release: () => core.stop(core.stateName === 'ready'),
      });
      return Promise.resolve();
    }
    // Only a healthy, idle runner is asked: a busy or broken rank may never read the request.
    return core.stop(core.stateName === 'ready');
  }
}
