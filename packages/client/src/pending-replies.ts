/**
 * The requests of a client waiting for their answer, by id: each with its reply timeout and its
 * abort signal, resolved by the server's `reply` and rejected by its `error` (or by a drop).
 */
import type { SendOptions, WebSocketLike } from './client-types.js';
import { CommandTimeoutError } from './base/errors.js';
import type { ErrorMessage } from './base/protocol.js';

/** A request waiting for its `reply` or `error`. */
export interface Pending {
  name: string;
  resolve(result: unknown): void;
  reject(err: Error): void;
  /** The error for the server's `error` answer. */
  fail(code: string, message: string, details?: ErrorMessage['details']): Error;
  cleanup(): void;
  /** The message as sent, for a command (sent again on a moved session's new instance). */
  resend?: string;
}

/** The requests of one client that wait for an answer. */
export class PendingReplies {
  #nextId = 1;
  readonly #pending = new Map<string, Pending>();

  /** Sends one request message on `ws` and waits for its `reply`/`error` (`defaultTimeoutMs` unless `options.timeoutMs`). */
  request(
    ws: WebSocketLike,
    name: string,
    build: (id: string) => object,
    fail: Pending['fail'],
    options: SendOptions,
    defaultTimeoutMs: number,
    /** Told the request's id once it is sent, then its end: no error for a reply, the error it rejects with otherwise. */
    watch?: { sent(id: string): void; settled(id: string, err?: Error): void },
  ): Promise<unknown> {
    if (options.signal?.aborted) return Promise.reject(options.signal.reason);
    const id = String(this.#nextId++);
    return new Promise<unknown>((resolve, reject) => {
      const timeoutMs = options.timeoutMs ?? defaultTimeoutMs;
      const timer = timeoutMs > 0 ? setTimeout(() => done(new CommandTimeoutError(name, timeoutMs)), timeoutMs) : undefined;
      const onAbort = (): void => done(options.signal?.reason as Error);
      const cleanup = (): void => {
        if (timer) clearTimeout(timer);
        options.signal?.removeEventListener('abort', onAbort);
        this.#pending.delete(id);
      };
      const done = (err: Error): void => {
        cleanup();
        watch?.settled(id, err);
        reject(err);
      };
      options.signal?.addEventListener('abort', onAbort, { once: true });
      const ok = (v: unknown): void => {
        cleanup();
        watch?.settled(id);
        resolve(v);
      };
      const message = build(id);
      const text = JSON.stringify(message);
      const resendable = (message as { type?: unknown }).type === 'command';
      this.#pending.set(id, { name, resolve: ok, reject: done, fail, cleanup, ...(resendable && { resend: text }) });
      watch?.sent(id);
      ws.send(text);
    });
  }

  /**
   * The session moved (4307 `session_moved`): the commands still waiting are kept, to be sent
   * again on the new instance ({@link resend}); every other request rejects with `err`. The old
   * instance held them (a move freezes the session as its snapshot is taken) and applied none.
   * @returns the ids kept
   */
  holdCommands(err: Error): Set<string> {
    const kept = new Set<string>();
    for (const [id, p] of [...this.#pending]) {
      if (p.resend !== undefined) kept.add(id);
      else p.reject(err);
    }
    return kept;
  }

  /** Sends the kept commands again on `ws` (the moved session's new instance), in the order they were first sent; how many. */
  resend(ws: WebSocketLike, ids: ReadonlySet<string>): number {
    let n = 0;
    for (const [id, p] of this.#pending) {
      if (!ids.has(id) || p.resend === undefined) continue;
      ws.send(p.resend);
      n++;
    }
    return n;
  }

  /** A `reply`: resolves the request it answers, if that still waits. */
  resolve(id: string, result: unknown): void {
    this.#pending.get(id)?.resolve(result);
  }

  /** An `error`: rejects the request it answers with that request's error; false when it answers none that waits. */
  fail(msg: ErrorMessage): boolean {
    const p = msg.id === undefined ? undefined : this.#pending.get(msg.id);
    if (p) {
      p.reject(p.fail(msg.code, msg.message, msg.details));
      return true;
    }
    return false;
  }

  /** Rejects every waiting request with `err`. */
  rejectAll(err: Error): void {
    for (const p of [...this.#pending.values()]) p.reject(err);
    this.#pending.clear();
  }
}
