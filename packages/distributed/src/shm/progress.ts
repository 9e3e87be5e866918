/**
 * Each rank's progress, published where the parent can read it without the rank's help: a tiny
 * file in /dev/shm (shared memory) holding a counter that the rank's event loop advances every
 * {@link PROGRESS_TICK_MS} and the rank's current phase. A rank that is stopped, blocked in
 * synchronous code or deadlocked stops advancing it; the parent notices by reading it.
 *
 * Layout (this module is its only reader and writer):
 * ```
 * offset 0  u32 LE  counter (wraps)
 * offset 4  u32 LE  phase, an index into PROGRESS_PHASES
 * ```
 * @internal
 */
import { closeSync, ftruncateSync, openSync, readSync, unlinkSync, writeSync } from 'node:fs';
import { SHM_DIR } from './segments.js';

/** How often a rank's event loop advances its counter. */
export const PROGRESS_TICK_MS = 100;
const COUNTER_OFFSET = 0;
const PHASE_OFFSET = 4;
const PROGRESS_BYTES = 8;

/** What a rank is doing, as published. */
/** `collective`: a Python rank inside a `torch.distributed` collective (labelled by `reactor_worker.init_distributed()`). */
export const PROGRESS_PHASES = ['idle', 'loading', 'generate', 'reset', 'collective', 'snapshot', 'restore'] as const;
export type ProgressPhase = (typeof PROGRESS_PHASES)[number];

/** The progress block of `rank` of the runner whose segment prefix is `prefix`. */
export function progressSegmentName(prefix: string, rank: number): string {
  return `${prefix}-r${rank}-progress`;
}

/** The rank's side: creates the block and advances it from a timer. */
export class ProgressPublisher {
  private readonly fd: number;
  private readonly path: string;
  private readonly bytes = Buffer.alloc(PROGRESS_BYTES);
  private counter = 0;
  private readonly timer: NodeJS.Timeout;

  constructor(prefix: string, rank: number) {
    this.path = `${SHM_DIR}/${progressSegmentName(prefix, rank)}`;
    this.fd = openSync(this.path, 'w+', 0o600);
    ftruncateSync(this.fd, PROGRESS_BYTES);
    this.publish();
    // unref: progress never keeps a rank alive; the IPC channel does.
    this.timer = setInterval(() => {
      this.counter = (this.counter + 1) >>> 0;
      this.publish();
    }, PROGRESS_TICK_MS).unref();
  }

  /** Publishes what the rank is doing now. */
  setPhase(phase: ProgressPhase): void {
    this.bytes.writeUInt32LE(PROGRESS_PHASES.indexOf(phase), PHASE_OFFSET);
    this.publish();
  }

  private publish(): void {
    this.bytes.writeUInt32LE(this.counter, COUNTER_OFFSET);
    writeSync(this.fd, this.bytes, 0, PROGRESS_BYTES, 0);
  }

  /** Stops publishing and removes the block. */
  dispose(): void {
    clearInterval(this.timer);
    try {
      closeSync(this.fd);
      unlinkSync(this.path);
    } catch {
      // already reclaimed by the parent
    }
  }
}

/** One reading of a rank's progress block. */
/** A rank in a point-to-point send or receive (a pipeline's `torch.distributed.send`/`recv`): which peer it waits on. */
export interface PeerWait {
  op: 'send' | 'recv';
  rank: number;
}

export interface ProgressReading {
  counter: number;
  phase: ProgressPhase;
  /** Set in the `collective` phase of a `send` or `recv`: the peer (bits 8-15 of the phase word: peer + 1; bit 16: a receive). */
  waitsOn?: PeerWait;
}

/** The parent's side: reads a rank's block (opened on first use). */
export class ProgressReader {
  private fd: number | null = null;
  private readonly bytes = Buffer.alloc(PROGRESS_BYTES);

  constructor(
    private readonly prefix: string,
    private readonly rank: number,
  ) {}

  /** The current reading, or null when the block cannot be read (not created yet, or gone). */
  read(): ProgressReading | null {
    try {
      this.fd ??= openSync(`${SHM_DIR}/${progressSegmentName(this.prefix, this.rank)}`, 'r');
      if (readSync(this.fd, this.bytes, 0, PROGRESS_BYTES, 0) < PROGRESS_BYTES) return null;
    } catch {
      return null;
    }
    const word = this.bytes.readUInt32LE(PHASE_OFFSET);
    const phase = PROGRESS_PHASES[word & 0xff] ?? 'idle';
    const peer = (word >>> 8) & 0xff;
    const counter = this.bytes.readUInt32LE(COUNTER_OFFSET);
    return peer > 0 ? { counter, phase, waitsOn: { op: word & 0x10000 ? 'recv' : 'send', rank: peer - 1 } } : { counter, phase };
  }

  close(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }
}
