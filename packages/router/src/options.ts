/**
 * Options of the session router, with their defaults and eager validation (a bad option
 * throws before anything listens, naming the option and the value).
 */
import { createPrivateKey, createPublicKey, type KeyObject } from 'node:crypto';
import type { KubeConfig } from '@kubernetes/client-node';
import { consoleLogger, type Logger } from '@reactor/log';
import { LOOPBACK_HOSTS, isLoopbackHost, TokenMinter, TokenVerifier, type SigningKey } from '@reactor/access';
import { DEFAULT_QUEUE_MAX_LENGTH, DEFAULT_QUEUE_MAX_WAIT_MS, DEFAULT_QUEUE_POLL_MS } from './session-queue.js';

/** Default lifetime of the token the router hands the browser for its instance, seconds (10 min). */
export const DEFAULT_INSTANCE_TOKEN_TTL_S = 600;

/** Default port of `reactor route` (one off `reactor run`'s 8080, so both run on one machine). */
export const DEFAULT_ROUTER_PORT = 8090;

/** Options of {@link SessionRouter}. */
export interface RouterOptions {
  /** The Kubernetes configuration (see `loadKubeConfig()`). */
  kubeConfig: KubeConfig;
  /** Namespace of the fleet's GameServers (default `default`). */
  namespace?: string;
  /** The Agones Fleet whose instances the router hands out (its `agones.dev/fleet` label). */
  fleet: string;
  /** Interface to bind (default `127.0.0.1`; `0.0.0.0` in a pod). */
  host?: string;
  /** TCP port (default {@link DEFAULT_ROUTER_PORT}; 0 picks a free one). */
  port?: number;
  /**
   * Access token, checked as `reactor run` checks it (`?token=`, `Authorization: Bearer`, the
   * viewer's cookie) on every route but the health ones; proxied requests carry it on to the
   * instance, so give instances the same token (or none, on a network only the router reaches).
   */
  token?: string;
  /** Origins whose pages may use the router (default: only its own; `['*']` any), as `reactor run`. */
  allowedOrigins?: string[];
  /** `Host` names the router answers to (default on loopback: `localhost`, `127.0.0.1`, `[::1]`; else any). */
  allowedHosts?: string[];
  /** Serve on a non-loopback address without a token (refused otherwise). */
  insecure?: boolean;
  /**
   * The router's URL as clients reach it (`https://play.example.com`), for the instance URLs it
   * answers. Default: from each request's `Host` and `X-Forwarded-Proto`.
   */
  publicUrl?: string;
  /** Seconds a 429 (no free instance) asks the client to wait, `Retry-After` (default 2). */
  retryAfterS?: number;
  /** Allocation attempts after a 409 Conflict before answering 503 (default 5). */
  conflictRetries?: number;
  /** First back-off after a conflict, ms (default 10; doubled each retry, at most 250). */
  conflictBackoffMs?: number;
  /** How long a readiness check of the Kubernetes API is reused, ms (default 2000). */
  readyCacheMs?: number;
  /** Time a client has to send its request headers, ms (default 10000). */
  headersTimeoutMs?: number;
  /** Longest wait for one Kubernetes API call (allocation, LIST, GET, PATCH), ms (default 5000). */
  apiTimeoutMs?: number;
  /** A full LIST of the fleet's GameServers this often, ms; the watch keeps the cache current between (default 30000). */
  resyncMs?: number;
  /** Longest wait for an instance's pod to accept a relayed connection, ms (default 3000). */
  relayConnectTimeoutMs?: number;
  /**
   * Longest wait, once a relayed request is sent (or a WebSocket upgrade asked), for the head of
   * the instance's answer, ms (default 5000). A hung process (stopped, its event loop blocked)
   * accepts connections in its kernel and never answers: past this, the client gets
   * `instance_unreachable` (502, or close code 4502) and the instance's circuit opens.
   */
  relayResponseTimeoutMs?: number;
  /**
   * After Agones allocated an instance, the router asks its `GET /health/ready` and hands it out
   * only on a 200 within this many ms (default 1000); an instance that is draining, not ready
   * (`rank_stalled`, ...) or that does not answer is left to the lost allocation and another is
   * allocated. 0 turns the check off (allocation then follows Agones' state and labels only).
   */
  allocationCheckTimeoutMs?: number;
  /** A relayed socket whose instance sent nothing this long gets a WebSocket ping from the router, ms (default 5000). */
  relayPingIntervalMs?: number;
  /** No byte from the instance this long after that ping: the instance is gone; the viewer is told (`instance_unreachable`), ms (default 5000). */
  relayPingTimeoutMs?: number;
  /** A relayed HTTP request whose socket is idle this long is cut, ms (default 60000). */
  relayIdleTimeoutMs?: number;
  /** After a failed connection or ping, the instance counts as unreachable this long (the circuit is open), ms (default 30000). */
  breakerOpenMs?: number;
  /**
   * The caller's key (your backend's): with it, `POST /sessions`, `GET` and `DELETE
   * /sessions/{id}` and `/metrics` take `Authorization: Bearer <apiKey>` (not `token`), and the
   * browser never needs it: the answer carries a short-lived `token` for its instance (see
   * `tokenKey`). At least 16 characters.
   */
  apiKey?: string;
  /**
   * The key the router signs instance tokens with (an HMAC `secret`, or an Ed25519 `privateKey`):
   * every allocation answer carries `token`, valid `instanceTokenTtlS` for that instance only
   * (`sid` = the GameServer name). Instances check it with the same secret or the public key.
   * With it, relayed routes (`/s/{instance}/...`) take such a token (checked by the router too).
   */
  tokenKey?: SigningKey;
  /** Lifetime of the instance token, seconds (default 600, at most 21600). */
  instanceTokenTtlS?: number;
  /**
   * Move a draining instance's session to another instance when its app takes snapshots
   * (default true; docs/snapshots.md "Move"). False: it runs on to its drain deadline.
   */
  moveOnDrain?: boolean;
  /** Longest `wait` a `POST /sessions?wait=<s>` may ask for, seconds (default 120). */
  queueMaxWaitS?: number;
  /** Most requests waiting at once (default 1000); more are answered 429 `queue_full`. */
  queueMaxLength?: number;
  /** While requests wait, look for a free instance this often besides the watch's Ready events, ms (default 1000). */
  queuePollMs?: number;
  /** Where diagnostics go (default `consoleLogger()`); the router logs with `child({ component: 'router' })`. */
  logger?: Logger;
}

