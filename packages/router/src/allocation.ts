/**
 * `POST /sessions`: one GameServerAllocation per request (skipping instances the breaker knows
 * unreachable), answered 201, or 429 when none is free, or, with `?wait=`, a place in the waiting
 * line whose answer streams one NDJSON line per change.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '@reactor/log';
import { parseTarget, wholeNumberParam } from '@reactor/access';
import { asRouterError, sendRouterError, sendRouterJson as sendJson } from './answers.js';
import { RouterError, RouterErrorCode } from './errors.js';
import type { RouterMetrics } from './metrics.js';
import type { ResolvedRouterOptions } from './options.js';
import type { AgonesRegistry, Instance } from './registry.js';
import { checkInstance } from './instance-check.js';
import { SessionQueue, type QueueOutcome } from './session-queue.js';

/** Allocations in a row that may land on instances that cannot take a user (circuit open, not ready, no answer) before the router gives up (503). */
const MAX_DEAD_ALLOCATIONS = 3;

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

/**
 * Work between an allocation and its answer (a fork hands the new instance its snapshot):
 * a refusal to answer instead, or undefined when the answer may go out (with `extra` fields).
 */
export type AllocationPrepare = (
  instance: Instance,
  sessionId: string,
) => Promise<{ refusal?: { status: number; code: RouterErrorCode; message: string }; extra?: Record<string, unknown> }>;

/** While a request waits, a line at least this often, ms (keeps idle-cutting proxies from closing the stream). */
export const QUEUE_HEARTBEAT_MS = 10_000;

/** What the allocator needs from the router. */
export interface AllocatorContext {
  options: ResolvedRouterOptions;
  metrics: RouterMetrics;
  log: Logger;
  registry: AgonesRegistry;
  /** The breaker's entry while an instance's circuit is open. */
  openCircuit(instance: Instance): { why: string } | undefined;
  /** Opens an instance's circuit (it did not answer the router's check). */
  trip(instance: Instance, why: string): void;
  /** The answer naming `instance` for `sessionId` (with an instance token when configured). */
  answer(req: IncomingMessage, sessionId: string, instance: Instance, role: string): Promise<SessionAnswer>;
  /** The request's `role` (default `controller`); undefined for another value. */
  role(url: URL): string | undefined;
}

/** `POST /sessions` and the waiting line. */
export class SessionAllocator {
  readonly #c: AllocatorContext;
  /** Requests waiting for an instance (`?wait=`). */
  readonly queue: SessionQueue;
  /** POST /sessions waiting for their GameServerAllocation now. */
  #allocating = 0;
  /** The cache's change count when an allocation last met UnAllocated (nothing free, as far as Agones knew). */
  #fullAt = -1;

