/**
 * The parent side of the collectives: counts arrivals per sequence number and, once every rank
 * has arrived, tells each rank where the parts it reads lie (each rank wrote its own part into
 * its collective block before arriving). Only these small signals pass through the parent. Also the source of truth for "a rank is waiting in
 * a collective", which turns a rank that finished early into an immediate `RankDesyncError`.
 * @internal
 */
import type { CapacityShortfall, CollectiveGoMessage, CollectiveMessage, CollectiveOp, PartInfo } from '../protocol.js';

interface Arrival {
  op: CollectiveOp;
  root: number;
  parts: (PartInfo | null)[];
  arrived: Set<number>;
  capacity?: CapacityShortfall;
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
      a = { op: msg.op, root: msg.root, parts: new Array<PartInfo | null>(this.worldSize).fill(null), arrived: new Set() };
      this.open.set(msg.seq, a);
    } else if (a.op !== msg.op || a.root !== msg.root) {
      const first = [...a.arrived][0];
      this.onMismatch(`collective #${msg.seq}: rank ${first} called ${a.op}(root ${a.root}) but rank ${rank} called ${msg.op}(root ${msg.root})`);
      return;
    }
    a.arrived.add(rank);
    a.parts[rank] = msg.part;
    if (msg.capacity) a.capacity ??= msg.capacity;
    if (a.arrived.size < this.worldSize) return;
    this.open.delete(msg.seq);
    if (a.capacity) {
      // A part that did not fit fails the collective on every rank alike (the runner stays healthy).
      for (let r = 0; r < this.worldSize; r++) this.sendTo(r, { t: 'collGo', seq: msg.seq, capacity: a.capacity });
      return;
    }
    for (let r = 0; r < this.worldSize; r++) {
      // Each rank is told only the parts it reads.
      const reads = a.op === 'allGather' || (a.op === 'gather' && r === a.root) || (a.op === 'broadcast' && r !== a.root);
      this.sendTo(r, reads ? { t: 'collGo', seq: msg.seq, parts: a.parts } : { t: 'collGo', seq: msg.seq });
    }
  }

  /** A new call starts: what a cancelled call left open is dropped (every rank continues at {@link nextSeq}). */
  reset(): void {
    this.open.clear();
  }

  /** The call was cancelled: every rank waiting in a collective is released (its collective rejects with an AbortError). */
  cancelAll(): void {
    for (const [seq, a] of this.open) {
      for (const r of a.arrived) this.sendTo(r, { t: 'collGo', seq, cancelled: true });
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
