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
 * Lifetimes: every array a collective returns is either the caller's own array or a fresh copy
 * that the caller owns; nothing returned is a view into shared memory.
 */
export interface Collectives {
  readonly rank: number;
  readonly worldSize: number;
  /** Resolves once every rank has called `barrier()`. */
  barrier(): Promise<void>;
  /** root's array is copied to every rank; others pass an array of the same type and length to receive into; resolves to that array */
  broadcast<T extends TypedArray>(array: T, root?: number): Promise<T>;
  /** root receives every rank's array in rank order (its own included); others get null. Arrays may differ in length. */
  gather<T extends TypedArray>(array: T, root?: number): Promise<T[] | null>;
  /** Every rank receives every rank's array in rank order (its own included). Arrays may differ in length. */
  allGather<T extends TypedArray>(array: T): Promise<T[]>;
}
