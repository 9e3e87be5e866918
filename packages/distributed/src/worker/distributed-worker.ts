import type { Collectives } from '../collectives/types.js';

/**
 * Base class of a model worker: one instance runs in every rank process.
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
 * export class EchoWorker extends DistributedWorker<{ scale: number }, { x: Float32Array }, Float32Array> {
 *   static moduleUrl = import.meta.url;
 *   private scale = 1;
 *   load(args: { scale: number }) { this.scale = args.scale; }
 *   generate(input: { x: Float32Array }) { return input.x.map((v) => v * this.scale); }
 *   reset() {}
 * }
 * ```
 */
export abstract class DistributedWorker<TArgs = any, TInput = any, TResult = any> {
  /** URL of the module that exports this class (`import.meta.url`). Every concrete worker sets it. */
  static moduleUrl?: string;

  /** This process's rank, `0 .. worldSize - 1`. */
  rank!: number;
  /** Number of ranks. */
  worldSize!: number;
  /** `gpu:<index>` (the physical GPU index, also in `REACTOR_GPU_INDEX`) or `cpu`. */
  device!: string;
  /** Collectives among the ranks of this runner. */
  comm!: Collectives;

  /** True on rank 0, whose result the runner returns. */
  get isLeader(): boolean {
    return this.rank === 0;
  }

  /** Runs once per rank with the runner's `loadArgs`. */
  abstract load(args: TArgs): void | Promise<void>;
  /** Runs on every rank with the same input; rank 0's return value is the runner's result. */
  abstract generate(input: TInput): TResult | Promise<TResult>;
  /** Clears per-rollout state, keeping weights. */
  abstract reset(): void | Promise<void>;
}

/** What a worker class looks like from the outside (its constructor takes no arguments). */
export interface WorkerClass {
  new (): DistributedWorker;
  readonly name: string;
  readonly moduleUrl?: string;
  readonly prototype: object;
}
