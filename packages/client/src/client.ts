/**
 * The Reactor client SDK: connect to a served app, read its schema, send commands, and
 * receive frames, messages and status. Browser-safe (no `node:` imports); in Node 20 pass
 * the `ws` package's `WebSocket` class as `options.WebSocket`. `ReactorClient` is the facade;
 * the socket's life is `connection.ts`, waiting replies `pending-replies.ts`, publications
 * `publisher.ts`, uploads `upload.ts`, `connect()` `connect.ts`.
 */
import type { AppTypes, CommandArgs, CommandName, MessageData, MessageName, UntypedApp } from './app-types.js';
import { type AppliedInfo, AppliedWaiters, type CommandPromise } from './applied-waiters.js';
import type {
  BlobLike,
  ClientAudio,
  ClientFrame,
  ConnectOptions,
  ConnectionState,
  ConnectionStatus,
  IterateOptions,
  ReactorClientEvents,
  ResumeEvent,
  SendOptions,
  UploadOptions,
  WebSocketConstructor,
} from './client-types.js';
import { ClientConnection } from './connection.js';
import { TypedEmitter } from './base/emitter.js';
import { ClientErrorCode, CommandFailedError, ConnectionError, ReactorClientError } from './base/errors.js';
import { wsMediaEvent, type InboundFrame } from './media/ws-media.js';
import { iterate } from './iterate.js';
import { startLatencyReports } from './latency-reporter.js';
import { LatencyTracker } from './latency/latency-tracker.js';
import { PendingReplies, type Pending } from './pending-replies.js';
import type { Publication, PublishOptions, PublishSource } from './media/publication.js';
import { Publisher, checkPublishSource, inboundTrack } from './media/publisher.js';
import type { SessionRoute } from './session-route.js';
import { downloadUrl, toWebSocketUrl } from './base/socket-url.js';
import { uploadFile } from './media/upload.js';
import type { WebRtcLink } from './rtc/rtc-link.js';
import {
  type ClipResult,
  type RecordingInfo,
  parseServerMessage,
  type AppMessage,
  type AppSchema,
  type ServerMessage,
  type SessionStatus,
  type StatsMessage,
  type UploadRef,
  type VideoCodecName,
  type VideoConfigMessage,
  type VideoOffer,
  type RtcWelcome,
  type VideoSelection,
  type WelcomeMessage,
  type ControlStatus,
  type RequestKeyFrameMessage,
  type RtcClientMessage,
} from './base/protocol.js';

