/**
 * The progress watch: every rank's progress block, read while calls are in flight (the call
 * tracker asks about each rank that owes an answer) and while idle (a frozen idle rank shows in
 * `stalledRanks` within `stallMs`). A counter standing still for `stallMs` is a reported stall
 * (log line, `stall` event); a change clears it (`stallCleared`).
 * @internal
 */
import type { Logger } from '@reactor/log';
import { ProgressReader, type ProgressReading } from '../shm/progress.js';
import type { ResolvedOptions } from './options.js';
import type { RankGroup } from './rank-group.js';
import type { DistributedRunnerEvents, StallInfo } from './runner-types.js';

/** The progress watch of one rank. */
interface Watch {
  reader: ProgressReader;
  counter: number | null;
  lastChange: number;
  stalled: boolean;
}

/** What the watch needs of the runner. */
export interface WatchHost {
  readonly opts: ResolvedOptions;
  readonly logger: Logger;
  readonly group: RankGroup;
  emit<K extends keyof DistributedRunnerEvents>(event: K, ...args: DistributedRunnerEvents[K]): void;
}

export class ProgressWatch {
  private watches: Watch[] = [];
  /** Reads every rank's progress block while no call runs. */
  private idleTimer: NodeJS.Timeout | null = null;

  constructor(private readonly host: WatchHost) {}

  /** Opens every rank's progress block (once the ranks are spawned). */
  watchRanks(prefix: string): void {
    for (let rank = 0; rank < this.host.opts.worldSize; rank++) {
      this.watches.push({ reader: new ProgressReader(prefix, rank), counter: null, lastChange: 0, stalled: false });
    }
  }

  /** Closes the progress blocks (in the teardown). */
  close(): void {
    for (const w of this.watches) w.reader.close();
  }

  /** The phase a rank's block shows now (`idle` when unreadable). */
  phase(rank: number): string {
    return this.watches[rank]?.reader.read()?.phase ?? 'idle';
  }

  /** Calls begin (from idle): every counter is read afresh and no rank counts as stalled. */
  restart(): void {
    const now = performance.now();
    for (const w of this.watches) {
      w.counter = w.reader.read()?.counter ?? null;
      w.lastChange = now;
      w.stalled = false;
    }
  }

  /** The last call ended: the stalls reported during the calls are cleared. */
  clearStalls(): void {
    for (const [rank, w] of this.watches.entries()) {
      if (w.stalled) {
        w.stalled = false;
        this.host.emit('stallCleared', rank);
      }
    }
  }

  /** One look at `rank` during call `op`: ms since its counter last changed, or null when its block is unreadable. */
  look(rank: number, now: number, op: string): number | null {
    const w = this.watches[rank];
    const reading = w?.reader.read() ?? null;
    return w && reading !== null ? this.observe(rank, w, reading, now, op) : null;
  }

  startIdle(): void {
    if (this.idleTimer) return;
    const now = performance.now();
    for (const w of this.watches) {
      w.counter = w.reader.read()?.counter ?? w.counter;
      w.lastChange = now;
    }
    this.idleTimer = setInterval(() => this.checkIdle(), Math.max(10, Math.min(250, this.host.opts.stallMs / 4)));
    this.idleTimer.unref();
  }

  stopIdle(): void {
    if (this.idleTimer) clearInterval(this.idleTimer);
    this.idleTimer = null;
  }

  /** The idle counterpart of {@link look}: a rank's event loop advances its block every 100 ms even with nothing to do. */
  private checkIdle(): void {
    if (!this.idleTimer) return;
    const now = performance.now();
    for (const [rank, w] of this.watches.entries()) {
      const reading = w.reader.read();
      if (reading !== null) this.observe(rank, w, reading, now, undefined);
    }
  }

  /**
   * One look at a rank's progress block, idle (`op` undefined) or during a call: a change clears
   * a reported stall; standing still for `stallMs` reports one (log line, `stall` event).
   * Returns the ms since the counter last changed (0 when it just did).
   */
  private observe(rank: number, w: Watch, reading: ProgressReading, now: number, op: string | undefined): number {
    if (reading.counter !== w.counter) {
      w.counter = reading.counter;
      w.lastChange = now;
      if (w.stalled) {
        w.stalled = false;
        this.host.logger.info(`Rank ${rank} makes progress again after a stall${op === undefined ? ' (idle)' : ''}.`);
        this.host.emit('stallCleared', rank);
      }
      return 0;
    }
    const since = now - w.lastChange;
    if (!w.stalled && since >= this.host.opts.stallMs) {
      w.stalled = true;
      const info: StallInfo = { rank, phase: reading.phase, sinceMs: Math.round(since), ...(reading.waitsOn && { waitsOn: reading.waitsOn }) };
      const peer = reading.waitsOn;
      const waits = peer ? ` (${peer.op === 'recv' ? 'receiving from' : 'sending to'} rank ${peer.rank}: rank ${rank} waits on rank ${peer.rank})` : '';
      const where = op === undefined ? 'while idle' : `in ${reading.phase}${waits} during ${op}`;
      this.host.logger
        .child({ rank })
        .warn(
          `Rank ${rank} (pid ${this.host.group.procs[rank]?.pid}) made no progress for ${info.sinceMs} ms ${where}: stopped, blocked in synchronous code, or deadlocked.`,
        );
      this.host.emit('stall', info);
    }
    return since;
  }

  /** Ranks that made no progress for `stallMs` (see `DistributedRunner.stalledRanks`). */
  stalledRanks(): StallInfo[] {
    const now = performance.now();
    return this.watches.flatMap((w, rank) => {
      if (!w.stalled) return [];
      const r = w.reader.read();
      return [{ rank, phase: r?.phase ?? 'idle', sinceMs: Math.round(now - w.lastChange), ...(r?.waitsOn && { waitsOn: r.waitsOn }) }];
    });
  }
}
