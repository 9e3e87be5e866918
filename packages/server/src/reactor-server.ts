/**
 * The HTTP + WebSocket server of one app host: `GET /` (viewer), `/viewer/*` (its modules),
 * `GET /schema`, `GET /health` (+ `/health/live`, `/health/ready`), `GET /metrics`, and the
 * WebSocket upgrade on `options.path`.
 */
import { STATUS_CODES, createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import {
  CloseCode,
  ReadinessCode,
  UPLOAD_PATH,
  encodeHttpError,
  type ClipResult,
  type ErrorBody,
  type SessionStatus,
  type StatsMessage,
  type TrackSchema,
} from '@reactor/protocol';
import type { Logger } from '@reactor/log';
import {
  type AppHostApi,
  type ClientHandle,
  type ClientSink,
  type ClipOptions,
  type MediaListener,
  type NotReadyReason,
  type Readiness,
  UploadError,
} from '@reactor/runtime';
import { TOKEN_COOKIE, authorize, type AccessDenial, type AccessPolicy } from './auth.js';
import type { Grant } from './tokens.js';
import { ServerErrorCode } from './errors.js';
import { ClientConnection, type ConnectionInfo } from './connection.js';
import { FrameDecoder } from './frame-decoder.js';
import { FrameEncoder } from './frame-encoder.js';
import { decodeImage } from './image-decoder.js';
import { ServerMetrics } from './metrics.js';
import { resolveServerOptions, type ResolvedServerOptions, type ServerOptions } from './options.js';
import { SendBudget } from './send-budget.js';
import { loadWebCodecs, webCodecsEncoderFactory } from './video-encoder.js';
import { VideoStreams, type VideoEncoderInfo } from './video-streams.js';
import { RecordingService } from './recording-service.js';
import { ViewerAssets, ViewerNotBuiltError } from './static-assets.js';
import { renderViewerPage, viewerBasePath, viewerSecurityHeaders } from './viewer-page.js';

/** How long `close()` waits for clients to acknowledge the close frame before cutting them. */
export const CLOSE_GRACE_MS = 2000;
/** Largest `POST /uploads` body (the JSON announcement), bytes. */
export const MAX_UPLOAD_REQUEST_BYTES = 4096;
/**
 * After refusing an upload mid-body, how long the server still reads (and drops) what the client
 * has in flight, so that it can read the answer, before it cuts the connection, ms.
 */
export const UPLOAD_REFUSAL_LINGER_MS = 1000;

/** The HTTP status of each upload error. */
const UPLOAD_STATUS: Record<string, number> = {
  [ServerErrorCode.UploadNoSession]: 409,
  [ServerErrorCode.UploadTooLarge]: 413,
  [ServerErrorCode.UploadQuotaExceeded]: 413,
  [ServerErrorCode.UploadTypeNotAllowed]: 415,
  [ServerErrorCode.UploadLengthMismatch]: 400,
  [ServerErrorCode.UploadNotFound]: 404,
  [ServerErrorCode.UploadAlreadyWritten]: 409,
  [ServerErrorCode.UploadInvalidRequest]: 400,
};

/** One model step, as a host that reports steps describes it (feeds `/metrics`). */
export interface StepSample {
  /** Model time (generate) of the step, ms. */
  elapsedMs: number;
}

/**
 * A host the server can serve: the transport contract plus, optionally, `close()` (called by
 * {@link ReactorServer.close}; it shuts the app's runner down through the app's hooks) and
 * `onStep()` (a step listener, for the step metrics).
 */
export interface ServableHost extends AppHostApi {
  close?(): Promise<void> | void;
  onStep?(listener: (step: StepSample) => void): (() => void) | void;
  /** A status listener (`AppHost.onStatus`): scale-out integrations follow sessions through it. */
  onStatus?(listener: (status: SessionStatus) => void): (() => void) | void;
  /**
   * Ends the running session now (`AppHost.endCurrentSession`): with a text, a release by the
   * session router or a drain's deadline; with an error, a session limit.
   */
  endCurrentSession?(reason: string | ErrorBody): Promise<boolean>;
  /** Cumulative counters (`AppHost.counters`): `steps` feeds `reactor_steps_total`. */
  readonly counters?: { readonly steps: number };
  /** A status listener (`AppHost.onStatus`): the server closes its video encoders when a session ends. */
  onStatus?(listener: (status: SessionStatus) => void): (() => void) | void;
  /** The playout tap (`AppHost.onMedia`): the clip ring and recordings read it. */
  onMedia?(listener: MediaListener): () => void;
  /** Where `this.output.clip()` goes (`AppHost.setClipper`). */
  setClipper?(clipper: ((options: ClipOptions) => Promise<ClipResult>) | undefined): void;
}

/** A client whose connection dropped, held for the resume grace. */
interface Suspended {
  readonly handle: ClientHandle;
  readonly grant: Grant;
  readonly timer: ReturnType<typeof setTimeout>;
}

/** Where a suspended client's messages and frames go until it resumes: nowhere. */
const NOWHERE: ClientSink = { message: () => undefined, frame: () => undefined, audio: () => undefined, close: () => undefined };

/** Health as `GET /health` reports it. */
export interface HealthReport {
  /** `ready` exactly when {@link HealthReport.ready}; `not_ready` for a loaded app that cannot take users now. */
  status: 'loading' | 'ready' | 'failed' | 'not_ready';
  /** Whether a new user would get a stream now (`AppHostApi.readiness()`); `/health/ready` answers 200 exactly then. */
  ready: boolean;
  /** Why not, one entry per cause (empty when ready). */
  reasons: readonly NotReadyReason[];
  /** Why loading failed. */
  reason?: string;
  session: string;
  clients: number;
  /** The current session's id, while one exists. */
  sessionId?: string;
  /** The instance name ({@link ReactorServer.instance}), when set. */
  instance?: string;
}

/** The header a session router (`reactor route`) sets on a relayed socket: the id the session takes if this socket starts it. */
export const SESSION_ID_HEADER = 'x-reactor-session-id';

/** A running server. Create it with `serve()` or {@link serveHost}. */
export class ReactorServer {
  /** The app host this server serves. */
  readonly host: ServableHost;
  /** The server's metrics (`GET /metrics` renders `metrics.registry`). */
  readonly metrics = new ServerMetrics();
  readonly options: ResolvedServerOptions;
  readonly #log: Logger;
  readonly #http: Server;
  readonly #wss: WebSocketServer;
  readonly #connections = new Set<ClientConnection>();
  readonly #encoder: FrameEncoder;
  readonly #decoder: FrameDecoder;
  /** Largest inbound binary frame (0: the app declares no inbound track). */
  readonly #maxFrameBytes: number;
  readonly #assets = new ViewerAssets();
  readonly #budget: SendBudget;
  readonly #video: VideoStreams;
  /** Clips and recordings (`options.recording`), when configured. */
  readonly #recording: RecordingService | undefined;
  #offStatus: (() => void) | undefined;
  #heartbeat: ReturnType<typeof setInterval> | undefined;
  #closing: Promise<void> | undefined;
  #offStep: (() => void) | undefined;
  #port = 0;
  #statsSteps = 0;
  #instance: string | undefined;
  /** Dropped clients held for resume, by resume secret. */
  readonly #suspended = new Map<string, Suspended>();
  /** Bytes announced for upload per token (`grant.tokenId`), against its `upl` grant. */
  readonly #uploadedBy = new Map<string, number>();
  /** The current session (for the session limits): its id, when it started, its time limit. */
  #session: { id: string; startedAt: number; limitMs: number | undefined; lastActivity: number } | undefined;
  #limitTimer: ReturnType<typeof setTimeout> | undefined;
  /**
   * Settles when the app has loaded (`serve()` loads it after listening); rejects with the
   * load error. Already resolved for {@link serveHost}.
   */
  loaded: Promise<void> = Promise.resolve();

  /** Prefer {@link serveHost}; call {@link listen} before use. */
  constructor(host: ServableHost, options: ServerOptions = {}) {
    this.options = resolveServerOptions(options);
    this.host = host;
    // A logger without child() (a plain object written before @reactor/log) is used as it is.
    const given = this.options.logger;
    this.#log = typeof given.child === 'function' ? given.child({ component: 'server' }) : given;
    this.#encoder = new FrameEncoder(this.options.encoding, this.options.jpegQuality, this.metrics);
    this.#decoder = new FrameDecoder(this.metrics);
    const inbound = host.schema.tracks.filter((t) => t.direction === 'in');
    this.metrics.declareInputTracks(inbound.map((t) => t.name));
    this.#maxFrameBytes = inbound.length === 0 ? 0 : (this.options.maxFrameBytes ?? Math.max(...inbound.map(frameBytesFor)));
    this.#budget = new SendBudget(this.options.maxTotalBufferedBytes);
    this.#video = new VideoStreams(this.options.video, host, this.metrics, this.#log);
    if (this.options.recording) this.#recording = new RecordingService(this.options.recording, host, this.#video, this.#log, this.metrics.registry);
    this.metrics.setVideoClients(() => [...this.#connections].flatMap((c) => c.videoSelection ?? []));
    let session: string | undefined;
    const offStatus = host.onStatus?.((s) => {
      // The session ended (or another began): its encoders' references are gone with it.
      if (s.sessionId !== session) {
        this.#video.endSession();
        this.#sessionChanged(s.sessionId);
      }
      session = s.sessionId;
    });
    if (typeof offStatus === 'function') this.#offStatus = offStatus;
    this.#http = createServer(
      { headersTimeout: this.options.headersTimeoutMs, connectionsCheckingInterval: Math.min(1000, this.options.headersTimeoutMs) },
      (req, res) => {
        this.#onRequest(req, res).catch((err: Error) => {
          this.#log.error(`${req.method} ${req.url}: ${err.stack ?? err.message}`);
          if (!res.headersSent) sendJson(res, 500, { error: { code: ServerErrorCode.InternalError, message: 'the server failed to answer; see its log' } });
          else res.destroy();
        });
      },
    );
    this.#http.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => this.#onUpgrade(req, socket, head));
    this.#http.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => answerClientError(err, socket));
    // No subprotocol is spoken: an offered one is never echoed (a client that requires one fails, as RFC 6455 says).
    // One inbound message per macrotask (allowSynchronousEvents: false): a client that floods
    // thousands of small messages in one TCP read cannot hold the event loop, so playout timers
    // and other clients get their turn between its messages, and its socket is read no faster
    // than they are handled.
    this.#wss = new WebSocketServer({
      noServer: true,
      // Text messages are held to maxMessageBytes by the connection (inbound frames may be larger).
      maxPayload: Math.max(this.options.maxMessageBytes, this.#maxFrameBytes),
      perMessageDeflate: false,
      clientTracking: false,
      handleProtocols: () => false,
      allowSynchronousEvents: false,
    });
    const off = host.onStep?.((s) => this.metrics.stepSeconds.observe(s.elapsedMs / 1000));
    if (typeof off === 'function') this.#offStep = off;
    this.metrics.setStepCounter(() => host.counters?.steps ?? this.#statsSteps);
    this.metrics.setReadiness(
      () => this.#readiness(),
      () => this.#budget.used,
    );
    const o = this.options;
    host.uploads?.configure({
      maxFileBytes: o.maxUploadBytes,
      quotaBytes: o.uploadQuotaBytes,
      resolveWaitMs: o.uploadWaitMs,
      expiryMs: o.uploadExpiryMs,
      ...(o.uploadDir !== undefined ? { dir: o.uploadDir } : {}),
      decodeImage,
    });
  }

  /**
   * Step statistics seen on their way to clients. Without a per-step listener on the host,
   * each new step of the window is recorded at the window's mean model time.
   */
  #onStats(msg: StatsMessage): void {
    if (msg.steps < this.#statsSteps) this.#statsSteps = 0; // a new session restarted the count
    const fresh = msg.steps - this.#statsSteps;
    if (fresh <= 0) return;
    this.#statsSteps = msg.steps;
    if (this.#offStep) return;
    for (let i = 0; i < Math.min(fresh, 10_000); i++) this.metrics.stepSeconds.observe(msg.stepMs / 1000);
  }

  /** Starts listening; resolves once the port is bound. */
  async listen(): Promise<this> {
    // The codec's native module loads before the first client can ask for it; when it cannot,
    // the server streams JPEG only (and says why in its log and in unsupported_codec answers).
    if (this.options.video.codec !== 'jpeg' && this.options.video.encoderFactory === webCodecsEncoderFactory) {
      try {
        await loadWebCodecs();
      } catch (err) {
        const reason = (err as Error).message;
        this.#video.markUnavailable(reason);
        this.#log.error(`video.codec ${this.options.video.codec} is not available, streaming JPEG only: ${reason}`);
      }
    }
    // Upload folders a killed server left (with its users' files) go before this one takes any.
    try {
      const swept = (await this.host.uploads?.sweep?.()) ?? 0;
      if (swept > 0) this.#log.info(`removed ${swept} upload folder(s) left by a server that is gone`);
    } catch (err) {
      this.#log.warn(`could not sweep the upload folders left by earlier servers: ${(err as Error).message}`);
    }
    await this.#recording?.start();
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error): void => reject(err);
      this.#http.once('error', onError);
      this.#http.listen(this.options.port, this.options.host, () => {
        this.#http.off('error', onError);
        resolve();
      });
    });
    const addr = this.#http.address();
    this.#port = typeof addr === 'object' && addr ? addr.port : this.options.port;
    this.#heartbeat = setInterval(() => this.#beat(), this.options.heartbeatMs);
    this.#heartbeat.unref();
    return this;
  }

  /** The bound port (the real one when `port: 0` was asked). */
  get port(): number {
    return this.#port;
  }

  /** Base URL, e.g. `http://127.0.0.1:8080` (open it in a browser for the viewer). */
  get url(): string {
    const h = this.options.host.includes(':') ? `[${this.options.host}]` : this.options.host;
    return `http://${h === '0.0.0.0' ? '127.0.0.1' : h}:${this.#port}`;
  }

  /** WebSocket URL, e.g. `ws://127.0.0.1:8080/ws`. */
  get wsUrl(): string {
    return this.url.replace(/^http/, 'ws') + this.options.path;
  }

  /**
   * The name of this instance among many (scale-out: the Agones GameServer name), reported in
   * `welcome.session.instance`, `session` messages and `GET /health`; `undefined` for a lone
   * server. Set by the integration that learns it (`@reactor/agones`).
   * @throws TypeError for a value that is not a non-empty string of at most 253 characters.
   */
  get instance(): string | undefined {
    return this.#instance;
  }

  set instance(name: string | undefined) {
    if (name !== undefined && (typeof name !== 'string' || name.length === 0 || name.length > 253)) {
      throw new TypeError(`server.instance must be a non-empty string of at most 253 characters (a Kubernetes object name), got ${JSON.stringify(name)}`);
    }
    this.#instance = name;
  }

  /** A snapshot of every video encoder (one per outbound video track, codec and tier in use). */
  videoEncoders(): VideoEncoderInfo[] {
    return this.#video.info();
  }

  /** A snapshot of every connected client's queue and counters. */
  connections(): ConnectionInfo[] {
    return [...this.#connections].map((c) => c.info());
  }

  /**
   * Health: `ready` (and `ready: true`) exactly when the host's `readiness()` says a new user
   * would get a stream; otherwise `loading`, `failed` (with the reason) or `not_ready`, with
   * every reason.
   */
  health(): HealthReport {
    const s = this.host.status;
    const r = this.#readiness();
    const status = r.ready ? 'ready' : s.state === 'loading' ? 'loading' : s.state === 'failed' ? 'failed' : 'not_ready';
    const report: HealthReport = { status, ready: r.ready, reasons: r.reasons, session: s.state, clients: s.clients };
    if (s.sessionId !== undefined) report.sessionId = s.sessionId;
    if (this.#instance !== undefined) report.instance = this.#instance;
    if (status === 'failed') report.reason = s.error?.message ?? 'the app failed to load';
    return report;
  }

  /** The access rules of every route and the upgrade. */
  get #policy(): AccessPolicy {
    const o = this.options;
    return { token: o.token, allowedHosts: o.allowedHosts, allowedOrigins: o.allowedOrigins, verifier: o.verifier };
  }

  /** What a token's `sid` may name on this server: the current session's id and the instance name. */
  #sessionKeys = (): string[] => {
    const keys: string[] = [];
    const id = this.host.status.sessionId;
    if (id !== undefined) keys.push(id);
    if (this.#instance !== undefined) keys.push(this.#instance);
    return keys;
  };

  #refuse(res: ServerResponse, denial: AccessDenial): void {
    this.metrics.rejected.inc({ reason: denial.reason });
    if (denial.status === 401) res.setHeader('WWW-Authenticate', denial.reason === 'token' ? 'Bearer error="invalid_token"' : 'Bearer');
    sendJson(res, denial.status, { error: { code: denial.code, message: denial.message } });
  }

  // ---- session limits ---------------------------------------------------------------------

  /** A new session began (or the last ended): its limits start over. */
  #sessionChanged(id: string | undefined): void {
    clearTimeout(this.#limitTimer);
    this.#limitTimer = undefined;
    if (id === undefined) {
      this.#session = undefined;
      return;
    }
    const now = performance.now();
    this.#session = { id, startedAt: now, limitMs: this.options.maxSessionMs, lastActivity: now };
    // Clients already connected (they waited for the session) bring their tokens' limits.
    for (const c of this.#connections) this.#applyGrantLimit(c.grant);
    this.#armLimits();
  }

  /** A client of the session holds a token with a longest session time: the session may not outlast it. */
  #applyGrantLimit(grant: Grant): void {
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
    if (!s || this.#closing) return;
    const now = performance.now();
    const idle = this.options.idleTimeoutMs;
    const dueAt = Math.min(s.limitMs === undefined ? Infinity : s.startedAt + s.limitMs, idle === undefined ? Infinity : s.lastActivity + idle);
    if (dueAt === Infinity) return;
    this.#limitTimer = setTimeout(() => this.#checkLimits(), Math.max(0, dueAt - now) + 1);
    this.#limitTimer.unref();
  }

  #checkLimits(): void {
    const s = this.#session;
    if (!s || this.#closing) return;
    const now = performance.now();
    const idle = this.options.idleTimeoutMs;
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
    this.#log.info(`ending session ${this.#session?.id ?? ''}: ${error.message}`);
    this.#session = undefined;
    for (const c of this.#connections) c.close(error.message, code);
    for (const [secret, s] of this.#suspended) {
      clearTimeout(s.timer);
      this.#suspended.delete(secret);
      s.handle.disconnect();
    }
    this.host.endCurrentSession?.(error).catch((err: Error) => this.#log.error(`ending the session failed: ${err.stack ?? err.message}`));
  }

  // ---- resume -------------------------------------------------------------------------------

  /** A connection closed: the client leaves, or, dropped without a close frame, is held for `resumeGraceMs`. */
  #gone(conn: ClientConnection, handle: ClientHandle, dropped: boolean): void {
    const graceMs = this.options.resumeGraceMs;
    if (!dropped || graceMs === 0 || this.#closing) return handle.disconnect();
    handle.rebind(NOWHERE);
    const timer = setTimeout(() => {
      if (this.#suspended.get(conn.resumeSecret)?.handle !== handle) return;
      this.#suspended.delete(conn.resumeSecret);
      this.#log.info({ client: handle.id }, `client ${handle.id} did not come back within ${graceMs} ms; it leaves`);
      handle.disconnect();
    }, graceMs);
    timer.unref();
    this.#suspended.set(conn.resumeSecret, { handle, grant: conn.grant, timer });
    this.#log.info({ client: handle.id }, `client ${handle.id} dropped; held ${graceMs} ms for resume`);
  }

  /** Clients held for resume now (their ids). */
  suspendedClients(): string[] {
    return [...this.#suspended.values()].map((s) => s.handle.id);
  }

  /** The host's readiness; a host that throws is not ready (and says why). */
  #readiness(): Readiness {
    if (this.#closing) return { ready: false, reasons: [{ code: ReadinessCode.Closing, message: 'the server is shutting down' }] };
    try {
      const r = this.host.readiness();
      return { ready: r.ready && r.reasons.length === 0, reasons: r.reasons };
    } catch (err) {
      this.#log.error(`readiness() threw: ${(err as Error)?.stack ?? String(err)}`);
      return { ready: false, reasons: [{ code: ReadinessCode.ReadinessFailed, message: `readiness() threw: ${(err as Error)?.message ?? String(err)}` }] };
    }
  }

  /**
   * Shuts down: stops accepting, sends every client a close frame (1001), closes the host
   * (which shuts the app's runner down), and waits for sockets to go. Idempotent.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    if (this.#heartbeat) clearInterval(this.#heartbeat);
    clearTimeout(this.#limitTimer);
    for (const s of this.#suspended.values()) {
      clearTimeout(s.timer);
      s.handle.disconnect();
    }
    this.#suspended.clear();
    this.#offStep?.();
    this.#offStatus?.();
    const httpClosed = new Promise<void>((resolve) => this.#http.close(() => resolve()));
    const gone = [...this.#connections].map((c) => c.closed);
    for (const c of this.#connections) c.close('server shutting down');
    try {
      await this.host.close?.();
    } catch (err) {
      this.#log.error(`closing the app failed: ${(err as Error).stack ?? String(err)}`);
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([Promise.all(gone), new Promise((r) => (timer = setTimeout(r, CLOSE_GRACE_MS)))]);
    clearTimeout(timer);
    for (const c of this.#connections) c.terminate();
    await this.#recording?.close();
    this.#http.closeAllConnections();
    this.#video.close();
    await httpClosed;
  }

  #beat(): void {
    for (const c of this.#connections) {
      if (!c.alive) {
        this.#log.warn(`client ${c.id} missed a heartbeat; dropping it`);
        this.metrics.rejected.inc({ reason: 'heartbeat' });
        c.terminate();
        continue;
      }
      c.alive = false;
      c.ping();
    }
  }

  async #onRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = parseTarget(req.url);
    if (!url) return sendJson(res, 400, { error: { code: ServerErrorCode.BadRequest, message: `cannot parse the request target ${JSON.stringify(req.url)}` } });
    if (url.pathname === '/uploads' || url.pathname.startsWith(UPLOAD_PATH)) return this.#onUpload(req, res, url);
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('Allow', 'GET, HEAD');
      return sendJson(res, 405, { error: { code: ServerErrorCode.MethodNotAllowed, message: `${req.method} is not supported; every route is GET` } });
    }
    if (url.pathname === '/favicon.ico') {
      res.statusCode = 204;
      return void res.end();
    }
    // Health is open (no token, any Host): load balancers and orchestrators probe it.
    if (url.pathname === '/health/live') return sendJson(res, 200, { status: 'live' });
    if (url.pathname === '/health/ready' || url.pathname === '/health') {
      const h = this.health();
      if (h.ready) return sendJson(res, 200, url.pathname === '/health' ? h : { ready: true, reasons: [] });
      const error = { code: ServerErrorCode.NotReady, message: `not ready: ${h.reasons.map((x) => x.message).join('; ')}` };
      return sendJson(res, 503, url.pathname === '/health' ? { ...h, error } : { ready: false, reasons: h.reasons, error });
    }
    const auth = await authorize(req, url, this.#policy, this.#sessionKeys);
    if (!auth.ok) return this.#refuse(res, auth.denial);
    switch (url.pathname) {
      case '/':
      case '/index.html': {
        const token = url.searchParams.get('token');
        if ((this.options.token !== undefined || this.options.verifier !== undefined) && token !== null) {
          // Lets the page's module scripts and its socket carry the token without putting it in every URL.
          res.setHeader('Set-Cookie', `${TOKEN_COOKIE}=${encodeURIComponent(token)}; HttpOnly; SameSite=Strict; Path=/`);
        }
        // Behind a session router the page lives under /s/{instance}: its scripts and socket are asked for there.
        const basePath = viewerBasePath(req.headers['x-forwarded-prefix']);
        const html = renderViewerPage({ title: this.host.schema.app.name, wsPath: this.options.path, basePath, recording: this.#recording !== undefined });
        res.setHeader('Cache-Control', 'no-store');
        for (const [name, value] of Object.entries(viewerSecurityHeaders(this.options.allowedOrigins, basePath))) res.setHeader(name, value);
        return send(res, 200, 'text/html; charset=utf-8', html);
      }
      case '/schema':
        return sendJson(res, 200, this.host.schema);
      case '/metrics': {
        const text = await this.metrics.registry.metrics();
        return send(res, 200, this.metrics.registry.contentType, text);
      }
      default:
        break;
    }
    if (this.#recording && (await this.#recording.serve(req, res, url.pathname))) return;
    if (url.pathname.startsWith('/viewer/')) {
      try {
        const asset = await this.#assets.get(url.pathname.slice('/viewer/'.length));
        if (asset) {
          res.setHeader('Cache-Control', 'no-cache');
          return send(res, 200, asset.contentType, asset.body);
        }
      } catch (err) {
        if (err instanceof ViewerNotBuiltError) return sendJson(res, 500, { error: { code: err.code, message: err.message } });
        throw err;
      }
    }
    return sendJson(res, 404, {
      error: {
        code: ServerErrorCode.NotFound,
        message: `no route ${url.pathname}; try /, /schema, /health, /metrics or the WebSocket at ${this.options.path}`,
      },
    });
  }

  /**
   * `POST /uploads` (a JSON announcement -> 201 ticket) and `PUT /uploads/{id}` (the raw bytes ->
   * 200 info), under the same Host, token and Origin checks as every route; no CORS headers, so
   * a page of another origin cannot even send its preflight.
   */
  async #onUpload(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const announce = url.pathname === '/uploads';
    const method = announce ? 'POST' : 'PUT';
    if (req.method !== method) {
      res.setHeader('Allow', method);
      this.#refuseBody(req, res);
      return sendJson(res, 405, {
        error: {
          code: ServerErrorCode.MethodNotAllowed,
          message: `${req.method} is not supported here: announce with POST /uploads, then PUT the bytes to /uploads/{uploadId}`,
        },
      });
    }
    const auth = await authorize(req, url, this.#policy, this.#sessionKeys);
    if (!auth.ok) {
      this.#refuseBody(req, res);
      return this.#refuse(res, auth.denial);
    }
    const grant = auth.grant;
    if (grant.uploadBytes === 0) {
      this.#refuseBody(req, res);
      return sendJson(res, 403, {
        error: {
          code: ServerErrorCode.UploadNotAllowed,
          message: `your token grants no uploads (role "${grant.role}"); uploading takes a controller's token, or one whose upl claim allows bytes`,
        },
      });
    }
    const uploads = this.host.uploads;
    if (!uploads) {
      this.#refuseBody(req, res);
      return sendJson(res, 404, { error: { code: ServerErrorCode.NotFound, message: 'this app host takes no uploads' } });
    }
    try {
      if (announce) {
        const body = await readSmallBody(req, MAX_UPLOAD_REQUEST_BYTES);
        let request: unknown;
        try {
          request = JSON.parse(body);
        } catch {
          throw new UploadError(
            ServerErrorCode.UploadInvalidRequest,
            `the announcement is not JSON; send {"name": "<display name>", "size": <exact byte count>} (at most ${MAX_UPLOAD_REQUEST_BYTES} bytes)`,
          );
        }
        const size = (request as { size?: unknown } | null)?.size;
        if (grant.uploadBytes !== undefined && grant.tokenId !== undefined && typeof size === 'number') {
          const used = this.#uploadedBy.get(grant.tokenId) ?? 0;
          if (used + size > grant.uploadBytes) {
            return sendJson(res, 413, {
              error: {
                code: ServerErrorCode.UploadGrantExceeded,
                message: `this upload of ${size} bytes would pass what your token grants (${grant.uploadBytes} bytes, ${used} already announced); ask for a token with a larger upl`,
              },
            });
          }
        }
        const ticket = uploads.announce(request);
        if (grant.uploadBytes !== undefined && grant.tokenId !== undefined && typeof size === 'number') {
          this.#uploadedBy.set(grant.tokenId, (this.#uploadedBy.get(grant.tokenId) ?? 0) + size);
        }
        this.metrics.uploads.inc({ outcome: 'announced' });
        return sendJson(res, 201, ticket);
      }
      let id: string;
      try {
        id = decodeURIComponent(url.pathname.slice(UPLOAD_PATH.length));
      } catch {
        id = '';
      }
      const header = req.headers['content-length'];
      const contentLength = header !== undefined && /^\d+$/.test(header) ? Number(header) : undefined;
      const info = await uploads.write(id, req.iterator({ destroyOnReturn: false }), contentLength !== undefined ? { contentLength } : {});
      this.metrics.uploads.inc({ outcome: 'stored' });
      this.metrics.uploadBytes.inc(info.size);
      return sendJson(res, 200, info);
    } catch (err) {
      if (!(err instanceof UploadError) || UPLOAD_STATUS[err.code] === undefined) throw err;
      this.metrics.uploads.inc({ outcome: err.code });
      this.#refuseBody(req, res);
      if (req.destroyed && !req.complete) return; // the client went away mid-body: nobody to answer
      return sendJson(res, UPLOAD_STATUS[err.code]!, { error: { code: err.code, message: err.message } });
    }
  }

  /**
   * An answer sent before the request body was read: the connection closes after it, and the
   * bytes the client still has in flight are read and dropped (never stored) for a moment, so a
   * client that reads its answer only after sending gets it instead of a reset.
   */
  #refuseBody(req: IncomingMessage, res: ServerResponse): void {
    if (req.complete) return;
    res.setHeader('Connection', 'close');
    req.resume();
    const cut = setTimeout(() => req.socket.destroy(), UPLOAD_REFUSAL_LINGER_MS);
    cut.unref();
    req.socket.once('close', () => clearTimeout(cut));
  }

  #onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    const url = parseTarget(req.url);
    if (!url) return writeHttpError(socket, 400, ServerErrorCode.BadRequest, `cannot parse the request target ${JSON.stringify(req.url)}`);
    if (this.#closing) return writeHttpError(socket, 503, ServerErrorCode.ServerClosing, 'the server is shutting down');
    if (url.pathname !== this.options.path) return writeHttpError(socket, 404, ServerErrorCode.NotFound, `the WebSocket is at ${this.options.path}`);
    const resume = url.searchParams.get('resume') ?? undefined;
    const upgrade = (grant: Grant): void => {
      if (socket.destroyed) return;
      if (this.#closing) return writeHttpError(socket, 503, ServerErrorCode.ServerClosing, 'the server is shutting down');
      this.#wss.handleUpgrade(req, socket, head, (ws) => this.#onConnection(ws, req, grant, resume));
    };
    const policy = this.#policy;
    if (!policy.verifier) {
      // No signed tokens: the check is synchronous, as before.
      void authorize(req, url, policy, this.#sessionKeys).then((auth) => (auth.ok ? upgrade(auth.grant) : this.#refuseUpgrade(socket, auth.denial)));
      return;
    }
    authorize(req, url, policy, this.#sessionKeys).then(
      (auth) => (auth.ok ? upgrade(auth.grant) : this.#refuseUpgrade(socket, auth.denial)),
      (err: Error) => {
        this.#log.error(`checking a token failed: ${err.stack ?? err.message}`);
        writeHttpError(socket, 503, ServerErrorCode.InternalError, `the token could not be checked now (${err.message}); retry`);
      },
    );
  }

  #refuseUpgrade(socket: Duplex, denial: AccessDenial): void {
    this.metrics.rejected.inc({ reason: denial.reason });
    writeHttpError(socket, denial.status, denial.code, denial.message);
  }

  #onConnection(ws: WebSocket, req: IncomingMessage, grant: Grant, resume: string | undefined): void {
    const conn = new ClientConnection(
      ws,
      {
        host: this.host,
        encoder: this.#encoder,
        decoder: this.#decoder,
        maxFrameBytes: this.#maxFrameBytes,
        metrics: this.metrics,
        options: this.options,
        logger: this.#log,
        budget: this.#budget,
        video: this.#video,
        recording: this.#recording,
        onStats: (m) => this.#onStats(m),
        instance: () => this.#instance,
        activity: () => {
          if (this.#session) this.#session.lastActivity = performance.now();
        },
        gone: (c, handle, dropped) => this.#gone(c, handle, dropped),
      },
      (c) => {
        this.#connections.delete(c);
        this.metrics.clients.set(this.#connections.size);
      },
      grant,
    );
    this.#connections.add(conn);
    this.metrics.clients.set(this.#connections.size);
    try {
      const held = resume === undefined ? undefined : this.#suspended.get(resume);
      if (held) {
        clearTimeout(held.timer);
        this.#suspended.delete(resume!);
        this.#log.info({ client: held.handle.id }, `client ${held.handle.id} resumed`);
        this.metrics.resumes.inc({ result: 'resumed' });
        conn.adopt(held.handle);
        return;
      }
      if (resume !== undefined) this.metrics.resumes.inc({ result: 'new_identity' });
      this.#applyGrantLimit(grant);
      const info: { remoteAddress?: string; userAgent?: string; sessionId?: string } = {};
      if (req.socket.remoteAddress) info.remoteAddress = req.socket.remoteAddress;
      if (req.headers['user-agent']) info.userAgent = req.headers['user-agent'];
      // A session router's id for the session (one id end to end); the host ignores one that is not label-safe.
      const chosen = req.headers[SESSION_ID_HEADER];
      if (typeof chosen === 'string' && chosen !== '') info.sessionId = chosen;
      conn.attach(info, resume !== undefined);
    } catch (err) {
      this.#log.error(`the app refused a client: ${(err as Error).stack ?? String(err)}`);
      ws.close(1011, 'the app could not register this client; see the server log');
    }
  }
}

/** Header and metadata allowance of an inbound frame, beyond its largest payload. */
const FRAME_OVERHEAD_BYTES = 64 * 1024;

/** The largest binary frame an inbound track may need: RGB24 at its size limit, or one second of PCM. */
function frameBytesFor(t: TrackSchema): number {
  const payload = t.kind === 'audio' ? (t.sampleRate ?? 48_000) * 2 : (t.maxWidth ?? 1920) * (t.maxHeight ?? 1080) * 3;
  return FRAME_OVERHEAD_BYTES + payload;
}

/**
 * Serves an existing app host over HTTP + WebSocket.
 *
 * @example
 * const server = await serveHost(host, { port: 0 });
 * console.log(`viewer at ${server.url}`);
 * await server.close();
 */
export async function serveHost(host: ServableHost, options: ServerOptions = {}): Promise<ReactorServer> {
  return new ReactorServer(host, options).listen();
}

/** A request body of at most `limit` bytes, as text. */
async function readSmallBody(req: IncomingMessage, limit: number): Promise<string> {
  const parts: Buffer[] = [];
  let total = 0;
  for await (const chunk of req.iterator({ destroyOnReturn: false })) {
    total += (chunk as Buffer).byteLength;
    if (total > limit)
      throw new UploadError(
        ServerErrorCode.UploadInvalidRequest,
        `the announcement is larger than ${limit} bytes; send only {"name", "size", "mimeType"?, "clientId"?}`,
      );
    parts.push(chunk as Buffer);
  }
  return Buffer.concat(parts).toString('utf8');
}

function send(res: ServerResponse, status: number, contentType: string, body: string | Buffer): void {
  res.statusCode = status;
  res.setHeader('Content-Type', contentType);
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.end(res.req.method === 'HEAD' ? undefined : body);
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  send(res, status, 'application/json; charset=utf-8', JSON.stringify(body));
}

/** The request target as a URL, or null when it cannot be parsed (`//`, `/\\`, ...). */
function parseTarget(target: string | undefined): URL | null {
  try {
    return new URL(target ?? '/', 'http://localhost');
  } catch {
    return null;
  }
}

/**
 * Answers a request Node could not parse as Node itself would without a `clientError`
 * listener: 431 for oversized headers, 408 for headers that took too long, 400 otherwise
 * (with a JSON body); nothing on a socket that is already gone.
 */
function answerClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || !socket.writable || (socket as Duplex & { _httpMessage?: unknown })._httpMessage) {
    socket.destroy();
    return;
  }
  const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
  const code = status === 431 ? ServerErrorCode.HeadersTooLarge : ServerErrorCode.BadRequest;
  const message =
    status === 431
      ? 'the request headers are too large'
      : status === 408
        ? 'the request headers did not arrive in time'
        : 'the request cannot be parsed as HTTP/1.1';
  writeHttpError(socket, status, code, message);
}

/** A complete HTTP error answer on a raw socket (refused upgrades, unparsable requests), then close. */
function writeHttpError(socket: Duplex, status: number, code: ServerErrorCode, message: string): void {
  const body = encodeHttpError(code, message);
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Error'}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${status === 401 ? 'WWW-Authenticate: Bearer\r\n' : ''}\r\n${body}`,
  );
}