/** Options with defaults applied. */
export interface ResolvedRouterOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  fleet: string;
  host: string;
  port: number;
  token: string | undefined;
  allowedOrigins: string[] | undefined;
  /** `undefined`: any host. */
  allowedHosts: string[] | undefined;
  insecure: boolean;
  /** Without a trailing slash. */
  publicUrl: string | undefined;
  retryAfterS: number;
  conflictRetries: number;
  conflictBackoffMs: number;
  readyCacheMs: number;
  headersTimeoutMs: number;
  apiTimeoutMs: number;
  resyncMs: number;
  relayConnectTimeoutMs: number;
  relayResponseTimeoutMs: number;
  allocationCheckTimeoutMs: number;
  relayPingIntervalMs: number;
  relayPingTimeoutMs: number;
  relayIdleTimeoutMs: number;
  breakerOpenMs: number;
  apiKey: string | undefined;
  /** Mints instance tokens (from `tokenKey`). */
  minter: TokenMinter | undefined;
  /** Checks the instance tokens on relayed routes (the same key). */
  verifier: TokenVerifier | undefined;
  instanceTokenTtlS: number;
  moveOnDrain: boolean;
  queueMaxWaitS: number;
  queueMaxLength: number;
  queuePollMs: number;
  logger: Logger;
}

