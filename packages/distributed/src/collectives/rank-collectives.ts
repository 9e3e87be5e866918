/**
 * The rank side of the collectives: each rank writes its contribution into its own shared-memory
 * slot, tells the parent (one small IPC message), and the parent answers every rank once all have
 * arrived, naming the slots to read. One round trip through the parent per collective; no spinning.
 *
 * Two slots per rank, alternating by sequence number: a rank reaching collective k+1 proves every
 * rank has finished reading collective k-1, so the slot of k-1 can be overwritten.
 * @internal
 */
import { CallAbortedError, CollectiveError } from '../errors.js';
import type { CollectiveGoMessage, CollectiveMessage, CollectiveOp, Payload } from '../protocol.js';
import { encodeValue } from '../shm/codec.js';
import { type SegmentEnv, type SegmentReader, SegmentWriter, fromPayload, toPayload } from '../shm/segments.js';
import { type Collectives, type TypedArray, isCollectiveArray } from './types.js';

interface Pending {
  op: CollectiveOp;
  root: number;
  array: TypedArray | null;
  resolve(value: unknown): void;
  reject(err: Error): void;
}

export class RankCollectives implements Collectives {
  private seq = 0;
  private readonly slots: [SegmentWriter, SegmentWriter];
  private readonly pending = new Map<number, Pending>();

  constructor(
    readonly rank: number,
    readonly worldSize: number,
    env: SegmentEnv,
    prefix: string,
    private readonly reader: SegmentReader,
    private readonly send: (msg: CollectiveMessage) => void,
  ) {
    this.slots = [
      new SegmentWriter(env, `${prefix}-r${rank}-c0`, `rank ${rank}'s collective slot`),
      new SegmentWriter(env, `${prefix}-r${rank}-c1`, `rank ${rank}'s collective slot`),
    ];
  }

  barrier(): Promise<void> {
    return this.run('barrier', 0, null) as Promise<void>;
  }

  broadcast<T extends TypedArray>(array: T, root = 0): Promise<T> {
    return this.run('broadcast', root, array) as Promise<T>;
  }

  gather<T extends TypedArray>(array: T, root = 0): Promise<T[] | null> {
    return this.run('gather', root, array) as Promise<T[] | null>;
  }

  allGather<T extends TypedArray>(array: T): Promise<T[]> {
    return this.run('allGather', 0, array) as Promise<T[]>;
  }

  private async run(op: CollectiveOp, root: number, array: TypedArray | null): Promise<unknown> {
    if (!Number.isInteger(root) || root < 0 || root >= this.worldSize) {
      throw new CollectiveError(`${op}(): root must be a rank between 0 and ${this.worldSize - 1}, got ${String(root)} (rank ${this.rank}).`);
    }
    if (op !== 'barrier' && !isCollectiveArray(array)) {
      throw new CollectiveError(`${op}() takes a typed array (Uint8Array, Float32Array, ...), got ${describe(array)} (rank ${this.rank}).`);
    }
    if (this.worldSize === 1) {
      if (op === 'gather' || op === 'allGather') return [array];
      return op === 'broadcast' ? array : undefined;
    }
    const seq = this.seq++;
    const writes = op === 'allGather' || (op === 'gather' && this.rank !== root) || (op === 'broadcast' && this.rank === root);
    const payload: Payload | null = writes ? toPayload(encodeValue(array), this.slots[seq % 2]!) : null;
    return new Promise((resolve, reject) => {
      this.pending.set(seq, { op, root, array, resolve, reject });
      this.send({ t: 'coll', seq, op, root, payload });
    });
  }

  /** The parent's answer: every rank has arrived at collective `msg.seq`. */
  onGo(msg: CollectiveGoMessage): void {
    const p = this.pending.get(msg.seq);
    if (!p) return;
    this.pending.delete(msg.seq);
    if (msg.cancelled) {
      p.reject(new CallAbortedError(`${p.op}() on rank ${this.rank}`, true, 'the call was cancelled while this rank waited for its peers.'));
      return;
    }
    if (msg.error) {
      p.reject(new CollectiveError(msg.error));
      return;
    }
    try {
      p.resolve(this.complete(p, msg.payloads));
    } catch (err) {
      p.reject(err as Error);
    }
  }

  private complete(p: Pending, refs: (Payload | null)[]): unknown {
    switch (p.op) {
      case 'barrier':
        return undefined;
      case 'broadcast': {
        if (this.rank === p.root) return p.array;
        const view = this.readFrom(p.root, refs);
        const target = p.array!;
        if (view.constructor !== target.constructor || view.length !== target.length) {
          throw new CollectiveError(
            `broadcast(): rank ${this.rank} passed a ${target.constructor.name}(${target.length}) to receive rank ${p.root}'s ` +
              `${view.constructor.name}(${view.length}); pass an array of the same type and length.`,
          );
        }
        target.set(view as never);
        return target;
      }
      case 'gather':
      case 'allGather': {
        if (p.op === 'gather' && this.rank !== p.root) return null;
        const out: TypedArray[] = [];
        for (let r = 0; r < this.worldSize; r++) {
          if (r === this.rank) {
            out.push(p.array!);
            continue;
          }
          const view = this.readFrom(r, refs);
          if (view.constructor !== p.array!.constructor) {
            throw new CollectiveError(
              `${p.op}(): rank ${r} sent a ${view.constructor.name} but rank ${this.rank} a ${p.array!.constructor.name}; every rank must pass the same array type.`,
            );
          }
          out.push(view.slice());
        }
        return out;
      }
    }
  }

  private readFrom(rank: number, payloads: (Payload | null)[]): TypedArray {
    const p = payloads[rank];
    if (!p) throw new CollectiveError(`Collective data of rank ${rank} is missing (protocol bug).`);
    return fromPayload(p, this.reader) as TypedArray;
  }

  /**
   * A new call starts at collective `seq` on every rank (a cancelled call may have left ranks at
   * different numbers), and a collective a worker left unawaited in the previous call is
   * rejected. Safe for the two slots: the parent starts a call only once every rank has
   * answered the previous one, so every read of it is done.
   */
  beginCall(seq: number): void {
    this.seq = seq;
    for (const p of this.pending.values()) p.reject(new CollectiveError(`${p.op}() was left waiting when the call it belongs to ended (rank ${this.rank}).`));
    this.pending.clear();
  }

  dispose(): void {
    for (const s of this.slots) s.dispose();
  }
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (typeof v === 'object') return (v as object).constructor?.name ?? 'object';
  return typeof v;
}
