/**
 * The server's hold on its session and its clients' identities: the session limits
 * (`maxSessionMs` and `idleTimeoutMs`: one timer for the nearer deadline, then every client is
 * closed with the limit's code), each client's own limit (its token's `mst`, counted from its
 * arrival in the session: that client alone is closed), and the resume grace (a client whose
 * socket dropped keeps its identity for `resumeGraceMs`, bound to a sink that drops everything).
 */
import { CloseCode, type ErrorBody } from '@reactor/protocol';
import type { Logger } from '@reactor/log';
import type { ClientHandle, ClientSink } from '@reactor/runtime';
import type { ClientConnection } from './connection.js';
import { ServerErrorCode } from './base/errors.js';
import type { ServerMetrics } from './base/metrics.js';
import type { ResolvedServerOptions } from './options.js';
import type { ServableHost } from './base/servable-host.js';
import type { Grant } from '@reactor/access';

/** A client whose connection dropped, held for the resume grace. */
interface Suspended {
  readonly handle: ClientHandle;
  readonly grant: Grant;
  readonly timer: ReturnType<typeof setTimeout>;
}

/**
 * Why credential `next` may not take the identity held with `held`, or undefined when it may:
 * its role must be the held client's (a resume never raises one), its tracks cover the held
 * publications' grant, and when the held token named a holder (`sub`), the same one.
 */
function otherHolder(held: Grant, next: Grant): string | undefined {
  if (next.role !== held.role) return `the credential's role "${next.role}" is not the held client's ("${held.role}")`;
  if (held.subject !== undefined && next.subject !== held.subject) return `the credential's subject is not the held client's`;
  const covers = next.publish === '*' || (held.publish !== '*' && held.publish.every((t) => next.publish.includes(t)));
  if (!covers) return 'the credential does not grant the tracks the held client may publish';
  return undefined;
}

/** One client's own time limit (its token's `mst`). */
interface ClientLimit {
  readonly limitMs: number;
  /** When its time started: its arrival, or the session's start when it came before the session. */
  startedAt: number;
  timer: ReturnType<typeof setTimeout> | undefined;
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
  /** Clients whose token limits their time in a session (`mst`), by client id (a resumed client keeps its clock). */
  readonly #clientLimits = new Map<string, ClientLimit>();

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
    // Clients that came before this session (they waited for it) count their own time from its start.
    for (const [clientId, limit] of this.#clientLimits) {
      if (limit.startedAt < now) {
        limit.startedAt = now;
        this.#armClient(clientId, limit);
      }
    }
    this.#armLimits();
  }

  /**
   * A new client (not a resumed one) whose token limits its time in a session (`mst`): from now
   * (or from the session's start, when none runs yet), it is closed alone with
   * `session_time_limit` when that time has run; the session goes on for the others.
   */
  admit(clientId: string, grant: Grant): void {
    if (grant.maxSessionMs === undefined || clientId === '') return;
    const limit: ClientLimit = { limitMs: grant.maxSessionMs, startedAt: performance.now(), timer: undefined };
    this.#clientLimits.set(clientId, limit);
    if (this.#session) this.#armClient(clientId, limit);
  }

  #armClient(clientId: string, limit: ClientLimit): void {
    clearTimeout(limit.timer);
    limit.timer = setTimeout(() => this.#clientTimeUp(clientId), Math.max(0, limit.startedAt + limit.limitMs - performance.now()) + 1);
    limit.timer.unref();
  }

  /** A client's own time has run: that client alone is closed (or, held for resume, let go). */
  #clientTimeUp(clientId: string): void {
    const limit = this.#clientLimits.get(clientId);
    this.#clientLimits.delete(clientId);
    if (!limit || this.#c.closing()) return;
    const message = `session_time_limit: your token allows ${limit.limitMs / 1000} s in a session (mst), from your arrival`;
    this.#c.log.info({ client: clientId }, `client ${clientId} leaves: ${message}`);
    for (const c of this.#c.connections()) if (c.id === clientId) c.close(message, CloseCode.SessionTimeLimit);
    for (const [secret, s] of this.#suspended) {
      if (s.handle.id !== clientId) continue;
      clearTimeout(s.timer);
      this.#suspended.delete(secret);
      s.handle.disconnect();
    }
  }

  /** A client left for good: its own limit goes with it. */
  #forget(clientId: string): void {
    clearTimeout(this.#clientLimits.get(clientId)?.timer);
    this.#clientLimits.delete(clientId);
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
    if (!dropped || graceMs === 0 || this.#c.closing()) {
      this.#forget(handle.id);
      return handle.disconnect();
    }
    handle.rebind(NOWHERE);
    const timer = setTimeout(() => {
      if (this.#suspended.get(conn.resumeSecret)?.handle !== handle) return;
      this.#suspended.delete(conn.resumeSecret);
      this.#c.log.info({ client: handle.id }, `client ${handle.id} did not come back within ${graceMs} ms; it leaves`);
      this.#forget(handle.id);
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
   * undefined. Only for the same holder: a credential of another role or subject (a leaked
   * secret presented with someone else's token) gets no identity, and the hold stays for its owner.
   */
  takeHeld(secret: string, grant: Grant): ClientHandle | undefined {
    const held = this.#suspended.get(secret);
    if (!held) return undefined;
    const other = otherHolder(held.grant, grant);
    if (other !== undefined) {
      this.#c.log.warn({ client: held.handle.id }, `a resume of client ${held.handle.id} was refused: ${other}; it connects as a new client`);
      return undefined;
    }
    clearTimeout(held.timer);
    this.#suspended.delete(secret);
    this.#c.log.info({ client: held.handle.id }, `client ${held.handle.id} resumed`);
    this.#c.metrics.resumes.inc({ result: 'resumed' });
    return held.handle;
  }

  /** Shutdown: no limit fires any more, and every held client leaves. */
  close(): void {
    clearTimeout(this.#limitTimer);
    for (const id of [...this.#clientLimits.keys()]) this.#forget(id);
    for (const s of this.#suspended.values()) {
      clearTimeout(s.timer);
      s.handle.disconnect();
    }
    this.#suspended.clear();
  }
}
