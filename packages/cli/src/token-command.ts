/**
 * Signed session tokens from the CLI: where `reactor run` and `reactor token` find their keys
 * (the environment first, then `server.auth` in reactor.yaml), and `reactor token`, which mints
 * one and prints it on stdout.
 */
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { ReactorError } from '@reactor/runtime';
import {
  MAX_TOKEN_TTL_S,
  RECORDING_GRANTS,
  TokenMinter,
  TokenVerifier,
  type RecordingGrant,
  type SigningKey,
  type TokenAuthOptions,
  type TokenRequest,
} from '@reactor/access';
import type { Logger } from '@reactor/log';
import { CliErrorCode } from './errors.js';
import { manifestFrom, type Manifest } from './manifest.js';

/** The environment variables that carry token keys (they win over `server.auth`). */
export const AUTH_ENV = {
  secret: 'REACTOR_AUTH_SECRET',
  publicKey: 'REACTOR_AUTH_PUBLIC_KEY',
  privateKey: 'REACTOR_AUTH_PRIVATE_KEY',
  jwksUrl: 'REACTOR_AUTH_JWKS_URL',
} as const;

/** An environment variable, empty counting as unset. */
const fromEnv = (env: NodeJS.ProcessEnv, name: string): string | undefined => (env[name] === '' ? undefined : env[name]);

/** A PEM key given as its text or as a file path (relative paths from the current folder). */
function pem(value: string, where: string): string {
  if (value.trimStart().startsWith('-----BEGIN')) return value;
  const path = resolve(value);
  if (!existsSync(path))
    throw new ReactorError(
      CliErrorCode.AuthInvalid,
      `${where}: ${path} does not exist; give the PEM file of the key (openssl genpkey -algorithm ed25519 -out key.pem)`,
    );
  return readFileSync(path, 'utf8');
}

/**
 * The token checking keys of `reactor run`: `REACTOR_AUTH_*` or `server.auth`; `undefined` when neither names one.
 * @throws ReactorError `auth_invalid` for a missing key file or a key the server cannot use.
 */
export function authOptions(m: Manifest, env: NodeJS.ProcessEnv = process.env): TokenAuthOptions | undefined {
  const a = m.server.auth ?? {};
  const secret = fromEnv(env, AUTH_ENV.secret) ?? a.secret;
  const pub = fromEnv(env, AUTH_ENV.publicKey) ?? a.publicKey;
  const jwksUrl = fromEnv(env, AUTH_ENV.jwksUrl) ?? a.jwksUrl;
  if (secret === undefined && pub === undefined && jwksUrl === undefined) return undefined;
  const options: TokenAuthOptions = {
    ...(secret !== undefined && { secret }),
    ...(pub !== undefined && { publicKey: pem(pub, fromEnv(env, AUTH_ENV.publicKey) !== undefined ? AUTH_ENV.publicKey : 'server.auth.public_key') }),
    ...(jwksUrl !== undefined && { jwksUrl }),
    ...(a.issuer !== undefined && { issuer: a.issuer }),
    ...(a.audience !== undefined && { audience: a.audience }),
    ...(a.maxTtlS !== undefined && { maxTtlS: a.maxTtlS }),
  };
  try {
    new TokenVerifier(options);
  } catch (err) {
    const where = fromEnv(env, AUTH_ENV.secret) !== undefined ? `${AUTH_ENV.secret} / server.auth` : `server.auth in ${m.file}`;
    throw new ReactorError(CliErrorCode.AuthInvalid, `${where}: ${(err as Error).message.replace(/options\.auth\./g, '')}`, { cause: err });
  }
  return options;
}

/** The flags of `reactor token`. */
export interface TokenOptions {
  manifest?: string;
  role?: string;
  session?: string;
  /** Lifetime: seconds, or with a unit (`90s`, `15m`, `1h`). */
  ttl?: string | number;
  /** Valid from this long on (same units). */
  notBefore?: string | number;
  /** Tracks it may publish: a comma-separated list, `*`, or `none`. */
  publish?: string;
  /** Bytes it may upload. */
  uploadBytes?: string | number;
  /** Clips and recordings it may make: `clip`, `record`, both comma-separated, `*`, or `none`. */
  rec?: string;
  /** The longest its holder may stay in a session, from its arrival (same units as --ttl). */
  maxSession?: string | number;
  subject?: string;
}

