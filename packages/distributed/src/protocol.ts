/**
 * The one IPC protocol between the parent (`DistributedRunner`) and a rank process. Control
 * messages are small JSON objects on Node's IPC channel; every payload (load arguments, inputs,
 * results, collective parts) travels through shared memory and is referred to by a {@link SlotRef}
 * (a collective part by a {@link PartInfo}).
 * @internal
 */
import { ProtocolError } from './errors.js';
import type { FaultSpec } from './faults.js';

/** Bumped whenever a message shape changes; the child refuses a parent of another version. */
export const PROTOCOL_VERSION = 5;

/** Where a payload lies: a shared-memory segment name and the byte length of the message in it. */
export interface SlotRef {
  seg: string;
  len: number;
}

/**
 * A value in transit: JSON text inline (`j`, with `m` = `[type, offset, length]` per typed array
 * whose bytes lie in `s`), or, without `j`, a v8-format message entirely in `s`.
 */
export interface Payload {
  j?: string;
  m?: number[];
  s?: SlotRef;
}

/** Which shared-memory implementation every process of a runner uses. */
export type ShmBackendKind = 'native' | 'file';

/** An error as it crosses the process boundary. */
export interface WireError {
  /** `error.name` */
  name: string;
  /** Constructor name: the error's type for the outcome policy and for rebuilding the class. */
  type: string;
  message: string;
  stack?: string;
  code?: unknown;
  /** Other own enumerable properties that survived a JSON round trip. */
  props?: Record<string, unknown>;
  /** The `cause` chain, if the cause was an error. */
  cause?: WireError;
}

export type CollectiveOp = 'barrier' | 'broadcast' | 'gather' | 'allGather';
export type CallOp = 'generate' | 'reset' | 'snapshot' | 'restore';

// ---- parent -> child -------------------------------------------------------------------------

export interface InitMessage {
  t: 'init';
  version: number;
  rank: number;
  worldSize: number;
  device: string;
  /** URL of the compiled JS module that exports the worker class. */
  moduleUrl: string;
  /** Export name of the worker class (`default` allowed). */
  exportName: string;
  /** Name prefix of every shared-memory segment of this runner. */
  prefix: string;
  backend: ShmBackendKind;
  /** Free-space cap for segments this rank creates (`maxShmBytes`); null: only /dev/shm's free space. */
  maxShmBytes: number | null;
  args: Payload;
  /** Faults to inject on this rank (`options.faults`); empty normally. */
  faults: FaultSpec[];
  /** Divergence check: answer every generate() with a hash of the input as decoded. */
  verifyInputs: boolean;
  /** `maxInFlight`: calls may queue on the rank (it runs them one at a time, in order); each has a slot below this. */
  slots: number;
  /** The rank whose result is the answer (`outputRank`): only it writes its result into shared memory. */
  outputRank: number;
}
export interface CallMessage {
  t: 'call';
  id: number;
  op: CallOp;
  input: Payload | null;
  /**
   * The number of this call's first collective (the same on every rank, whatever a cancelled call
   * left); -1 for a call sent while others are in flight: the rank goes on from where it is.
   */
  collSeq: number;
  /** The call's slot (0 .. slots-1): which of the output rank's result blocks its result goes in. */
  slot: number;
}
/** The call `id` was cancelled: abort the worker's `signal`; the rank's answer is its acknowledgement. */
export interface CancelMessage {
  t: 'cancel';
  id: number;
}
/** Every rank has arrived at collective `seq`: it is complete on this rank. */
export interface CollectiveGoMessage {
  t: 'collGo';
  seq: number;
  /** Per rank, its part, where this rank reads it (null: this rank does not read that rank's part). */
  parts?: (PartInfo | null)[];
  /** Set when the ranks called different collectives here: every rank's call rejects with it. */
  error?: string;
  /** Set when a rank's part did not fit in its block: every rank's collective rejects with a `SharedMemoryCapacityError`. */
  capacity?: CapacityShortfall;
  /** Set when the call was cancelled while this rank waited: its collective rejects with an AbortError. */
  cancelled?: boolean;
}
export interface ExitMessage {
  t: 'exit';
}
export type ParentMessage = InitMessage | CallMessage | CancelMessage | CollectiveGoMessage | ExitMessage;

