/**
 * The URLs of a connection: the socket URL from the server's, the HTTP base and download URLs
 * from the socket's, a token kept out of error texts, and the session router's close refusals.
 */
import { HttpErrorCode } from './protocol.js';

/** Close codes of a session router that accepted a socket only to refuse it (`@reactor/router`'s RouterCloseCode). */
const ROUTER_CLOSE_CODES: Record<number, HttpErrorCode> = { 4404: HttpErrorCode.UnknownInstance, 4502: HttpErrorCode.InstanceUnreachable };

/** The router's refusal a close carries (code 4404/4502, reason `<code>: ...`), if it is one. */
export function routerRefusal(code: number, reason: string): { code: HttpErrorCode } | undefined {
  const known = ROUTER_CLOSE_CODES[code];
  return known !== undefined && reason.startsWith(`${known}:`) ? { code: known } : undefined;
}

/** Close code of a session router that moved the session to another instance (reason `session_moved: /s/{instance}`). */
export const SESSION_MOVED_CLOSE = 4307;

/** Where a moved session went: the socket URL with its `/s/{instance}` prefix replaced (4307 `session_moved`), if the close says so. */
export function movedTo(code: number, reason: string, wsUrl: string): string | undefined {
  if (code !== SESSION_MOVED_CLOSE) return undefined;
  const m = new RegExp(`^${HttpErrorCode.SessionMoved}: (/s/[^/\\s?#]+)$`).exec(reason);
  if (!m) return undefined;
  const u = new URL(wsUrl);
  if (!/^\/s\/[^/]+/.test(u.pathname)) return undefined;
  u.pathname = u.pathname.replace(/^\/s\/[^/]+/, m[1]!);
  return u.toString();
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

/** The server's HTTP base URL, from the socket's (`ws://h/base/ws` -> `http://h/base`). */
export function httpBase(wsUrl: string): string {
  const u = new URL(wsUrl);
  u.protocol = u.protocol === 'wss:' ? 'https:' : 'http:';
  u.pathname = u.pathname.replace(/\/ws$/, '');
  u.search = '';
  return u.href.replace(/\/$/, '');
}

/** A server path as an absolute URL carrying the client's token (`?token=`), for downloads. */
export function downloadUrl(wsUrl: string, path: string, token: string | undefined): string {
  const u = new URL(path.replace(/^\/+/, ''), `${httpBase(wsUrl)}/`);
  if (token !== undefined) u.searchParams.set('token', token);
  return u.href;
}

/** The URL with its `token` query parameter masked, for error messages. */
export function redact(url: string): string {
  return url.replace(/([?&]token=)[^&]*/, '$1***');
}