/** A duration flag in seconds: `3600`, `90s`, `15m`, `1h`. @throws ReactorError `cli_usage` */
export function durationS(value: string | number, flag: string): number {
  const m = /^(\d+)(s|m|h)?$/.exec(String(value).trim());
  if (!m)
    throw new ReactorError(
      CliErrorCode.CliUsage,
      `${flag} must be a whole number of seconds or a duration such as 90s, 15m or 1h, got ${JSON.stringify(String(value))}`,
    );
  return Number(m[1]) * (m[2] === 'h' ? 3600 : m[2] === 'm' ? 60 : 1);
}

/** `--rec`: `*`, `none`, or a comma-separated list of `clip` and `record`. @throws ReactorError `cli_usage` */
export function recordingFlag(value: string): '*' | RecordingGrant[] {
  if (value.trim() === '*') return '*';
  if (value.trim() === 'none') return [];
  const list = value
    .split(',')
    .map((t) => t.trim())
    .filter(Boolean);
  const bad = list.find((t) => !(RECORDING_GRANTS as readonly string[]).includes(t));
  if (bad !== undefined || list.length === 0)
    throw new ReactorError(CliErrorCode.CliUsage, `--rec takes clip, record (comma-separated), * or none, got ${JSON.stringify(value)}`);
  return list as RecordingGrant[];
}

/**
 * The key `reactor token` signs with: `REACTOR_AUTH_PRIVATE_KEY` / `server.auth.private_key`
 * (Ed25519), else the HMAC secret.
 * @throws ReactorError `token_no_key` when there is none; `auth_invalid` for a missing key file.
 */
export function signingKey(m: Manifest, env: NodeJS.ProcessEnv = process.env): SigningKey {
  const priv = fromEnv(env, AUTH_ENV.privateKey) ?? m.server.auth?.privateKey;
  if (priv !== undefined) return { privateKey: pem(priv, fromEnv(env, AUTH_ENV.privateKey) !== undefined ? AUTH_ENV.privateKey : 'server.auth.private_key') };
  const secret = fromEnv(env, AUTH_ENV.secret) ?? m.server.auth?.secret;
  if (secret !== undefined) return { secret };
  throw new ReactorError(
    CliErrorCode.TokenNoKey,
    `no key to sign with: set ${AUTH_ENV.secret} (an HMAC secret of at least 32 characters) or ${AUTH_ENV.privateKey} (an Ed25519 PEM key), or server.auth.secret / server.auth.private_key in ${m.file}`,
  );
}

/** `reactor token`: mints one token with the manifest's (or the environment's) key and prints it. */
export async function tokenCommand(o: TokenOptions, _logger: Logger): Promise<void> {
  const m = manifestFrom(o);
  const key = signingKey(m);
  const request: TokenRequest = {
    ttlS: o.ttl === undefined ? 3600 : durationS(o.ttl, '--ttl'),
    ...(o.notBefore !== undefined && { notBeforeS: durationS(o.notBefore, '--not-before') }),
    ...(o.role !== undefined && { role: String(o.role) }),
    ...(o.session !== undefined && { session: String(o.session) }),
    ...(o.publish !== undefined && {
      publish:
        o.publish === '*'
          ? '*'
          : o.publish === 'none'
            ? []
            : String(o.publish)
                .split(',')
                .map((t) => t.trim())
                .filter(Boolean),
    }),
    ...(o.uploadBytes !== undefined && { uploadBytes: Number(o.uploadBytes) }),
    ...(o.rec !== undefined && { recording: recordingFlag(String(o.rec)) }),
    ...(o.maxSession !== undefined && { maxSessionS: durationS(o.maxSession, '--max-session') }),
    ...(o.subject !== undefined && { subject: String(o.subject) }),
    ...(m.server.auth?.issuer !== undefined && { issuer: m.server.auth.issuer }),
    ...(m.server.auth?.audience !== undefined && { audience: m.server.auth.audience }),
  };
  if (request.ttlS! > MAX_TOKEN_TTL_S) {
    throw new ReactorError(
      CliErrorCode.CliUsage,
      `--ttl is at most ${MAX_TOKEN_TTL_S / 3600} h (${MAX_TOKEN_TTL_S} s), got ${request.ttlS} s; tokens are meant to be short-lived: mint a new one when it runs out`,
    );
  }
  let token: string;
  try {
    token = await new TokenMinter(key).mint(request);
  } catch (err) {
    if (err instanceof RangeError || err instanceof TypeError) throw new ReactorError(CliErrorCode.CliUsage, `reactor token: ${err.message}`, { cause: err });
    throw err;
  }
  process.stdout.write(`${token}\n`);
}