/** The PEM public key of an Ed25519 private key (PEM text or a KeyObject). */
function publicPem(key: string | KeyObject): string {
  return createPublicKey(typeof key === 'string' ? createPrivateKey(key) : key)
    .export({ type: 'spki', format: 'pem' })
    .toString();
}

function int(name: string, v: unknown, min: number, max: number): void {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new RangeError(`options.${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(v)}`);
  }
}

/** A Kubernetes name (namespace, fleet): DNS label rules. */
const DNS_NAME = /^[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?$/;

/**
 * Applies defaults and validates every option.
 * @throws {RangeError | TypeError} naming the option, e.g. `options.fleet must be a Kubernetes name ...`.
 */
export function resolveRouterOptions(o: RouterOptions): ResolvedRouterOptions {
  if (!o || typeof o !== 'object') throw new TypeError('options must be an object with at least kubeConfig and fleet');
  if (!o.kubeConfig || typeof (o.kubeConfig as { makeApiClient?: unknown }).makeApiClient !== 'function') {
    throw new TypeError('options.kubeConfig must be a KubeConfig of @kubernetes/client-node (see loadKubeConfig())');
  }
  const r: ResolvedRouterOptions = {
    kubeConfig: o.kubeConfig,
    namespace: o.namespace ?? 'default',
    fleet: o.fleet,
    host: o.host ?? '127.0.0.1',
    port: o.port ?? DEFAULT_ROUTER_PORT,
    token: o.token,
    allowedOrigins: o.allowedOrigins,
    allowedHosts: undefined,
    insecure: o.insecure ?? false,
    publicUrl: o.publicUrl?.replace(/\/+$/, ''),
    retryAfterS: o.retryAfterS ?? 2,
    conflictRetries: o.conflictRetries ?? 5,
    conflictBackoffMs: o.conflictBackoffMs ?? 10,
    readyCacheMs: o.readyCacheMs ?? 2000,
    headersTimeoutMs: o.headersTimeoutMs ?? 10_000,
    apiTimeoutMs: o.apiTimeoutMs ?? 5000,
    resyncMs: o.resyncMs ?? 30_000,
    relayConnectTimeoutMs: o.relayConnectTimeoutMs ?? 3000,
    relayResponseTimeoutMs: o.relayResponseTimeoutMs ?? 5000,
    allocationCheckTimeoutMs: o.allocationCheckTimeoutMs ?? 1000,
    relayPingIntervalMs: o.relayPingIntervalMs ?? 5000,
    relayPingTimeoutMs: o.relayPingTimeoutMs ?? 5000,
    relayIdleTimeoutMs: o.relayIdleTimeoutMs ?? 60_000,
    breakerOpenMs: o.breakerOpenMs ?? 30_000,
    apiKey: o.apiKey,
    minter: undefined,
    verifier: undefined,
    instanceTokenTtlS: o.instanceTokenTtlS ?? DEFAULT_INSTANCE_TOKEN_TTL_S,
    moveOnDrain: o.moveOnDrain ?? true,
    queueMaxWaitS: o.queueMaxWaitS ?? DEFAULT_QUEUE_MAX_WAIT_MS / 1000,
    queueMaxLength: o.queueMaxLength ?? DEFAULT_QUEUE_MAX_LENGTH,
    queuePollMs: o.queuePollMs ?? DEFAULT_QUEUE_POLL_MS,
    logger: o.logger ?? consoleLogger(),
  };
  if (r.apiKey !== undefined && (typeof r.apiKey !== 'string' || r.apiKey.length < 16)) {
    throw new TypeError('options.apiKey must be a string of at least 16 characters (your backend presents it as "Authorization: Bearer <apiKey>")');
  }
  if (o.tokenKey !== undefined) {
    r.minter = new TokenMinter(o.tokenKey);
    r.verifier = new TokenVerifier('secret' in o.tokenKey ? { secret: o.tokenKey.secret } : { publicKey: publicPem(o.tokenKey.privateKey) });
  }
  int('instanceTokenTtlS', r.instanceTokenTtlS, 1, 21_600);
  int('queueMaxWaitS', r.queueMaxWaitS, 1, 3600);
  int('queueMaxLength', r.queueMaxLength, 0, 1_000_000);
  int('queuePollMs', r.queuePollMs, 10, 60_000);
  for (const key of ['namespace', 'fleet'] as const) {
    if (typeof r[key] !== 'string' || !DNS_NAME.test(r[key])) {
      throw new RangeError(`options.${key} must be a Kubernetes name (lower-case letters, digits, "-" and "."), got ${JSON.stringify(r[key])}`);
    }
  }
  if (typeof r.host !== 'string' || r.host === '') throw new TypeError(`options.host must be a non-empty string, got ${JSON.stringify(r.host)}`);
  int('port', r.port, 0, 65535);
  if (r.token !== undefined && (typeof r.token !== 'string' || r.token.length === 0)) {
    throw new TypeError('options.token must be a non-empty string when given; leave it out to disable access control');
  }
  if (typeof r.insecure !== 'boolean') throw new TypeError(`options.insecure must be a boolean, got ${JSON.stringify(r.insecure)}`);
  if (!isLoopbackHost(r.host) && r.token === undefined && r.apiKey === undefined && !r.insecure) {
    throw new RangeError(
      `options.host is ${JSON.stringify(r.host)}, not a loopback address, and no options.token is set: anyone who can reach it could allocate every instance. ` +
        'Set options.token, bind 127.0.0.1, or pass insecure: true on a network you trust.',
    );
  }
  if (r.allowedOrigins !== undefined && (!Array.isArray(r.allowedOrigins) || r.allowedOrigins.some((x) => typeof x !== 'string'))) {
    throw new TypeError('options.allowedOrigins must be an array of origins such as "https://example.com" (or ["*"])');
  }
  if (o.allowedHosts !== undefined && (!Array.isArray(o.allowedHosts) || o.allowedHosts.some((x) => typeof x !== 'string' || x === ''))) {
    throw new TypeError('options.allowedHosts must be an array of host names such as "reactor.example.com" (or ["*"])');
  }
  r.allowedHosts = o.allowedHosts?.includes('*') ? undefined : (o.allowedHosts ?? (isLoopbackHost(r.host) ? LOOPBACK_HOSTS : undefined));
  if (r.publicUrl !== undefined) {
    let u: URL | undefined;
    try {
      u = new URL(r.publicUrl);
    } catch {
      u = undefined;
    }
    if (!u || (u.protocol !== 'http:' && u.protocol !== 'https:') || u.search || u.hash) {
      throw new TypeError(`options.publicUrl must be an http(s) URL without query, such as "https://play.example.com", got ${JSON.stringify(o.publicUrl)}`);
    }
  }
  int('retryAfterS', r.retryAfterS, 1, 3600);
  int('conflictRetries', r.conflictRetries, 0, 100);
  int('conflictBackoffMs', r.conflictBackoffMs, 1, 10_000);
  int('readyCacheMs', r.readyCacheMs, 0, 600_000);
  int('headersTimeoutMs', r.headersTimeoutMs, 100, 600_000);
  int('apiTimeoutMs', r.apiTimeoutMs, 10, 120_000);
  int('resyncMs', r.resyncMs, 100, 3_600_000);
  int('relayConnectTimeoutMs', r.relayConnectTimeoutMs, 10, 120_000);
  int('relayResponseTimeoutMs', r.relayResponseTimeoutMs, 10, 600_000);
  int('allocationCheckTimeoutMs', r.allocationCheckTimeoutMs, 0, 60_000);
  int('relayPingIntervalMs', r.relayPingIntervalMs, 10, 600_000);
  int('relayPingTimeoutMs', r.relayPingTimeoutMs, 10, 600_000);
  int('relayIdleTimeoutMs', r.relayIdleTimeoutMs, 100, 3_600_000);
  int('breakerOpenMs', r.breakerOpenMs, 0, 3_600_000);
  return r;
}
