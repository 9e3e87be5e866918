/**
 * The HTTP helpers of the server and of the session router (`@reactor/access`): JSON
 * answers, the error envelope (on a response or on a raw socket), request targets and query
 * values, small request bodies, and a route table (method + path -> handler). Loads nothing of
 * the runtime.
 *
 * The two answer the same envelope, `{"error": {"code", "message"}}`, with their own headers:
 * {@link SERVER_ANSWER} (the app server: `nosniff`, no body for `HEAD`) and {@link ROUTER_ANSWER}
 * (the router: `Content-Length`, `Cache-Control: no-store`).
 */
import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { encodeHttpError, httpErrorEnvelope } from '@reactor/protocol';

/** The body of every error answer. */
export interface ErrorEnvelope<C extends string = string> {
  error: { code: C; message: string };
}

/** `{ error: { code, message } }` (the protocol's envelope, written once in `@reactor/protocol`). */
export function errorEnvelope<C extends string>(code: C, message: string): ErrorEnvelope<C> {
  return httpErrorEnvelope(code, message);
}

/** Which headers an answer carries beside `Content-Type`. */
export interface AnswerStyle {
  /** `Content-Length` set from the body. */
  readonly contentLength: boolean;
  /** `Cache-Control: no-store`. */
  readonly noStore: boolean;
  /** `X-Content-Type-Options: nosniff`, and no body for a `HEAD` request. */
  readonly nosniff: boolean;
}

/** The app server's answers. */
export const SERVER_ANSWER: AnswerStyle = { contentLength: false, noStore: false, nosniff: true };
/** The session router's answers. */
export const ROUTER_ANSWER: AnswerStyle = { contentLength: true, noStore: true, nosniff: false };

/** An answer with a body of `contentType`. */
export function sendBody(res: ServerResponse, status: number, contentType: string, body: string | Buffer, style: AnswerStyle = SERVER_ANSWER): void {
  res.statusCode = status;
  res.setHeader('Content-Type', contentType);
  if (style.contentLength) res.setHeader('Content-Length', typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength);
  if (style.noStore) res.setHeader('Cache-Control', 'no-store');
  if (style.nosniff) res.setHeader('X-Content-Type-Options', 'nosniff');
  res.end(style.nosniff && res.req.method === 'HEAD' ? undefined : body);
}

/** A JSON answer. */
export function sendJson(res: ServerResponse, status: number, body: unknown, style: AnswerStyle = SERVER_ANSWER): void {
  sendBody(res, status, 'application/json; charset=utf-8', JSON.stringify(body), style);
}

/** An error answer: the envelope, plus `extra` fields beside `error` (the router's `retryAfterS`). */
export function sendError(
  res: ServerResponse,
  status: number,
  code: string,
  message: string,
  style: AnswerStyle = SERVER_ANSWER,
  extra?: Record<string, unknown>,
): void {
  sendJson(res, status, extra ? { ...errorEnvelope(code, message), ...extra } : errorEnvelope(code, message), style);
}

/**
 * A complete HTTP error answer on a raw socket (refused upgrades, unparsable requests), then close.
 * @param challenge the `WWW-Authenticate` value of a 401 (`bearerChallenge()`; default `Bearer`)
 */
export function writeHttpError(socket: Duplex, status: number, code: string, message: string, challenge = 'Bearer'): void {
  const body = encodeHttpError(code, message);
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Error'}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${status === 401 ? `WWW-Authenticate: ${challenge}\r\n` : ''}\r\n${body}`,
  );
}

/** The request target as a URL, or null when it cannot be parsed (`//`, `/\\`, ...). */
export function parseTarget(target: string | undefined): URL | null {
  try {
    return new URL(target ?? '/', 'http://localhost');
  } catch {
    return null;
  }
}

/** `decodeURIComponent`, or undefined for a malformed escape. */
export function safeDecode(s: string): string | undefined {
  try {
    return decodeURIComponent(s);
  } catch {
    return undefined;
  }
}

/** A query value that must be a whole number: undefined when absent, NaN when it is not only digits. */
export function wholeNumberParam(url: URL, name: string): number | undefined {
  const raw = url.searchParams.get(name);
  if (raw === null) return undefined;
  return /^\d+$/.test(raw) ? Number(raw) : NaN;
}

/** A query value from a closed set (`fallback` when absent); undefined for any other value. */
export function oneOfParam<T extends string>(url: URL, name: string, allowed: readonly T[], fallback: T): T | undefined {
  const raw = url.searchParams.get(name) ?? fallback;
  return (allowed as readonly string[]).includes(raw) ? (raw as T) : undefined;
}

/**
 * A request body of at most `limit` bytes, as text.
 * @throws what `tooLarge()` returns, as soon as the body passes `limit` (the rest is not read).
 */
export async function readBody(req: IncomingMessage, limit: number, tooLarge: () => Error): Promise<string> {
  const parts: Buffer[] = [];
  let total = 0;
  for await (const chunk of req.iterator({ destroyOnReturn: false })) {
    total += (chunk as Buffer).byteLength;
    if (total > limit) throw tooLarge();
    parts.push(chunk as Buffer);
  }
  return Buffer.concat(parts).toString('utf8');
}

/** One entry of a {@link RouteTable}. */
export interface Route<H> {
  /** The methods it answers (`'*'`: every method, the handler checks). */
  readonly methods: readonly string[] | '*';
  /** An exact path, or a pattern whose groups become the handler's params. */
  readonly path: string | RegExp;
  readonly handler: H;
}

/** What {@link RouteTable.match} found for a path. */
export interface RouteMatch<H> {
  readonly route: Route<H>;
  /** The pattern's groups (none for an exact path). */
  readonly params: readonly string[];
  /** Whether the route answers the request's method. */
  readonly allowed: boolean;
}

/** An ordered table of routes: the first whose path matches answers. */
export class RouteTable<H> {
  readonly routes: readonly Route<H>[];

  constructor(routes: readonly Route<H>[]) {
    this.routes = routes;
  }

  /** The first route whose path matches `pathname`, or undefined. */
  match(method: string | undefined, pathname: string): RouteMatch<H> | undefined {
    for (const route of this.routes) {
      let params: string[];
      if (typeof route.path === 'string') {
        if (route.path !== pathname) continue;
        params = [];
      } else {
        const m = route.path.exec(pathname);
        if (!m) continue;
        params = m.slice(1).map((g) => g ?? '');
      }
      const allowed = route.methods === '*' || (method !== undefined && route.methods.includes(method));
      return { route, params, allowed };
    }
    return undefined;
  }
}