  constructor(c: AllocatorContext) {
    this.#c = c;
    this.queue = new SessionQueue((sessionId) => this.#allocateOnce(sessionId), {
      maxLength: c.options.queueMaxLength,
      pollMs: c.options.queuePollMs,
      onDone: (o) => c.metrics.queueWait.observe({ result: o.kind }, o.waitedMs / 1000),
      onError: (err) => c.log.warn(`allocating for the waiting line failed (tried again at the next Ready or poll): ${asRouterError(err).message}`),
    });
  }

  /**
   * One allocation for `sessionId`, handing out only an instance that this router saw answer:
   * one whose circuit is closed and (with `allocationCheckTimeoutMs`) whose `/health/ready` says
   * 200 now; `undefined` when none is free.
   * @throws {RouterError} `instance_unreachable` after {@link MAX_DEAD_ALLOCATIONS} unusable instances in a row.
   */
  async #allocateOnce(sessionId: string): Promise<Instance | undefined> {
    for (let dead = 0; ; dead++) {
      const outcome = await this.#c.registry.allocate(sessionId);
      if (!outcome.allocated) return undefined;
      const instance = outcome.instance;
      const open = this.#c.openCircuit(instance);
      let why: string | undefined = open ? `it did not answer lately (${open.why})` : undefined;
      if (!open && this.#c.options.allocationCheckTimeoutMs > 0) {
        // Agones' view lags: a draining label lands after the sidecar's rate limit, a hung or stalled
        // instance turns Unhealthy after the health check's period. The instance's own answer does not.
        const check = await checkInstance(instance, this.#c.options.allocationCheckTimeoutMs);
        if (!check.ok) {
          why = check.why;
          if (!check.answered) this.#c.trip(instance, check.why);
        }
      }
      if (why === undefined) return instance;
      this.#c.metrics.deadAllocations.inc();
      this.#c.log.warn(`allocation gave instance ${instance.name}, which cannot take a user: ${why}; it stays Allocated to nobody, allocating again`);
      if (dead + 1 >= MAX_DEAD_ALLOCATIONS) {
        throw new RouterError(
          RouterErrorCode.InstanceUnreachable,
          `the last ${MAX_DEAD_ALLOCATIONS} instances allocated could not take a user (the last: ${why}); retry after ${this.#c.options.retryAfterS} s`,
        );
      }
    }
  }

  /**
   * One allocation for `sessionId` now, ahead of the waiting line (a moved session outranks a new one).
   * @throws {RouterError} as the allocation does
   */
  allocateFor(sessionId: string): Promise<Instance | undefined> {
    return this.#allocateOnce(sessionId);
  }

  /**
   * `POST /sessions?wait=<s>`: no instance free now, so the request takes its place in the line
   * and the answer (202) streams one JSON line per change, NDJSON: `queued` with its position and
   * estimate, then `allocated` (the 201 body) or `timeout`. Closing the request leaves the line.
   */
  #wait(req: IncomingMessage, res: ServerResponse, waitS: number, role: string, prepare?: AllocationPrepare): void {
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
    const ticket = this.queue.enqueue(sessionId, waitS * 1000, (p) => line({ state: 'queued', position: p.position, estimateS: p.estimateS }));
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
        this.#c.metrics.allocations.inc({ result: 'allocated' });
        this.#c.log.info(`session ${o.sessionId} allocated instance ${o.instance.name} after ${Math.round(o.waitedMs)} ms in the line`);
        try {
          const ready = prepare ? await prepare(o.instance, o.sessionId) : {};
          if (ready.refusal) {
            line({ state: 'failed', error: { code: ready.refusal.code, message: ready.refusal.message } });
            res.end();
            return;
          }
          line({ state: 'allocated', ...(await this.#c.answer(req, o.sessionId, o.instance, role)), ...ready.extra });
        } catch (err) {
          line({
            state: 'failed',
            error: { code: RouterErrorCode.InternalError, message: `the instance token could not be minted: ${(err as Error).message}` },
          });
        }
      } else if (o.kind === 'timeout') {
        this.#c.metrics.allocations.inc({ result: 'queue_timeout' });
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
  async handle(req: IncomingMessage, res: ServerResponse, prepare?: AllocationPrepare): Promise<void> {
    const url = parseTarget(req.url)!;
    const role = this.#c.role(url);
    if (role === undefined) return sendRouterError(res, 400, RouterErrorCode.BadRequest, 'role must be controller or spectator');
    const waitParam = url.searchParams.get('wait');
    const waitS = wholeNumberParam(url, 'wait');
    if (waitParam !== null && waitS !== undefined) {
      if (!(waitS >= 1 && waitS <= this.#c.options.queueMaxWaitS)) {
        return sendRouterError(
          res,
          400,
          RouterErrorCode.BadWait,
          `wait must be a whole number of seconds from 1 to ${this.#c.options.queueMaxWaitS} (queueMaxWaitS), got ${JSON.stringify(waitParam.slice(0, 20))}`,
        );
      }
    }
    // Requests already wait: a new one takes its place behind them, never an instance before them.
    if (this.queue.length > 0) {
      if (waitS === undefined) {
        this.#c.metrics.allocations.inc({ result: 'no_free_instance' });
        this.#c.metrics.noFreeInstance.inc();
        return sendRouterError(
          res,
          429,
          RouterErrorCode.NoFreeInstance,
          `no free instance: ${this.queue.length} request(s) wait for one; ask with ?wait=<seconds> to take a place in the line, or retry after ${this.#c.options.retryAfterS} s`,
          this.#c.options.retryAfterS,
        );
      }
      if (this.queue.full) return this.#queueFull(res);
      return this.#wait(req, res, waitS, role, prepare);
    }
    const started = performance.now();
    const sessionId = randomUUID();
    const done = (result: string): void => {
      this.#c.metrics.allocations.inc({ result });
      this.#c.metrics.allocationSeconds.observe({ result }, (performance.now() - started) / 1000);
    };
    // The cache says how many instances are free: more allocations in flight than that could only
    // meet UnAllocated; answer those now. One more may ask the API when the cache changed since
    // the last UnAllocated (an instance Ready a moment ago that the watch has not brought yet).
    const free = this.#freeInstances();
    const limit = free === undefined ? Infinity : free + (this.#fullAt === this.#c.registry.cache.changes ? 0 : 1);
    if (this.#allocating >= limit) {
      // A request that may wait takes its place in the line instead (the queue allocates when one frees up).
      if (waitS !== undefined) {
        if (this.queue.full) return this.#queueFull(res);
        return this.#wait(req, res, waitS, role, prepare);
      }
      done('no_free_instance');
      this.#c.metrics.noFreeInstance.inc();
      return sendRouterError(
        res,
        429,
        RouterErrorCode.NoFreeInstance,
        `no free instance: every instance of fleet "${this.#c.options.fleet}" (namespace "${this.#c.options.namespace}") holds a session or is being allocated; retry after ${this.#c.options.retryAfterS} s`,
        this.#c.options.retryAfterS,
      );
    }
    this.#allocating++;
    let instance: Instance | undefined;
    try {
      instance = await this.#allocateOnce(sessionId);
    } catch (err) {
      const e = asRouterError(err);
      done(e.code === RouterErrorCode.AllocationConflict ? 'conflict' : e.code === RouterErrorCode.InstanceUnreachable ? 'unreachable' : 'error');
      this.#c.log.warn(`POST /sessions failed: ${e.message}`);
      return sendRouterError(res, 503, e.code, e.message, this.#c.options.retryAfterS);
    } finally {
      this.#allocating--;
    }
    if (!instance && waitS !== undefined) {
      if (this.queue.full) return this.#queueFull(res);
      return this.#wait(req, res, waitS, role, prepare);
    }
    if (!instance) {
      this.#fullAt = this.#c.registry.cache.changes;
      done('no_free_instance');
      this.#c.metrics.noFreeInstance.inc();
      return sendRouterError(
        res,
        429,
        RouterErrorCode.NoFreeInstance,
        `no free instance: every instance of fleet "${this.#c.options.fleet}" (namespace "${this.#c.options.namespace}") holds a session; retry after ${this.#c.options.retryAfterS} s`,
        this.#c.options.retryAfterS,
      );
    }
    done('allocated');
    this.#c.log.info(`session ${sessionId} allocated instance ${instance.name} (${instance.address}:${instance.port})`);
    const ready = prepare ? await prepare(instance, sessionId) : {};
    if (ready.refusal) return sendRouterError(res, ready.refusal.status, ready.refusal.code, ready.refusal.message);
    res.setHeader('Location', `/sessions/${sessionId}`);
    sendJson(res, 201, { ...(await this.#c.answer(req, sessionId, instance, role)), ...ready.extra });
  }

  #queueFull(res: ServerResponse): void {
    this.#c.metrics.allocations.inc({ result: 'queue_full' });
    return sendRouterError(
      res,
      429,
      RouterErrorCode.QueueFull,
      `the waiting line is full (${this.#c.options.queueMaxLength} requests, queueMaxLength); retry after ${this.#c.options.retryAfterS} s`,
      this.#c.options.retryAfterS,
    );
  }

  /** Ready instances the cache knows that may be handed out (not draining, circuit closed); undefined while the cache is not current. */
  #freeInstances(): number | undefined {
    if (!this.#c.registry.cache.synced || this.#c.registry.cache.lastError !== undefined) return undefined;
    return this.#c.registry.instances().filter((i) => i.state === 'Ready' && !i.draining && !this.#c.openCircuit(i)).length;
  }
}
