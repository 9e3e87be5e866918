/**
 * The parent side of the collectives: counts arrivals per sequence number and, once every rank
 * has arrived, tells each rank where to read. Also the source of truth for "a rank is waiting in
 * a collective", which turns a rank that finished early into an immediate `RankDesyncError`.
 * @internal
 */
import type { CollectiveGoMessage, CollectiveMessage, CollectiveOp, Payload } from '../protocol.js';

interface Arrival {
  op: CollectiveOp;
  root: number;
  payloads: (Payload | null)[];
  arrived: Set<number>;
}

export class CollectiveHub {
  private readonly open = new Map<number, Arrival>();
  private next = 0;

  /** The number the next collective takes (one past the highest seen). */
  get nextSeq(): number {
    return this.next;
  }

  constructor(
    private readonly worldSize: number,
    private readonly sendTo: (rank: number, msg: CollectiveGoMessage) => void,
    private readonly onMismatch: (detail: string) => void,
  ) {}

  arrive(rank: number, msg: CollectiveMessage): void {
    this.next = Math.max(this.next, msg.seq + 1);
    let a = this.open.get(msg.seq);
    if (!a) {
      a = { op: msg.op, root: msg.root, payloads: new Array<Payload | null>(this.worldSize).fill(null), arrived: new Set() };
      this.open.set(msg.seq, a);
    } else if (a.op !== msg.op || a.root !== msg.root) {
      const first = [...a.arrived][0];
      this.onMismatch(`collective #${msg.seq}: rank ${first} called ${a.op}(root ${a.root}) but rank ${rank} called ${msg.op}(root ${msg.root})`);
      return;
    }
    a.arrived.add(rank);
    a.payloads[rank] = msg.payload;
    if (a.arrived.size < this.worldSize) return;
    this.open.delete(msg.seq);
    const none: (Payload | null)[] = [];
    for (let r = 0; r < this.worldSize; r++) {
      let payloads: (Payload | null)[];
      if (a.op === 'barrier') payloads = none;
      else if (a.op === 'gather') payloads = r === a.root ? a.payloads : none;
      else payloads = a.payloads;
      this.sendTo(r, { t: 'collGo', seq: msg.seq, payloads });
    }
  }

  /** A new call starts: what a cancelled call left open is dropped (every rank continues at {@link nextSeq}). */
  reset(): void {
    this.open.clear();
  }

  /** The call was cancelled: every rank waiting in a collective is released (its collective rejects with an AbortError). */
  cancelAll(): void {
    for (const [seq, a] of this.open) {
      for (const r of a.arrived) this.sendTo(r, { t: 'collGo', seq, payloads: [], cancelled: true });
    }
    this.open.clear();
  }

  /** Ranks that have arrived at collective `seq` so far. */
  arrivedAt(seq: number): number[] {
    return [...(this.open.get(seq)?.arrived ?? [])];
  }

  /**
   * The collective some ranks wait in that `rank` has not joined, if any: when `rank` has just
   * finished its call, those ranks will wait forever.
   */
  waitingWithout(rank: number): { seq: number; op: CollectiveOp; waiting: number[] } | null {
    for (const [seq, a] of this.open) {
      if (!a.arrived.has(rank)) return { seq, op: a.op, waiting: [...a.arrived].sort((x, y) => x - y) };
    }
    return null;
  }
}
