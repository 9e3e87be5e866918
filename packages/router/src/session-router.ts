/**
 * The stateless session router: `POST /sessions` allocates an instance of the fleet through
 * Agones, `GET /sessions/{id}` finds the instance that holds a session, `DELETE /sessions/{id}`
 * releases it, and `/s/{instance}/...` relays HTTP requests and WebSocket connections to that
 * instance's pod. Lookups read a cache of the fleet's GameServers kept by list + watch (see
 * `gameserver-cache.ts`); allocations are Agones' own. What the router holds beyond the API is
 * only what it saw itself: which instances failed to answer lately (the circuit breaker). Any
 * number of routers can run side by side and one can be replaced at any time.
 */
import { randomUUID } from 'node:crypto';
import {
  Agent,
  STATUS_CODES,
  createServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import { connect as netConnect, type AddressInfo, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Logger } from '@reactor/log';
import { encodeHttpError, httpErrorEnvelope } from '@reactor/protocol';
import { authorize, checkAccess, hostAllowed, originAllowed, type AccessDenial, type AccessPolicy } from '@reactor/server/internal';
import { SessionQueue, type QueueOutcome } from './session-queue.js';
import { RouterError, RouterErrorCode } from './errors.js';
import { RouterMetrics } from './metrics.js';
import { resolveRouterOptions, type ResolvedRouterOptions, type RouterOptions } from './options.js';
import { AgonesRegistry, SESSION_ID_PATTERN, type Instance } from './registry.js';
import { FrameBoundaries, RouterCloseCode, acceptAndClose, clientPingFrame, headEnd, serverCloseFrame } from './ws-relay.js';

/** The header that carries the router's session id to the instance: its session takes that id (one id end to end). */
export const SESSION_ID_HEADER = 'x-reactor-session-id';
/** Allocations in a row that may land on instances the breaker knows unreachable before the router gives up (503). */
const MAX_DEAD_ALLOCATIONS = 3;

/** Path prefix of the routes relayed to an instance: `/s/{instance}/ws`, `/s/{instance}/schema`, ... */
export const INSTANCE_PATH_PREFIX = '/s/';

/** The answer of `POST /sessions` (201) and `GET /sessions/{id}` (200). */
export interface SessionAnswer {
  sessionId: string;
  /** The GameServer's name. */
  instance: string;
  /** The instance's base URL through this router: connect `@reactor/client` to it (its socket is `{url}/ws`). */
  url: string;
  /** The same, as a path on the router (`/s/{instance}`). */
  path: string;
  /**
   * With `tokenKey`: a short-lived token for this instance only (`sid` = the instance), to hand
   * the browser (`connect(url, { token })`); the router's `apiKey` never leaves your backend.
   */
  token?: string;
  /** When `token` expires, ms since the epoch. */
  tokenExpiresAt?: number;
}

/** One line of a `POST /sessions?wait=` stream (202, `application/x-ndjson`). */
export type QueueLine =
  | { state: 'queued'; position: number; estimateS: number | null }
  | ({ state: 'allocated' } & SessionAnswer)
  | { state: 'timeout' | 'failed'; error: { code: RouterErrorCode; message: string } };

/** While a request waits, a line at least this often, ms (keeps idle-cutting proxies from closing the stream). */
export const QUEUE_HEARTBEAT_MS = 10_000;

/** The body of every error answer. */
interface ErrorAnswer {
  error: { code: RouterErrorCode; message: string };
  /** With 429 and 503: the seconds of `Retry-After`. */
  retryAfterS?: number;
}

/** Headers a proxy must not pass on (RFC 9110 section 7.6.1), plus the ones the router sets itself. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  'origin',
]);
/** A GameServer name: a Kubernetes object name. */
const INSTANCE_NAME = /^[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?$/;

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
  readonly #agent = new Agent({ keepAlive: true, maxSockets: 256 });
  readonly #relays = new Set<Duplex>();
  /** The relayed sockets of each instance, by the function that cuts one (when the instance is found gone). */
  readonly #relaysTo = new Map<string, Set<(why: string) => void>>();
  /** Instances that failed a relayed connection or ping lately: name -> until when (`performance.now()`) and why. */
  readonly #breaker = new Map<string, { until: number; why: string; address: string }>();
  readonly #queue: SessionQueue;
  #port = 0;
  #closing: Promise<void> | undefined;
  /** POST /sessions waiting for their GameServerAllocation now. */
  #allocating = 0;
  /** The cache's change count when an allocation last met UnAllocated (nothing free, as far as Agones knew). */
  #fullAt = -1;
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
          this.#cutRelays(name, to === undefined ? 'its GameServer was deleted' : `Agones marked it ${to}`);
        // An instance came back to the fleet: the first waiting request gets it.
        if (to === 'Ready') this.#queue?.kick();
      },
      logger: this.#log,
    });
    this.#queue = new SessionQueue((sessionId) => this.#allocateOnce(sessionId), {
      maxLength: this.options.queueMaxLength,
      pollMs: this.options.queuePollMs,
      onDone: (o) => this.metrics.queueWait.observe({ result: o.kind }, o.waitedMs / 1000),
      onError: (err) => this.#log.warn(`allocating for the waiting line failed (tried again at the next Ready or poll): ${asRouterError(err).message}`),
    });
    this.metrics.queueState = () => ({ length: this.#queue.length, oldestWaitMs: this.#queue.oldestWaitMs() });
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
      this.#queue.close();
      this.registry.stop();
      this.#http.close(() => resolve());
      for (const s of this.#relays) s.destroy();
      this.#http.closeAllConnections();
      this.#agent.destroy();
    });
    return this.#closing;
  }

  async #onRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = parseTarget(req.url);
    if (!url) return this.#sendError(res, 400, RouterErrorCode.BadRequest, `cannot parse the request target ${JSON.stringify(req.url)}`);
    const path = url.pathname;
    // Health is open (no token, any Host): load balancers and orchestrators probe it.
    if (path === '/health/live') return sendJson(res, 200, { status: 'live' });
    if (path === '/health/ready' || path === '/health') return this.#onReady(res);
    if (req.method === 'OPTIONS') return this.#onPreflight(req, res);
    const denial = await this.#access(req, url);
    if (denial) {
      this.metrics.rejected.inc({ reason: denial.reason });
      if (denial.status === 401) res.setHeader('WWW-Authenticate', denial.reason === 'token' ? 'Bearer error="invalid_token"' : 'Bearer');
      req.resume();
      return this.#sendError(res, denial.status, denial.code as RouterErrorCode, denial.message);
    }
    this.#cors(req, res);
    if (path.startsWith(INSTANCE_PATH_PREFIX)) return this.#proxyHttp(req, res, url);
    if (path === '/sessions') {
      req.resume();
      if (req.method !== 'POST') return this.#methodNotAllowed(res, 'POST');
      return this.#onAllocate(req, res);
    }
    const lookup = /^\/sessions\/([^/]+)$/.exec(path);
    if (lookup) {
      req.resume();
      if (req.method === 'DELETE') return this.#onRelease(res, safeDecode(lookup[1]!));
      if (req.method !== 'GET' && req.method !== 'HEAD') return this.#methodNotAllowed(res, 'GET, HEAD, DELETE');
      return this.#onLookup(req, res, safeDecode(lookup[1]!));
    }
    req.resume();
    if (req.method !== 'GET' && req.method !== 'HEAD') return this.#methodNotAllowed(res, 'GET, HEAD');
    if (path === '/metrics') {
      res.setHeader('Content-Type', this.metrics.registry.contentType);
      res.end(await this.metrics.registry.metrics());
      return;
    }
    return this.#sendError(
      res,
      404,
      RouterErrorCode.NotFound,
      `no route ${path}; the router answers POST /sessions, GET and DELETE /sessions/{id}, /s/{instance}/..., /health, /health/live, /health/ready and /metrics`,
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

  /** One allocation for `sessionId`, skipping instances the breaker knows unreachable; `undefined` when none is free. @throws {RouterError} */
  async #allocateOnce(sessionId: string): Promise<Instance | undefined> {
    for (let dead = 0; ; dead++) {
      const outcome = await this.registry.allocate(sessionId);
      if (!outcome.allocated) return undefined;
      const open = this.#openCircuit(outcome.instance);
      if (!open) return outcome.instance;
      // Agones still counts it Ready (its pings have not timed out yet), but it did not answer this router lately.
      this.metrics.deadAllocations.inc();
      this.#log.warn(
        `allocation gave instance ${outcome.instance.name}, which did not answer lately (${open.why}); it stays Allocated to nobody, allocating again`,
      );
      if (dead + 1 >= MAX_DEAD_ALLOCATIONS) {
        throw new RouterError(
          RouterErrorCode.InstanceUnreachable,
          `the last ${MAX_DEAD_ALLOCATIONS} instances allocated did not answer lately (${open.why}); retry after ${this.options.retryAfterS} s`,
        );
      }
    }
  }

  /**
   * `POST /sessions?wait=<s>`: no instance free now, so the request takes its place in the line
   * and the answer (202) streams one JSON line per change, NDJSON: `queued` with its position and
   * estimate, then `allocated` (the 201 body) or `timeout`. Closing the request leaves the line.
   */
  #wait(req: IncomingMessage, res: ServerResponse, waitS: number, role: string): void {
    const sessionId = randomUUID();
    res.statusCode = 202;
    res.setHeader('Content-Type', 'application/x-ndjson; charset=utf-8');
    res.setHeader('Cache-Control', 'no-store');
    // Proxies that buffer answers (nginx) would hold the position lines back.
    res.setHeader('X-Accel-Buffering', 'no');
    res.flushHeaders();
    let last = '';
    const line = (l: QueueLine): void => {
      last = JSON.stringify(l);
      if (!res.writableEnded) res.write(`${last}\n`);
    };
    const ticket = this.#queue.enqueue(sessionId, waitS * 1000, (p) => line({ state: 'queued', position: p.position, estimateS: p.estimateS }));
    const beat = setInterval(() => {
      if (last && !res.writableEnded) res.write(`${last}\n`);
    }, QUEUE_HEARTBEAT_MS);
    beat.unref();
    res.on('close', () => {
      clearInterval(beat);
      if (!res.writableFinished) ticket.cancel();
    });
    void ticket.outcome.then(async (o: QueueOutcome) => {
      clearInterval(beat);
      if (o.kind === 'allocated') {
        this.metrics.allocations.inc({ result: 'allocated' });
        this.#log.info(`session ${o.sessionId} allocated instance ${o.instance.name} after ${Math.round(o.waitedMs)} ms in the line`);
        try {
          line({ state: 'allocated', ...(await this.#answer(req, o.sessionId, o.instance, role)) });
        } catch (err) {
          line({
            state: 'failed',
            error: { code: RouterErrorCode.InternalError, message: `the instance token could not be minted: ${(err as Error).message}` },
          });
        }
      } else if (o.kind === 'timeout') {
        this.metrics.allocations.inc({ result: 'queue_timeout' });
        line({
          state: 'timeout',
          error: { code: RouterErrorCode.QueueTimeout, message: `no instance became free within ${waitS} s; try again later (the fleet may be scaling up)` },
        });
      } else if (o.kind === 'closed') {
        line({ state: 'failed', error: { code: RouterErrorCode.NotReady, message: 'the router is shutting down; ask again (another router takes it)' } });
      }
      res.end();
    });
  }

  /** `POST /sessions`: one GameServerAllocation; 201 with the instance, or 429 when none is Ready (or, with `?wait=`, a place in the line). */
  async #onAllocate(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = parseTarget(req.url)!;
    const role = roleParam(url);
    if (role === undefined) return this.#sendError(res, 400, RouterErrorCode.BadRequest, 'role must be controller or spectator');
    const waitParam = url.searchParams.get('wait');
    let waitS: number | undefined;
    if (waitParam !== null) {
      waitS = /^\d+$/.test(waitParam) ? Number(waitParam) : NaN;
      if (!(waitS >= 1 && waitS <= this.options.queueMaxWaitS)) {
        return this.#sendError(
          res,
          400,
          RouterErrorCode.BadWait,
          `wait must be a whole number of seconds from 1 to ${this.options.queueMaxWaitS} (queueMaxWaitS), got ${JSON.stringify(waitParam.slice(0, 20))}`,
        );
      }
    }
    // Requests already wait: a new one takes its place behind them, never an instance before them.
    if (this.#queue.length > 0) {
      if (waitS === undefined) {
        this.metrics.allocations.inc({ result: 'no_free_instance' });
        this.metrics.noFreeInstance.inc();
        return this.#sendError(
          res,
          429,
          RouterErrorCode.NoFreeInstance,
          `no free instance: ${this.#queue.length} request(s) wait for one; ask with ?wait=<seconds> to take a place in the line, or retry after ${this.options.retryAfterS} s`,
          this.options.retryAfterS,
        );
      }
      if (this.#queue.full) return this.#queueFull(res);
      return this.#wait(req, res, waitS, role);
    }
    const started = performance.now();
    const sessionId = randomUUID();
    const done = (result: string): void => {
      this.metrics.allocations.inc({ result });
      this.metrics.allocationSeconds.observe({ result }, (performance.now() - started) / 1000);
    };
    // The cache says how many instances are free: more allocations in flight than that could only
    // meet UnAllocated; answer those now. One more may ask the API when the cache changed since
    // the last UnAllocated (an instance Ready a moment ago that the watch has not brought yet).
    const free = this.#freeInstances();
    const limit = free === undefined ? Infinity : free + (this.#fullAt === this.registry.cache.changes ? 0 : 1);
    if (this.#allocating >= limit) {
      // A request that may wait takes its place in the line instead (the queue allocates when one frees up).
      if (waitS !== undefined) {
        if (this.#queue.full) return this.#queueFull(res);
        return this.#wait(req, res, waitS, role);
      }
      done('no_free_instance');
      this.metrics.noFreeInstance.inc();
      return this.#sendError(
        res,
        429,
        RouterErrorCode.NoFreeInstance,
        `no free instance: every instance of fleet "${this.options.fleet}" (namespace "${this.options.namespace}") holds a session or is being allocated; retry after ${this.options.retryAfterS} s`,
        this.options.retryAfterS,
      );
    }
    this.#allocating++;
    let instance: Instance | undefined;
    try {
      instance = await this.#allocateOnce(sessionId);
    } catch (err) {
      const e = asRouterError(err);
      done(e.code === RouterErrorCode.AllocationConflict ? 'conflict' : e.code === RouterErrorCode.InstanceUnreachable ? 'unreachable' : 'error');
      this.#log.warn(`POST /sessions failed: ${e.message}`);
      return this.#sendError(res, 503, e.code, e.message, this.options.retryAfterS);
    } finally {
      this.#allocating--;
    }
    if (!instance && waitS !== undefined) {
      if (this.#queue.full) return this.#queueFull(res);
      return this.#wait(req, res, waitS, role);
    }
    if (!instance) {
      this.#fullAt = this.registry.cache.changes;
      done('no_free_instance');
      this.metrics.noFreeInstance.inc();
      return this.#sendError(
        res,
        429,
        RouterErrorCode.NoFreeInstance,
        `no free instance: every instance of fleet "${this.options.fleet}" (namespace "${this.options.namespace}") holds a session; retry after ${this.options.retryAfterS} s`,
        this.options.retryAfterS,
      );
    }
    done('allocated');
    this.#log.info(`session ${sessionId} allocated instance ${instance.name} (${instance.address}:${instance.port})`);
    res.setHeader('Location', `/sessions/${sessionId}`);
    sendJson(res, 201, await this.#answer(req, sessionId, instance, role));
  }

  #queueFull(res: ServerResponse): void {
    this.metrics.allocations.inc({ result: 'queue_full' });
    return this.#sendError(
      res,
      429,
      RouterErrorCode.QueueFull,
      `the waiting line is full (${this.options.queueMaxLength} requests, queueMaxLength); retry after ${this.options.retryAfterS} s`,
      this.options.retryAfterS,
    );
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
      this.#sendError(res, 404, RouterErrorCode.UnknownSession, `${JSON.stringify(sessionId ?? '')} is not a session id (the router's ids are UUIDs)`);
      return undefined;
    }
    let instance: Instance | undefined;
    try {
      instance = await o.find(sessionId);
    } catch (err) {
      o.count('error');
      const e = asRouterError(err);
      this.#sendError(res, 503, e.code, e.message, this.options.retryAfterS);
      return undefined;
    }
    if (!instance) {
      o.count('not_found');
      this.#sendError(res, 404, RouterErrorCode.UnknownSession, `no instance holds session ${sessionId}: ${o.missing}`);
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
    const open = this.#openCircuit(instance);
    if (open) {
      this.metrics.lookups.inc({ result: 'unreachable' });
      return this.#sendError(
        res,
        502,
        RouterErrorCode.InstanceUnreachable,
        `instance ${instance.name}, which holds session ${sessionId}, does not answer (${open.why}): the session is lost; start a new one with POST /sessions`,
      );
    }
    this.metrics.lookups.inc({ result: 'found' });
    const role = roleParam(parseTarget(req.url)!);
    if (role === undefined) return this.#sendError(res, 400, RouterErrorCode.BadRequest, 'role must be controller or spectator');
    sendJson(res, 200, await this.#answer(req, sessionId, instance, role));
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

  /** Ready instances the cache knows that may be handed out (not draining, circuit closed); undefined while the cache is not current. */
  #freeInstances(): number | undefined {
    if (!this.registry.cache.synced || this.registry.cache.lastError !== undefined) return undefined;
    return this.registry.instances().filter((i) => i.state === 'Ready' && !i.draining && !this.#openCircuit(i)).length;
  }

  /** The breaker's entry for an instance while its circuit is open (it failed lately at the same address), else undefined. */
  #openCircuit(instance: Instance): { why: string } | undefined {
    const e = this.#breaker.get(instance.name);
    if (!e) return undefined;
    if (performance.now() > e.until || e.address !== `${instance.address}:${instance.port}`) {
      this.#breaker.delete(instance.name);
      return undefined;
    }
    return e;
  }

  /** Opens an instance's circuit: for `breakerOpenMs` it is given to nobody and its relays answer `instance_unreachable` at once. */
  #trip(instance: Instance, why: string): void {
    if (this.options.breakerOpenMs === 0) return;
    if (!this.#breaker.has(instance.name)) this.metrics.breakerTrips.inc();
    this.#breaker.set(instance.name, { until: performance.now() + this.options.breakerOpenMs, why, address: `${instance.address}:${instance.port}` });
    // Every socket still relayed to it goes the same way: its viewers are told now, not when TCP gives up.
    for (const cut of this.#relaysTo.get(instance.name) ?? []) cut(why);
  }

  /** Cuts every socket relayed to an instance (its viewers get `instance_unreachable` with `why`). */
  #cutRelays(name: string, why: string): void {
    for (const cut of this.#relaysTo.get(name) ?? []) cut(why);
  }

  /** A relay's success closes the instance's circuit. */
  #reset(instance: Instance): void {
    this.#breaker.delete(instance.name);
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
      return this.#sendError(
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

  /** The instance a `/s/{instance}/...` path names, if it holds a session. */
  async #target(path: string): Promise<{ instance: Instance; rest: string }> {
    const m = /^\/s\/([^/]+)(\/.*)?$/.exec(path);
    const name = m ? safeDecode(m[1]!) : undefined;
    if (!m || name === undefined || !INSTANCE_NAME.test(name)) {
      throw new RouterError(
        RouterErrorCode.UnknownInstance,
        `${JSON.stringify(path)} names no instance: the path is /s/{instance}/..., with the instance of POST /sessions`,
      );
    }
    const instance = await this.registry.getInstance(name);
    if (!instance || instance.state !== 'Allocated' || !instance.address || !instance.port) {
      throw new RouterError(
        RouterErrorCode.UnknownInstance,
        `no instance "${name}" holds a session in fleet "${this.options.fleet}"${instance ? ` (it is ${instance.state})` : ''}: its session ended, or it never had one; start a new one with POST /sessions`,
      );
    }
    const open = this.#openCircuit(instance);
    if (open) {
      throw new RouterError(
        RouterErrorCode.InstanceUnreachable,
        `instance ${name} does not answer (${open.why}): its session is lost; start a new one with POST /sessions`,
      );
    }
    return { instance, rest: m[2] ?? '/' };
  }

  /** Relays one HTTP request to the instance (schema, uploads, the viewer page). */
  async #proxyHttp(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    let target;
    try {
      target = await this.#target(url.pathname);
    } catch (err) {
      req.resume();
      const e = asRouterError(err);
      const status = e.code === RouterErrorCode.UnknownInstance ? 404 : e.code === RouterErrorCode.InstanceUnreachable ? 502 : 503;
      this.metrics.proxied.inc({ kind: 'http', result: status === 404 ? 'unknown_instance' : status === 502 ? 'unreachable' : 'error' });
      return this.#sendError(res, status, e.code, e.message);
    }
    const { instance, rest } = target;
    const upstream = httpRequest({
      host: instance.address,
      port: instance.port,
      method: req.method,
      path: rest + url.search,
      headers: this.#forwardedHeaders(req, instance, url.pathname.slice(0, url.pathname.length - rest.length)),
      agent: this.#agent,
    });
    // A pod that is gone without a reset (its node lost, a silent drop) never answers the SYN: give up after relayConnectTimeoutMs.
    const connectTimer = setTimeout(
      () => upstream.destroy(new Error(`no connection within ${this.options.relayConnectTimeoutMs} ms (relayConnectTimeoutMs)`)),
      this.options.relayConnectTimeoutMs,
    );
    upstream.on('socket', (sock: Socket) => {
      if (!sock.connecting) clearTimeout(connectTimer);
      else sock.once('connect', () => clearTimeout(connectTimer));
      sock.setTimeout(this.options.relayIdleTimeoutMs);
    });
    upstream.on('timeout', () => upstream.destroy(new Error(`no byte for ${this.options.relayIdleTimeoutMs} ms (relayIdleTimeoutMs)`)));
    upstream.on('response', (answer) => {
      clearTimeout(connectTimer);
      this.#reset(instance);
      this.metrics.proxied.inc({ kind: 'http', result: 'ok' });
      const headers: Record<string, string | string[]> = {};
      for (const [k, v] of Object.entries(answer.headers)) if (v !== undefined && !HOP_BY_HOP.has(k)) headers[k] = v;
      res.writeHead(answer.statusCode ?? 502, headers);
      answer.pipe(res);
    });
    upstream.on('error', (err) => {
      clearTimeout(connectTimer);
      if (res.headersSent) {
        res.destroy();
        return;
      }
      this.metrics.proxied.inc({ kind: 'http', result: 'unreachable' });
      this.#log.warn(`instance ${instance.name} (${instance.address}:${instance.port}) unreachable: ${err.message}`);
      this.#trip(instance, err.message);
      this.#sendError(
        res,
        502,
        RouterErrorCode.InstanceUnreachable,
        `instance ${instance.name} did not answer: ${err.message}; its pod may be gone: start a new session with POST /sessions`,
      );
    });
    res.on('close', () => {
      clearTimeout(connectTimer);
      if (!res.writableFinished) upstream.destroy();
    });
    req.pipe(upstream);
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
      return writeHttpError(socket, denial.status, denial.code as RouterErrorCode, denial.message);
    }
    if (!url.pathname.startsWith(INSTANCE_PATH_PREFIX)) {
      return writeHttpError(socket, 404, RouterErrorCode.NotFound, `the router relays WebSockets at /s/{instance}/ws, not ${url.pathname}`);
    }
    const key = req.headers['sec-websocket-key'];
    /** Refuses the socket in a way a browser page can read: accepted, then closed with the code and message as its reason. */
    const refuse = (status: number, code: RouterErrorCode, message: string): void => {
      const closeCode = code === RouterErrorCode.UnknownInstance ? RouterCloseCode.UnknownInstance : RouterCloseCode.InstanceUnreachable;
      if (status === 503 || !acceptAndClose(socket, typeof key === 'string' ? key : undefined, closeCode, `${code}: ${message}`)) {
        writeHttpError(socket, status, code, message);
      }
    };
    let target;
    try {
      target = await this.#target(url.pathname);
    } catch (err) {
      const e = asRouterError(err);
      const status = e.code === RouterErrorCode.UnknownInstance ? 404 : e.code === RouterErrorCode.InstanceUnreachable ? 502 : 503;
      this.metrics.proxied.inc({ kind: 'ws', result: status === 404 ? 'unknown_instance' : status === 502 ? 'unreachable' : 'error' });
      return refuse(status, e.code, e.message);
    }
    const { instance, rest } = target;
    const upstream: Socket = netConnect({ host: instance.address, port: instance.port });
    let connected = false;
    let upgraded = false;
    let ended = false;
    upstream.setNoDelay(true);
    const fromClient = new FrameBoundaries();
    const fromInstance = new FrameBoundaries();
    let responseHead: Buffer | undefined = Buffer.alloc(0);
    let lastFromInstance = performance.now();
    let pingSentAt: number | undefined;
    let pingPending = false;
    const connectTimer = setTimeout(() => {
      upstream.destroy(new Error(`no connection within ${this.options.relayConnectTimeoutMs} ms (relayConnectTimeoutMs)`));
    }, this.options.relayConnectTimeoutMs);
    const end = (): void => {
      if (ended) return;
      ended = true;
      clearTimeout(connectTimer);
      clearInterval(pinger);
      this.#relays.delete(socket);
      const set = this.#relaysTo.get(instance.name);
      set?.delete(cut);
      if (set?.size === 0) this.#relaysTo.delete(instance.name);
      if (connected) this.metrics.openSockets.dec();
      upstream.destroy();
      socket.destroy();
    };
    /** The instance is gone: the viewer gets a close frame that says so (if the instance was between frames), then the socket ends. */
    const cut = (why: string): void => {
      if (ended) return;
      if (upgraded && fromInstance.atBoundary) {
        socket.end(
          serverCloseFrame(RouterCloseCode.InstanceUnreachable, `${RouterErrorCode.InstanceUnreachable}: instance ${instance.name} stopped answering (${why})`),
        );
      }
      this.metrics.relaysCut.inc();
      upstream.destroy();
      setTimeout(end, 200).unref();
    };
    const pinger = setInterval(
      () => {
        if (!upgraded || ended) return;
        const now = performance.now();
        if (pingSentAt !== undefined) {
          if (now - pingSentAt > this.options.relayPingTimeoutMs) {
            const why = `no answer to a ping within ${this.options.relayPingTimeoutMs} ms`;
            this.#log.warn(`instance ${instance.name} (${instance.address}:${instance.port}): ${why}; closing its relayed sockets`);
            this.#trip(instance, why);
            cut(why);
          }
          return;
        }
        if (now - lastFromInstance < this.options.relayPingIntervalMs) return;
        pingSentAt = now;
        if (fromClient.atBoundary) upstream.write(clientPingFrame());
        else pingPending = true;
      },
      Math.max(5, Math.min(this.options.relayPingIntervalMs, this.options.relayPingTimeoutMs) / 4),
    );
    pinger.unref();
    this.#relays.add(socket);
    let set = this.#relaysTo.get(instance.name);
    if (!set) this.#relaysTo.set(instance.name, (set = new Set()));
    set.add(cut);

    upstream.once('connect', () => {
      clearTimeout(connectTimer);
      connected = true;
      this.metrics.proxied.inc({ kind: 'ws', result: 'ok' });
      this.metrics.openSockets.inc();
      const headers = this.#forwardedHeaders(req, instance, url.pathname.slice(0, url.pathname.length - rest.length));
      const lines = [`${req.method ?? 'GET'} ${rest}${url.search} HTTP/1.1`, 'Connection: Upgrade', `Upgrade: ${req.headers.upgrade ?? 'websocket'}`];
      for (const [k, v] of Object.entries(headers)) for (const one of Array.isArray(v) ? v : [v]) lines.push(`${k}: ${one}`);
      upstream.write(`${lines.join('\r\n')}\r\n\r\n`);
      if (head.length > 0) {
        fromClient.push(head);
        upstream.write(head);
      }
      socket.on('data', (chunk: Buffer) => {
        const ends = fromClient.push(chunk);
        let out = chunk;
        if (pingPending && ends.length > 0) {
          // Put the ping right after the first frame that ends in this chunk.
          pingPending = false;
          const at = ends[0]!;
          upstream.write(chunk.subarray(0, at));
          upstream.write(clientPingFrame());
          out = chunk.subarray(at);
        }
        if (out.length > 0 && !upstream.write(out)) socket.pause();
      });
      upstream.on('drain', () => socket.resume());
      socket.on('drain', () => upstream.resume());
      upstream.on('data', (chunk: Buffer) => {
        lastFromInstance = performance.now();
        pingSentAt = undefined;
        let frames = chunk;
        if (responseHead !== undefined) {
          // The instance's answer to the upgrade first; frames follow a 101 only.
          responseHead = Buffer.concat([responseHead, chunk]);
          const at = headEnd(responseHead);
          if (at < 0) {
            if (!socket.write(chunk)) upstream.pause();
            return;
          }
          upgraded = responseHead.subarray(0, 12).toString('latin1').startsWith('HTTP/1.1 101');
          if (upgraded) this.#reset(instance);
          frames = responseHead.subarray(at);
          responseHead = undefined;
        }
        if (upgraded && frames.length > 0) fromInstance.push(frames);
        if (!socket.write(chunk)) upstream.pause();
      });
    });
    upstream.on('error', (err) => {
      if (!connected) {
        clearTimeout(connectTimer);
        this.metrics.proxied.inc({ kind: 'ws', result: 'unreachable' });
        this.#log.warn(`instance ${instance.name} (${instance.address}:${instance.port}) unreachable: ${err.message}`);
        this.#trip(instance, err.message);
        ended = true;
        clearInterval(pinger);
        this.#relays.delete(socket);
        this.#relaysTo.get(instance.name)?.delete(cut);
        refuse(
          502,
          RouterErrorCode.InstanceUnreachable,
          `instance ${instance.name} did not accept the connection: ${err.message}; start a new session with POST /sessions`,
        );
        return;
      }
      end();
    });
    upstream.on('close', () => {
      if (connected) end();
    });
    socket.on('close', end);
  }

  /** The headers of a relayed request, with the session id of the instance (the router's id becomes the session's). */
  #forwardedHeaders(req: IncomingMessage, instance: Instance, prefix: string): Record<string, string | string[]> {
    const out = forwardedHeaders(req, instance, this.#publicBase(req), prefix);
    delete out[SESSION_ID_HEADER];
    if (instance.sessionId) out[SESSION_ID_HEADER] = instance.sessionId;
    return out;
  }

  #methodNotAllowed(res: ServerResponse, allow: string): void {
    res.setHeader('Allow', allow);
    this.#sendError(res, 405, RouterErrorCode.MethodNotAllowed, `this route takes ${allow}`);
  }

  #sendError(res: ServerResponse, status: number, code: RouterErrorCode, message: string, retryAfterS?: number): void {
    const body: ErrorAnswer = httpErrorEnvelope(code, message);
    if (retryAfterS !== undefined) {
      res.setHeader('Retry-After', String(retryAfterS));
      body.retryAfterS = retryAfterS;
    }
    sendJson(res, status, body);
  }

  #internalError(res: ServerResponse, err: unknown): void {
    this.#log.error(`request failed: ${(err as Error)?.stack ?? String(err)}`);
    if (res.headersSent) {
      res.destroy();
      return;
    }
    this.#sendError(res, 500, RouterErrorCode.InternalError, 'the router failed to answer; its log has the details');
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

