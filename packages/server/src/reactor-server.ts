/**
 * The HTTP + WebSocket server of one app host: `GET /` (viewer), `/viewer/*` (its modules),
 * `GET /schema`, `GET /health` (+ `/health/live`, `/health/ready`), `GET /metrics`, `GET /dashboard`
 * (+ `/dashboard/data`, sampled once a second: `dashboard.ts`), the upload,
 * clip and recording routes (one route table: `server-routes.ts`), and the WebSocket upgrade on
 * `options.path`. Session limits and resume holds: `session-keeper.ts`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import type { Logger } from '@reactor/log';
import type { Readiness } from '@reactor/runtime';
import {
  authorize,
  bearerChallenge,
  parseTarget,
  sendError,
  writeHttpError,
  type AccessDenial,
  type AccessPolicy,
  type Grant,
  type RouteTable,
} from '@reactor/access';
import { ServerErrorCode } from './base/errors.js';
import { ClientConnection, dashboardClient, type ConnectionInfo } from './connection.js';
import { DashboardSampler } from './dashboard/dashboard.js';
import { DashboardEvents } from './dashboard/dashboard-events.js';
import { FrameDecoder } from './intake/frame-decoder.js';
import { frameBytesFor } from './intake/frame-intake.js';
import { FrameEncoder } from './video/frame-encoder.js';
import { decodeImage } from './intake/image-decoder.js';
import { ServerMetrics } from './base/metrics.js';
import { resolveServerOptions, type ResolvedServerOptions, type ServerOptions } from './options.js';
import { SendBudget } from './base/send-budget.js';
import { loadWebCodecs, webCodecsEncoderFactory } from './video/video-encoder.js';
import { OpusStreams } from './webrtc/rtc-audio.js';
import { RtcMetrics } from './webrtc/rtc-metrics.js';
import type { RtcServerContext } from './webrtc/rtc-session.js';
import { VideoStreams, type VideoEncoderInfo } from './video/video-streams.js';
import { RecordingService } from './recording/recording-service.js';
import { ViewerAssets } from './http/static-assets.js';
import { type HealthReport, type ServableHost, loadProgressOf } from './base/servable-host.js';
import { healthOf, readinessOf } from './http/server-health.js';
import { answerClientError, notFound, serverRoutes, type ServerRoute } from './server-routes.js';
import { SessionKeeper } from './session-keeper.js';
import { StepMetrics } from './base/step-metrics.js';
import { UploadRoutes } from './http/upload-routes.js';

export type { ServableHost, StepSample, HealthReport } from './base/servable-host.js';

/** How long `close()` waits for clients to acknowledge the close frame before cutting them. */
export const CLOSE_GRACE_MS = 2000;
/** The header a session router (`reactor route`) sets on a relayed socket: the id the session takes if this socket starts it. */
export const SESSION_ID_HEADER = 'x-reactor-session-id';

/** Options of {@link ReactorServer.close}: what the clients' close frame says (default 1001, "server shutting down"). */
export interface ServerCloseOptions {
  /** The close code (a registered one: `CloseCode` of `@reactor/protocol`, or 1001). */
  code?: number;
  /** The close reason (cut to 123 bytes); start it with the wire code it stands for (`drain_deadline: ...`). */
  reason?: string;
}