/** App messages kept for a first `message` listener that comes a moment after the welcome (the oldest goes beyond). */
const MAX_EARLY_MESSAGES = 256;

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
  /** How the server wants this client's peer connection set up (`welcome.webrtc`: ICE servers, policy, connect window); undefined: its WebRTC transport is off. */
  webrtcSetup: RtcWelcome | undefined;
  /** The last `video_config` of each outbound video track, by track name. */
  readonly videoConfigs = new Map<string, VideoConfigMessage>();
  /** Resolves when the first welcome arrives; rejects when the first connection fails. */
  readonly ready: Promise<this>;
  /** The session and instance, when {@link connect} went through a session router (`options.session`). */
  route: SessionRoute | undefined;

  readonly #wsUrl: string;
  readonly #conn: ClientConnection;
  readonly #commandTimeoutMs: number;
  readonly #signal: AbortSignal | undefined;
  readonly #pending = new PendingReplies();
  readonly #applied = new AppliedWaiters();
  /** A welcome came on some connection already: a later one that is not a resume is a new identity. */
  #welcomed = false;
  /** Commands kept across a move (4307 `session_moved`), sent again once the new instance welcomes this client. */
  #movedCommands: Set<string> | undefined;
  #onAbort = (): void => this.close();
  /**
   * App messages that came while nobody listened, before the caller could (`await connect()` goes
   * on in a later microtask than the read that held the welcome and the messages after it): the
   * first `message` listener gets them. Undefined once that window closed (a macrotask after the
   * connection is ready, or after {@link holdEarlyMessages}' release).
   */
  #early: AppMessage[] | undefined = [];
  #earlyHolds = 0;
  #earlyFlushing = false;
  readonly #token: string | undefined;
  /** The last `selectVideo()` that succeeded, sent again after a re-join. */
  #video: { codec: VideoCodecName; tier?: string } | undefined;
  readonly #publisher = new Publisher({
    sendBinary: (bytes) => {
      const ws = this.#conn.openSocket();
      if (!ws) return false;
      ws.send(bytes);
      return true;
    },
    bufferedAmount: () => this.#conn.ws?.bufferedAmount ?? 0,
    unpublish: (track) => (this.#conn.state === 'open' ? this.#trackRequest('unpublish', track) : Promise.resolve()),
  });
  /** This client's role, from the welcome (`controller` without a token). */
  role = 'controller';
  /** Single-controller mode: who steers (from the welcome and `control` messages). */
  control: ControlStatus | undefined;
  /**
   * What this client's user sees (command-to-pixel, time to first frame, freezes, drops), reported
   * to the server as `client_stats`; undefined with `options.stats: false`.
   */
  readonly latency: LatencyTracker | undefined;
  readonly #stopReports: () => void = () => undefined;
  /** The WebRTC link `connect(url, { transport })` opened (undefined: media on the WebSocket). */
  rtc: WebRtcLink | undefined;

  /**
   * The media path that carries the app's outbound tracks now: `webrtc` while {@link rtc} is
   * connected (its tracks, in media elements), else `websocket` (the `frame` and `audio` events).
   */
  get transport(): 'webrtc' | 'websocket' {
    return this.rtc?.transport ?? 'websocket';
  }

  /** Prefer {@link connect}; the constructor starts connecting at once. */
  constructor(url: string, options: ConnectOptions = {}) {
    super();
    const WS = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (!WS) throw new TypeError('no WebSocket implementation: pass options.WebSocket (in Node 20: `import { WebSocket } from "ws"`)');
    this.#wsUrl = toWebSocketUrl(url, options.token);
    this.#token = options.token;
    this.#conn = new ClientConnection(this.#wsUrl, WS, options.reconnect ?? true, options.resume ?? true, {
      opening: () => this.latency?.connecting(),
      welcome: (msg) => this.#onWelcome(msg),
      message: (data) => this.#onMessage(data),
      error: (err) => this.emit('error', err),
      status: (status) => {
        // Closed for good: no `applied` can come any more, nor a reply to a command kept across a move.
        if (status.state === 'closed') {
          this.#pending.rejectAll(
            new ConnectionError(ClientErrorCode.ConnectionLost, `the connection closed before the reply arrived: ${status.reason ?? ''}`),
          );
          this.#movedCommands = undefined;
          this.#applied.endAll();
        }
        this.emit('status', status);
      },
      reconnecting: (status) => this.emit('reconnecting', status),
      endPublications: () => this.#publisher.endAll('connection_lost'),
      rejectPending: (err) => this.#pending.rejectAll(err),
      holdPending: (err) => {
        const kept = this.#pending.holdCommands(err);
        this.#movedCommands = new Set([...(this.#movedCommands ?? []), ...kept]);
      },
    });
    const stats = options.stats ?? true;
    if (stats !== false) {
      this.latency = new LatencyTracker();
      const mode = stats === true ? 'delivery' : (stats.presentation ?? 'delivery');
      this.#stopReports = startLatencyReports(this, this.latency, mode, (msg) => this.#conn.openSocket()?.send(JSON.stringify(msg)));
    }
    this.#commandTimeoutMs = options.commandTimeoutMs ?? 30_000;
    this.#signal = options.signal;
    this.ready = this.#conn.open(options.signal).then(
      () => {
        this.#signal?.addEventListener('abort', this.#onAbort, { once: true });
        this.#closeEarlySoon();
        return this;
      },
      (err: unknown) => {
        this.#early = undefined;
        throw err;
      },
    );
    // The caller awaits `ready`; keep an unobserved rejection from being reported twice.
    this.ready.catch(() => undefined);
  }

  /** Adds a listener (see {@link TypedEmitter.on}); the first `message` listener also gets the app messages that came before it could listen. */
  override on<K extends keyof ReactorClientEvents>(type: K, listener: (value: ReactorClientEvents[K]) => void): () => void {
    const off = super.on(type, listener);
    if (type === 'message' && this.#early !== undefined && this.#early.length > 0 && !this.#earlyFlushing) {
      this.#earlyFlushing = true;
      // In order, before any later message (those wait behind these until the flush).
      queueMicrotask(() => {
        const held = this.#early ?? [];
        this.#early = undefined;
        for (const m of held) this.emit('message', m);
      });
    }
    return off;
  }

  /**
   * Keeps the early app messages for the first listener until the returned function is called
   * (then a macrotask more): `connect()` holds them while it sets up the transport.
   * @internal
   */
  holdEarlyMessages(): () => void {
    this.#earlyHolds++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#earlyHolds--;
      this.#closeEarlySoon();
    };
  }

  #closeEarlySoon(): void {
    setTimeout(() => {
      if (this.#earlyHolds === 0 && !this.#earlyFlushing) this.#early = undefined;
    }, 0);
  }

  /** Connection state: `connecting`, `open`, `reconnecting` or `closed`. */
  get connectionState(): ConnectionState {
    return this.#conn.state;
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
  send(name: string, params?: Record<string, unknown>, options: SendOptions = {}): CommandPromise<unknown> {
    let applied: Promise<AppliedInfo> | undefined;
    const reply = this.#request(
      name,
      (id) => (params === undefined ? { type: 'command', id, name } : { type: 'command', id, name, params }),
      (code, message, details) => new CommandFailedError(name, code, message, details),
      options,
      {
        sent: (id) => {
          applied = this.#applied.wait(id);
          // Command-to-pixel counts from here, the send, to the presentation of the applied frame.
          const tracker = this.latency;
          const sentAt = performance.now();
          if (tracker)
            applied.then(
              (info) => tracker.applied(name, sentAt, info),
              () => undefined,
            );
        },
        settled: (id, err) => {
          if (err) this.#applied.fail(id, err);
        },
      },
    );
    if (applied === undefined) {
      // Never sent (not connected, already aborted): the reply rejects, and `.applied` with the same error.
      applied = reply.then(() => ({ outcome: 'ended' }) as const);
      applied.catch(() => undefined);
    }
    return Object.assign(reply, { applied });
  }

  /** Sends one request message and waits for its `reply`/`error`. */
  #request(
    name: string,
    build: (id: string) => object,
    fail: Pending['fail'],
    options: SendOptions,
    watch?: Parameters<PendingReplies['request']>[6],
  ): Promise<unknown> {
    const ws = this.#conn.openSocket();
    if (!ws) {
      return Promise.reject(
        new ConnectionError(
          ClientErrorCode.NotConnected,
          `cannot send "${name}": the client is ${this.#conn.state}; wait for the "status" event with state "open"`,
        ),
      );
    }
    return this.#pending.request(ws, name, build, fail, options, this.#commandTimeoutMs, watch);
  }

  /** A `publish`/`unpublish`/`pause_track`/`resume_track` request; the server's refusal as a `ReactorClientError` with its code. */
  #trackRequest(type: 'publish' | 'unpublish' | 'pause_track' | 'resume_track', track: string, options: SendOptions = {}, extra?: object): Promise<void> {
    return this.#request(
      `${type} ${track}`,
      (id) => ({ type, id, track, ...extra }),
      (code, message) => new ReactorClientError(code, `${type} of track "${track}" failed (${code}): ${message}`),
      options,
    ).then(() => undefined);
  }

  /**
   * Publishes an inbound track: asks the server for it (`publish`), then sends the source's frames
   * until the returned {@link Publication} is stopped, the source ends, or the server releases the
   * track. A browser camera is captured at the schema's `width`/`height`/`fps` and sent as JPEG, a
   * microphone as PCM at the track's `sampleRate`; a Node source yields `{ rgb | jpeg, width,
   * height, ptsMs?, metadata? }` frames (video) or `Int16Array` chunks (audio). Camera frames are
   * skipped, not queued, while the socket's send buffer is full. While `client.rtc` is connected a
   * browser track goes over WebRTC instead (`options.transport`, see `rtc-publish.ts`).
   * @throws {ReactorClientError} `unknown_track` / `wrong_track_direction` (checked against the
   *   schema), or the server's refusal: `publish_refused` (another client holds it), `no_session`.
   * @throws {ConnectionError} `not_connected` when the socket is not open.
   * @example
   * const cam = (await navigator.mediaDevices.getUserMedia({ video: true })).getVideoTracks()[0];
   * const pub = await client.publish('webcam', cam);
   * // later: await pub.stop();
   */
  async publish(track: string, source: PublishSource, options: PublishOptions = {}): Promise<Publication> {
    const { schema, index } = inboundTrack(this.schema, track);
    checkPublishSource(track, schema, source);
    const send = options.signal ? { signal: options.signal } : {};
    return this.#publisher.publish(schema, index, source, options, this.rtc, (extra) => this.#trackRequest('publish', track, send, extra));
  }

  /**
   * Stops publishing a track (as `publication.stop()`); the app's buffer for it closes.
   * @throws {ReactorClientError} `not_publisher` when this client does not publish it.
   */
  async unpublish(track: string): Promise<void> {
    const pub = this.#publisher.publications.get(track);
    if (pub) return pub.stop();
    return this.#trackRequest('unpublish', track);
  }

  /** The live publications of this client, by track name. */
  get publications(): ReadonlyMap<string, Publication> {
    return this.#publisher.publications;
  }

  /**
   * Stops receiving one outbound track on this connection (the model keeps running); e.g. a
   * muted audio track to save bandwidth.
   * @throws {ReactorClientError} `unknown_track`, `wrong_track_direction` (an inbound track).
   */
  pauseTrack(track: string): Promise<void> {
    return this.#trackRequest('pause_track', track).then(() => this.latency?.setTrackPaused(track, true));
  }

  /** Resumes an outbound track paused with {@link pauseTrack}. */
  resumeTrack(track: string): Promise<void> {
    return this.#trackRequest('resume_track', track).then(() => this.latency?.setTrackPaused(track, false));
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
   *   `disk_full`, `invalid_params`; `forbidden_role` (a spectator's token without the `clip`
   *   grant: `reactor token --rec clip`), `recording_not_granted` (a controller's token without it).
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
    return { ...result, url: downloadUrl(this.#wsUrl, result.url, this.#token) };
  }

  /**
   * Starts (`'start'`) or stops (`'stop'`) recording the session into the server's recording
   * folder, as fragmented MP4 written as it streams. Resolves with the recording's description.
   * @throws {ReactorClientError} `recording_disabled`, `recording_state` (already recording / not
   *   recording), `disk_full`, `clip_unavailable` (no video to record); `forbidden_role` (a
   *   spectator's token without the `record` grant), `recording_not_granted` (a controller's token
   *   without it), `not_controller` (single-controller mode, another client holds control).
   */
  async recording(action: 'start' | 'stop', options: SendOptions = {}): Promise<RecordingInfo> {
    return (await this.#request(
      `recording ${action}`,
      (id) => ({ type: 'recording', id, action }),
      (code, message) => new ReactorClientError(code, `recording ${action} failed (${code}): ${message}`),
      options,
    )) as RecordingInfo;
  }

  /**
   * Asks for a key frame on an outbound video track (a decoder lost its reference); no reply.
   * The server forces at most one per track every 500 ms and sends this client none of the
   * track's delta frames until it arrives. Nothing to do for JPEG.
   * @throws {ConnectionError} `not_connected` when the socket is not open.
   */
  requestKeyFrame(track: string): void {
    this.signal({ type: 'request_key_frame', track });
  }

  /** Sends a message without reply (`request_key_frame`, WebRTC signalling). @throws {ConnectionError} `not_connected` when the socket is not open. */
  signal(msg: RequestKeyFrameMessage | RtcClientMessage): void {
    const ws = this.#conn.openSocket();
    if (!ws) throw new ConnectionError(ClientErrorCode.NotConnected, `cannot send ${msg.type}: the client is ${this.#conn.state}`);
    ws.send(JSON.stringify(msg));
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
    return uploadFile(this.#wsUrl, this.#token, this.clientId, data, options);
  }

  /**
   * {@link send}, typed by the app: with `connect<MyAppTypes>()` a command name the app lacks,
   * a missing parameter or one of the wrong type is a compile error.
   * @example await client.command('set_prompt', { prompt: 'A beach at dusk.' });
   */
  command<K extends CommandName<T>>(name: K, ...args: CommandArgs<T['commands'][K], SendOptions>): CommandPromise<unknown> {
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
    if (!this.#conn.beginClose()) return;
    this.#early = undefined;
    this.#signal?.removeEventListener('abort', this.#onAbort);
    this.#stopReports();
    this.#pending.rejectAll(new ConnectionError(ClientErrorCode.ClientClosed, 'the client was closed before the reply arrived'));
    this.#publisher.endAll('client_closed');
    this.#conn.closeSocket();
    this.#conn.setState({ state: 'closed', reason: 'closed by the client' });
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
    const droppedAt = this.#conn.takeWelcome(msg);
    this.role = msg.role ?? 'controller';
    this.control = msg.control;
    if (droppedAt !== undefined && msg.resumed !== true) this.#publisher.endAll('connection_lost');
    const moved = this.#movedCommands;
    this.#movedCommands = undefined;
    // A new identity (a failed resume, a `reactor dev` reload): the old session's outcomes will not come (but for commands sent again after a move).
    if (this.#welcomed && msg.resumed !== true) this.#applied.endAll(moved);
    this.#welcomed = true;
    this.schema = msg.schema;
    this.state = msg.state;
    this.session = msg.session;
    this.clientId = msg.clientId;
    this.videoOffer = msg.video;
    this.webrtcSetup = msg.webrtc;
    this.videoConfigs.clear();
    this.#conn.setState({ state: 'open' });
    this.emit('welcome', msg);
    this.emit('state', msg.state);
    this.emit('session', msg.session);
    // The session moved: the commands the old instance held (it froze the session for the move) apply here.
    const ws = this.#conn.openSocket();
    if (moved && moved.size > 0 && ws) this.#pending.resend(ws, moved);
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
      // The WebSocket media path: a frame or an audio chunk.
      let inbound: InboundFrame;
      try {
        inbound = wsMediaEvent(data as ArrayBuffer, this.schema);
      } catch (err) {
        this.emit('error', err as Error);
        return;
      }
      if (inbound.type === 'audio') this.emit('audio', inbound.value);
      else this.emit('frame', inbound.value);
      return;
    }
    let msg: ServerMessage;
    try {
      msg = parseServerMessage(data);
    } catch (err) {
      this.emit('error', err as Error);
      return;
    }
    if (msg.type === 'rtc_answer' || msg.type === 'rtc_candidate' || msg.type === 'rtc_state') return this.emit('rtc', msg);
    switch (msg.type) {
      case 'reply': {
        this.#pending.resolve(msg.id, msg.result);
        return;
      }
      case 'error': {
        if (this.#pending.fail(msg)) return;
        const err = new ReactorClientError(msg.code, `server error (${msg.code}): ${msg.message}`);
        this.#publisher.reportFrameError(msg.code, msg.message);
        this.emit('error', err);
        return;
      }
      case 'message':
        if (this.#early !== undefined && (this.#earlyFlushing || this.listenerCount('message') === 0)) {
          if (this.#early.push(msg) > MAX_EARLY_MESSAGES) this.#early.shift();
          return;
        }
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
      case 'applied':
        this.#applied.settle(msg);
        this.emit('applied', msg);
        return;
      case 'video_config':
        this.videoConfigs.set(msg.track, msg);
        this.emit('video_config', msg);
        return;
      case 'track_released':
        this.#publisher.publications.get(msg.track)?.finish({ reason: 'released', detail: msg.reason });
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

  /** Async iterator over outbound audio chunks. Keeps at most `bufferSize` (default 50: one second of 20 ms chunks) unread. */
  audio(options: IterateOptions = {}): AsyncIterableIterator<ClientAudio> {
    return this.#iterate('audio', { bufferSize: 50, ...options });
  }

  #iterate<K extends 'frame' | 'message' | 'status' | 'audio'>(type: K, options: IterateOptions): AsyncIterableIterator<ReactorClientEvents[K]> {
    return iterate(this, this.#conn.state === 'closed', type, options);
  }
}