/** The headers of a relayed request: the client's, less hop-by-hop ones and `Origin` (checked here), plus `X-Forwarded-*`. */
function forwardedHeaders(req: IncomingMessage, instance: Instance, publicBase: string, prefix: string): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const h: IncomingHttpHeaders = req.headers;
  for (const [k, v] of Object.entries(h)) {
    if (v === undefined || HOP_BY_HOP.has(k) || k.startsWith('x-forwarded-')) continue;
    out[k] = v;
  }
  out['host'] = `${instance.address.includes(':') ? `[${instance.address}]` : instance.address}:${instance.port}`;
  const prior = req.headers['x-forwarded-for'];
  const peer = req.socket.remoteAddress ?? '';
  out['x-forwarded-for'] = prior ? `${String(prior)}, ${peer}` : peer;
  const base = new URL(publicBase);
  out['x-forwarded-proto'] = base.protocol.replace(':', '');
  out['x-forwarded-host'] = base.host;
  out['x-forwarded-prefix'] = prefix;
  return out;
}

function asRouterError(err: unknown): RouterError {
  return err instanceof RouterError ? err : new RouterError(RouterErrorCode.InternalError, (err as Error)?.message ?? String(err), { cause: err });
}

function safeDecode(s: string): string | undefined {
  try {
    return decodeURIComponent(s);
  } catch {
    return undefined;
  }
}

function parseTarget(target: string | undefined): URL | null {
  try {
    return new URL(target ?? '/', 'http://localhost');
  } catch {
    return null;
  }
}

/** The `role` of a session request (default `controller`); `undefined` for another value. */
function roleParam(url: URL): string | undefined {
  const role = url.searchParams.get('role') ?? 'controller';
  return role === 'controller' || role === 'spectator' ? role : undefined;
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(text));
  res.setHeader('Cache-Control', 'no-store');
  res.end(text);
}

function writeHttpError(socket: Duplex, status: number, code: RouterErrorCode, message: string): void {
  const body = encodeHttpError(code, message);
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Error'}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${status === 401 ? 'WWW-Authenticate: Bearer\r\n' : ''}\r\n${body}`,
  );
}
