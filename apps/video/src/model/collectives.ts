/**
 * The collectives a rank uses to gather a chunk on rank 0: the `Collectives` interface of
 * `@reactor/distributed`, which a `DistributedWorker` receives as `this.comm`. Only its type is
 * used, so the model has no runtime dependency on the runner and anything of the same shape
 * can drive it.
 */
export type { Collectives as ModelCollectives } from '@reactor/distributed';
