/**
 * Short-lived session tokens: signed JWTs (`jose`) that say who may do what on a server for how
 * long. Minted by {@link TokenMinter} (`reactor token`, the router, an app's own backend) with an
 * HMAC secret (HS256) or an Ed25519 private key (EdDSA); checked by {@link TokenVerifier} with the
 * same secret, the Ed25519 public key, or the JWKS of a platform that mints them.
 *
 * Claims beyond the registered ones (`exp`, `nbf`, `iat`, `sub`, `iss`, `aud`, `jti`):
 * `sid` (the session or instance, `*` for any), `role` (`controller`, `spectator`, or an app's
 * own), `pub` (inbound tracks the holder may publish, `*` for all), `upl` (bytes it may upload),
 * `rec` (what it may do with clips and recordings: `clip`, `record`, `*` for both), `mst` (the
 * longest this holder may stay in a session, seconds, from its arrival). The header carries `kid`, a fingerprint of
 * the signing key, so that a token of another key is told apart from a tampered one.
 */
import { createHash, createPrivateKey, createPublicKey, webcrypto, type KeyObject } from 'node:crypto';
import { SignJWT, createRemoteJWKSet, decodeProtectedHeader, errors as joseErrors, jwtVerify, type JWTPayload, type JWTVerifyGetKey } from 'jose';
import { HttpErrorCode } from '@reactor/protocol';

/** Default lifetime of a minted token, seconds (1 h). */
export const DEFAULT_TOKEN_TTL_S = 3600;
/** Longest lifetime a token may have, minted or verified, seconds (6 h, as the original's `POST /tokens`). */
export const MAX_TOKEN_TTL_S = 6 * 3600;
/** Clock skew tolerated between the minter and the server, seconds. */
export const TOKEN_CLOCK_TOLERANCE_S = 5;
/** Tokens whose signature and claims were checked, kept so that the next request with the same token skips the signature (its time window and session are checked again). */
export const VERIFIED_TOKEN_CACHE_SIZE = 10_000;
/** The built-in roles. */
export const ROLES = ['controller', 'spectator'] as const;
/** A role name: `controller`, `spectator`, or an app's own snake_case role. */
export type Role = string;
const ROLE_PATTERN = /^[a-z][a-z0-9_]{0,31}$/;
/** What a token may do with clips and recordings (its `rec` claim): take clips, start and stop recordings. */
export const RECORDING_GRANTS = ['clip', 'record'] as const;
/** One of {@link RECORDING_GRANTS}. */
export type RecordingGrant = (typeof RECORDING_GRANTS)[number];

/** What a token (or the static token, or an open server) lets its holder do. */
export interface Grant {
  /** `controller` (may steer), `spectator` (watches), or an app's own role. */
  readonly role: Role;
  /** The session or instance it is bound to; `*`: any. */
  readonly session: string;
  /** Inbound tracks it may publish; `*`: all. */
  readonly publish: '*' | readonly string[];
  /** Bytes it may upload in all; `undefined`: the server's own limits only. */
  readonly uploadBytes: number | undefined;
  /** What it may do with clips and recordings (`rec`): `clip`, `record` (start and stop a recording); `*`: both. */
  readonly recording: '*' | readonly RecordingGrant[];
  /** The longest its holder may stay in a session, ms, counted from its arrival; `undefined`: no limit. */
  readonly maxSessionMs: number | undefined;
  /** When the token expires (ms since the epoch); `undefined`: never (static token, open server). */
  readonly expiresAt: number | undefined;
  /** The token's `sub`, when it has one. */
  readonly subject?: string;
  /** The token's `jti`, or a digest of it: upload grants are counted per token. */
  readonly tokenId?: string;
}

/** The grant of a client that presented the static token, or of any client of an open server. */
export const FULL_GRANT: Grant = Object.freeze({
  role: 'controller',
  session: '*',
  publish: '*',
  uploadBytes: undefined,
  recording: '*',
  maxSessionMs: undefined,
  expiresAt: undefined,
});

/** Whether a grant lets its holder take clips (`clip`) or start and stop recordings (`record`). */
export function mayRecord(grant: Grant, what: RecordingGrant): boolean {
  return grant.recording === '*' || grant.recording.includes(what);
}