// ---- child -> parent -------------------------------------------------------------------------

export interface LoadedMessage {
  t: 'loaded';
}
export interface LoadFailedMessage {
  t: 'loadFailed';
  error: WireError;
}
export interface ResultMessage {
  t: 'result';
  id: number;
  /** The output rank's encoded result (null for other ranks: their results are not sent). */
  value: Payload | null;
  /** With `verifyInputs`: a hash of the input this rank decoded. */
  inputHash?: string;
}
export interface CallFailedMessage {
  t: 'failed';
  id: number;
  error: WireError;
  /** True when the model succeeded but its result could not be delivered (shared memory full). */
  transport?: boolean;
  /** With `verifyInputs`: a hash of the input this rank decoded. */
  inputHash?: string;
}
/** One rank's part of a collective: a typed array its rank has written into its own collective block. */
export interface PartInfo {
  /** The typed array's constructor name (`Float32Array`, ...). */
  type: string;
  /** Length in elements. */
  length: number;
  byteLength: number;
  /** The block it lies in (null for an empty part) and its data offset there. */
  seg: string | null;
  at: number;
}
/** A shared-memory block that did not fit (the fields of a `SharedMemoryCapacityError`). */
export interface CapacityShortfall {
  what: string;
  neededBytes: number;
  availableBytes: number;
  limitName: string;
}
/** This rank has arrived at collective `seq` (its part, if it sends one, is already written). */
export interface CollectiveMessage {
  t: 'coll';
  seq: number;
  op: CollectiveOp;
  root: number;
  part: PartInfo | null;
  /** Set when this rank's part did not fit in its block: the collective fails on every rank with it. */
  capacity?: CapacityShortfall;
}
export interface FatalMessage {
  t: 'fatal';
  error: WireError;
}
/** The rank's load progress (`reportProgress(ratio, stage)` in its `load()`), checked by the rank before it is sent. */
export interface LoadProgressMessage {
  t: 'progress';
  /** 0..1 */
  ratio: number;
  stage: string;
}
/** The rank's GPU busy ratio (0..1), sampled at most once a second where the rank knows it. */
export interface GpuBusyMessage {
  t: 'gpu';
  ratio: number;
}
export type ChildMessage =
  LoadedMessage | LoadFailedMessage | ResultMessage | CallFailedMessage | CollectiveMessage | FatalMessage | LoadProgressMessage | GpuBusyMessage;

const PARENT_TAGS = new Set(['init', 'call', 'cancel', 'collGo', 'exit']);
const CHILD_TAGS = new Set(['loaded', 'loadFailed', 'result', 'failed', 'coll', 'fatal', 'progress', 'gpu']);

function tagOf(value: unknown): unknown {
  return typeof value === 'object' && value !== null ? (value as { t?: unknown }).t : undefined;
}

/** Type guard: a message the parent may send. */
export function isParentMessage(value: unknown): value is ParentMessage {
  return PARENT_TAGS.has(tagOf(value) as string);
}

/** Type guard: a message a rank may send. */
export function isChildMessage(value: unknown): value is ChildMessage {
  return CHILD_TAGS.has(tagOf(value) as string);
}

/** Narrows `value` to a parent message or throws {@link ProtocolError}. */
export function expectParentMessage(value: unknown): ParentMessage {
  if (!isParentMessage(value)) throw new ProtocolError(`Rank received an unknown message from the parent: ${describe(value)}.`);
  return value;
}

/** Narrows `value` to a child message or throws {@link ProtocolError}. */
export function expectChildMessage(value: unknown, rank: number): ChildMessage {
  if (!isChildMessage(value)) throw new ProtocolError(`Parent received an unknown message from rank ${rank}: ${describe(value)}.`);
  return value;
}

function describe(value: unknown): string {
  let s: string;
  try {
    s = JSON.stringify(value) ?? String(value);
  } catch {
    s = String(value);
  }
  return s.length > 200 ? `${s.slice(0, 200)}...` : s;
}
