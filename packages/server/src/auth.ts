/** Access control: the optional token and the allowed origins. */
import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/** Name of the cookie the viewer page sets so its scripts and socket carry the token. */
export const TOKEN_COOKIE = 'reactor_token';

/** The token a request presents: `?token=`, `Authorization: Bearer`, or the viewer's cookie. */
export function presentedToken(req: IncomingMessage, url: URL): string | undefined {
  const q = url.searchParams.get('token');
  if (q !== null) return q;
  const auth = req.headers.authorization;
  if (auth?.startsWith('Bearer ')) return auth.slice(7).trim();
  const cookie = req.headers.cookie;
  if (cookie) {
    for (const part of cookie.split(';')) {
      const eq = part.indexOf('=');
      if (eq > 0 && part.slice(0, eq).trim() === TOKEN_COOKIE) {
        try {
          return decodeURIComponent(part.slice(eq + 1).trim());
        } catch {
          return undefined;
        }
      }
    }
  }
  return undefined;
}

/** Constant-time token comparison. */
export function tokenMatches(expected: string, presented: string | undefined): boolean {
  if (presented === undefined) return false;
  const a = Buffer.from(expected);
  const b = Buffer.from(presented);
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * Whether the request's `Origin` may connect. No `Origin` (non-browser clients) is allowed;
 * a browser origin must be the server's own (same host header) or listed; `*` allows any.
 */
export function originAllowed(req: IncomingMessage, allowed: string[] | undefined): boolean {
  const origin = req.headers.origin;
  if (origin === undefined || origin === '') return true;
  if (allowed?.includes('*')) return true;
  if (allowed?.includes(origin)) return true;
  try {
    return new URL(origin).host === req.headers.host;
  } catch {
    return false;
  }
}

/**
 * Whether the request's `Host` header names this server (DNS-rebinding guard). `allowed`
 * undefined allows any; names are compared without the port, case-insensitively.
 */
export function hostAllowed(req: IncomingMessage, allowed: string[] | undefined): boolean {
  if (allowed === undefined) return true;
  const header = req.headers.host;
  if (!header) return false;
  let name: string;
  try {
    name = new URL(`http://${header}`).hostname.toLowerCase();
  } catch {
    return false;
  }
  return allowed.some((h) => h.toLowerCase() === name);
}