/** The keys a server checks tokens with (`ServerOptions.auth`). At least one of them. */
export interface TokenAuthOptions {
  /** HMAC secret (HS256), at least 32 characters: the same one mints and checks. */
  secret?: string;
  /** Ed25519 public key(s), PEM (SPKI): checks EdDSA tokens minted with the private key. */
  publicKey?: string | readonly string[];
  /** URL of a JSON Web Key Set (a platform's keys): checks the tokens it mints (EdDSA, ES256, RS256). */
  jwksUrl?: string;
  /** Required `iss`, when set. */
  issuer?: string;
  /** Required `aud`, when set. */
  audience?: string;
  /** Longest lifetime accepted, seconds (default and cap {@link MAX_TOKEN_TTL_S}). */
  maxTtlS?: number;
}

/** The key a minter signs with. */
export type SigningKey = { secret: string } | { privateKey: string | KeyObject };

/** What a new token grants (every field optional). */
export interface TokenRequest {
  /** Lifetime, seconds (default {@link DEFAULT_TOKEN_TTL_S}, at most {@link MAX_TOKEN_TTL_S}). */
  ttlS?: number;
  /** Valid only from this many seconds on (default 0: at once). */
  notBeforeS?: number;
  /** The session or instance it is for (default `*`: any). */
  session?: string;
  /** Default `controller`. */
  role?: Role;
  /** Inbound tracks it may publish (default: `*` for a controller, none for any other role). */
  publish?: '*' | readonly string[];
  /** Bytes it may upload (default: the server's limits for a controller, 0 for any other role). */
  uploadBytes?: number;
  /** Clips and recordings it may make (default: `*` for a controller, none for any other role). */
  recording?: '*' | readonly RecordingGrant[];
  /** The longest its holder may stay in a session, seconds, from its arrival (default: no limit). */
  maxSessionS?: number;
  /** `sub`: who holds it (a user id). */
  subject?: string;
  issuer?: string;
  audience?: string;
  /** `jti` (default: a random one). */
  id?: string;
}

/** The result of checking a token: its grant, or why it is refused. */
export type TokenCheck = { ok: true; grant: Grant } | { ok: false; status: 401 | 403; code: TokenErrorCode; message: string };

/** The codes a refused token is answered with (every one is in docs/errors.md). */
export type TokenErrorCode =
  | typeof HttpErrorCode.TokenExpired
  | typeof HttpErrorCode.TokenNotYetValid
  | typeof HttpErrorCode.TokenWrongKey
  | typeof HttpErrorCode.TokenTampered
  | typeof HttpErrorCode.TokenAlgNotAllowed
  | typeof HttpErrorCode.TokenWrongSession
  | typeof HttpErrorCode.TokenMalformed
  | typeof HttpErrorCode.TokenInvalidClaims;

/** A fingerprint of a key, for the `kid` header: 16 base64url characters of a SHA-256. */
function fingerprint(kind: string, material: Buffer | string): string {
  return createHash('sha256').update(kind).update(material).digest('base64url').slice(0, 16);
}

function checkSecret(secret: unknown, where: string): string {
  if (typeof secret !== 'string' || secret.length < 32) {
    throw new RangeError(
      `${where} must be a string of at least 32 characters (e.g. "openssl rand -base64 32"), got ${typeof secret === 'string' ? `${secret.length} characters` : typeof secret}`,
    );
  }
  return secret;
}

function ed25519Public(pem: string, where: string): KeyObject {
  let key: KeyObject;
  try {
    key = createPublicKey(pem);
  } catch (err) {
    throw new TypeError(`${where} is not a PEM public key: ${(err as Error).message}`);
  }
  if (key.asymmetricKeyType !== 'ed25519')
    throw new TypeError(`${where} is a ${key.asymmetricKeyType} key; tokens are signed with Ed25519 keys (openssl genpkey -algorithm ed25519)`);
  return key;
}

const spkiKid = (key: KeyObject): string => fingerprint('ed25519:', key.export({ type: 'spki', format: 'der' }));

/**
 * Mints tokens with one key.
 * @example
 * const minter = new TokenMinter({ secret: process.env.REACTOR_AUTH_SECRET! });
 * const token = await minter.mint({ role: 'spectator', ttlS: 600 });
 */
export class TokenMinter {
  readonly #alg: 'HS256' | 'EdDSA';
  readonly #kid: string;
  readonly #key: Uint8Array | KeyObject;

