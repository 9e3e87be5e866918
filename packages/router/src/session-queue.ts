/**
 * The router's waiting line for `POST /sessions?wait=<s>`: when no instance is free, a request
 * waits here, first come first served, until an instance becomes Ready (the GameServer cache's
 * watch says so, or the poll finds one), its time limit runs out, or its caller goes away. Only
 * the head of the line is allocated for: a later request never takes an instance before an
 * earlier one. The line lives in one router's memory (see docs/decisions.md, issue 25).
 */
import { randomUUID } from 'node:crypto';
import type { Instance } from './instance.js';

/** Default longest wait a request may ask for, ms (2 min). */
export const DEFAULT_QUEUE_MAX_WAIT_MS = 120_000;
/** Default most requests waiting at once. */
export const DEFAULT_QUEUE_MAX_LENGTH = 1000;
/** Default poll for a free instance while requests wait (besides the watch's Ready events), ms. */
export const DEFAULT_QUEUE_POLL_MS = 1000;
/** Weight of the newest interval in the mean time between two allocations from the line. */
const SERVE_INTERVAL_WEIGHT = 0.3;

/** How a wait ended. */
export type QueueOutcome =
  | { kind: 'allocated'; instance: Instance; sessionId: string; waitedMs: number }
  | { kind: 'timeout'; waitedMs: number }
  | { kind: 'cancelled'; waitedMs: number }
  | { kind: 'closed'; waitedMs: number };

/** Where a waiting request stands: its place (1 = next) and the estimated wait, seconds (`null` until the line has served twice). */
export interface QueuePosition {
  position: number;
  estimateS: number | null;
}

/** One waiting request. */
export interface QueueTicket {
  readonly id: string;
  readonly sessionId: string;
  /** Settles once: allocated, timed out, cancelled, or the router closed. */
  readonly outcome: Promise<QueueOutcome>;
  /** Leaves the line (the caller went away); a no-op once settled. */
  cancel(): void;
}

interface Waiter {
  readonly ticket: QueueTicket;
  readonly sessionId: string;
  readonly enqueuedAt: number;
  readonly timer: ReturnType<typeof setTimeout>;
  readonly onPosition: (p: QueuePosition) => void;
  settle(outcome: QueueOutcome): void;
  last: number;
}

/** What the line needs: an allocation for a session id (`undefined`: no free instance). */
export type Allocate = (sessionId: string) => Promise<Instance | undefined>;

/** Options of {@link SessionQueue}. */
export interface SessionQueueOptions {
  maxLength: number;
  pollMs: number;
  /** A wait ended (for the metrics). */
  onDone?: (outcome: QueueOutcome) => void;
  /** An allocation attempt failed (the API): logged; the line tries again at the next poll or Ready. */
  onError?: (err: unknown) => void;
}

/** The waiting line (see the module comment). */
export class SessionQueue {
  readonly #allocate: Allocate;
  readonly #o: SessionQueueOptions;
  readonly #line: Waiter[] = [];
  #serving = false;
  #again = false;
  #poll: ReturnType<typeof setInterval> | undefined;
  #lastServedAt: number | undefined;
  /** Mean time between two allocations from the line, ms (EWMA). */
  #serveIntervalMs: number | undefined;
  #closed = false;

  constructor(allocate: Allocate, options: SessionQueueOptions) {
    this.#allocate = allocate;
    this.#o = options;
  }

  /** Requests waiting now. */
  get length(): number {
    return this.#line.length;
  }

  /** Whether the line is full (a new request is refused). */
  get full(): boolean {
    return this.#line.length >= this.#o.maxLength;
  }

  /** How long the oldest request has waited, ms (0 when none waits). */
  oldestWaitMs(now = performance.now()): number {
    const first = this.#line[0];
    return first ? now - first.enqueuedAt : 0;
  }

