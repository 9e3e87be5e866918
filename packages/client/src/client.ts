/**
 * The Reactor client SDK: connect to a served app, read its schema, send commands, and
 * receive frames, messages and status. Browser-safe (no `node:` imports); in Node 20 pass
 * the `ws` package's `WebSocket` class as `options.WebSocket`.
 */
import type { AppTypes, CommandArgs, CommandName, MessageData, MessageName, UntypedApp } from './app-types.js';
import { TypedEmitter } from './emitter.js';
import { requestSession, type AllocationRetryOptions, type QueuePlace, type SessionRoute } from './session-route.js';
import {
  ClientErrorCode,
  CommandFailedError,
  CommandTimeoutError,
  ConnectionError,
  ProtocolMismatchError,
  ReactorClientError,
  SessionRouteError,
} from './errors.js';
import { Publication, isMediaTrack, type PublishOptions, type PublishSource, type PublishTransport } from './publication.js';
import {
  type ClipResult,
  type RecordingInfo,
  CloseCode,
  FrameEncoding,
  HttpErrorCode,
  PROTOCOL_VERSION,
  WireErrorCode,
  decodeFrame,
  parseServerMessage,
  type AppMessage,
  type AppSchema,
  type DecodedFrame,
  type ErrorMessage,
  type FlushMessage,
  type ServerMessage,
  type SessionStatus,
  type StatsMessage,
  type TrackReleasedMessage,
  type TrackSchema,
  type UploadInfo,
  type UploadRef,
  type UploadTicket,
  type VideoCodecName,
  type VideoConfigMessage,
  type VideoOffer,
  type VideoSelection,
  type WelcomeMessage,
  type ControlStatus,
  readHttpError,
} from './protocol.js';