  /** @throws {RangeError | TypeError} for a secret shorter than 32 characters or a key that is not an Ed25519 private key. */
  constructor(key: SigningKey) {
    if (key !== null && typeof key === 'object' && 'secret' in key) {
      const secret = checkSecret(key.secret, 'the token secret');
      this.#alg = 'HS256';
      this.#kid = fingerprint('hs256:', secret);
      this.#key = new TextEncoder().encode(secret);
    } else if (key !== null && typeof key === 'object' && 'privateKey' in key) {
      let priv: KeyObject;
      try {
        priv = typeof key.privateKey === 'string' ? createPrivateKey(key.privateKey) : key.privateKey;
      } catch (err) {
        throw new TypeError(`the token private key is not a PEM private key: ${(err as Error).message}`);
      }
      if (priv.asymmetricKeyType !== 'ed25519')
        throw new TypeError(`the token private key is a ${priv.asymmetricKeyType} key; use an Ed25519 key (openssl genpkey -algorithm ed25519)`);
      this.#alg = 'EdDSA';
      this.#kid = spkiKid(createPublicKey(priv));
      this.#key = priv;
    } else {
      throw new TypeError('a token key is { secret } (HMAC, at least 32 characters) or { privateKey } (Ed25519, PEM)');
    }
  }

  /** The `kid` of its tokens. */
  get keyId(): string {
    return this.#kid;
  }

