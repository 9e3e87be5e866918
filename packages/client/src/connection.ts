/**
 * A client's socket and its life: open one and wait for its welcome, tell a drop from a close,
 * reconnect with back-off, and take the identity back within the server's grace with the
 * welcome's resume secret. The client hears of it through {@link ConnectionHooks}.
 */
import type { ConnectionState, ConnectionStatus, ReconnectOptions, WebSocketConstructor, WebSocketLike } from './client-types.js';
import { ClientErrorCode, ConnectionError, ProtocolMismatchError } from './base/errors.js';
import { CloseCode, HttpErrorCode, PROTOCOL_VERSION, parseServerMessage, type ServerMessage, type WelcomeMessage } from './base/protocol.js';
import { movedTo, redact, routerRefusal } from './base/socket-url.js';

const OPEN = 1;

/** What a {@link ClientConnection} tells its client. */
export interface ConnectionHooks {
  /** A socket is about to be opened (the first, or a reconnect). */
  opening(): void;
  /** A welcome arrived (the first of a socket, or a re-join on it). */
  welcome(msg: WelcomeMessage): void;
  /** A message after the socket's welcome (text or binary). */
  message(data: unknown): void;
  /** A message before the welcome that does not parse. */
  error(err: Error): void;
  /** The connection state changed (the `status` event). */
  status(status: ConnectionStatus): void;
  /** A reconnect attempt is scheduled (the `reconnecting` event). */
  reconnecting(status: ConnectionStatus): void;
  /** The publications end (`connection_lost`): the connection is gone and will not be resumed. */
  endPublications(): void;
  /** The requests waiting for an answer fail with `err`. */
  rejectPending(err: Error): void;
  /** The session moved (4307): the commands waiting for an answer are kept to be sent again on the new instance; other requests fail with `err`. */
  holdPending(err: Error): void;
}

/** The socket of one {@link ReactorClient}, across its reconnects. */
export class ClientConnection {
  /** The socket URL; a session router's 4307 `session_moved` points it at the session's new instance. */
  #wsUrl: string;
  readonly #WebSocket: WebSocketConstructor;
  readonly #reconnect: Required<ReconnectOptions> | undefined;
  readonly #resume: boolean;
  readonly #hooks: ConnectionHooks;
  #ws: WebSocketLike | undefined;
  #state: ConnectionState = 'connecting';
  #closedByUser = false;
  #retryTimer: ReturnType<typeof setTimeout> | undefined;
  /** The last welcome's resume secret. */
  #resumeSecret: { secret: string; graceMs: number } | undefined;
  /** When the connection dropped with a resume secret in hand (performance.now()). */
  #droppedAt: number | undefined;

  /** `r`: `ConnectOptions.reconnect` (`true`: the default back-off); `resume`: `ConnectOptions.resume`. */
  constructor(wsUrl: string, WebSocket: WebSocketConstructor, r: boolean | ReconnectOptions, resume: boolean, hooks: ConnectionHooks) {
    this.#wsUrl = wsUrl;
    this.#WebSocket = WebSocket;
    this.#reconnect =
      r === false
        ? undefined
        : {
            initialDelayMs: 250,
            maxDelayMs: 5000,
            factor: 2,
            maxAttempts: Infinity,
            ...(r === true ? {} : r),
          };
    this.#resume = resume;
    this.#hooks = hooks;
  }

  /** Connection state: `connecting`, `open`, `reconnecting` or `closed`. */
  get state(): ConnectionState {
    return this.#state;
  }

  /** The current socket, if one was opened. */
  get ws(): WebSocketLike | undefined {
    return this.#ws;
  }

  /** The socket while the connection is open and the socket can send; else undefined. */
  openSocket(): WebSocketLike | undefined {
    const ws = this.#ws;
    return this.#state !== 'open' || !ws || ws.readyState !== OPEN ? undefined : ws;
  }

  /** Moves to `status.state` and tells the client (its `status` event). */
  setState(status: ConnectionStatus): void {
    this.#state = status.state;
    this.#hooks.status(status);
  }

  /** A welcome arrived: keeps its resume secret; returns when the connection had dropped (undefined: it had not). */
  takeWelcome(msg: WelcomeMessage): number | undefined {
    const droppedAt = this.#droppedAt;
    this.#droppedAt = undefined;
    this.#resumeSecret = this.#resume ? msg.resume : undefined;
    return droppedAt;
  }