  /**
   * Puts a request at the end of the line for at most `waitMs`. `onPosition` is called at once
   * and whenever its place changes.
   * @throws {RangeError} when the line is full or closed (check {@link full} first).
   */
  enqueue(sessionId: string, waitMs: number, onPosition: (p: QueuePosition) => void): QueueTicket {
    if (this.#closed) throw new RangeError('the queue is closed');
    if (this.full) throw new RangeError(`the queue is full (${this.#o.maxLength} waiting)`);
    let settle!: (o: QueueOutcome) => void;
    const outcome = new Promise<QueueOutcome>((r) => (settle = r));
    const enqueuedAt = performance.now();
    const waiter: Waiter = {
      ticket: { id: randomUUID(), sessionId, outcome, cancel: () => this.#leave(waiter, 'cancelled') },
      sessionId,
      enqueuedAt,
      timer: setTimeout(() => this.#leave(waiter, 'timeout'), waitMs),
      onPosition,
      last: 0,
      settle: (o) => {
        clearTimeout(waiter.timer);
        settle(o);
        this.#o.onDone?.(o);
      },
    };
    this.#line.push(waiter);
    this.#tell(waiter, this.#line.length);
    this.#ensurePoll();
    this.kick();
    return waiter.ticket;
  }

  /** An instance may be free (a GameServer became Ready, or the poll): serve the line from its head. */
  kick(): void {
    if (this.#line.length === 0 || this.#closed) return;
    if (this.#serving) {
      this.#again = true;
      return;
    }
    this.#serving = true;
    void this.#serve().finally(() => {
      this.#serving = false;
      if (this.#again) {
        this.#again = false;
        this.kick();
      }
    });
  }

  /** Answers every waiting request `closed` and stops. */
  close(): void {
    this.#closed = true;
    clearInterval(this.#poll);
    for (const w of this.#line.splice(0)) w.settle({ kind: 'closed', waitedMs: performance.now() - w.enqueuedAt });
  }

  async #serve(): Promise<void> {
    while (this.#line.length > 0 && !this.#closed) {
      const head = this.#line[0]!;
      let instance: Instance | undefined;
      try {
        instance = await this.#allocate(head.sessionId);
      } catch (err) {
        this.#o.onError?.(err);
        return;
      }
      if (!instance) return;
      const now = performance.now();
      // The head may have left while the allocation ran: the instance goes to the next in line.
      const first = this.#line[0];
      if (!first) return; // nobody waits any more; the instance stays Allocated to a session nobody joins (its grace ends it)
      if (first !== head) {
        // Allocated under the old head's session id: hand the same instance and id to the new head.
        this.#line.shift();
        first.settle({ kind: 'allocated', instance, sessionId: head.sessionId, waitedMs: now - first.enqueuedAt });
      } else {
        this.#line.shift();
        head.settle({ kind: 'allocated', instance, sessionId: head.sessionId, waitedMs: now - head.enqueuedAt });
      }
      if (this.#lastServedAt !== undefined) {
        const gap = now - this.#lastServedAt;
        this.#serveIntervalMs = this.#serveIntervalMs === undefined ? gap : this.#serveIntervalMs * (1 - SERVE_INTERVAL_WEIGHT) + gap * SERVE_INTERVAL_WEIGHT;
      }
      this.#lastServedAt = now;
      this.#tellAll();
    }
    if (this.#line.length === 0) this.#stopPoll();
  }

  #leave(w: Waiter, kind: 'timeout' | 'cancelled'): void {
    const i = this.#line.indexOf(w);
    if (i < 0) return;
    this.#line.splice(i, 1);
    w.settle({ kind, waitedMs: performance.now() - w.enqueuedAt });
    this.#tellAll(i);
    if (this.#line.length === 0) this.#stopPoll();
  }

  #tell(w: Waiter, position: number): void {
    if (w.last === position) return;
    w.last = position;
    const estimateS = this.#serveIntervalMs === undefined ? null : Math.round((position * this.#serveIntervalMs) / 100) / 10;
    try {
      w.onPosition({ position, estimateS });
    } catch {
      // A listener that throws (its socket is gone) must not stop the line.
    }
  }

  #tellAll(from = 0): void {
    for (let i = from; i < this.#line.length; i++) this.#tell(this.#line[i]!, i + 1);
  }

  #ensurePoll(): void {
    if (this.#poll) return;
    this.#poll = setInterval(() => this.kick(), this.#o.pollMs);
    this.#poll.unref();
  }

  #stopPoll(): void {
    clearInterval(this.#poll);
    this.#poll = undefined;
  }
}
