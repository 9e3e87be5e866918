/**
 * The Reactor client SDK: connect to a served app, read its schema, send commands, and
 * receive frames, messages and status. Browser-safe (no `node:` imports); in Node 20 pass
 * the `ws` package's `WebSocket` class as `options.WebSocket`.
 */
import type { AppTypes, CommandArgs, CommandName, MessageData, MessageName, UntypedApp } from './app-types.js';
import { TypedEmitter } from './emitter.js';
import { ClientErrorCode, CommandFailedError, CommandTimeoutError, ConnectionError, ProtocolMismatchError, ReactorClientError } from './errors.js';
import {
  PROTOCOL_VERSION,
  decodeFrame,
  parseServerMessage,
  type AppMessage,
  type AppSchema,
  type DecodedFrame,
  type FlushMessage,
  type ServerMessage,
  type SessionStatus,
  type StatsMessage,
  type WelcomeMessage,
} from './protocol.js';

/** The subset of the WHATWG `WebSocket` this client uses (browsers, `ws`, Node 22+). */
export interface WebSocketLike {
  readonly readyState: number;
  binaryType: string;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: 'open' | 'message' | 'close' | 'error', listener: (event: any) => void): void;
}

/** A `WebSocket` constructor: `globalThis.WebSocket` or `import { WebSocket } from 'ws'`. */
export type WebSocketConstructor = new (url: string) => WebSocketLike;

/** Back-off policy for automatic reconnection. */
export interface ReconnectOptions {
  /** Delay before the first attempt, ms (default 250). */
  initialDelayMs?: number;
  /** Upper bound of the delay, ms (default 5000). */
  maxDelayMs?: number;
  /** Multiplier per attempt (default 2). */
  factor?: number;
  /** Give up after this many failed attempts in a row (default: never). */
  maxAttempts?: number;
}

/** Options of {@link connect}. */
export interface ConnectOptions {
  /** Access token, when the server requires one (sent as the `token` query parameter). */
  token?: string;
  /** Aborts the initial connection; once connected, aborting closes the client. */
  signal?: AbortSignal;
  /** WebSocket implementation; defaults to `globalThis.WebSocket`. In Node 20 pass `ws`'s class. */
  WebSocket?: WebSocketConstructor;
  /** Reconnect with back-off after the connection drops (default `true`). `false` disables it. */
  reconnect?: boolean | ReconnectOptions;
  /** Default reply timeout of {@link ReactorClient.send}, ms (default 30000; 0 = none). */
  commandTimeoutMs?: number;
}

/** Options of one {@link ReactorClient.send} call. */
export interface SendOptions {
  /** Stops waiting for the reply (the command may still run on the server). */
  signal?: AbortSignal;
  /** Reply timeout, ms; overrides `ConnectOptions.commandTimeoutMs`; 0 = none. */
  timeoutMs?: number;
}

/** Connection state of a client. */
export type ConnectionState = 'connecting' | 'open' | 'reconnecting' | 'closed';

/** A `status` event: the connection state and, while reconnecting, the attempt. */
export interface ConnectionStatus {
  state: ConnectionState;
  /** Reconnect attempt number (1-based), while `reconnecting`. */
  attempt?: number;
  /** Delay before that attempt, ms. */
  delayMs?: number;
  /** Why the connection dropped or the client closed, if known. */
  reason?: string;
}

/** A received frame: the decoded header, the payload view, and when it arrived. */
export interface ClientFrame extends DecodedFrame {
  /** Name of the frame's track (`schema.tracks[track].name`). */
  trackName: string;
  /** `performance.now()` when the message arrived. */
  receivedAt: number;
}

/** Events of a {@link ReactorClient}. */
export interface ReactorClientEvents {
  /** A welcome arrived (first connection and every re-join). */
  welcome: WelcomeMessage;
  frame: ClientFrame;
  /** An app message (`send()` broadcast or `client.send()`). */
  message: AppMessage;
  /** The public state changed. */
  state: Record<string, unknown>;
  session: SessionStatus;
  stats: StatsMessage;
  /** Playout was cut: clear what is shown. */
  flush: FlushMessage;
  status: ConnectionStatus;
  /** A server error not tied to a command, or an undecodable message. */
  error: Error;
}

interface Pending {
  name: string;
  resolve(result: unknown): void;
  reject(err: Error): void;
  cleanup(): void;
}

const OPEN = 1;

