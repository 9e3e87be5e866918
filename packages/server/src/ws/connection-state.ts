/**
 * The one state of a client connection, as a transition table: every change goes through
 * {@link ConnectionLifecycle.to}, and an edge the table does not list throws
 * `IllegalTransitionError` (`illegal_transition`, the protocol's one transition helper), so a wrong order of events is a loud bug.
 *
 * - `open`: read and written.
 * - `reads_paused`: its answers are unread (more than `readPauseBytes` unsent): the server stops
 *   reading it (TCP back-pressure) until they drain, for at most `readPauseTimeoutMs`.
 * - `closing` / `closing_reads_paused`: the server closed the socket itself (a limit, a refusal,
 *   shutdown) and waits for the close handshake: the client is not held for resume. Reads go on
 *   (or stay paused) as before.
 * - `cut`: cut for not reading its answers or for an oversized message: nothing more is read or
 *   handled.
 * - `evicted`: cut by the server-wide send budget; its unsent bytes were given back.
 * - `closed`: the socket closed and the host was told. Final.
 *
 * Only a connection that was still `open` or `reads_paused` when its socket dropped (1006) is
 * held for resume.
 */
import { transition, type TransitionTable } from '@reactor/protocol';

export type ConnectionState = 'open' | 'reads_paused' | 'closing' | 'closing_reads_paused' | 'cut' | 'evicted' | 'closed';

/** For each state, the states it may move to (an empty list: a final state). */
export const CONNECTION_TRANSITIONS: TransitionTable<ConnectionState> = {
  open: ['reads_paused', 'closing', 'cut', 'evicted', 'closed'],
  reads_paused: ['open', 'closing_reads_paused', 'cut', 'evicted', 'closed'],
  closing: ['closing_reads_paused', 'cut', 'evicted', 'closed'],
  closing_reads_paused: ['closing', 'cut', 'evicted', 'closed'],
  cut: ['evicted', 'closed'],
  evicted: ['closed'],
  closed: [],
};

/** One connection's state, and the questions its parts ask of it. */
export class ConnectionLifecycle {
  #state: ConnectionState = 'open';

  get state(): ConnectionState {
    return this.#state;
  }

  /**
   * Moves to `next`.
   * @throws IllegalTransitionError (`illegal_transition`) when {@link CONNECTION_TRANSITIONS} has no such edge.
   */
  to(next: ConnectionState): void {
    this.#state = transition('connection', CONNECTION_TRANSITIONS, this.#state, next);
  }

  /** The socket closed and the host was told. */
  get closed(): boolean {
    return this.#state === 'closed';
  }

  /** Nothing more is read or handled (cut, evicted, closed). */
  get deaf(): boolean {
    return this.#state === 'cut' || this.#state === 'evicted' || this.#state === 'closed';
  }

  /** Cut for not reading, or for an oversized message. */
  get cut(): boolean {
    return this.#state === 'cut';
  }

  /** Cut by the server-wide budget. */
  get evicted(): boolean {
    return this.#state === 'evicted';
  }

  /** The server stopped reading it. */
  get readsPaused(): boolean {
    return this.#state === 'reads_paused' || this.#state === 'closing_reads_paused';
  }

  /** Reads pause: `open` -> `reads_paused`, `closing` -> `closing_reads_paused`. */
  pauseReads(): void {
    this.to(this.#state === 'closing' ? 'closing_reads_paused' : 'reads_paused');
  }

  /** Reads resume: the reverse of {@link pauseReads}. */
  resumeReads(): void {
    this.to(this.#state === 'closing_reads_paused' ? 'closing' : 'open');
  }

  /** The server closes the socket itself (no resume); nothing changes once it is cut, evicted or closed. */
  closeByServer(): void {
    if (this.#state === 'open') this.to('closing');
    else if (this.#state === 'reads_paused') this.to('closing_reads_paused');
  }

  /** A socket that drops (1006) in this state is held for resume. */
  get resumable(): boolean {
    return this.#state === 'open' || this.#state === 'reads_paused';
  }
}