/** A running server. Create it with `serve()` or {@link serveHost}. */
export class ReactorServer {
  /** The app host this server serves. */
  readonly host: ServableHost;
  /** The server's metrics (`GET /metrics` renders `metrics.registry`). */
  readonly metrics = new ServerMetrics();
  readonly options: ResolvedServerOptions;
  readonly #log: Logger;
  /** The live dashboard's samples and its ring of recent errors and warnings. */
  readonly #dashboard: DashboardSampler;
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
  readonly #rtc: RtcServerContext | undefined;
  /** Closes the Opus encoders, if they were loaded. */
  #closeOpus: () => void = () => undefined;
  /** Clips and recordings (`options.recording`), when configured. */
  readonly #recording: RecordingService | undefined;
  #offStatus: (() => void) | undefined;
  #heartbeat: ReturnType<typeof setInterval> | undefined;
  #closing: Promise<void> | undefined;
  /** Set by {@link beginDrain}: not ready for a new session, while the running one goes on. */
  #draining = false;
  #offStep: (() => void) | undefined;
  #port = 0;
  readonly #steps: StepMetrics;
  #instance: string | undefined;
  /** Session limits and resume holds. */
  readonly #sessions: SessionKeeper;
  /** Method + path -> handler. */
  readonly #routes: RouteTable<ServerRoute>;
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
    const events = new DashboardEvents();
    // Every warning and error the server logs is also kept for the dashboard's recent errors.
    this.#log = events.tap(typeof given.child === 'function' ? given.child({ component: 'server' }) : given);
    this.#dashboard = new DashboardSampler({
      registry: this.metrics.registry,
      events,
      status: () => host.status,
      clients: () => [...this.#connections].map(dashboardClient),
    });
    this.#encoder = new FrameEncoder(this.options.encoding, this.options.jpegQuality, this.metrics);
    this.#decoder = new FrameDecoder(this.metrics);
    const inbound = host.schema.tracks.filter((t) => t.direction === 'in');
    this.metrics.declareInputTracks(inbound.map((t) => t.name));
    this.#maxFrameBytes = inbound.length === 0 ? 0 : (this.options.maxFrameBytes ?? Math.max(...inbound.map(frameBytesFor)));
    this.#budget = new SendBudget(this.options.maxTotalBufferedBytes);
    this.#video = new VideoStreams(this.options.video, host, this.metrics, this.#log);
    if (this.options.webrtc.enabled) {
      let opus: Promise<OpusStreams | undefined> | undefined;
      const log = this.#log;
      this.#rtc = {
        options: this.options.webrtc,
        metrics: new RtcMetrics(this.metrics.registry),
        // Loaded on the first offer (a server nobody offers to never loads the encoder module for audio).
        get opus() {
          opus ??= OpusStreams.load(log);
          return opus;
        },
      };
      this.#closeOpus = () => void opus?.then((o) => o?.close());
    }
    if (this.options.recording) this.#recording = new RecordingService(this.options.recording, host, this.#video, this.#log, this.metrics.registry);
    this.metrics.setVideoClients(() => [...this.#connections].flatMap((c) => c.videoSelection ?? []));
    this.#sessions = new SessionKeeper({
      options: this.options,
      log: this.#log,
      metrics: this.metrics,
      host,
      connections: () => this.#connections,
      closing: () => this.#closing !== undefined,
    });
    const uploads = new UploadRoutes({
      host,
      metrics: this.metrics,
      authorize: (req, url) => authorize(req, url, this.#policy, this.#sessionKeys),
      refuse: (res, denial) => this.#refuse(res, denial),
    });
    this.#routes = serverRoutes({
      host,
      options: this.options,
      metrics: this.metrics,
      recording: this.#recording,
      assets: this.#assets,
      uploads,
      snapshots: {
        host,
        hasToken: this.options.token !== undefined,
        authorize: (req, url) => authorize(req, url, this.#policy, this.#sessionKeys),
        refuse: (res, denial) => this.#refuse(res, denial),
      },
      dashboard: this.#dashboard,
      health: () => this.health(),
    });
    let session: string | undefined;
    const offStatus = host.onStatus?.((s) => {
      this.#dashboard.status(s);
      // The session ended (or another began): its encoders' references are gone with it.
      if (s.sessionId !== session) {
        this.#video.endSession();
        this.#sessions.sessionChanged(s.sessionId);
      }
      session = s.sessionId;
    });
    if (typeof offStatus === 'function') this.#offStatus = offStatus;
    this.#http = createServer(
      { headersTimeout: this.options.headersTimeoutMs, connectionsCheckingInterval: Math.min(1000, this.options.headersTimeoutMs) },
      (req, res) => {
        this.#onRequest(req, res).catch((err: Error) => {
          this.#log.error(`${req.method} ${req.url}: ${err.stack ?? err.message}`);
          if (!res.headersSent) sendError(res, 500, ServerErrorCode.InternalError, 'the server failed to answer; see its log');
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
    this.#steps = new StepMetrics(this.metrics);
    const off = host.onStep?.((s) => this.#steps.observeStep(s));
    if (typeof off === 'function') this.#offStep = off;
    this.metrics.setStepCounter(() => host.counters?.steps ?? this.#steps.statsSteps);
    this.metrics.setSnapshotCounters(() => host.counters);
    this.metrics.setLoadGauges(
      () => loadProgressOf(host.status),
      () => host.rankGpuBusy?.() ?? [],
    );
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
    this.#dashboard.start();
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
    return healthOf(this.host, this.#readiness(), this.#instance);
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
    const challenge = bearerChallenge(denial);
    if (challenge !== undefined) res.setHeader('WWW-Authenticate', challenge);
    sendError(res, denial.status, denial.code, denial.message);
  }

  /** Clients held for resume now (their ids). */
  suspendedClients(): string[] {
    return this.#sessions.suspendedClients();
  }

  /** The host's readiness (see `server-health.ts`). */
  #readiness(): Readiness {
    return readinessOf(this.host, this.#closing !== undefined, this.#log, this.#draining);
  }

  /**
   * The instance begins to drain (SIGTERM under a scheduler): from now on `/health/ready` answers
   * 503 `closing` (a new user must be sent elsewhere: a session router checks it before handing
   * the instance out), while the running session and its viewers go on until {@link close}.
   */
  beginDrain(): void {
    this.#draining = true;
  }

  /**
   * Shuts down: stops accepting, sends every client a close frame (1001 "server shutting down",
   * or `options`' code and reason), closes the host (which shuts the app's runner down), and
   * waits for sockets to go. Idempotent (a second call's options are ignored).
   */
  close(options: ServerCloseOptions = {}): Promise<void> {
    this.#closing ??= this.#close(options);
    return this.#closing;
  }

  async #close(options: ServerCloseOptions): Promise<void> {
    if (this.#heartbeat) clearInterval(this.#heartbeat);
    this.#dashboard.stop();
    this.#sessions.close();
    this.#offStep?.();
    this.#offStatus?.();
    const httpClosed = new Promise<void>((resolve) => this.#http.close(() => resolve()));
    const gone = [...this.#connections].map((c) => c.closed);
    for (const c of this.#connections) c.close(options.reason ?? 'server shutting down', options.code);
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
    this.#closeOpus();
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

  /** Every HTTP request, through the route table (see `server-routes.ts`). */
  async #onRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = parseTarget(req.url);
    if (!url) return sendError(res, 400, ServerErrorCode.BadRequest, `cannot parse the request target ${JSON.stringify(req.url)}`);
    const found = this.#routes.match(req.method, url.pathname)?.route.handler;
    if (found?.access === 'self') return found.run(req, res, url);
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('Allow', 'GET, HEAD');
      return sendError(res, 405, ServerErrorCode.MethodNotAllowed, `${req.method} is not supported; every route is GET`);
    }
    // Health is open (no token, any Host): load balancers and orchestrators probe it.
    if (found?.access === 'open') return found.run(req, res, url);
    const auth = await authorize(req, url, this.#policy, this.#sessionKeys);
    if (!auth.ok) return this.#refuse(res, auth.denial);
    if (found) return found.run(req, res, url, auth.grant);
    return notFound(res, url, this.options);
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
    writeHttpError(socket, denial.status, denial.code, denial.message, bearerChallenge(denial));
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
        ...(this.#rtc ? { rtc: this.#rtc } : {}),
        recording: this.#recording,
        onStats: (m) => this.#steps.onStats(m, this.#offStep !== undefined),
        instance: () => this.#instance,
        activity: () => this.#sessions.activity(),
        gone: (c, handle, dropped) => this.#sessions.gone(c, handle, dropped),
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
      const held = resume === undefined ? undefined : this.#sessions.takeHeld(resume, grant);
      if (held) {
        conn.adopt(held);
        return;
      }
      if (resume !== undefined) this.metrics.resumes.inc({ result: 'new_identity' });
      const info: { remoteAddress?: string; userAgent?: string; sessionId?: string } = {};
      if (req.socket.remoteAddress) info.remoteAddress = req.socket.remoteAddress;
      if (req.headers['user-agent']) info.userAgent = req.headers['user-agent'];
      // A session router's id for the session (one id end to end); the host ignores one that is not label-safe.
      const chosen = req.headers[SESSION_ID_HEADER];
      if (typeof chosen === 'string' && chosen !== '') info.sessionId = chosen;
      conn.attach(info, resume !== undefined);
      this.#sessions.admit(conn.id, grant);
    } catch (err) {
      this.#log.error(`the app refused a client: ${(err as Error).stack ?? String(err)}`);
      ws.close(1011, 'the app could not register this client; see the server log');
    }
  }
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
