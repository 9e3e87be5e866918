/**
 * Asking a session router (`reactor route`) for an instance: `POST /sessions` for a new session,
 * `GET /sessions/{id}` to join one. Browser-safe (`fetch` and timers only).
 */
import { ClientErrorCode, ConnectionError, SessionRouteError } from './base/errors.js';
import { HttpErrorCode, parseJsonText, readHttpError } from './base/protocol.js';

/** Where a session lives, as the router answered. */
export interface SessionRoute {
  /** The session's id: give it to others so they join with `connect(routerUrl, { session: id })`. */
  sessionId: string;
  /** The instance (GameServer) that holds it. */
  instance: string;
  /** The instance's base URL through the router (its socket is `{url}/ws`). */
  url: string;
  /** A short-lived token for this instance, when the router mints them (`connect()` uses it for the instance). */
  token?: string;
}

/** A place in a router's waiting line (`wait`). */
export interface QueuePlace {
  /** 1: next. */
  position: number;
  /** Estimated seconds until an instance is free; `null` until the router has seen the line move. */
  estimateS: number | null;
}

/** Retries of `session: 'new'` while every instance is busy (429). */
export interface AllocationRetryOptions {
  /** Requests in all, the first included (default 1: no retry). */
  maxAttempts?: number;
  /** Longest wait between two requests, ms, whatever `Retry-After` says (default 10000). */
  maxDelayMs?: number;
}

/** Options of {@link requestSession}. */
export interface RequestSessionOptions {
  /** `'new'` allocates a free instance for a new session; an id finds the instance that holds it. */
  session: 'new' | string;
  /** The router's access token (sent as `Authorization: Bearer`). */
  token?: string;
  signal?: AbortSignal;
  /** With `session: 'new'`: keep asking while no instance is free, waiting `Retry-After` between requests. */
  allocationRetry?: AllocationRetryOptions;
  /**
   * With `session: 'new'`: when no instance is free, wait in the router's line up to this many
   * seconds (`POST /sessions?wait=`), first come first served; abort `signal` to leave it.
   */
  waitS?: number;
  /** Called with the place in the line at once and whenever it changes. */
  onQueue?: (place: QueuePlace) => void;
  /** The role to ask an instance token for (`controller` or `spectator`; routers that mint tokens). */
  role?: 'controller' | 'spectator';
}

/**
 * Asks a session router for an instance: a new session's (`session: 'new'`) or an existing one's.
 *
 * @param routerUrl The router's base URL, e.g. `https://play.example.com`.
 * @throws {SessionRouteError} the router's code: `no_free_instance` (429, `retryAfterMs` set) once
 *   the retries are spent, `unknown_session` (404), `unauthorized`, `allocation_conflict`,
 *   `registry_unavailable`, ...
 * @throws {ConnectionError} `connection_failed` when the router cannot be reached or does not answer JSON.
 * @example
 * const { sessionId, url } = await requestSession('https://play.example.com', { session: 'new' });
 */
export async function requestSession(routerUrl: string, options: RequestSessionOptions): Promise<SessionRoute> {
  const { session } = options;
  if (typeof session !== 'string' || session === '') throw new TypeError(`options.session must be 'new' or a session id, got ${JSON.stringify(session)}`);
  const base = routerBase(routerUrl);
  const attempts = options.allocationRetry?.maxAttempts ?? 1;
  if (!Number.isInteger(attempts) || attempts < 1)
    throw new RangeError(`options.allocationRetry.maxAttempts must be an integer >= 1, got ${JSON.stringify(attempts)}`);
  const maxDelayMs = options.allocationRetry?.maxDelayMs ?? 10_000;
  for (let attempt = 1; ; attempt++) {
    try {
      return await askRouter(base, options);
    } catch (err) {
      if (!(err instanceof SessionRouteError) || err.code !== HttpErrorCode.NoFreeInstance || session !== 'new' || attempt >= attempts) throw err;
      await delay(Math.min(maxDelayMs, err.retryAfterMs ?? 1000), options.signal);
    }
  }
}