/**
 * Connects to a Reactor server and resolves once the welcome message has arrived.
 *
 * @param url The server's base URL (`http://127.0.0.1:8080`) or its WebSocket URL (`ws://127.0.0.1:8080/ws`).
 * @throws {ConnectionError} `connection_failed` when the socket cannot be opened or is refused
 *   (wrong token: the server answers 401; disallowed origin: 403).
 * @throws {ProtocolMismatchError} when the server speaks another protocol version.
 * @example
 * const client = await connect('http://127.0.0.1:8080', { WebSocket });
 * await client.send('set_prompt', { prompt: 'A beach at dusk.' });
 */
export async function connect<T extends AppTypes = UntypedApp>(url: string, options: ConnectOptions = {}): Promise<ReactorClient<T>> {
  const client = new ReactorClient<T>(url, options);
  await client.ready;
  return client;
}

/** Turns `http(s)://host[/base]` into `ws(s)://host[/base]/ws`, and adds the token. */
export function toWebSocketUrl(url: string, token?: string): string {
  const u = new URL(url);
  if (u.protocol === 'http:') u.protocol = 'ws:';
  else if (u.protocol === 'https:') u.protocol = 'wss:';
  if (u.protocol !== 'ws:' && u.protocol !== 'wss:') throw new TypeError(`url must be http(s):// or ws(s)://, got ${url}`);
  if (!u.pathname.endsWith('/ws')) u.pathname = u.pathname.replace(/\/?$/, '/ws');
  if (token !== undefined) u.searchParams.set('token', token);
  return u.toString();
}

/**
 * A live connection to one app session. Create it with {@link connect}.
 * Events: `frame`, `message`, `state`, `session`, `stats`, `flush`, `status`, `welcome`, `error`
 * (see {@link ReactorClientEvents}); or iterate with {@link frames}, {@link messages}, {@link statuses}.
 */
export class ReactorClient<T extends AppTypes = UntypedApp> extends TypedEmitter<ReactorClientEvents> {
  /** The app's published schema (commands, messages, tracks). */
  schema!: AppSchema;
  /** The current public state (kept up to date from `state` messages). */
  state: Record<string, unknown> = {};
  /** The current session status. */
  session!: SessionStatus;
  /** This connection's id on the server (changes on re-join). */
  clientId = '';
  /** Last step statistics, if any arrived. */
  stats: StatsMessage | undefined;
  /** Resolves when the first welcome arrives; rejects when the first connection fails. */
  readonly ready: Promise<this>;

  readonly #wsUrl: string;
  readonly #WebSocket: WebSocketConstructor;
  readonly #reconnect: Required<ReconnectOptions> | undefined;
  readonly #commandTimeoutMs: number;
  readonly #signal: AbortSignal | undefined;
  #ws: WebSocketLike | undefined;
  #state: ConnectionState = 'connecting';
  #closedByUser = false;
  #nextId = 1;
  readonly #pending = new Map<string, Pending>();
  #retryTimer: ReturnType<typeof setTimeout> | undefined;
  #onAbort = (): void => this.close();

