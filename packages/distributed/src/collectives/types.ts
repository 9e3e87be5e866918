/**
 * The constructors of every typed array a collective accepts: the one list, checked against
 * {@link TypedArray} below so the two cannot drift.
 */
export const TYPED_ARRAY_CONSTRUCTORS = [
  Uint8Array,
  Uint8ClampedArray,
  Int8Array,
  Uint16Array,
  Int16Array,
  Uint32Array,
  Int32Array,
  Float32Array,
  Float64Array,
] as const;

/** Every typed array a collective accepts. */
export type TypedArray = Uint8Array | Uint8ClampedArray | Int8Array | Uint16Array | Int16Array | Uint32Array | Int32Array | Float32Array | Float64Array;

// Compile-time check that the list and the type name the same arrays (by their toStringTag).
type Tag<T> = T extends { readonly [Symbol.toStringTag]: infer N } ? N : never;
type ListedTags = Tag<InstanceType<(typeof TYPED_ARRAY_CONSTRUCTORS)[number]>>;
const sameArrays: [ListedTags] extends [Tag<TypedArray>] ? ([Tag<TypedArray>] extends [ListedTags] ? true : never) : never = true;
void sameArrays;

const ACCEPTED = new Set<unknown>(TYPED_ARRAY_CONSTRUCTORS);

/** True when `value` is a typed array a collective accepts. */
export function isCollectiveArray(value: unknown): value is TypedArray {
  return ArrayBuffer.isView(value) && ACCEPTED.has(value.constructor);
}

/**
 * Host-side collectives among the ranks of one runner, over shared memory (`this.comm` in a
 * worker). Every rank must call the same collectives in the same order (with the same `root`);
 * a rank that calls a different one, or finishes its call while its peers wait in a collective,
 * fails the call with `RankDesyncError` in the parent.
 *
 * How: a rank copies its part into its own shared-memory block (one copy) and sends one small
 * message; the ranks that receive it read it there in place. One round trip through the parent
 * per collective; no bytes through it.
 *
 * Lifetimes: `broadcast` fills the caller's own array. `gather` and `allGather` return the
 * caller's own array at its rank and, at the others, **views into the senders' shared memory,
 * valid until the next call (`generate()`/`reset()`) begins** — the same lifetime as the call's
 * input views and `resultArray()`. Use them (or return them: rank 0's result copies them) within
 * the call; `.slice()` what you keep longer. Do not write into them.
 */
export interface Collectives {
  readonly rank: number;
  readonly worldSize: number;
  /** Resolves once every rank has called `barrier()`. */
  barrier(): Promise<void>;
  /** root's array is copied to every rank; others pass an array of the same type and length to receive into; resolves to that array */
  broadcast<T extends TypedArray>(array: T, root?: number): Promise<T>;
  /**
   * root receives every rank's array in rank order (its own array object at its rank, views valid
   * until the next call elsewhere); others get null. Arrays may differ in length (empty ones too).
   * @throws SharedMemoryCapacityError (`shm_capacity`, on every rank) when a part does not fit in /dev/shm or `maxShmBytes`
   */
  gather<T extends TypedArray>(array: T, root?: number): Promise<T[] | null>;
  /** Every rank receives every rank's array in rank order (as `gather`'s root does). Arrays may differ in length. */
  allGather<T extends TypedArray>(array: T): Promise<T[]>;
}
