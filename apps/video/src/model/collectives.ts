/**
 * The collectives a rank uses to gather a chunk on rank 0. Structurally the `Collectives`
 * interface of `@reactor/distributed` (which a `DistributedWorker` receives as `this.comm`);
 * declared here so the model has no dependency on the runner and can be driven by anything
 * with the same shape.
 */

/** Any typed array the collectives move. */
export type TypedArray =
  | Int8Array
  | Uint8Array
  | Uint8ClampedArray
  | Int16Array
  | Uint16Array
  | Int32Array
  | Uint32Array
  | Float32Array
  | Float64Array
  | BigInt64Array
  | BigUint64Array;

/** Host-side collectives across the ranks of one runner. */
export interface ModelCollectives {
  readonly rank: number;
  readonly worldSize: number;
  barrier(): Promise<void>;
  broadcast<T extends TypedArray>(array: T, root?: number): Promise<T>;
  /** On `root`: every rank's array in rank order; elsewhere null. */
  gather<T extends TypedArray>(array: T, root?: number): Promise<T[] | null>;
  allGather<T extends TypedArray>(array: T): Promise<T[]>;
}
