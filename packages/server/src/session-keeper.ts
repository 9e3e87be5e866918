/**
 * The server's hold on its session and its clients' identities: the session limits
 * (`maxSessionMs`, the tokens' `mst`, `idleTimeoutMs`: one timer for the nearer deadline, then
 * every client is closed with the limit's code) and the resume grace (a client whose socket
 * dropped keeps its identity for `resumeGraceMs`, bound to a sink that drops everything).
 */
import { CloseCode, type ErrorBody } from '@reactor/protocol';
import type { Logger } from '@reactor/log';
import type { ClientHandle, ClientSink } from '@reactor/runtime';
import type { ClientConnection } from './connection.js';
import { ServerErrorCode } from './errors.js';
import type { ServerMetrics } from './metrics.js';
import type { ResolvedServerOptions } from './options.js';
import type { ServableHost } from './servable-host.js';
import type { Grant } from './tokens.js';

/** A client whose connection dropped, held for the resume grace. */
interface Suspended {
  readonly handle: ClientHandle;
  readonly grant: Grant;
  readonly timer: ReturnType<typeof setTimeout>;
}

/** Where a suspended client's messages and frames go until it resumes: nowhere. */
const NOWHERE: ClientSink = { message: () => undefined, frame: () => undefined, audio: () => undefined, close: () => undefined };

/** What the keeper needs from the server. */
export interface SessionKeeperContext {
  options: ResolvedServerOptions;
  log: Logger;
  metrics: ServerMetrics;
  host: ServableHost;
  connections(): Iterable<ClientConnection>;
  /** The server is shutting down. */
  closing(): boolean;
}

/** Session limits and resume holds of one server. */
export class SessionKeeper {
  readonly #c: SessionKeeperContext;
  /** Dropped clients held for resume, by resume secret. */
  readonly #suspended = new Map<string, Suspended>();
  /** The current session (for the session limits): its id, when it started, its time limit. */
  #session: { id: string; startedAt: number; limitMs: number | undefined; lastActivity: number } | undefined;
  #limitTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(c: SessionKeeperContext) {
    this.#c = c;
  }

  /** A client did something (a command, a publication, a frame): the idle timeout starts over. */
  activity(): void {
    if (this.#session) this.#session.lastActivity = performance.now();
  }

  // ---- session limits ---------------------------------------------------------------------

  /** A new session began (or the last ended): its limits start over. */
  sessionChanged(id: string | undefined): void {
    clearTimeout(this.#limitTimer);
    this.#limitTimer = undefined;
    if (id === undefined) {
      this.#session = undefined;
      return;
    }
    const now = performance.now();
    this.#session = { id, startedAt: now, limitMs: this.#c.options.maxSessionMs, lastActivity: now };
    // Clients already connected (they waited for the session) bring their tokens' limits.
    for (const c of this.#c.connections()) this.applyGrantLimit(c.grant);
    this.#armLimits();
  }

  /** A client of the session holds a token with a longest session time: the session may not outlast it. */
  applyGrantLimit(grant: Grant): void {
    const s = this.#session;
    if (!s || grant.maxSessionMs === undefined) return;
    if (s.limitMs === undefined || grant.maxSessionMs < s.limitMs) {
      s.limitMs = grant.maxSessionMs;
      this.#armLimits();
    }
  }

  /** Arms one timer for the nearer of the session's deadline and its idle timeout. */
  #armLimits(): void {
    clearTimeout(this.#limitTimer);
    this.#limitTimer = undefined;
    const s = this.#session;
    if (!s || this.#c.closing()) return;
    const now = performance.now();
    const idle = this.#c.options.idleTimeoutMs;
    const dueAt = Math.min(s.limitMs === undefined ? Infinity : s.startedAt + s.limitMs, idle === undefined ? Infinity : s.lastActivity + idle);
    if (dueAt === Infinity) return;
    this.#limitTimer = setTimeout(() => this.#checkLimits(), Math.max(0, dueAt - now) + 1);
    this.#limitTimer.unref();
  }

  #checkLimits(): void {
    const s = this.#session;
    if (!s || this.#c.closing()) return;
    const now = performance.now();
    const idle = this.#c.options.idleTimeoutMs;
    if (s.limitMs !== undefined && now - s.startedAt >= s.limitMs) {
      return this.#endSession(CloseCode.SessionTimeLimit, {
        code: ServerErrorCode.SessionTimeLimit,
        message: `session_time_limit: the session reached its longest time, ${s.limitMs / 1000} s`,
      });
    }
    if (idle !== undefined && now - s.lastActivity >= idle) {
      return this.#endSession(CloseCode.IdleTimeout, {
        code: ServerErrorCode.IdleTimeout,
        message: `idle_timeout: no command, publication or frame for ${idle / 1000} s`,
      });
    }
    this.#armLimits();
  }

  /** Ends the session for a limit: every client is closed with `code` and the reason (no resume), then the host ends the session. */
  #endSession(code: number, error: ErrorBody): void {
    this.#c.log.info(`ending session ${this.#session?.id ?? ''}: ${error.message}`);
    this.#session = undefined;
    for (const c of this.#c.connections()) c.close(error.message, code);
    for (const [secret, s] of this.#suspended) {
      clearTimeout(s.timer);
      this.#suspended.delete(secret);
      s.handle.disconnect();
    }
    this.#c.host.endCurrentSession?.(error).catch((err: Error) => this.#c.log.error(`ending the session failed: ${err.stack ?? err.message}`));
  }

  // ---- resume -------------------------------------------------------------------------------

  /** A connection closed: the client leaves, or, dropped without a close frame, is held for `resumeGraceMs`. */
  gone(conn: ClientConnection, handle: ClientHandle, dropped: boolean): void {
    const graceMs = this.#c.options.resumeGraceMs;
    if (!dropped || graceMs === 0 || this.#c.closing()) return handle.disconnect();
    handle.rebind(NOWHERE);
    const timer = setTimeout(() => {
      if (this.#suspended.get(conn.resumeSecret)?.handle !== handle) return;
      this.#suspended.delete(conn.resumeSecret);
      this.#c.log.info({ client: handle.id }, `client ${handle.id} did not come back within ${graceMs} ms; it leaves`);
      handle.disconnect();
    }, graceMs);
    timer.unref();
    this.#suspended.set(conn.resumeSecret, { handle, grant: conn.grant, timer });
    this.#c.log.info({ client: handle.id }, `client ${handle.id} dropped; held ${graceMs} ms for resume`);
  }

  /** Clients held for resume now (their ids). */
  suspendedClients(): string[] {
    return [...this.#suspended.values()].map((s) => s.handle.id);
  }

  /**
   * The held client of resume secret `secret`, taken out of the hold (its timer stopped), or
   * undefined.
   */
  takeHeld(secret: string): ClientHandle | undefined {
    const held = this.#suspended.get(secret);
    if (!held) return undefined;
    clearTimeout(held.timer);
    this.#suspended.delete(secret);
    this.#c.log.info({ client: held.handle.id }, `client ${held.handle.id} resumed`);
    this.#c.metrics.resumes.inc({ result: 'resumed' });
    return held.handle;
  }

  /** Shutdown: no limit fires any more, and every held client leaves. */
  close(): void {
    clearTimeout(this.#limitTimer);
    for (const s of this.#suspended.values()) {
      clearTimeout(s.timer);
      s.handle.disconnect();
    }
    this.#suspended.clear();
  }
}
