/**
 * Asking a session router (`reactor route`) for an instance: `POST /sessions` for a new session,
 * `GET /sessions/{id}` to join one. Browser-safe (`fetch` and timers only).
 */
import { ClientErrorCode, ConnectionError, SessionRouteError } from './errors.js';
import { HttpErrorCode } from './protocol.js';

/** Where a session lives, as the router answered. */
export interface SessionRoute {
  /** The session's id: give it to others so they join with `connect(routerUrl, { session: id })`. */
  sessionId: string;
  /** The instance (GameServer) that holds it. */
  instance: string;
  /** The instance's base URL through the router (its socket is `{url}/ws`). */
  url: string;
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
  const target = isNew ? `${base}/sessions` : `${base}/sessions/${encodeURIComponent(options.session)}`;
  const headers: Record<string, string> = { accept: 'application/json' };
  if (options.token !== undefined) headers['authorization'] = `Bearer ${options.token}`;
  let res: Response;
  try {
    res = await fetch(target, { method: isNew ? 'POST' : 'GET', headers, ...(options.signal ? { signal: options.signal } : {}) });
  } catch (err) {
    if ((err as Error).name === 'AbortError') throw err;
    throw new ConnectionError(ClientErrorCode.ConnectionFailed, `cannot reach the session router at ${base}: ${(err as Error).message}`, { cause: err });
  }
  const text = await res.text();
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  if (!res.ok) {
    const e = (body as { error?: { code?: string; message?: string } } | undefined)?.error;
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
  return { sessionId: route.sessionId, instance: route.instance, url: route.url };
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
