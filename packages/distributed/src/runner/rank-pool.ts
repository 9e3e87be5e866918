/**
 * The rank reuse pool a host owns (`reactor dev`): install it, let the app make runners, and
 * release what the new version did not take. See `rank-reuse.ts` for what may be reused.
 * @internal
 */
import type { DistributedWorker } from '../worker/distributed-worker.js';
import type { PythonWorkerSpec } from '../python/python-worker.js';
import { DistributedRunner } from './distributed-runner.js';
import type { DistributedRunnerOptions } from './options.js';
import { RankReusePool } from './rank-reuse.js';

/**
 * A {@link RankReusePool} with its factory.
 * @example
 * ```ts
 * const ranks = new RankPool().install();   // reactor dev, once
 * // ... each app version: new DistributedRunner(...) (or ranks.create(...)) reuses the parked ranks
 * await ranks.releaseParked();              // after a reload: stop what the new version did not take
 * await ranks.close();                      // on exit
 * ```
 */
export class RankPool extends RankReusePool {
  /** The parked runner with the same fingerprint (the same object, started), or a new runner. */
  create<TInput, TResult, TArgs>(
    WorkerClass: ((abstract new () => DistributedWorker<TInput, TResult, TArgs>) & { readonly moduleUrl: string }) | PythonWorkerSpec<TInput, TResult, TArgs>,
    options: DistributedRunnerOptions<TArgs>,
  ): DistributedRunner<TInput, TResult, TArgs> {
    return DistributedRunner.fromPool(this, WorkerClass, options);
  }
}
