import type { Collectives, TypedArray } from '../collectives/types.js';
import { checkProgressReport } from './progress-report.js';

/** A typed array constructor (`Uint8Array`, `Float32Array`, ...). */
export interface TypedArrayConstructor<T extends TypedArray> {
  new (length: number): T;
  new (buffer: ArrayBufferLike, byteOffset: number, length: number): T;
  readonly BYTES_PER_ELEMENT: number;
}

/**
 * Base class of a model worker: one instance runs in every rank process. The type parameters
 * are in the runner's order: `DistributedWorker<TInput, TResult, TArgs>` and
 * `DistributedRunner<TInput, TResult, TArgs>`.
 *
 * A child process cannot receive a class, so a worker class says where its module is with a
 * static `moduleUrl` (`static moduleUrl = import.meta.url`, which works from TypeScript and from
 * plain JavaScript) and that module exports the class under its own name or as `default`. When
 * `moduleUrl` is a `.ts` file under a package's `src/`, ranks run the compiled sibling under
 * `dist/` (build the package first).
 *
 * `rank`, `worldSize`, `device`, `isLeader` and `comm` are set before `load()` runs.
 *
 * Inputs: typed arrays in `generate(input)` are views into shared memory, valid until that call
 * settles; copy (`.slice()`) what you keep across calls, and do not write into them (every rank
 * sees the same memory).
 *
 * @example
 * ```ts
 * export class EchoWorker extends DistributedWorker<{ x: Float32Array }, Float32Array, { scale: number }> {
 *   static moduleUrl = import.meta.url;
 *   private scale = 1;
 *   load(args: { scale: number }) { this.scale = args.scale; }
 *   generate(input: { x: Float32Array }) { return input.x.map((v) => v * this.scale); }
 *   reset() {}
 * }
 * ```
 */
export abstract class DistributedWorker<TInput = any, TResult = any, TArgs = any> {
  /**
   * URL of the module that exports this class (`import.meta.url`). Every concrete worker sets
   * it; `new DistributedRunner()` takes only a class that does (a type error otherwise).
   */
  static moduleUrl?: string;

  /** This process's rank, `0 .. worldSize - 1`. */
  rank!: number;
  /** Number of ranks. */
  worldSize!: number;
  /** `gpu:<index>` (the physical GPU index, also in `REACTOR_GPU_INDEX`) or `cpu`. */
  device!: string;
  /** Collectives among the ranks of this runner. */
  comm!: Collectives;
  /**
   * Aborted when the caller cancels the call in flight (`runner.generate(input, { signal })`);
   * a new signal for every call. A worker that can stop early checks it (or listens to its
   * `abort` event) and returns or throws; its answer tells the runner it stopped.
   */
  signal!: AbortSignal;

  /** @internal Set by the rank loop on rank 0 (native shared memory only). */
  resultAllocator?: (bytes: number) => Uint8Array | null;
  /** @internal Set by the rank loop: sends a checked load-progress report to the parent. */
  progressReporter?: (ratio: number, stage: string) => void;

  /**
   * Reports this rank's load progress from `load()` (weights read, compiled, warmed): the runner
   * averages its ranks, and the app host shows it (session status `progress`,
   * `reactor_load_progress_ratio`, the progress bar of `reactor run`, `/health/ready`). Reports
   * faster than every 50 ms are dropped (a new stage always goes); outside `load()` it does nothing.
   * @param ratio how far this rank's load is, 0..1
   * @param stage what it is doing now (`reading weights`, `compiling`), up to 100 characters
   * @throws RangeError when `ratio` is not a number in 0..1; TypeError when `stage` is not a non-empty string
   * @example
   * ```ts
   * for (const [i, file] of files.entries()) { await read(file); this.reportProgress((i + 1) / files.length, 'reading weights'); }
   * ```
   */
  reportProgress(ratio: number, stage: string): void {
    const text = checkProgressReport(ratio, stage, `${this.constructor.name}.reportProgress()`);
    this.progressReporter?.(ratio, text);
  }

  /**
   * Optional: this rank's GPU busy ratio now (0..1), or undefined when not known. The rank calls
   * it at most once a second once loaded and the runner exports it as
   * `reactor_rank_gpu_busy_ratio{rank}`; a throw stops the sampling (unknown from then on).
   * Python ranks read `torch.cuda.utilization()` by default.
   */
  gpuBusy?(): number | undefined;

  /**
   * A typed array for rank 0's result, allocated in the shared-memory block the result travels
   * through: return it (anywhere in the result) and it reaches the caller with **no copy at all**
   * (an array from the heap costs one copy into shared memory). On other ranks, and with the
   * file fallback, it is an ordinary array.
   *
   * Allocation restarts at the block's beginning with every `generate()` call: allocate the
   * arrays of a result in the call that returns them (it costs nothing), and do not keep them
   * across calls — the next call's arrays take the same memory, and the caller may still be
   * reading the previous result until it calls `generate()` again.
   * @example
   * ```ts
   * const frames = this.resultArray(Uint8Array, n * h * w * 3);
   * render(frames);
   * return { frames };
   * ```
   */
  resultArray<T extends TypedArray>(type: TypedArrayConstructor<T>, length: number): T {
    const mem = this.resultAllocator?.(length * type.BYTES_PER_ELEMENT);
    return mem ? new type(mem.buffer, mem.byteOffset, length) : new type(length);
  }

  /** True on rank 0 (the runner returns the `outputRank`'s result, rank 0 by default). */
  get isLeader(): boolean {
    return this.rank === 0;
  }

  /** Runs once per rank with the runner's `loadArgs`. */
  abstract load(args: TArgs): void | Promise<void>;
  /** Runs on every rank with the same input; rank 0's return value is the runner's result. */
  abstract generate(input: TInput): TResult | Promise<TResult>;
  /** Clears per-rollout state, keeping weights. */
  abstract reset(): void | Promise<void>;

  /**
   * Optional: this rank's session state as typed arrays and plain data (PyTorch's
   * `state_dict()` shape), taken between calls (`runner.snapshot()`); the output rank's value (rank 0 by default) is the
   * runner's snapshot, so a worker whose state is sharded across ranks gathers it there with
   * `comm`. docs/snapshots.md.
   */
  snapshot?(): unknown;

  /**
   * Optional: puts back a state {@link snapshot} returned (`runner.restore(data)`), on every rank
   * with the same value; typed arrays are copies the worker owns.
   */
  restore?(snapshot: unknown): void | Promise<void>;
}

/** What a worker class looks like from the outside (its constructor takes no arguments). */
export interface WorkerClass {
  new (): DistributedWorker;
  readonly name: string;
  readonly moduleUrl?: string;
  readonly prototype: object;
}
