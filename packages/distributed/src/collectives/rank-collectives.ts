/**
 * The rank side of the collectives. A rank that contributes a part copies it into its own
 * collective block (the one copy a part costs) and tells the parent where it lies, in one small
 * IPC message; once every rank has arrived the parent tells each rank where the parts it reads
 * lie, and the rank returns views of them: no relay of bytes through the parent, no copy on the
 * reading side, no spinning. One round trip through the parent per collective.
 *
 * What a collective returns (other than the rank's own array) is a view into a peer's block,
 * valid until the next call begins (see `shm/collective-blocks.ts`).
 * @internal
 */
import { CallAbortedError, CollectiveError, SharedMemoryCapacityError } from '../errors.js';
import type { CapacityShortfall, CollectiveGoMessage, CollectiveMessage, CollectiveOp, PartInfo } from '../protocol.js';
import { CollectiveArena, CollectiveMemory } from '../shm/collective-blocks.js';
import type { SegmentEnv } from '../shm/segments.js';
import { type Collectives, TYPED_ARRAY_CONSTRUCTORS, type TypedArray, isCollectiveArray } from './types.js';

interface Pending {
  op: CollectiveOp;
  root: number;
  array: TypedArray | null;
  resolve(value: unknown): void;
  reject(err: Error): void;
}

type ArrayCtor = new (buffer: ArrayBufferLike, byteOffset: number, length: number) => TypedArray;
const CONSTRUCTOR_BY_NAME = new Map<string, ArrayCtor>(TYPED_ARRAY_CONSTRUCTORS.map((c) => [c.name, c as unknown as ArrayCtor]));

export class RankCollectives implements Collectives {
  private seq = 0;
  private readonly pending = new Map<number, Pending>();
  private readonly memory: CollectiveMemory;
  private readonly arena: CollectiveArena;

  constructor(
    readonly rank: number,
    readonly worldSize: number,
    env: SegmentEnv,
    prefix: string,
    private readonly send: (msg: CollectiveMessage) => void,
    /** The runner's `maxInFlight`: above 1 the ranks may be in different calls, which these collectives cannot pair. */
    private readonly slots = 1,
  ) {
    this.memory = new CollectiveMemory(env.backend);
    this.arena = new CollectiveArena(env, `${prefix}-r${rank}-coll`, `rank ${rank}'s collective parts`);
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
    if (this.slots > 1 && this.worldSize > 1) {
      throw new CollectiveError(
        `${op}() on rank ${this.rank} of a runner with maxInFlight ${this.slots}: the host collectives pair every rank within one call, ` +
          `and with several calls in flight the ranks may be in different ones. Use maxInFlight 1 for a worker that calls collectives ` +
          `(a pipeline of TypeScript ranks is not supported; Python ranks send to each other with torch.distributed).`,
      );
    }
    if (this.worldSize === 1) {
      if (op === 'gather' || op === 'allGather') return [array];
      return op === 'broadcast' ? array : undefined;
    }
    const writes = op === 'allGather' || (op === 'gather' && this.rank !== root) || (op === 'broadcast' && this.rank === root);
    let part: PartInfo | null = null;
    let capacity: CapacityShortfall | undefined;
    if (array) {
      part = { type: array.constructor.name, length: array.length, byteLength: array.byteLength, seg: null, at: 0 };
      if (writes && array.byteLength > 0) {
        try {
          const { seg, at } = this.arena.place(array.byteLength);
          this.memory.write(seg, at, new Uint8Array(array.buffer, array.byteOffset, array.byteLength));
          part.seg = seg;
          part.at = at;
        } catch (err) {
          if (!(err instanceof SharedMemoryCapacityError)) throw err;
          // Arrive anyway: the collective then fails on every rank with this error, not on this one alone (a desync).
          capacity = { what: err.what, neededBytes: err.neededBytes, availableBytes: err.availableBytes, limitName: err.limitName };
        }
      }
    }
    const seq = this.seq++;
    return new Promise((resolve, reject) => {
      this.pending.set(seq, { op, root, array, resolve, reject });
      this.send({ t: 'coll', seq, op, root, part, ...(capacity && { capacity }) });
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
    if (msg.capacity) {
      const c = msg.capacity;
      p.reject(new SharedMemoryCapacityError(c.what, c.neededBytes, c.availableBytes, c.limitName));
      return;
    }
    try {
      p.resolve(this.complete(p, msg.parts));
    } catch (err) {
      p.reject(err as Error);
    }
  }

  private complete(p: Pending, parts: CollectiveGoMessage['parts']): unknown {
    switch (p.op) {
      case 'barrier':
        return undefined;
      case 'broadcast': {
        if (this.rank === p.root) return p.array;
        const view = this.viewOf(parts, p.root);
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
          const view = this.viewOf(parts, r);
          if (view.constructor !== p.array!.constructor) {
            throw new CollectiveError(
              `${p.op}(): rank ${r} sent a ${view.constructor.name} but rank ${this.rank} a ${p.array!.constructor.name}; every rank must pass the same array type.`,
            );
          }
          out.push(view);
        }
        return out;
      }
    }
  }

  /** A typed view of rank `rank`'s part where that rank wrote it (no copy). */
  private viewOf(parts: CollectiveGoMessage['parts'], rank: number): TypedArray {
    const part = parts?.[rank];
    if (!part) throw new CollectiveError(`Collective data of rank ${rank} is missing (protocol bug).`);
    const Ctor = CONSTRUCTOR_BY_NAME.get(part.type);
    if (!Ctor) throw new CollectiveError(`Rank ${rank} sent a ${part.type}, which collectives do not take (protocol bug).`);
    if (part.seg === null) return new Ctor(new ArrayBuffer(0), 0, 0);
    const bytes = this.memory.read(part.seg, part.at, part.byteLength);
    return new Ctor(bytes.buffer, bytes.byteOffset, part.length);
  }

  /**
   * A new call starts at collective `seq` on every rank (a cancelled call may have left ranks at
   * different numbers), and a collective a worker left unawaited in the previous call is
   * rejected. The rank's block starts again from its beginning: the parent starts a call only
   * once every rank has answered the previous one, so every read of it is done.
   */
  beginCall(seq: number): void {
    this.seq = seq;
    this.arena.reset();
    for (const p of this.pending.values()) p.reject(new CollectiveError(`${p.op}() was left waiting when the call it belongs to ended (rank ${this.rank}).`));
    this.pending.clear();
  }

  dispose(): void {
    this.memory.close();
    this.arena.dispose();
  }
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (typeof v === 'object') return (v as object).constructor?.name ?? 'object';
  return typeof v;
}
