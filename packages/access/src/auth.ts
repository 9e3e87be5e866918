/**
 * Access control, one check for HTTP routes and the WebSocket upgrade alike: the `Host` header
 * (DNS-rebinding guard), the optional token, and the browser's `Origin`.
 */
import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { HttpErrorCode } from '@reactor/protocol';
import { FULL_GRANT, looksLikeJwt, type Grant, type TokenVerifier } from './tokens.js';

/** Loopback host names: the default `allowedHosts` of a server bound to loopback. */
export const LOOPBACK_HOSTS = ['localhost', '127.0.0.1', '[::1]'];
/** Whether a bind address is loopback (`localhost`, `127.x.x.x`, `::1`): only this machine can connect. */
export const isLoopbackHost = (host: string): boolean => host === 'localhost' || host === '::1' || host === '[::1]' || host.startsWith('127.');

/** Name of the cookie the viewer page sets so its scripts and socket carry the token. */
export const TOKEN_COOKIE = 'reactor_token';

/** What {@link checkAccess} needs from the server's options. */
export interface AccessPolicy {
  token: string | undefined;
  /** `undefined`: any host. */
  allowedHosts: string[] | undefined;
  allowedOrigins: string[] | undefined;
  /** Checks signed session tokens (`ServerOptions.auth`); with it, a JWT is accepted besides the static token. */
  verifier?: TokenVerifier | undefined;
}

/** Why a request was refused: the HTTP answer and the `reactor_connections_rejected_total` reason. */
export interface AccessDenial {
  status: 401 | 403;
  code: HttpErrorCode;
  message: string;
  /** Label of the rejection metric. */
  reason: 'host' | 'unauthorized' | 'origin' | 'token';
}

/** The outcome of {@link authorize}: what the caller may do, or why it is refused. */
export type Authorization = { ok: true; grant: Grant } | { ok: false; denial: AccessDenial };

/**
 * {@link checkAccess} with signed tokens: Host, then the credential (the static token, or a JWT
 * checked by `policy.verifier`, whose refusal carries its own code), then Origin.
 * @param sessions what a token's `sid` may name here (the current session id, the instance name)
 */
export async function authorize(req: IncomingMessage, url: URL, policy: AccessPolicy, sessions: () => readonly string[]): Promise<Authorization> {
  const verifier = policy.verifier;
  if (!verifier) {
    const denial = checkAccess(req, url, policy);
    return denial ? { ok: false, denial } : { ok: true, grant: FULL_GRANT };
  }
  const hostOnly = checkAccess(req, url, { ...policy, token: undefined, allowedOrigins: ['*'] });
  if (hostOnly) return { ok: false, denial: hostOnly };
  const presented = presentedToken(req, url);
  let grant: Grant;
  if (presented !== undefined && policy.token !== undefined && tokenMatches(policy.token, presented)) {
    grant = FULL_GRANT;
  } else if (presented !== undefined && looksLikeJwt(presented)) {
    const check = await verifier.verify(presented, sessions());
    if (!check.ok) return { ok: false, denial: { status: check.status, code: check.code, message: check.message, reason: 'token' } };
    grant = check.grant;
  } else {
    return {
      ok: false,
      denial: {
        status: 401,
        code: HttpErrorCode.Unauthorized,
        reason: 'unauthorized',
        message: `${presented === undefined ? 'missing' : 'wrong'} access token: present a session token (mint one with "reactor token") as ?token=... or an "Authorization: Bearer ..." header`,
      },
    };
  }
  if (!originAllowed(req, policy.allowedOrigins)) {
    return {
      ok: false,
      denial: {
        status: 403,
        code: HttpErrorCode.OriginNotAllowed,
        reason: 'origin',
        message: `origin ${JSON.stringify(req.headers.origin)} may not use this server; add it to allowedOrigins`,
      },
    };
  }
  return { ok: true, grant };
}

/**
 * The `WWW-Authenticate` value of a refused request (RFC 6750): `Bearer` when no usable
 * credential came, `Bearer error="invalid_token"` when a token was presented and refused; none
 * for a 403. The same on HTTP routes and refused upgrades.
 */
export function bearerChallenge(denial: AccessDenial): string | undefined {
  if (denial.status !== 401) return undefined;
  return denial.reason === 'token' ? 'Bearer error="invalid_token"' : 'Bearer';
}

/**
 * Checks a request against the policy, in this order: Host, token, Origin.
 * @returns `undefined` when the request may proceed, else the denial to answer.
 */
export function checkAccess(req: IncomingMessage, url: URL, policy: AccessPolicy): AccessDenial | undefined {
  if (!hostAllowed(req, policy.allowedHosts)) {
    return {
      status: 403,
      code: HttpErrorCode.HostNotAllowed,
      reason: 'host',
      message: `Host ${JSON.stringify(req.headers.host ?? '')} is not allowed: this server answers only to ${policy.allowedHosts!.join(', ')} (a guard against DNS rebinding); list the name in allowedHosts`,
    };
  }
  if (policy.token !== undefined && !tokenMatches(policy.token, presentedToken(req, url))) {
    return {
      status: 401,
      code: HttpErrorCode.Unauthorized,
      reason: 'unauthorized',
      message: 'missing or wrong access token: add ?token=... to the URL or send an "Authorization: Bearer ..." header',
    };
  }
  if (!originAllowed(req, policy.allowedOrigins)) {
    return {
      status: 403,
      code: HttpErrorCode.OriginNotAllowed,
      reason: 'origin',
      message: `origin ${JSON.stringify(req.headers.origin)} may not use this server; add it to allowedOrigins`,
    };
  }
  return undefined;
}

/** The token a request presents: `?token=`, `Authorization: Bearer` (scheme in any case), or the viewer's cookie. */
export function presentedToken(req: IncomingMessage, url: URL): string | undefined {
  const q = url.searchParams.get('token');
  if (q !== null) return q;
  const auth = /^\s*bearer\s+(.+)$/i.exec(req.headers.authorization ?? '');
  if (auth) return auth[1]!.trim();
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

/** An origin in its canonical form (`scheme://host[:port]`, lower-case scheme and host, default port left out), or undefined. */
function canonicalOrigin(origin: string): string | undefined {
  try {
    const u = new URL(origin);
    return u.origin === 'null' ? undefined : u.origin;
  } catch {
    return undefined;
  }
}

/**
 * Whether the request's `Origin` may connect. No `Origin` (non-browser clients) is allowed;
 * a browser origin must be the server's own or listed (`*` allows any), compared by scheme,
 * host (case-insensitively) and port. The server's own origin is `http://<Host header>`, or
 * `https://` when a reverse proxy says so with `X-Forwarded-Proto: https`.
 */
export function originAllowed(req: IncomingMessage, allowed: string[] | undefined): boolean {
  const origin = req.headers.origin;
  if (origin === undefined || origin === '') return true;
  if (allowed?.includes('*')) return true;
  const presented = canonicalOrigin(origin);
  if (presented === undefined) return false;
  if (allowed?.some((a) => canonicalOrigin(a) === presented)) return true;
  const host = req.headers.host;
  if (!host) return false;
  const forwarded = String(req.headers['x-forwarded-proto'] ?? '')
    .split(',')[0]!
    .trim()
    .toLowerCase();
  const scheme = forwarded === 'https' ? 'https' : 'http';
  return canonicalOrigin(`${scheme}://${host}`) === presented;
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