  /** Closed by the client's user: no reconnect from now on. False when it already was. */
  beginClose(): boolean {
    if (this.#closedByUser) return false;
    this.#closedByUser = true;
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    return true;
  }

  /** Closes the socket (1000, `client closed`). */
  closeSocket(): void {
    try {
      this.#ws?.close(1000, 'client closed');
    } catch {
      // closing a socket that is still connecting throws in some implementations; it is going away anyway
    }
  }

  /** Opens one socket and resolves on its welcome. */
  open(signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      let ws: WebSocketLike;
      this.#hooks.opening();
      try {
        ws = new this.#WebSocket(this.#socketUrl());
      } catch (err) {
        return reject(new ConnectionError(ClientErrorCode.ConnectionFailed, `cannot open ${redact(this.#wsUrl)}: ${(err as Error).message}`, { cause: err }));
      }
      ws.binaryType = 'arraybuffer';
      this.#ws = ws;
      let welcomed = false;
      let lastError = '';
      const onAbort = (): void => {
        try {
          ws.close(1000, 'aborted');
        } catch {
          // see closeSocket()
        }
        reject(signal?.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      ws.addEventListener('error', (ev: { message?: string; error?: Error }) => {
        lastError = ev.error?.message ?? ev.message ?? 'WebSocket error';
      });
      ws.addEventListener('message', (ev: { data: unknown }) => {
        if (!welcomed) {
          if (typeof ev.data !== 'string') return;
          let msg: ServerMessage;
          try {
            msg = parseServerMessage(ev.data);
          } catch (err) {
            this.#hooks.error(err as Error);
            return;
          }
          if (msg.type !== 'welcome') return;
          signal?.removeEventListener('abort', onAbort);
          if (msg.protocol !== PROTOCOL_VERSION) {
            ws.close(1000, 'protocol mismatch');
            reject(new ProtocolMismatchError(msg.protocol, PROTOCOL_VERSION));
            return;
          }
          welcomed = true;
          this.#hooks.welcome(msg);
          resolve();
          return;
        }
        this.#hooks.message(ev.data);
      });
      ws.addEventListener('close', (ev: { code: number; reason: string }) => {
        signal?.removeEventListener('abort', onAbort);
        if (!welcomed) {
          const routed = routerRefusal(ev.code, ev.reason);
          if (routed) {
            // The session router accepted the socket only to say why it cannot relay it (not a token problem).
            reject(new ConnectionError(routed.code, `cannot connect to ${redact(this.#wsUrl)}: the session router says ${ev.reason}`));
            return;
          }
          const why = lastError || `closed with code ${ev.code}${ev.reason ? ` (${ev.reason})` : ''}`;
          reject(
            new ConnectionError(
              ClientErrorCode.ConnectionFailed,
              `cannot connect to ${redact(this.#wsUrl)}: ${why}. A 401 means a missing or wrong token, a 403 a disallowed origin`,
            ),
          );
          return;
        }
        this.#onClose(ev.code, ev.reason);
      });
    });
  }

  /** The socket URL, with the resume secret while a dropped connection may still be resumed. */
  #socketUrl(): string {
    if (this.#droppedAt === undefined || !this.#resumeSecret) return this.#wsUrl;
    const u = new URL(this.#wsUrl);
    u.searchParams.set('resume', this.#resumeSecret.secret);
    return u.toString();
  }

  /** The socket closed after its welcome: resume, reconnect, or end. */
  #onClose(code: number, reason: string): void {
    // A drop that may be resumed keeps the publications: they skip frames until the socket is back.
    const resumable = this.#resumeSecret !== undefined && this.#reconnect !== undefined && !this.#closedByUser && code !== 1000 && code !== 1008;
    if (resumable) this.#droppedAt ??= performance.now();
    else this.#hooks.endPublications();
    if (code === CloseCode.SessionTimeLimit || code === CloseCode.IdleTimeout || code === CloseCode.DrainDeadline) {
      // The session ended for good (a limit): reconnecting would only start another.
      this.#droppedAt = undefined;
      this.#hooks.endPublications();
      this.#hooks.rejectPending(new ConnectionError(ClientErrorCode.ConnectionLost, `the session ended (${reason}) before the reply arrived`));
      if (!this.#closedByUser) this.setState({ state: 'closed', reason });
      return;
    }
    const lost = new ConnectionError(
      ClientErrorCode.ConnectionLost,
      `the connection dropped (code ${code}${reason ? `, ${reason}` : ''}) before the reply arrived`,
    );
    // The session router moved the session (its instance drains): reconnect there at once.
    const moved = this.#reconnect && !this.#closedByUser ? movedTo(code, reason, this.#wsUrl) : undefined;
    // Its commands still waiting were held by the old instance, not applied: they go again to the new one.
    if (moved !== undefined) this.#hooks.holdPending(lost);
    else this.#hooks.rejectPending(lost);
    if (this.#closedByUser) return;
    if (moved !== undefined) {
      this.#wsUrl = moved;
      this.#scheduleReconnect(1, reason, 0);
      return;
    }
    // The router found the instance gone: reconnecting to it cannot help; the session is lost.
    if (routerRefusal(code, reason)) {
      this.setState({ state: 'closed', reason: `the session is lost: closed by the session router (code ${code}, ${reason})` });
      return;
    }
    if (!this.#reconnect) {
      this.setState({ state: 'closed', reason: `closed by the server (code ${code}${reason ? `, ${reason}` : ''})` });
      return;
    }
    this.#scheduleReconnect(1, reason || `code ${code}`);
  }

  #scheduleReconnect(attempt: number, reason: string, firstDelayMs?: number): void {
    const r = this.#reconnect!;
    if (attempt > r.maxAttempts) {
      this.setState({ state: 'closed', reason: `gave up after ${r.maxAttempts} reconnect attempts: ${reason}` });
      return;
    }
    const base = Math.min(r.maxDelayMs, r.initialDelayMs * r.factor ** (attempt - 1));
    const delayMs = firstDelayMs ?? Math.round(base * (0.75 + Math.random() * 0.5));
    this.setState({ state: 'reconnecting', attempt, delayMs, reason });
    this.#hooks.reconnecting({ state: 'reconnecting', attempt, delayMs, reason });
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      if (this.#closedByUser) return;
      this.open().catch((err: Error) => {
        if (this.#closedByUser) return;
        // The session router answered for the instance: it is gone (or holds no session now), so the session is lost.
        const code = (err as { code?: string }).code;
        if (code === HttpErrorCode.InstanceUnreachable || code === HttpErrorCode.UnknownInstance) {
          this.#droppedAt = undefined;
          this.#hooks.endPublications();
          this.setState({ state: 'closed', reason: `the session is lost: ${err.message}` });
          return;
        }
        this.#scheduleReconnect(attempt + 1, err.message);
      });
    }, delayMs);
  }
}