/** One request to the router. */
async function askRouter(base: string, options: RequestSessionOptions): Promise<SessionRoute> {
  const isNew = options.session === 'new';
  const query = new URLSearchParams();
  if (isNew && options.waitS !== undefined) query.set('wait', String(options.waitS));
  if (options.role !== undefined) query.set('role', options.role);
  const q = query.size > 0 ? `?${query.toString()}` : '';
  const target = `${isNew ? `${base}/sessions` : `${base}/sessions/${encodeURIComponent(options.session)}`}${q}`;
  const headers: Record<string, string> = { accept: 'application/json' };
  if (options.token !== undefined) headers['authorization'] = `Bearer ${options.token}`;
  let res: Response;
  try {
    res = await fetch(target, { method: isNew ? 'POST' : 'GET', headers, ...(options.signal ? { signal: options.signal } : {}) });
  } catch (err) {
    if ((err as Error).name === 'AbortError') throw err;
    throw new ConnectionError(ClientErrorCode.ConnectionFailed, `cannot reach the session router at ${base}: ${(err as Error).message}`, { cause: err });
  }
  if (res.status === 202 && res.body) return followQueue(res.body, options, base);
  const text = await res.text();
  const body = parseJsonText(text);
  if (!res.ok) {
    const e = readHttpError(body);
    const retryAfter = Number(res.headers.get('retry-after'));
    const what = isNew ? 'a new session' : `session ${options.session}`;
    throw new SessionRouteError(
      e?.code ?? ClientErrorCode.ConnectionFailed,
      `the session router refused ${what} (${e?.code ?? `HTTP ${res.status}`}): ${e?.message ?? text.slice(0, 200)}`,
      res.status,
      Number.isFinite(retryAfter) && retryAfter >= 0 && res.headers.has('retry-after') ? retryAfter * 1000 : undefined,
    );
  }
  const route = body as Partial<SessionRoute> | undefined;
  if (!route || typeof route.url !== 'string' || typeof route.sessionId !== 'string' || typeof route.instance !== 'string') {
    throw new ConnectionError(
      ClientErrorCode.ConnectionFailed,
      `${target} did not answer a session (HTTP ${res.status}): is ${base} a Reactor session router?`,
    );
  }
  return { sessionId: route.sessionId, instance: route.instance, url: route.url, ...(typeof route.token === 'string' && { token: route.token }) };
}

/** Reads a 202 wait (one JSON object per line) until `allocated`, `timeout` or `failed`. */
async function followQueue(body: ReadableStream<Uint8Array>, options: RequestSessionOptions, base: string): Promise<SessionRoute> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffered = '';
  let lastPosition = -1;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += decoder.decode(value, { stream: true });
    let nl: number;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const text = buffered.slice(0, nl).trim();
      buffered = buffered.slice(nl + 1);
      if (!text) continue;
      const line = JSON.parse(text) as {
        state: string;
        position?: number;
        estimateS?: number | null;
        error?: { code: string; message: string };
      } & Partial<SessionRoute>;
      if (line.state === 'queued' && typeof line.position === 'number') {
        if (line.position !== lastPosition) options.onQueue?.({ position: line.position, estimateS: line.estimateS ?? null });
        lastPosition = line.position;
      } else if (line.state === 'allocated' && typeof line.url === 'string' && typeof line.sessionId === 'string' && typeof line.instance === 'string') {
        void reader.cancel().catch(() => undefined);
        return { sessionId: line.sessionId, instance: line.instance, url: line.url, ...(typeof line.token === 'string' && { token: line.token }) };
      } else if (line.error) {
        void reader.cancel().catch(() => undefined);
        throw new SessionRouteError(line.error.code, `the session router gave no instance (${line.error.code}): ${line.error.message}`, 202, undefined);
      }
    }
  }
  throw new ConnectionError(ClientErrorCode.ConnectionFailed, `the session router at ${base} ended the wait without an answer`);
}

/** The router's base URL (`ws(s)://` accepted too), without a trailing slash or query. */
function routerBase(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new TypeError(`the router URL must be http(s)://..., got ${JSON.stringify(url)}`);
  }
  if (u.protocol === 'ws:') u.protocol = 'http:';
  else if (u.protocol === 'wss:') u.protocol = 'https:';
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new TypeError(`the router URL must be http(s)://..., got ${JSON.stringify(url)}`);
  u.search = '';
  u.hash = '';
  return u.href.replace(/\/+$/, '');
}

function delay(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason as Error);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal!.reason as Error);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
