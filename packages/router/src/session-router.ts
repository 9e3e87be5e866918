/**
 * The stateless session router: `POST /sessions` allocates an instance of the fleet through
 * Agones, `GET /sessions/{id}` finds the instance that holds a session, `DELETE /sessions/{id}`
 * releases it, and `/s/{instance}/...` relays HTTP requests and WebSocket connections to that
 * instance's pod. Lookups read a cache of the fleet's GameServers kept by list + watch (see
 * `gameserver-cache.ts`); allocations are Agones' own. What the router holds beyond the API is
 * only what it saw itself: which instances failed to answer lately (the circuit breaker). Any
 * number of routers can run side by side and one can be replaced at any time.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Duplex } from 'node:stream';
import type { Logger } from '@reactor/log';
import {
  authorize,
  bearerChallenge,
  checkAccess,
  hostAllowed,
  oneOfParam,
  originAllowed,
  parseTarget,
  safeDecode,
  writeHttpError,
  type AccessDenial,
  type AccessPolicy,
} from '@reactor/access';
import { asRouterError, sendRouterError, sendRouterJson as sendJson } from './answers.js';
import { RouterErrorCode } from './errors.js';
import { RouterMetrics } from './metrics.js';
import { resolveRouterOptions, type ResolvedRouterOptions, type RouterOptions } from './options.js';
import { AgonesRegistry, SESSION_ID_PATTERN, type Instance } from './registry.js';
import { InstanceRelay } from './relay.js';
import { SessionAllocator, type SessionAnswer } from './allocation.js';
import { forkSession } from './fork.js';
import { moveSession, movedReason } from './move.js';
import { RouterCloseCode } from './ws-relay.js';

export { SESSION_ID_HEADER } from './relay.js';
export { QUEUE_HEARTBEAT_MS } from './allocation.js';
export type { SessionAnswer, QueueLine } from './allocation.js';
/** Path prefix of the routes relayed to an instance: `/s/{instance}/ws`, `/s/{instance}/schema`, ... */
export const INSTANCE_PATH_PREFIX = '/s/';

/**
 * The router. Create it with {@link route} (or `new SessionRouter(options).listen()`).
 * @example
 * const { kubeConfig, namespace } = loadKubeConfig();
 * const router = await route({ kubeConfig, namespace, fleet: 'reactor', port: 8090 });
 */
export class SessionRouter {
  readonly options: ResolvedRouterOptions;
  readonly metrics = new RouterMetrics();
  readonly registry: AgonesRegistry;
  readonly #http: Server;
  readonly #log: Logger;
  readonly #policy: AccessPolicy;
  /** `/s/{instance}/...`: relayed requests and sockets, and the circuit breaker. */
  readonly #relay: InstanceRelay;
  /** `POST /sessions` and its waiting line. */
  readonly #alloc: SessionAllocator;
  #port = 0;
  /** This router's id in move claims (several routers may watch one fleet). */
  readonly #routerId = `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
  #closing: Promise<void> | undefined;
  #readyCheck: { at: number; result: Promise<string | undefined> } | undefined;

