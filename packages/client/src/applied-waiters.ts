/**
 * Commands waiting for their `applied` message (issue 26): the `.applied` promise that
 * `client.command()` / `client.send()` return alongside the reply.
 *
 * How each one settles:
 * - the server's `applied`: resolves with its outcome (`applied` with `seq` and `track`, or
 *   `superseded`, `paused`, `ended`);
 * - the command failed (an `error` answer, a reply timeout, a connection lost before the reply,
 *   `close()` before the reply, not connected): rejects with the same error as the command;
 * - the reply came, but the `applied` never will: the client closed or gave up reconnecting, or a
 *   welcome that is not a resume (a new identity, a `reactor dev` reload): resolves `ended`.
 * A rejection nobody reads is not reported as unhandled: each promise has a handler of its own.
 */
import type { AppliedMessage } from './base/protocol.js';

/** Where a command's change first showed, or why it never will (`.applied` of a command). */
export type AppliedInfo =
  | {
      outcome: 'applied';
      seq: number;
      track: string;
      /** While the client's WebRTC link is up: the RTP timestamp that frame carries on its WebRTC video. */
      rtpTimestamp?: number;
    }
  | { outcome: 'superseded' | 'paused' | 'ended' };

/** What `client.command()` returns: the reply, and the frame that first shows the command. */
export type CommandPromise<R = unknown> = Promise<R> & {
  /** Settles once the server said which frame first reflects the command (see {@link AppliedInfo}); rejects when the command failed. */
  readonly applied: Promise<AppliedInfo>;
};

interface Waiter {
  resolve(info: AppliedInfo): void;
  reject(err: Error): void;
}

/** The `.applied` promises of one client, by command id. */
export class AppliedWaiters {
  readonly #waiting = new Map<string, Waiter>();

  /** The `.applied` promise of command `id` (sent just now). */
  wait(id: string): Promise<AppliedInfo> {
    const p = new Promise<AppliedInfo>((resolve, reject) => {
      this.#waiting.set(id, { resolve, reject });
    });
    // Unread is fine: a caller that never looks at `.applied` gets no unhandled rejection.
    p.catch(() => undefined);
    return p;
  }

  /** The server's `applied`; one for a command nobody waits for (a repeat after a resume, a timed-out command) is ignored. */
  settle(msg: AppliedMessage): void {
    const w = this.#waiting.get(msg.id);
    if (!w) return;
    this.#waiting.delete(msg.id);
    if (msg.outcome !== 'applied') return w.resolve({ outcome: msg.outcome });
    w.resolve({ outcome: 'applied', seq: msg.seq, track: msg.track, ...(msg.rtpTimestamp !== undefined && { rtpTimestamp: msg.rtpTimestamp }) });
  }

  /** The command failed: its `.applied` rejects with the same error. */
  fail(id: string, err: Error): void {
    const w = this.#waiting.get(id);
    if (!w) return;
    this.#waiting.delete(id);
    w.reject(err);
  }

  /** No `applied` will come for any of them (the connection or the session is gone): each resolves `ended` (but those in `except`: commands sent again). */
  endAll(except?: ReadonlySet<string>): void {
    const waiting = [...this.#waiting].filter(([id]) => !except?.has(id));
    for (const [id] of waiting) this.#waiting.delete(id);
    for (const [, w] of waiting) w.resolve({ outcome: 'ended' });
  }
}