  /** Prefer {@link connect}; the constructor starts connecting at once. */
  constructor(url: string, options: ConnectOptions = {}) {
    super();
    const WS = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (!WS) throw new TypeError('no WebSocket implementation: pass options.WebSocket (in Node 20: `import { WebSocket } from "ws"`)');
    this.#WebSocket = WS;
    this.#wsUrl = toWebSocketUrl(url, options.token);
    const r = options.reconnect ?? true;
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
    this.#commandTimeoutMs = options.commandTimeoutMs ?? 30_000;
    this.#signal = options.signal;
    this.ready = this.#open(options.signal).then(() => {
      this.#signal?.addEventListener('abort', this.#onAbort, { once: true });
      return this;
    });
    // The caller awaits `ready`; keep an unobserved rejection from being reported twice.
    this.ready.catch(() => undefined);
  }

  /** Connection state: `connecting`, `open`, `reconnecting` or `closed`. */
  get connectionState(): ConnectionState {
    return this.#state;
  }

  /**
   * Sends a command and resolves with its result (`undefined` for a bare acknowledgement).
   *
   * @throws {CommandFailedError} the server's error, with its `code` and field `details`.
   * @throws {CommandTimeoutError} `command_timeout` when no reply arrives in time.
   * @throws {ConnectionError} `not_connected` / `connection_lost` when the socket is not open or drops.
   * @example
   * try { await client.send('set_speed', { speed: 99 }); }
   * catch (e) { if (e instanceof CommandFailedError) console.log(e.code, e.details); }
   */
  send(name: string, params?: Record<string, unknown>, options: SendOptions = {}): Promise<unknown> {
    const ws = this.#ws;
    if (this.#state !== 'open' || !ws || ws.readyState !== OPEN) {
      return Promise.reject(
        new ConnectionError(ClientErrorCode.NotConnected, `cannot send "${name}": the client is ${this.#state}; wait for the "status" event with state "open"`),
      );
    }
    if (options.signal?.aborted) return Promise.reject(options.signal.reason);
    const id = String(this.#nextId++);
    return new Promise<unknown>((resolve, reject) => {
      const timeoutMs = options.timeoutMs ?? this.#commandTimeoutMs;
      const timer = timeoutMs > 0 ? setTimeout(() => done(new CommandTimeoutError(name, timeoutMs)), timeoutMs) : undefined;
      const onAbort = (): void => done(options.signal?.reason as Error);
      const cleanup = (): void => {
        if (timer) clearTimeout(timer);
        options.signal?.removeEventListener('abort', onAbort);
        this.#pending.delete(id);
      };
      const done = (err: Error): void => {
        cleanup();
        reject(err);
      };
      options.signal?.addEventListener('abort', onAbort, { once: true });
      this.#pending.set(id, { name, resolve: (v) => (cleanup(), resolve(v)), reject: done, cleanup });
      ws.send(JSON.stringify(params === undefined ? { type: 'command', id, name } : { type: 'command', id, name, params }));
    });
  }

  /**
   * {@link send}, typed by the app: with `connect<MyAppTypes>()` a command name the app lacks,
   * a missing parameter or one of the wrong type is a compile error.
   * @example await client.command('set_prompt', { prompt: 'A beach at dusk.' });
   */
  command<K extends CommandName<T>>(name: K, ...args: CommandArgs<T['commands'][K], SendOptions>): Promise<unknown> {
    const [params, options] = args;
    return this.send(name, params as Record<string, unknown> | undefined, options);
  }

  /**
   * Listens to one message of the app, its data typed by the app; returns a function that stops it.
   * @example client.onMessage('backend_info', (info) => show(info.world_size));
   */
  onMessage<K extends MessageName<T>>(name: K, handler: (data: MessageData<T, K>, message: AppMessage) => void): () => void {
    return this.on('message', (m) => {
      if (m.name === name) handler(m.data as MessageData<T, K>, m);
    });
  }

  /** Async iterator over frames. Keeps at most `bufferSize` (default 8) unread frames, dropping the oldest. */
  frames(options: IterateOptions = {}): AsyncIterableIterator<ClientFrame> {
    return this.#iterate('frame', options);
  }

  /** Async iterator over app messages (unbounded buffer unless `bufferSize` is given). */
  messages(options: IterateOptions = {}): AsyncIterableIterator<AppMessage> {
    return this.#iterate('message', { bufferSize: Infinity, ...options });
  }

  /** Async iterator over connection status changes. */
  statuses(options: IterateOptions = {}): AsyncIterableIterator<ConnectionStatus> {
    return this.#iterate('status', { bufferSize: Infinity, ...options });
  }

  /** Closes the connection for good (no reconnect); pending commands reject with `client_closed`. Idempotent. */
  close(): void {
    if (this.#closedByUser) return;
    this.#closedByUser = true;
    this.#signal?.removeEventListener('abort', this.#onAbort);
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    this.#rejectPending(new ConnectionError(ClientErrorCode.ClientClosed, 'the client was closed before the reply arrived'));
    try {
      this.#ws?.close(1000, 'client closed');
    } catch {
      // closing a socket that is still connecting throws in some implementations; it is going away anyway
    }
    this.#setState({ state: 'closed', reason: 'closed by the client' });
  }

  #setState(status: ConnectionStatus): void {
    this.#state = status.state;
    this.emit('status', status);
  }

  #rejectPending(err: Error): void {
    for (const p of [...this.#pending.values()]) p.reject(err);
    this.#pending.clear();
  }

  /** Opens one socket and resolves on its welcome. */
  #open(signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      let ws: WebSocketLike;
      try {
        ws = new this.#WebSocket(this.#wsUrl);
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
          // see close()
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
            this.emit('error', err as Error);
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
          this.#onWelcome(msg);
          resolve();
          return;
        }
        this.#onMessage(ev.data);
      });
      ws.addEventListener('close', (ev: { code: number; reason: string }) => {
        signal?.removeEventListener('abort', onAbort);
        if (!welcomed) {
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

  #onWelcome(msg: WelcomeMessage): void {
    this.schema = msg.schema;
    this.state = msg.state;
    this.session = msg.session;
    this.clientId = msg.clientId;
    this.#setState({ state: 'open' });
    this.emit('welcome', msg);
    this.emit('state', msg.state);
    this.emit('session', msg.session);
  }

  #onMessage(data: unknown): void {
    if (typeof data !== 'string') {
      let frame: DecodedFrame;
      try {
        frame = decodeFrame(new Uint8Array(data as ArrayBuffer));
      } catch (err) {
        this.emit('error', err as Error);
        return;
      }
      const f = frame as ClientFrame;
      f.trackName = this.schema.tracks[frame.track]?.name ?? String(frame.track);
      f.receivedAt = performance.now();
      this.emit('frame', f);
      return;
    }
    let msg: ServerMessage;
    try {
      msg = parseServerMessage(data);
    } catch (err) {
      this.emit('error', err as Error);
      return;
    }
    switch (msg.type) {
      case 'reply': {
        this.#pending.get(msg.id)?.resolve(msg.result);
        return;
      }
      case 'error': {
        const p = msg.id === undefined ? undefined : this.#pending.get(msg.id);
        const err = new CommandFailedError(p?.name ?? '(none)', msg.code, msg.message, msg.details);
        if (p) p.reject(err);
        else this.emit('error', new ReactorClientError(msg.code, `server error (${msg.code}): ${msg.message}`));
        return;
      }
      case 'message':
        this.emit('message', msg);
        return;
      case 'state':
        this.state = msg.state;
        this.emit('state', msg.state);
        return;
      case 'session':
        this.session = msg.session;
        this.emit('session', msg.session);
        return;
      case 'stats':
        this.stats = msg;
        this.emit('stats', msg);
        return;
      case 'flush':
        this.emit('flush', msg);
        return;
      case 'welcome':
        this.#onWelcome(msg);
        return;
      default:
        // A newer server may add message types; ignoring them keeps old clients working.
        return;
    }
  }

  #onClose(code: number, reason: string): void {
    this.#rejectPending(
      new ConnectionError(ClientErrorCode.ConnectionLost, `the connection dropped (code ${code}${reason ? `, ${reason}` : ''}) before the reply arrived`),
    );
    if (this.#closedByUser) return;
    if (!this.#reconnect) {
      this.#setState({ state: 'closed', reason: `closed by the server (code ${code}${reason ? `, ${reason}` : ''})` });
      return;
    }
    this.#scheduleReconnect(1, reason || `code ${code}`);
  }

  #scheduleReconnect(attempt: number, reason: string): void {
    const r = this.#reconnect!;
    if (attempt > r.maxAttempts) {
      this.#setState({ state: 'closed', reason: `gave up after ${r.maxAttempts} reconnect attempts: ${reason}` });
      return;
    }
    const base = Math.min(r.maxDelayMs, r.initialDelayMs * r.factor ** (attempt - 1));
    const delayMs = Math.round(base * (0.75 + Math.random() * 0.5));
    this.#setState({ state: 'reconnecting', attempt, delayMs, reason });
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      if (this.#closedByUser) return;
      this.#open().catch((err: Error) => {
        if (!this.#closedByUser) this.#scheduleReconnect(attempt + 1, err.message);
      });
    }, delayMs);
  }

  #iterate<K extends 'frame' | 'message' | 'status'>(type: K, options: IterateOptions): AsyncIterableIterator<ReactorClientEvents[K]> {
    type T = ReactorClientEvents[K];
    const bufferSize = options.bufferSize ?? 8;
    const buffer: T[] = [];
    let waiting: ((r: IteratorResult<T>) => void) | undefined;
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      offValue();
      offStatus();
      options.signal?.removeEventListener('abort', finish);
      waiting?.({ value: undefined, done: true });
      waiting = undefined;
    };
    const offValue = this.on(type, (v: T) => {
      if (waiting) {
        const w = waiting;
        waiting = undefined;
        w({ value: v, done: false });
        return;
      }
      buffer.push(v);
      if (buffer.length > bufferSize) buffer.shift();
    });
    const offStatus = this.on('status', (s) => {
      if (s.state === 'closed') queueMicrotask(finish);
    });
    options.signal?.addEventListener('abort', finish, { once: true });
    if (this.#state === 'closed' || options.signal?.aborted) finish();
    const it: AsyncIterableIterator<T> = {
      next: () => {
        if (buffer.length > 0) return Promise.resolve({ value: buffer.shift()!, done: false });
        if (done) return Promise.resolve({ value: undefined, done: true });
        return new Promise((res) => (waiting = res));
      },
      return: () => {
        finish();
        return Promise.resolve({ value: undefined, done: true });
      },
      [Symbol.asyncIterator]: () => it,
    };
    return it;
  }
}

/** Options of the async iterators. */
export interface IterateOptions {
  /** Ends the iteration. */
  signal?: AbortSignal;
  /** Unread items kept; the oldest is dropped beyond it. */
  bufferSize?: number;
}

function redact(url: string): string {
  return url.replace(/([?&]token=)[^&]*/, '$1***');
}