  /**
   * A signed token for `request`.
   * @throws {RangeError | TypeError} for a lifetime past {@link MAX_TOKEN_TTL_S}, a bad role, track list or byte count.
   */
  async mint(request: TokenRequest = {}): Promise<string> {
    const ttl = request.ttlS ?? DEFAULT_TOKEN_TTL_S;
    if (!Number.isInteger(ttl) || ttl < 1 || ttl > MAX_TOKEN_TTL_S) {
      throw new RangeError(`a token lives 1 to ${MAX_TOKEN_TTL_S} s (6 h), got ${JSON.stringify(ttl)}; mint a new one when it runs out`);
    }
    const nbf = request.notBeforeS ?? 0;
    if (!Number.isInteger(nbf) || nbf < 0 || nbf >= ttl)
      throw new RangeError(`notBeforeS must be an integer from 0 to below ttlS (${ttl}), got ${JSON.stringify(nbf)}`);
    const role = request.role ?? 'controller';
    if (typeof role !== 'string' || !ROLE_PATTERN.test(role))
      throw new TypeError(`role must be snake_case (controller, spectator or the app's own), got ${JSON.stringify(role)}`);
    const session = request.session ?? '*';
    if (typeof session !== 'string' || session === '' || session.length > 253)
      throw new TypeError(`session must be a session id, an instance name or "*", got ${JSON.stringify(session)}`);
    const publish = request.publish ?? (role === 'controller' ? '*' : []);
    if (publish !== '*' && (!Array.isArray(publish) || publish.some((t) => typeof t !== 'string' || t === ''))) {
      throw new TypeError(`publish must be "*" or a list of inbound track names, got ${JSON.stringify(publish)}`);
    }
    const upl = request.uploadBytes ?? (role === 'controller' ? undefined : 0);
    if (upl !== undefined && !(Number.isSafeInteger(upl) && upl >= 0))
      throw new RangeError(`uploadBytes must be a non-negative integer, got ${JSON.stringify(upl)}`);
    const rec = request.recording ?? (role === 'controller' ? '*' : []);
    if (rec !== '*' && (!Array.isArray(rec) || rec.some((r) => !(RECORDING_GRANTS as readonly string[]).includes(r)))) {
      throw new TypeError(`recording must be "*" or a list of ${RECORDING_GRANTS.map((r) => `"${r}"`).join(', ')}, got ${JSON.stringify(rec)}`);
    }
    const mst = request.maxSessionS;
    if (mst !== undefined && !(Number.isInteger(mst) && mst > 0))
      throw new RangeError(`maxSessionS must be a positive integer of seconds, got ${JSON.stringify(mst)}`);
    const now = Math.floor(Date.now() / 1000);
    const claims: JWTPayload = { sid: session, role, pub: publish, rec };
    if (upl !== undefined) claims['upl'] = upl;
    if (mst !== undefined) claims['mst'] = mst;
    const jwt = new SignJWT(claims)
      .setProtectedHeader({ alg: this.#alg, typ: 'JWT', kid: this.#kid })
      .setIssuedAt(now)
      .setNotBefore(now + nbf)
      .setExpirationTime(now + ttl)
      .setJti(request.id ?? crypto.randomUUID());
    if (request.subject !== undefined) jwt.setSubject(request.subject);
    if (request.issuer !== undefined) jwt.setIssuer(request.issuer);
    if (request.audience !== undefined) jwt.setAudience(request.audience);
    return jwt.sign(this.#key);
  }
}

/**
 * Mints one token (see {@link TokenMinter.mint}).
 * @example
 * const token = await mintToken({ secret }, { role: 'spectator', session: 'gs-abc12', ttlS: 900 });
 */
export function mintToken(key: SigningKey, request: TokenRequest = {}): Promise<string> {
  return new TokenMinter(key).mint(request);
}

/** Whether the token's middle part decodes to a JSON object (jose checks the signature first, which would call any other payload tampered). */
function payloadIsJsonObject(token: string): boolean {
  try {
    const claims: unknown = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8'));
    return typeof claims === 'object' && claims !== null && !Array.isArray(claims);
  } catch {
    return false;
  }
}

/** Whether a presented credential has the shape of a JWT (three base64url parts). */
export function looksLikeJwt(token: string): boolean {
  return /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/.test(token);
}

/**
 * Checks tokens against the configured keys; one per server (keys are imported once).
 * @throws {RangeError | TypeError} from the constructor for a bad key or option, naming it.
 */
export class TokenVerifier {
  readonly options: Readonly<TokenAuthOptions>;
  /** The HMAC key, imported once (jose would import raw bytes again for every token). */
  readonly #hmac: { kid: string; key: Promise<webcrypto.CryptoKey> } | undefined;
  /** Ed25519 public keys by kid, imported once as WebCrypto keys. */
  readonly #ed = new Map<string, Promise<webcrypto.CryptoKey>>();
  readonly #jwks: JWTVerifyGetKey | undefined;
  readonly #maxTtlS: number;
  /** Verified tokens -> their payload (insertion order: the oldest is dropped first). */
  readonly #verified = new Map<string, JWTPayload>();

  constructor(options: TokenAuthOptions) {
    if (options === null || typeof options !== 'object') throw new TypeError('options.auth must be an object { secret } | { publicKey } | { jwksUrl }');
    const { secret, publicKey, jwksUrl } = options;
    if (secret === undefined && publicKey === undefined && jwksUrl === undefined) {
      throw new TypeError('options.auth needs a key: secret (HMAC), publicKey (Ed25519 PEM) or jwksUrl');
    }
    if (secret !== undefined) {
      checkSecret(secret, 'options.auth.secret');
      const key = webcrypto.subtle.importKey('raw', new TextEncoder().encode(secret), { name: 'HMAC', hash: 'SHA-256' }, false, ['verify']);
      key.catch(() => undefined);
      this.#hmac = { kid: fingerprint('hs256:', secret), key };
    }
    for (const pem of publicKey === undefined ? [] : typeof publicKey === 'string' ? [publicKey] : publicKey) {
      const key = ed25519Public(pem, 'options.auth.publicKey');
      const imported = webcrypto.subtle.importKey('spki', key.export({ type: 'spki', format: 'der' }), { name: 'Ed25519' }, false, ['verify']);
      imported.catch(() => undefined);
      this.#ed.set(spkiKid(key), imported);
    }
    if (jwksUrl !== undefined) {
      let url: URL;
      try {
        url = new URL(jwksUrl);
      } catch {
        throw new TypeError(`options.auth.jwksUrl must be an http(s) URL, got ${JSON.stringify(jwksUrl)}`);
      }
      if (url.protocol !== 'https:' && url.protocol !== 'http:')
        throw new TypeError(`options.auth.jwksUrl must be an http(s) URL, got ${JSON.stringify(jwksUrl)}`);
      this.#jwks = createRemoteJWKSet(url, { cooldownDuration: 30_000, cacheMaxAge: 600_000 });
    }
    const maxTtlS = options.maxTtlS ?? MAX_TOKEN_TTL_S;
    if (!Number.isInteger(maxTtlS) || maxTtlS < 1 || maxTtlS > MAX_TOKEN_TTL_S) {
      throw new RangeError(`options.auth.maxTtlS must be an integer from 1 to ${MAX_TOKEN_TTL_S}, got ${JSON.stringify(maxTtlS)}`);
    }
    this.#maxTtlS = maxTtlS;
    this.options = { ...options };
  }

  /**
   * Checks a token: signature (and which key), time window, lifetime cap, claims, session.
   * @param sessions the session ids and instance name this server holds now (a `sid` other than these and `*` is refused)
   */
  async verify(token: string, sessions: readonly string[]): Promise<TokenCheck> {
    const refuse = (code: TokenErrorCode, message: string, status: 401 | 403 = 401): TokenCheck => ({ ok: false, status, code, message });
    const seen = this.#verified.get(token);
    if (seen !== undefined) {
      // The signature held before (the same bytes): only the time window can have changed.
      if (Date.now() / 1000 < seen.exp! + TOKEN_CLOCK_TOLERANCE_S) return this.#grant(seen, sessions, refuse);
      this.#verified.delete(token);
      return refuse(HttpErrorCode.TokenExpired, 'the token has expired; get a new one (tokens live at most 6 h)');
    }
    let header: ReturnType<typeof decodeProtectedHeader>;
    try {
      header = decodeProtectedHeader(token);
    } catch {
      return refuse(HttpErrorCode.TokenMalformed, 'the token is not a JWT (three base64url parts, a JSON header); mint a new one with "reactor token"');
    }
    if (!payloadIsJsonObject(token)) {
      return refuse(
        HttpErrorCode.TokenMalformed,
        "the token's payload is not a base64url JSON object (its claims cannot be read); present the token whole, as minted",
      );
    }
    const alg = header.alg;
    const kid = header.kid;
    let key: webcrypto.CryptoKey | KeyObject | JWTVerifyGetKey | undefined;
    if (alg === 'HS256' && this.#hmac) {
      if (kid !== undefined && kid !== this.#hmac.kid)
        return refuse(
          HttpErrorCode.TokenWrongKey,
          `the token was signed with another key (kid ${JSON.stringify(String(kid).slice(0, 32))}); mint it with this server's secret`,
        );
      key = await this.#hmac.key;
    } else if (alg === 'EdDSA' && kid !== undefined && this.#ed.has(kid)) {
      key = await this.#ed.get(kid)!;
    } else if (this.#jwks && alg !== undefined && ['EdDSA', 'ES256', 'RS256'].includes(alg)) {
      key = this.#jwks;
    } else if (alg === 'EdDSA' && this.#ed.size > 0) {
      return refuse(
        HttpErrorCode.TokenWrongKey,
        'the token was signed with an Ed25519 key this server does not know; mint it with the private key of options.auth.publicKey',
      );
    } else {
      const allowed = [this.#hmac ? 'HS256' : undefined, this.#ed.size > 0 || this.#jwks ? 'EdDSA' : undefined, this.#jwks ? 'ES256, RS256' : undefined]
        .filter(Boolean)
        .join(', ');
      return refuse(
        HttpErrorCode.TokenAlgNotAllowed,
        `the token's algorithm ${JSON.stringify(alg ?? null)} is not accepted here${alg === 'none' ? ' (an unsigned token)' : ''}; this server takes ${allowed}`,
      );
    }
    let payload: JWTPayload;
    try {
      const options = {
        algorithms: [alg!],
        requiredClaims: ['exp'],
        clockTolerance: TOKEN_CLOCK_TOLERANCE_S,
        ...(this.options.issuer !== undefined && { issuer: this.options.issuer }),
        ...(this.options.audience !== undefined && { audience: this.options.audience }),
      };
      const result = typeof key === 'function' ? await jwtVerify(token, key, options) : await jwtVerify(token, key, options);
      payload = result.payload;
      if (this.#verified.size >= VERIFIED_TOKEN_CACHE_SIZE) this.#verified.delete(this.#verified.keys().next().value!);
      this.#verified.set(token, payload);
    } catch (err) {
      if (err instanceof joseErrors.JWTExpired) return refuse(HttpErrorCode.TokenExpired, 'the token has expired; get a new one (tokens live at most 6 h)');
      if (err instanceof joseErrors.JWTClaimValidationFailed && err.claim === 'nbf') {
        return refuse(
          HttpErrorCode.TokenNotYetValid,
          'the token is not valid yet (its nbf is in the future); use it later, or check the clocks of the minter and this server',
        );
      }
      if (err instanceof joseErrors.JWTClaimValidationFailed)
        return refuse(HttpErrorCode.TokenInvalidClaims, `the token's "${err.claim}" claim is wrong: ${err.message}`);
      if (err instanceof joseErrors.JWKSNoMatchingKey)
        return refuse(HttpErrorCode.TokenWrongKey, "the token was signed with a key the JWKS does not list; mint it with one of the platform's keys");
      if (err instanceof joseErrors.JWSSignatureVerificationFailed) {
        return refuse(
          kid === undefined ? HttpErrorCode.TokenWrongKey : HttpErrorCode.TokenTampered,
          kid === undefined
            ? "the token's signature does not verify with this server's key (and it names none); mint it with this server's key"
            : "the token's signature does not match its content: it was changed after it was signed; mint a new one",
        );
      }
      if (err instanceof joseErrors.JOSEAlgNotAllowed)
        return refuse(HttpErrorCode.TokenAlgNotAllowed, `the token's algorithm is not accepted here: ${(err as Error).message}`);
      if (err instanceof joseErrors.JOSEError && !(err instanceof joseErrors.JWKSTimeout) && !(err instanceof joseErrors.JWKSInvalid)) {
        return refuse(HttpErrorCode.TokenMalformed, `the token cannot be read: ${(err as Error).message}`);
      }
      throw err;
    }
    return this.#grant(payload, sessions, refuse);
  }

  #grant(p: JWTPayload, sessions: readonly string[], refuse: (code: TokenErrorCode, message: string, status?: 401 | 403) => TokenCheck): TokenCheck {
    const now = Math.floor(Date.now() / 1000);
    const lifetime = p.exp! - (typeof p.iat === 'number' ? Math.min(p.iat, now) : now);
    if (lifetime > this.#maxTtlS + TOKEN_CLOCK_TOLERANCE_S) {
      return refuse(
        HttpErrorCode.TokenInvalidClaims,
        `the token lives ${lifetime} s, longer than this server accepts (${this.#maxTtlS} s); mint a shorter-lived one`,
      );
    }
    const role = p['role'] ?? 'controller';
    if (typeof role !== 'string' || !ROLE_PATTERN.test(role))
      return refuse(HttpErrorCode.TokenInvalidClaims, `the token's role ${JSON.stringify(role)} is not a snake_case role name`);
    const sid = p['sid'] ?? '*';
    if (typeof sid !== 'string')
      return refuse(HttpErrorCode.TokenInvalidClaims, 'the token\'s "sid" claim must be a string (a session id, an instance name or "*")');
    if (sid !== '*' && !sessions.includes(sid)) {
      return refuse(
        HttpErrorCode.TokenWrongSession,
        // The session this server holds is not named: a token for another session must not learn it.
        `the token is for session ${JSON.stringify(sid.slice(0, 64))}, which this server does not hold; ask for a token of the session you join`,
        403,
      );
    }
    const pub = p['pub'] ?? (role === 'controller' ? '*' : []);
    if (pub !== '*' && !(Array.isArray(pub) && pub.every((t) => typeof t === 'string')))
      return refuse(HttpErrorCode.TokenInvalidClaims, 'the token\'s "pub" claim must be "*" or a list of track names');
    const upl = p['upl'] ?? (role === 'controller' ? undefined : 0);
    if (upl !== undefined && !(typeof upl === 'number' && Number.isSafeInteger(upl) && upl >= 0))
      return refuse(HttpErrorCode.TokenInvalidClaims, 'the token\'s "upl" claim must be a byte count');
    const rec = p['rec'] ?? (role === 'controller' ? '*' : []);
    if (rec !== '*' && !(Array.isArray(rec) && rec.every((r) => (RECORDING_GRANTS as readonly unknown[]).includes(r))))
      return refuse(HttpErrorCode.TokenInvalidClaims, `the token's "rec" claim must be "*" or a list of ${RECORDING_GRANTS.map((r) => `"${r}"`).join(', ')}`);
    const mst = p['mst'];
    if (mst !== undefined && !(typeof mst === 'number' && Number.isInteger(mst) && mst > 0))
      return refuse(HttpErrorCode.TokenInvalidClaims, 'the token\'s "mst" claim must be a positive number of seconds');
    const grant: Grant = {
      role,
      session: sid,
      publish: pub as Grant['publish'],
      uploadBytes: upl as number | undefined,
      recording: rec as Grant['recording'],
      maxSessionMs: mst === undefined ? undefined : (mst as number) * 1000,
      expiresAt: p.exp! * 1000,
      ...(typeof p.sub === 'string' && { subject: p.sub }),
      tokenId: typeof p.jti === 'string' ? p.jti : fingerprint('jwt:', `${p.iat}:${p.exp}:${p.sub}`),
    };
    return { ok: true, grant };
  }
}

/** Whether a grant lets its holder publish `track`. */
export function mayPublish(grant: Grant, track: string): boolean {
  return grant.publish === '*' || grant.publish.includes(track);
}