  /** @throws {RangeError | TypeError} for a bad option (see {@link resolveRouterOptions}). */
  constructor(options: RouterOptions) {
    this.options = resolveRouterOptions(options);
    this.#log = this.options.logger.child({ component: 'router' });
    this.#policy = { token: this.options.token, allowedHosts: this.options.allowedHosts, allowedOrigins: this.options.allowedOrigins };
    this.registry = new AgonesRegistry(this.options.kubeConfig, {
      namespace: this.options.namespace,
      fleet: this.options.fleet,
      conflictRetries: this.options.conflictRetries,
      conflictBackoffMs: this.options.conflictBackoffMs,
      onConflict: () => this.metrics.conflicts.inc(),
      apiTimeoutMs: this.options.apiTimeoutMs,
      resyncMs: this.options.resyncMs,
      onStateChange: (name, _from, to) => {
        if (to === 'Unhealthy') this.metrics.unhealthy.inc();
        // Agones gave up on it (or its GameServer is gone): its viewers are told now, whatever TCP says.
        if (to === 'Unhealthy' || to === 'Shutdown' || to === undefined)
          this.#relay.cutRelays(name, to === undefined ? 'its GameServer was deleted' : `Agones marked it ${to}`);
        // An instance came back to the fleet: the first waiting request gets it.
        if (to === 'Ready') this.#alloc?.queue.kick();
      },
      // SIGTERM on an instance with a session: move it, where the app takes snapshots.
      onDraining: (instance) => {
        if (!this.options.moveOnDrain) {
          this.#log.info(`instance ${instance.name} drains; moveOnDrain is off (--no-move), so its session stays to its drain deadline`);
          return;
        }
        void moveSession(
          {
            log: this.#log,
            registry: this.registry,
            allocator: this.#alloc,
            token: this.options.token,
            closeRelays: (name, code, reason) => this.#relay.closeRelays(name, code, reason),
            routerId: this.#routerId,
          },
          instance,
        );
      },
      // A session moved off an instance (by this router or another): the sockets this router relays there follow it.
      onMoved: (instance) => {
        if (instance.movedTo !== undefined) this.#relay.closeRelays(instance.name, RouterCloseCode.SessionMoved, movedReason(instance.movedTo));
      },
      logger: this.#log,
    });
    this.#relay = new InstanceRelay({
      options: this.options,
      metrics: this.metrics,
      log: this.#log,
      registry: this.registry,
      publicBase: (req) => this.#publicBase(req),
    });
    this.#alloc = new SessionAllocator({
      options: this.options,
      metrics: this.metrics,
      log: this.#log,
      registry: this.registry,
      openCircuit: (i) => this.#relay.openCircuit(i),
      trip: (i, why) => this.#relay.trip(i, why),
      answer: (req, sessionId, instance, role) => this.#answer(req, sessionId, instance, role),
      role: roleParam,
    });
    this.metrics.queueState = () => ({ length: this.#alloc.queue.length, oldestWaitMs: this.#alloc.queue.oldestWaitMs() });
    this.metrics.instancesByState = () => {
      const counts = new Map<string, number>();
      for (const i of this.registry.instances()) {
        const state = i.draining && i.state === 'Ready' ? 'draining' : i.state;
        counts.set(state, (counts.get(state) ?? 0) + 1);
      }
      return counts;
    };
    this.#http = createServer({ headersTimeout: this.options.headersTimeoutMs, requestTimeout: 0 }, (req, res) => {
      this.#onRequest(req, res).catch((err: unknown) => this.#internalError(res, err));
    });
    this.#http.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      this.#onUpgrade(req, socket, head).catch((err: unknown) => {
        this.#log.error(`relaying an upgrade failed: ${(err as Error)?.stack ?? String(err)}`);
        socket.destroy();
      });
    });
    this.#http.on('clientError', (_err, socket: Duplex) => {
      if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
      else socket.destroy();
    });
  }

  /**
   * Starts listening.
   * @throws {RouterError} never; the listen error (`EADDRINUSE`, ...) as Node raises it.
   */
  async listen(): Promise<this> {
    await this.#bind();
    // Serve once the fleet is known (lookups from memory), or after one API timeout (lookups then fall back to the API).
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([this.registry.start(), new Promise((r) => (timer = setTimeout(r, this.options.apiTimeoutMs)))]);
    clearTimeout(timer);
    return this;
  }

  #bind(): Promise<this> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => reject(err);
      this.#http.once('error', onError);
      this.#http.listen(this.options.port, this.options.host, () => {
        this.#http.off('error', onError);
        this.#port = (this.#http.address() as AddressInfo).port;
        this.#log.info(`routing sessions of fleet "${this.options.fleet}" (namespace "${this.options.namespace}") at ${this.url}`);
        resolve(this);
      });
    });
  }

  /** The port it listens on (after {@link listen}). */
  get port(): number {
    return this.#port;
  }

  /** The router's own URL, e.g. `http://127.0.0.1:8090`. */
  get url(): string {
    const h = this.options.host.includes(':') ? `[${this.options.host}]` : this.options.host;
    return `http://${h === '0.0.0.0' || h === '[::]' ? '127.0.0.1' : h}:${this.#port}`;
  }

  /** Stops accepting, cuts the relayed sockets (clients reconnect through another router) and closes. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= new Promise<void>((resolve) => {
      this.#alloc.queue.close();
      this.registry.stop();
      this.#http.close(() => resolve());
      this.#relay.close();
      this.#http.closeAllConnections();
    });
    return this.#closing;
  }

  async #onRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = parseTarget(req.url);
    if (!url) return sendRouterError(res, 400, RouterErrorCode.BadRequest, `cannot parse the request target ${JSON.stringify(req.url)}`);
    const path = url.pathname;
    // Health is open (no token, any Host): load balancers and orchestrators probe it.
    if (path === '/health/live') return sendJson(res, 200, { status: 'live' });
    if (path === '/health/ready' || path === '/health') return this.#onReady(res);
    if (req.method === 'OPTIONS') return this.#onPreflight(req, res);
    const denial = await this.#access(req, url);
    if (denial) {
      this.metrics.rejected.inc({ reason: denial.reason });
      const challenge = bearerChallenge(denial);
      if (challenge !== undefined) res.setHeader('WWW-Authenticate', challenge);
      req.resume();
      return sendRouterError(res, denial.status, denial.code as RouterErrorCode, denial.message);
    }
    this.#cors(req, res);
    if (path.startsWith(INSTANCE_PATH_PREFIX)) return this.#relay.http(req, res, url);
    if (path === '/sessions') {
      req.resume();
      if (req.method !== 'POST') return this.#methodNotAllowed(res, 'POST');
      return this.#alloc.handle(req, res);
    }
    const fork = /^\/sessions\/([^/]+)\/fork$/.exec(path);
    if (fork) {
      req.resume();
      if (req.method !== 'POST') return this.#methodNotAllowed(res, 'POST');
      return this.#onFork(req, res, safeDecode(fork[1]!));
    }
    const lookup = /^\/sessions\/([^/]+)$/.exec(path);
    if (lookup) {
      req.resume();
      if (req.method === 'DELETE') return this.#onRelease(res, safeDecode(lookup[1]!));
      if (req.method !== 'GET' && req.method !== 'HEAD') return this.#methodNotAllowed(res, 'GET, HEAD, DELETE');
      return this.#onLookup(req, res, safeDecode(lookup[1]!));
    }
    const drain = /^\/instances\/([^/]+)$/.exec(path);
    if (drain) {
      req.resume();
      if (req.method !== 'DELETE') return this.#methodNotAllowed(res, 'DELETE');
      return this.#onDrain(res, safeDecode(drain[1]!));
    }
    req.resume();
    if (req.method !== 'GET' && req.method !== 'HEAD') return this.#methodNotAllowed(res, 'GET, HEAD');
    if (path === '/metrics') {
      res.setHeader('Content-Type', this.metrics.registry.contentType);
      res.end(await this.metrics.registry.metrics());
      return;
    }
    return sendRouterError(
      res,
      404,
      RouterErrorCode.NotFound,
      `no route ${path}; the router answers POST /sessions, GET and DELETE /sessions/{id}, POST /sessions/{id}/fork, DELETE /instances/{name}, /s/{instance}/..., /health, /health/live, /health/ready and /metrics`,
    );
  }

  /**
   * Who may use a route: relayed routes (`/s/{instance}/...`) take the static token or, with
   * `tokenKey`, an instance token for that instance (checked as the instance checks it); the
   * router's own routes take the `apiKey` when one is set (else the static token).
   */
  async #access(req: IncomingMessage, url: URL): Promise<AccessDenial | undefined> {
    const relay = url.pathname.startsWith(INSTANCE_PATH_PREFIX);
    const o = this.options;
    if (relay && o.verifier) {
      const name = safeDecode(/^\/s\/([^/]+)/.exec(url.pathname)?.[1] ?? '') ?? '';
      const auth = await authorize(req, url, { ...this.#policy, verifier: o.verifier }, () => [name]);
      return auth.ok ? undefined : auth.denial;
    }
    if (relay && o.apiKey !== undefined && o.token === undefined) {
      // The instance checks its own token; the router's key is not for browsers.
      return checkAccess(req, url, { ...this.#policy, token: undefined });
    }
    if (!relay && o.apiKey !== undefined) {
      const withKey = checkAccess(req, url, { ...this.#policy, token: o.apiKey });
      if (!withKey || o.token === undefined) {
        return withKey && withKey.code === RouterErrorCode.Unauthorized
          ? {
              ...withKey,
              message:
                'missing or wrong API key: your backend calls the router with "Authorization: Bearer <apiKey>"; browsers get an instance token from its answer instead',
            }
          : withKey;
      }
    }
    return checkAccess(req, url, this.#policy);
  }

  /**
   * The instance `find` gives for a session id, for `GET` and `DELETE /sessions/{id}`; undefined
   * once the refusal is sent: 404 for an id that is no UUID or that no instance holds, 503 when
   * the API fails. `count` records the outcome (`countBadId`: a malformed id counts as not_found).
   */
  async #sessionInstance(
    res: ServerResponse,
    sessionId: string | undefined,
    o: { find: (id: string) => Promise<Instance | undefined>; count: (result: string) => void; countBadId: boolean; missing: string },
  ): Promise<Instance | undefined> {
    if (sessionId === undefined || !SESSION_ID_PATTERN.test(sessionId)) {
      if (o.countBadId) o.count('not_found');
      sendRouterError(res, 404, RouterErrorCode.UnknownSession, `${JSON.stringify(sessionId ?? '')} is not a session id (the router's ids are UUIDs)`);
      return undefined;
    }
    let instance: Instance | undefined;
    try {
      instance = await o.find(sessionId);
    } catch (err) {
      o.count('error');
      const e = asRouterError(err);
      sendRouterError(res, 503, e.code, e.message, this.options.retryAfterS);
      return undefined;
    }
    if (!instance) {
      o.count('not_found');
      sendRouterError(res, 404, RouterErrorCode.UnknownSession, `no instance holds session ${sessionId}: ${o.missing}`);
      return undefined;
    }
    return instance;
  }

  /** `GET /sessions/{id}`: the Allocated instance labelled with the session, or 404. */
  async #onLookup(req: IncomingMessage, res: ServerResponse, sessionId: string | undefined): Promise<void> {
    const instance = await this.#sessionInstance(res, sessionId, {
      find: (id) => this.registry.findSession(id),
      count: (result) => this.metrics.lookups.inc({ result }),
      countBadId: true,
      missing: 'it ended, or never existed; start a new one with POST /sessions',
    });
    if (!instance || sessionId === undefined) return;
    const open = this.#relay.openCircuit(instance);
    if (open) {
      this.metrics.lookups.inc({ result: 'unreachable' });
      return sendRouterError(
        res,
        502,
        RouterErrorCode.InstanceUnreachable,
        `instance ${instance.name}, which holds session ${sessionId}, does not answer (${open.why}): the session is lost; start a new one with POST /sessions`,
      );
    }
    this.metrics.lookups.inc({ result: 'found' });
    const role = roleParam(parseTarget(req.url)!);
    if (role === undefined) return sendRouterError(res, 400, RouterErrorCode.BadRequest, 'role must be controller or spectator');
    sendJson(res, 200, await this.#answer(req, sessionId, instance, role));
  }

  /** `POST /sessions/{id}/fork`: a new session from a snapshot of this one, on another instance (`fork.ts`). */
  async #onFork(req: IncomingMessage, res: ServerResponse, sessionId: string | undefined): Promise<void> {
    const source = await this.#sessionInstance(res, sessionId, {
      find: (id) => this.registry.findSession(id),
      count: (result) => this.metrics.lookups.inc({ result }),
      countBadId: true,
      missing: 'it ended, or never existed; only a running session can be forked',
    });
    if (!source || sessionId === undefined) return;
    return forkSession({ log: this.#log, registry: this.registry, allocator: this.#alloc, token: this.options.token }, req, res, sessionId, source);
  }

  /** `DELETE /sessions/{id}`: asks the instance to end the session and return to the fleet (202), or 404. */
  async #onRelease(res: ServerResponse, sessionId: string | undefined): Promise<void> {
    const instance = await this.#sessionInstance(res, sessionId, {
      find: (id) => this.registry.release(id),
      count: (result) => this.metrics.releases.inc({ result }),
      countBadId: false,
      missing: 'it ended already, or never existed',
    });
    if (!instance) return;
    this.metrics.releases.inc({ result: 'released' });
    this.#log.info(`session ${sessionId} released on instance ${instance.name} (DELETE /sessions)`);
    sendJson(res, 202, { sessionId, instance: instance.name, released: true });
  }

  /**
   * `DELETE /instances/{name}`: drains an instance of the fleet (202), as SIGTERM does: the
   * instance labels itself draining, its session moves (an app with snapshots, `moveOnDrain`)
   * or runs to its drain deadline, and it exits once empty (Agones then replaces it). 404
   * `unknown_instance` for a name the fleet does not have.
   */
  async #onDrain(res: ServerResponse, name: string | undefined): Promise<void> {
    let instance: Instance | undefined;
    try {
      instance = name === undefined || name === '' ? undefined : await this.registry.getInstance(name);
      if (instance && !(await this.registry.drain(instance))) instance = undefined;
    } catch (err) {
      const e = asRouterError(err);
      return sendRouterError(res, 503, e.code, e.message, this.options.retryAfterS);
    }
    if (!instance)
      return sendRouterError(res, 404, RouterErrorCode.UnknownInstance, `fleet "${this.options.fleet}" has no instance ${JSON.stringify(name ?? '')}`);
    const move = instance.sessionId !== undefined && this.options.moveOnDrain;
    this.#log.info(
      `instance ${instance.name} asked to drain (DELETE /instances)${instance.sessionId ? `; its session ${instance.sessionId} moves if its app takes snapshots` : ''}`,
    );
    sendJson(res, 202, { instance: instance.name, draining: true, ...(instance.sessionId !== undefined && { sessionId: instance.sessionId, move }) });
  }

  async #answer(req: IncomingMessage, sessionId: string, instance: Instance, role = 'controller'): Promise<SessionAnswer> {
    const path = `${INSTANCE_PATH_PREFIX}${encodeURIComponent(instance.name)}`;
    const answer: SessionAnswer = { sessionId, instance: instance.name, url: `${this.#publicBase(req)}${path}`, path };
    const minter = this.options.minter;
    if (minter) {
      const ttlS = this.options.instanceTokenTtlS;
      answer.token = await minter.mint({ session: instance.name, role, ttlS, subject: sessionId });
      answer.tokenExpiresAt = Date.now() + ttlS * 1000;
    }
    return answer;
  }

  /** The router's URL as the client reached it: `publicUrl`, else the request's scheme and `Host`. */
  #publicBase(req: IncomingMessage): string {
    if (this.options.publicUrl) return this.options.publicUrl;
    const forwarded = String(req.headers['x-forwarded-proto'] ?? '')
      .split(',')[0]!
      .trim()
      .toLowerCase();
    return `${forwarded === 'https' ? 'https' : 'http'}://${req.headers.host ?? `127.0.0.1:${this.#port}`}`;
  }

  /** Health: ready while the Kubernetes API answers the router (checked at most every `readyCacheMs`). */
  async #onReady(res: ServerResponse): Promise<void> {
    const now = performance.now();
    if (!this.#readyCheck || now - this.#readyCheck.at > this.options.readyCacheMs) {
      this.#readyCheck = {
        at: now,
        result: this.registry.check().then(
          () => undefined,
          (err: unknown) => asRouterError(err).message,
        ),
      };
    }
    const problem = this.#closing ? 'the router is shutting down' : await this.#readyCheck.result;
    if (problem === undefined) return sendJson(res, 200, { ready: true, fleet: this.options.fleet, namespace: this.options.namespace });
    return sendJson(res, 503, { ready: false, error: { code: RouterErrorCode.NotReady, message: `not ready: ${problem}` } });
  }

  /** A CORS preflight: allowed for a permitted Host and Origin (it carries no token, by design of browsers). */
  #onPreflight(req: IncomingMessage, res: ServerResponse): void {
    req.resume();
    if (!hostAllowed(req, this.options.allowedHosts) || !originAllowed(req, this.options.allowedOrigins)) {
      this.metrics.rejected.inc({ reason: hostAllowed(req, this.options.allowedHosts) ? 'origin' : 'host' });
      return sendRouterError(
        res,
        403,
        RouterErrorCode.OriginNotAllowed,
        `origin ${JSON.stringify(req.headers.origin ?? '')} may not use this router; add it to allowedOrigins`,
      );
    }
    this.#cors(req, res);
    res.setHeader('Access-Control-Allow-Methods', 'GET, HEAD, POST, PUT, DELETE');
    res.setHeader('Access-Control-Allow-Headers', 'Authorization, Content-Type');
    res.setHeader('Access-Control-Max-Age', '600');
    res.statusCode = 204;
    res.end();
  }

  /** Lets an allowed browser origin read the answer (the access check ran before). */
  #cors(req: IncomingMessage, res: ServerResponse): void {
    const origin = req.headers.origin;
    if (!origin) return;
    res.setHeader('Access-Control-Allow-Origin', origin);
    res.setHeader('Access-Control-Expose-Headers', 'Retry-After, Location');
    res.setHeader('Vary', 'Origin');
  }

  /**
   * Relays a WebSocket upgrade on `/s/{instance}/...` to the instance's pod, byte for byte, with
   * a connect timeout and the router's own pings: when the instance sent nothing for
   * `relayPingIntervalMs` the router puts a ping between two of the client's frames, and when no
   * byte follows within `relayPingTimeoutMs` it closes the viewer's socket with
   * `instance_unreachable` (and opens the instance's circuit) instead of letting it freeze.
   */
  async #onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    socket.on('error', () => socket.destroy());
    const url = parseTarget(req.url);
    if (!url) return writeHttpError(socket, 400, RouterErrorCode.BadRequest, `cannot parse the request target ${JSON.stringify(req.url)}`);
    if (this.#closing) return writeHttpError(socket, 503, RouterErrorCode.NotReady, 'the router is shutting down; connect again');
    const denial = await this.#access(req, url);
    if (denial) {
      this.metrics.rejected.inc({ reason: denial.reason });
      return writeHttpError(socket, denial.status, denial.code as RouterErrorCode, denial.message, bearerChallenge(denial));
    }
    if (!url.pathname.startsWith(INSTANCE_PATH_PREFIX)) {
      return writeHttpError(socket, 404, RouterErrorCode.NotFound, `the router relays WebSockets at /s/{instance}/ws, not ${url.pathname}`);
    }
    return this.#relay.upgrade(req, socket, head, url);
  }

  #methodNotAllowed(res: ServerResponse, allow: string): void {
    res.setHeader('Allow', allow);
    sendRouterError(res, 405, RouterErrorCode.MethodNotAllowed, `this route takes ${allow}`);
  }

  #internalError(res: ServerResponse, err: unknown): void {
    this.#log.error(`request failed: ${(err as Error)?.stack ?? String(err)}`);
    if (res.headersSent) {
      res.destroy();
      return;
    }
    sendRouterError(res, 500, RouterErrorCode.InternalError, 'the router failed to answer; its log has the details');
  }
}

/**
 * Creates a router and starts listening.
 * @throws {RangeError | TypeError} for a bad option; the listen error (`EADDRINUSE`) as Node raises it.
 * @example
 * const router = await route({ kubeConfig: loadKubeConfig().kubeConfig, fleet: 'reactor' });
 */
export function route(options: RouterOptions): Promise<SessionRouter> {
  return new SessionRouter(options).listen();
}

/** The `role` of a session request (default `controller`); `undefined` for another value. */
function roleParam(url: URL): string | undefined {
  return oneOfParam(url, 'role', ['controller', 'spectator'], 'controller');
}