/** The subset of the WHATWG `WebSocket` this client uses (browsers, `ws`, Node 22+). */
export interface WebSocketLike {
  readonly readyState: number;
  /** Bytes queued but not yet sent; publishing skips camera frames while it is high. */
  readonly bufferedAmount?: number;
  binaryType: string;
  send(data: string | Uint8Array): void;
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
  /**
   * On a reconnect, take this client's identity back with the welcome's resume secret (default
   * `true`): within the server's grace it keeps its id, role, publications and uploads (a `resumed`
   * event); after it, it starts over as a new client (a `new_identity` event; publish again).
   */
  resume?: boolean;
  /** Default reply timeout of {@link ReactorClient.send}, ms (default 30000; 0 = none). */
  commandTimeoutMs?: number;
  /**
   * Connect through a session router (`reactor route`): `url` is then the router's. `'new'`
   * starts a session on a free instance; a session id (`client.route.sessionId` of another
   * client) joins the instance that holds it. Left out: `url` is the instance's own.
   */
  session?: 'new' | string;
  /** With `session: 'new'`: keep asking while no instance is free (429), waiting `Retry-After` between requests (default: fail at once). */
  allocationRetry?: AllocationRetryOptions;
  /** With `session: 'new'`: wait in the router's line up to this many seconds when no instance is free (see `requestSession`). */
  waitS?: number;
  /** The place in the router's line, at once and on every change. */
  onQueue?: (place: QueuePlace) => void;
  /** Through a router that mints instance tokens: the role to ask for (default `controller`). */
  role?: 'controller' | 'spectator';
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

/**
 * A received frame: the decoded header, the payload view, and when it arrived. `encoding` says
 * what `payload` holds: a JPEG file, raw RGB24, or, after {@link ReactorClient.selectVideo}, one
 * coded frame: `FrameEncoding.H264` (an Annex B access unit) or `FrameEncoding.Vp8`, with `key`
 * true on a key frame. Feed coded payloads in order to a decoder configured from the track's
 * last `video_config` event (in a browser, `EncodedVideoChunk({ type: key ? 'key' : 'delta',
 * timestamp, data: payload })`); the payload is a view into the received message, valid after
 * the event.
 */
export interface ClientFrame extends DecodedFrame {
  /** Name of the frame's track (`schema.tracks[track].name`). */
  trackName: string;
  /** `performance.now()` when the message arrived. */
  receivedAt: number;
}

/**
 * A chunk of an outbound audio track (a binary frame with PCM encoding): mono s16 samples at
 * `sampleRate`, on the same `ptsMs` clock as the video frames.
 */
export interface ClientAudio {
  /** Index of the track in `schema.tracks`. */
  track: number;
  trackName: string;
  seq: number;
  ptsMs: number;
  sampleRate: number;
  samples: Int16Array;
  /** `performance.now()` when the message arrived. */
  receivedAt: number;
}

/** Options of {@link ReactorClient.upload}. */
export interface UploadOptions {
  /** The file's name, for display (default: the `File`'s name, else `upload`). */
  name?: string;
  /** The type the client believes it is (`image/png`); the server checks the bytes. Default: the `Blob`'s type. */
  type?: string;
  /**
   * The command the file is for (its wire name) and, when it has several, its upload parameter:
   * the server then holds the file to that field's `maxBytes` and types before and while the
   * bytes stream (`upload_too_large`, `upload_type_not_allowed`) instead of at the command.
   */
  command?: string;
  field?: string;
  signal?: AbortSignal;
}

/** A `Blob`/`File` as `upload()` reads it (typed structurally: the Node entry needs no DOM types). */
export interface BlobLike {
  readonly size: number;
  readonly type: string;
  readonly name?: string;
  arrayBuffer(): Promise<ArrayBuffer>;
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
  /** A chunk of an outbound audio track. */
  audio: ClientAudio;
  /** The server released a track this client published (the session ended); publish again to keep sending. */
  track_released: TrackReleasedMessage;
  /**
   * How an outbound video track is encoded from the next frame on (after {@link ReactorClient.selectVideo},
   * a tier change, or the server's fall-back to JPEG): (re)configure the track's decoder from it.
   */
  video_config: VideoConfigMessage;
  status: ConnectionStatus;
  /** The connection dropped; the client tries again after `delayMs` (as the `status` event with state `reconnecting`). */
  reconnecting: ConnectionStatus;
  /** The connection came back within the server's grace: same `clientId`, role and publications (they carry on); the state follows. */
  resumed: ResumeEvent;
  /** The connection came back too late to resume (or the server lost the client): a new `clientId`, the publications ended. */
  new_identity: ResumeEvent;
  /** Single-controller mode: who steers now. */
  control: ControlStatus;
  /** A server error not tied to a command, or an undecodable message. */
  error: Error;
}

/** A `resumed` or `new_identity` event. */
export interface ResumeEvent {
  clientId: string;
  previousClientId: string;
  /** From the drop to the welcome, ms. */
  downMs: number;
}

interface Pending {
  name: string;
  resolve(result: unknown): void;
  reject(err: Error): void;
  /** The error for the server's `error` answer. */
  fail(code: string, message: string, details?: ErrorMessage['details']): Error;
  cleanup(): void;
}

/** Server error codes about an inbound frame: tied to the publication of the track they name. */
const FRAME_ERROR_CODES: ReadonlySet<string> = new Set([
  WireErrorCode.NotPublisher,
  WireErrorCode.WrongEncoding,
  WireErrorCode.UndecodableFrame,
  WireErrorCode.FrameTooLarge,
  WireErrorCode.FrameRateLimited,
  WireErrorCode.FrameHeaderMismatch,
  WireErrorCode.UnknownTrack,
  WireErrorCode.WrongTrackDirection,
]);

const OPEN = 1;

/**
 * Connects to a Reactor server and resolves once the welcome message has arrived.
 *
 * @param url The server's base URL (`http://127.0.0.1:8080`) or its WebSocket URL (`ws://127.0.0.1:8080/ws`);
 *   with `options.session`, the session router's URL.
 * @throws {ConnectionError} `connection_failed` when the socket cannot be opened or is refused
 *   (wrong token: the server answers 401; disallowed origin: 403), or the router cannot be reached.
 * @throws {SessionRouteError} with `options.session`: the router's refusal, `no_free_instance`
 *   (429, `retryAfterMs`) or `unknown_session` (404), ...
 * @throws {ProtocolMismatchError} when the server speaks another protocol version.
 * @example
 * const client = await connect('http://127.0.0.1:8080', { WebSocket });
 * await client.send('set_prompt', { prompt: 'A beach at dusk.' });
 * // through a session router: a new session, then a second viewer joins it
 * const host = await connect('https://play.example.com', { session: 'new', WebSocket });
 * const guest = await connect('https://play.example.com', { session: host.route!.sessionId, WebSocket });
 */
export async function connect<T extends AppTypes = UntypedApp>(url: string, options: ConnectOptions = {}): Promise<ReactorClient<T>> {
  if (options.session === undefined) {
    const client = new ReactorClient<T>(url, options);
    await client.ready;
    return client;
  }
  for (let attempt = 1; ; attempt++) {
    const route = await requestSession(url, {
      session: options.session,
      ...(options.token !== undefined ? { token: options.token } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
      ...(options.allocationRetry ? { allocationRetry: options.allocationRetry } : {}),
      ...(options.waitS !== undefined ? { waitS: options.waitS } : {}),
      ...(options.onQueue ? { onQueue: options.onQueue } : {}),
      ...(options.role ? { role: options.role } : {}),
    });
    // A router that mints instance tokens: the instance takes that token, never the router's key.
    const client = new ReactorClient<T>(route.url, route.token !== undefined ? { ...options, token: route.token } : options);
    client.route = route;
    try {
      await client.ready;
      return client;
    } catch (err) {
      client.close();
      const code = (err as { code?: string }).code;
      if (code !== HttpErrorCode.InstanceUnreachable && code !== HttpErrorCode.UnknownInstance) throw err;
      // The instance died between the router's answer and the socket: a new session asks for another one;
      // a joiner's session is lost with its instance.
      if (options.session !== 'new' || attempt >= NEW_INSTANCE_ATTEMPTS) {
        throw new SessionRouteError(
          code,
          options.session === 'new'
            ? `${attempt} instances in a row were unreachable: ${(err as Error).message}`
            : `session ${options.session} is lost: ${(err as Error).message}; start a new one with session: 'new'`,
          502,
          undefined,
        );
      }
    }
  }
}

/** Instances `connect(router, { session: 'new' })` tries when the one it was given turns out unreachable. */
const NEW_INSTANCE_ATTEMPTS = 3;

/** Close codes of a session router that accepted a socket only to refuse it (`@reactor/router`'s RouterCloseCode). */
const ROUTER_CLOSE_CODES: Record<number, HttpErrorCode> = { 4404: HttpErrorCode.UnknownInstance, 4502: HttpErrorCode.InstanceUnreachable };

/** The router's refusal a close carries (code 4404/4502, reason `<code>: ...`), if it is one. */
function routerRefusal(code: number, reason: string): { code: HttpErrorCode } | undefined {
  const known = ROUTER_CLOSE_CODES[code];
  return known !== undefined && reason.startsWith(`${known}:`) ? { code: known } : undefined;
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
  /** The codecs and tiers the server offers (`welcome.video`); undefined: JPEG only. */
  videoOffer: VideoOffer | undefined;
  /** The last `video_config` of each outbound video track, by track name. */
  readonly videoConfigs = new Map<string, VideoConfigMessage>();
  /** Resolves when the first welcome arrives; rejects when the first connection fails. */
  readonly ready: Promise<this>;
  /** The session and instance, when {@link connect} went through a session router (`options.session`). */
  route: SessionRoute | undefined;

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
  readonly #token: string | undefined;
  #frameSeq = 0;
  /** The last `selectVideo()` that succeeded, sent again after a re-join. */
  #video: { codec: VideoCodecName; tier?: string } | undefined;
  readonly #publications = new Map<string, Publication>();
  readonly #resume: boolean;
  /** The last welcome's resume secret. */
  #resumeSecret: { secret: string; graceMs: number } | undefined;
  /** When the connection dropped with a resume secret in hand (performance.now()). */
  #droppedAt: number | undefined;
  /** This client's role, from the welcome (`controller` without a token). */
  role = 'controller';
  /** Single-controller mode: who steers (from the welcome and `control` messages). */
  control: ControlStatus | undefined;

  /** Prefer {@link connect}; the constructor starts connecting at once. */
  constructor(url: string, options: ConnectOptions = {}) {
    super();
    const WS = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (!WS) throw new TypeError('no WebSocket implementation: pass options.WebSocket (in Node 20: `import { WebSocket } from "ws"`)');
    this.#WebSocket = WS;
    this.#wsUrl = toWebSocketUrl(url, options.token);
    this.#token = options.token;
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
    this.#resume = options.resume ?? true;
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
    return this.#request(
      name,
      (id) => (params === undefined ? { type: 'command', id, name } : { type: 'command', id, name, params }),
      (code, message, details) => new CommandFailedError(name, code, message, details),
      options,
    );
  }

  /** Sends one request message and waits for its `reply`/`error`. */
  #request(name: string, build: (id: string) => object, fail: Pending['fail'], options: SendOptions): Promise<unknown> {
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
      this.#pending.set(id, { name, resolve: (v) => (cleanup(), resolve(v)), reject: done, fail, cleanup });
      ws.send(JSON.stringify(build(id)));
    });
  }

  /** A `publish`/`unpublish`/`pause_track`/`resume_track` request; the server's refusal as a `ReactorClientError` with its code. */
  #trackRequest(type: 'publish' | 'unpublish' | 'pause_track' | 'resume_track', track: string, options: SendOptions = {}): Promise<void> {
    return this.#request(
      `${type} ${track}`,
      (id) => ({ type, id, track }),
      (code, message) => new ReactorClientError(code, `${type} of track "${track}" failed (${code}): ${message}`),
      options,
    ).then(() => undefined);
  }

  /** The schema entry and index of an inbound track, or a `ReactorClientError` naming the tracks there are. */
  #inboundTrack(name: string): { schema: TrackSchema; index: number } {
    const index = this.schema.tracks.findIndex((t) => t.name === name);
    const inbound = this.schema.tracks.filter((t) => t.direction === 'in').map((t) => `"${t.name}" (${t.kind})`);
    const list = inbound.length ? `its inbound tracks are ${inbound.join(', ')}` : 'it has no inbound tracks (declare them on an Input class)';
    const schema = this.schema.tracks[index];
    if (!schema) throw new ReactorClientError(WireErrorCode.UnknownTrack, `the app has no track "${name}"; ${list}`);
    if (schema.direction !== 'in') {
      throw new ReactorClientError(WireErrorCode.WrongTrackDirection, `track "${name}" is an outbound track (the app streams it); ${list}`);
    }
    return { schema, index };
  }

  /**
   * Publishes an inbound track: asks the server for it (`publish`), then sends the source's frames
   * until the returned {@link Publication} is stopped, the source ends, or the server releases the
   * track. A browser camera is captured at the schema's `width`/`height`/`fps` and sent as JPEG, a
   * microphone as PCM at the track's `sampleRate`; a Node source yields `{ rgb | jpeg, width,
   * height, ptsMs?, metadata? }` frames (video) or `Int16Array` chunks (audio). Camera frames are
   * skipped, not queued, while the socket's send buffer is full.
   *
   * @throws {ReactorClientError} `unknown_track` / `wrong_track_direction` (checked against the
   *   schema), or the server's refusal: `publish_refused` (another client holds it), `no_session`.
   * @throws {ConnectionError} `not_connected` when the socket is not open.
   * @example
   * const cam = (await navigator.mediaDevices.getUserMedia({ video: true })).getVideoTracks()[0];
   * const pub = await client.publish('webcam', cam);
   * // later: await pub.stop();
   */
  async publish(track: string, source: PublishSource, options: PublishOptions = {}): Promise<Publication> {
    const { schema, index } = this.#inboundTrack(track);
    if (isMediaTrack(source) && source.kind !== schema.kind) {
      throw new TypeError(
        `source is a${source.kind === 'audio' ? 'n' : ''} ${source.kind} track, but "${track}" is a${schema.kind === 'audio' ? 'n' : ''} ${schema.kind} track`,
      );
    }
    if (!isMediaTrack(source) && (typeof source !== 'object' || source === null || !(Symbol.asyncIterator in source))) {
      throw new TypeError('source must be a MediaStreamTrack or an async iterable of frames (video) or Int16Array chunks (audio)');
    }
    await this.#trackRequest('publish', track, options.signal ? { signal: options.signal } : {});
    const pub = new Publication(this.#publishTransport, schema, index, options);
    this.#publications.get(track)?.finish({ reason: 'stopped' });
    this.#publications.set(track, pub);
    void pub.pump(source, schema, options);
    return pub;
  }

  /**
   * Stops publishing a track (as `publication.stop()`); the app's buffer for it closes.
   * @throws {ReactorClientError} `not_publisher` when this client does not publish it.
   */
  async unpublish(track: string): Promise<void> {
    const pub = this.#publications.get(track);
    if (pub) return pub.stop();
    return this.#trackRequest('unpublish', track);
  }

  /** The live publications of this client, by track name. */
  get publications(): ReadonlyMap<string, Publication> {
    return this.#publications;
  }

  /**
   * Stops receiving one outbound track on this connection (the model keeps running); e.g. a
   * muted audio track to save bandwidth.
   * @throws {ReactorClientError} `unknown_track`, `wrong_track_direction` (an inbound track).
   */
  pauseTrack(track: string): Promise<void> {
    return this.#trackRequest('pause_track', track);
  }

  /** Resumes an outbound track paused with {@link pauseTrack}. */
  resumeTrack(track: string): Promise<void> {
    return this.#trackRequest('resume_track', track);
  }

  /**
   * Chooses how this connection receives outbound video: a codec of {@link videoOffer} (`h264`,
   * `vp8`, `jpeg`) and a tier of its ladder (default: the best). From then on each video track
   * sends a `video_config` event, then frames of that encoding (see {@link ClientFrame}), the
   * first a key frame. Sent again after a re-join. Call again with another tier to move on the
   * ladder.
   * @throws {ReactorClientError} `unsupported_codec` / `unknown_tier` (the connection keeps its codec).
   * @example
   * const sel = await client.selectVideo('h264', 'half'); // { codec: 'h264', tier: 'half' }
   */
  async selectVideo(codec: VideoCodecName, tier?: string, options: SendOptions = {}): Promise<VideoSelection> {
    const result = (await this.#request(
      `select_video ${codec}`,
      (id) => (tier === undefined ? { type: 'select_video', id, codec } : { type: 'select_video', id, codec, tier }),
      (code, message) => new ReactorClientError(code, `select_video ${codec}${tier === undefined ? '' : ` tier ${tier}`} failed (${code}): ${message}`),
      options,
    )) as VideoSelection;
    this.#video = tier === undefined ? { codec } : { codec, tier };
    return result;
  }

  /**
   * Takes a clip: the last `seconds` of the session's video (and its audio) as an MP4 that plays
   * in browsers, made from what the server already encoded (its clip ring). Resolves with the
   * file's absolute URL (carrying the client's token, so it downloads under the server's access
   * rules), its expiry, duration and size. The clip starts on a key frame, so it may be up to one
   * key-frame interval longer than asked.
   * @throws {ReactorClientError} `clips_disabled` (the server keeps no ring: `recording:` in
   *   reactor.yaml), `clip_unavailable` (no video yet, or none at all), `clip_busy`, `clip_failed`,
   *   `disk_full`, `invalid_params`.
   * @example
   * const { url } = await client.clip({ seconds: 10 });
   * video.src = url;
   */
  async clip(options: { seconds?: number; track?: string } & SendOptions = {}): Promise<ClipResult> {
    const { seconds, track, ...send } = options;
    const result = (await this.#request(
      'clip',
      (id) => ({ type: 'clip', id, ...(seconds !== undefined && { seconds }), ...(track !== undefined && { track }) }),
      (code, message) => new ReactorClientError(code, `clip failed (${code}): ${message}`),
      send,
    )) as ClipResult;
    return { ...result, url: this.#downloadUrl(result.url) };
  }

  /**
   * Starts (`'start'`) or stops (`'stop'`) recording the session into the server's recording
   * folder, as fragmented MP4 written as it streams. Resolves with the recording's description.
   * @throws {ReactorClientError} `recording_disabled`, `recording_state` (already recording / not
   *   recording), `disk_full`, `clip_unavailable` (no video to record).
   */
  async recording(action: 'start' | 'stop', options: SendOptions = {}): Promise<RecordingInfo> {
    return (await this.#request(
      `recording ${action}`,
      (id) => ({ type: 'recording', id, action }),
      (code, message) => new ReactorClientError(code, `recording ${action} failed (${code}): ${message}`),
      options,
    )) as RecordingInfo;
  }

  /** A server path as an absolute URL carrying the client's token (`?token=`), for downloads. */
  #downloadUrl(path: string): string {
    const u = new URL(path.replace(/^\/+/, ''), `${this.#httpBase()}/`);
    if (this.#token !== undefined) u.searchParams.set('token', this.#token);
    return u.href;
  }

  /**
   * Asks for a key frame on an outbound video track (a decoder lost its reference); no reply.
   * The server forces at most one per track every 500 ms and sends this client none of the
   * track's delta frames until it arrives. Nothing to do for JPEG.
   * @throws {ConnectionError} `not_connected` when the socket is not open.
   */
  requestKeyFrame(track: string): void {
    const ws = this.#ws;
    if (this.#state !== 'open' || !ws || ws.readyState !== OPEN) {
      throw new ConnectionError(ClientErrorCode.NotConnected, `cannot request a key frame: the client is ${this.#state}`);
    }
    ws.send(JSON.stringify({ type: 'request_key_frame', track }));
  }

  /**
   * Uploads a file for a command parameter of upload type: `POST /uploads`, then `PUT` of the
   * bytes, with the client's token. Resolves with the reference to put in the command.
   *
   * @throws {ReactorClientError} the server's code: `upload_too_large`, `upload_type_not_allowed`,
   *   `upload_quota_exceeded`, `upload_no_session`, ...; `upload_failed` when the server cannot be reached.
   * @example
   * const image = await client.upload(fileInput.files[0]);
   * await client.send('set_image', { image });
   */
  async upload(data: BlobLike | ArrayBuffer | Uint8Array, options: UploadOptions = {}): Promise<UploadRef> {
    const isBlob = !(data instanceof ArrayBuffer) && !ArrayBuffer.isView(data);
    const size = isBlob ? (data as BlobLike).size : data.byteLength;
    const name = options.name ?? (isBlob ? (data as BlobLike).name : undefined) ?? 'upload';
    const type = options.type ?? (isBlob && (data as BlobLike).type ? (data as BlobLike).type : undefined);
    const base = this.#httpBase();
    const auth: Record<string, string> = this.#token === undefined ? {} : { authorization: `Bearer ${this.#token}` };
    const announce = {
      name,
      size,
      ...(type ? { mimeType: type } : {}),
      ...(this.clientId ? { clientId: this.clientId } : {}),
      ...(options.command !== undefined ? { command: options.command } : {}),
      ...(options.field !== undefined ? { field: options.field } : {}),
    };
    const ticket = (await this.#http(`upload of "${name}"`, `${base}/uploads`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...auth },
      body: JSON.stringify(announce),
      ...(options.signal ? { signal: options.signal } : {}),
    })) as UploadTicket;
    const info = (await this.#http(`upload of "${name}"`, new URL(ticket.url.replace(/^\/+/, ''), `${base}/`).href, {
      method: 'PUT',
      headers: { 'content-type': type ?? 'application/octet-stream', ...auth },
      body: data as Uint8Array<ArrayBuffer>,
      ...(options.signal ? { signal: options.signal } : {}),
    })) as UploadInfo;
    return { uploadId: info.uploadId ?? ticket.uploadId };
  }

  /** The server's HTTP base URL, from the socket's (`ws://h/base/ws` -> `http://h/base`). */
  #httpBase(): string {
    const u = new URL(this.#wsUrl);
    u.protocol = u.protocol === 'wss:' ? 'https:' : 'http:';
    u.pathname = u.pathname.replace(/\/ws$/, '');
    u.search = '';
    return u.href.replace(/\/$/, '');
  }

  async #http(what: string, url: string, init: RequestInit): Promise<unknown> {
    let res: Response;
    try {
      res = await fetch(url, init);
    } catch (err) {
      if ((err as Error).name === 'AbortError') throw err;
      throw new ReactorClientError(ClientErrorCode.UploadFailed, `${what} failed: cannot reach ${redact(url)}: ${(err as Error).message}`, { cause: err });
    }
    const text = await res.text();
    let body: unknown;
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      body = undefined;
    }
    if (!res.ok) {
      const e = readHttpError(body);
      throw new ReactorClientError(
        e?.code ?? ClientErrorCode.UploadFailed,
        `${what} failed (${e?.code ?? `HTTP ${res.status}`}): ${e?.message ?? text.slice(0, 200)}`,
      );
    }
    if (body === undefined) throw new ReactorClientError(ClientErrorCode.UploadFailed, `${what} failed: the server's answer (HTTP ${res.status}) is not JSON`);
    return body;
  }

  readonly #publishTransport: PublishTransport = {
    sendBinary: (bytes) => {
      const ws = this.#ws;
      if (this.#state !== 'open' || !ws || ws.readyState !== OPEN) return false;
      ws.send(bytes);
      return true;
    },
    bufferedAmount: () => this.#ws?.bufferedAmount ?? 0,
    nextSeq: () => (this.#frameSeq = (this.#frameSeq + 1) >>> 0),
    unpublish: (track) => (this.#state === 'open' ? this.#trackRequest('unpublish', track) : Promise.resolve()),
    forget: (p) => {
      if (this.#publications.get(p.track) === p) this.#publications.delete(p.track);
    },
  };

  /** Ends every publication without asking the server (it forgets them with the connection). */
  #endPublications(reason: 'connection_lost' | 'client_closed'): void {
    for (const p of [...this.#publications.values()]) p.finish({ reason });
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
    this.#endPublications('client_closed');
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

  /** Single-controller mode: asks to steer; resolves `{ controller: true }` or `{ controller: false, position }`. */
  requestControl(options: SendOptions = {}): Promise<{ controller: boolean; position?: number }> {
    return this.#request(
      'request_control',
      (id) => ({ type: 'request_control', id }),
      (code, message) => new ReactorClientError(code, `request_control failed (${code}): ${message}`),
      options,
    ) as Promise<{
      controller: boolean;
      position?: number;
    }>;
  }

  /** Single-controller mode: gives control up (to the first client waiting, if any). */
  async releaseControl(options: SendOptions = {}): Promise<void> {
    await this.#request(
      'release_control',
      (id) => ({ type: 'release_control', id }),
      (code, message) => new ReactorClientError(code, `release_control failed (${code}): ${message}`),
      options,
    );
  }

  #onWelcome(msg: WelcomeMessage): void {
    const previous = this.clientId;
    const droppedAt = this.#droppedAt;
    this.#droppedAt = undefined;
    this.#resumeSecret = this.#resume ? msg.resume : undefined;
    this.role = msg.role ?? 'controller';
    this.control = msg.control;
    if (droppedAt !== undefined && msg.resumed !== true) this.#endPublications('connection_lost');
    this.schema = msg.schema;
    this.state = msg.state;
    this.session = msg.session;
    this.clientId = msg.clientId;
    this.videoOffer = msg.video;
    this.videoConfigs.clear();
    this.#setState({ state: 'open' });
    this.emit('welcome', msg);
    this.emit('state', msg.state);
    this.emit('session', msg.session);
    if (droppedAt !== undefined) {
      const event: ResumeEvent = { clientId: msg.clientId, previousClientId: previous, downMs: performance.now() - droppedAt };
      this.emit(msg.resumed === true ? 'resumed' : 'new_identity', event);
    }
    // A re-join starts as JPEG: ask again for what this client had selected.
    const video = this.#video;
    if (video) this.selectVideo(video.codec, video.tier).catch((err: Error) => this.emit('error', err));
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
      const trackName = this.schema.tracks[frame.track]?.name ?? String(frame.track);
      if (frame.encoding === FrameEncoding.PcmS16le) {
        const p = frame.payload;
        // Int16Array needs an even byte offset; the metadata length may make it odd.
        const samples =
          p.byteOffset % 2 === 0 ? new Int16Array(p.buffer, p.byteOffset, p.byteLength >> 1) : new Int16Array(p.slice(0, p.byteLength & ~1).buffer);
        this.emit('audio', {
          track: frame.track,
          trackName,
          seq: frame.seq,
          ptsMs: frame.ptsMs,
          sampleRate: this.schema.tracks[frame.track]?.sampleRate ?? 48_000,
          samples,
          receivedAt: performance.now(),
        });
        return;
      }
      const f = frame as ClientFrame;
      f.trackName = trackName;
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
        if (p) {
          p.reject(p.fail(msg.code, msg.message, msg.details));
          return;
        }
        const err = new ReactorClientError(msg.code, `server error (${msg.code}): ${msg.message}`);
        if (FRAME_ERROR_CODES.has(msg.code)) this.#publicationFor(msg.message)?.reportError(new ReactorClientError(msg.code, msg.message));
        this.emit('error', err);
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
      case 'video_config':
        this.videoConfigs.set(msg.track, msg);
        this.emit('video_config', msg);
        return;
      case 'track_released':
        this.#publications.get(msg.track)?.finish({ reason: 'released', detail: msg.reason });
        this.emit('track_released', msg);
        return;
      case 'welcome':
        this.#onWelcome(msg);
        return;
      case 'control':
        this.control = { controller: msg.controller, queue: msg.queue };
        this.emit('control', this.control);
        return;
      default:
        // A newer server may add message types; ignoring them keeps old clients working.
        return;
    }
  }

  /** The publication a frame error is about: the one whose track the message names (`"webcam"`), else the only one. */
  #publicationFor(message: string): Publication | undefined {
    const pubs = [...this.#publications.values()];
    return pubs.find((p) => message.includes(`"${p.track}"`)) ?? (pubs.length === 1 ? pubs[0] : undefined);
  }

  #onClose(code: number, reason: string): void {
    // A drop that may be resumed keeps the publications: they skip frames until the socket is back.
    const resumable = this.#resumeSecret !== undefined && this.#reconnect !== undefined && !this.#closedByUser && code !== 1000 && code !== 1008;
    if (resumable) this.#droppedAt ??= performance.now();
    else this.#endPublications('connection_lost');
    if (code === CloseCode.SessionTimeLimit || code === CloseCode.IdleTimeout) {
      // The session ended for good (a limit): reconnecting would only start another.
      this.#droppedAt = undefined;
      this.#endPublications('connection_lost');
      this.#rejectPending(new ConnectionError(ClientErrorCode.ConnectionLost, `the session ended (${reason}) before the reply arrived`));
      if (!this.#closedByUser) this.#setState({ state: 'closed', reason });
      return;
    }
    this.#rejectPending(
      new ConnectionError(ClientErrorCode.ConnectionLost, `the connection dropped (code ${code}${reason ? `, ${reason}` : ''}) before the reply arrived`),
    );
    if (this.#closedByUser) return;
    // The router found the instance gone: reconnecting to it cannot help; the session is lost.
    if (!this.#reconnect || routerRefusal(code, reason)) {
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
    this.emit('reconnecting', { state: 'reconnecting', attempt, delayMs, reason });
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      if (this.#closedByUser) return;
      this.#open().catch((err: Error) => {
        if (!this.#closedByUser) this.#scheduleReconnect(attempt + 1, err.message);
      });
    }, delayMs);
  }

  /** Async iterator over outbound audio chunks. Keeps at most `bufferSize` (default 50: one second of 20 ms chunks) unread. */
  audio(options: IterateOptions = {}): AsyncIterableIterator<ClientAudio> {
    return this.#iterate('audio', { bufferSize: 50, ...options });
  }

  #iterate<K extends 'frame' | 'message' | 'status' | 'audio'>(type: K, options: IterateOptions): AsyncIterableIterator<ReactorClientEvents[K]> {
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
