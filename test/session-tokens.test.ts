/**
 * Signed session tokens through the real server, started as a user starts it: `reactor run
 * --manifest` with `server.auth` (an Ed25519 public key file, a JWKS on loopback) and
 * `REACTOR_AUTH_SECRET`, tokens minted by `reactor token` as typed. Every refusal has its own
 * code on the upgrade and on HTTP routes; roles hold on the wire (a spectator's command,
 * publication and upload are refused, a controller's accepted); single-controller hand-over.
 */
import { generateKeyPairSync, createPrivateKey } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { SignJWT, exportJWK } from 'jose';
import { connect, type ReactorClient } from '@reactor/client';
import { TokenMinter } from '@reactor/server';
import { cameraWorkspace, removeDir } from './fixtures/camera-run.js';
import { cliSync, runCli, type RunningCli } from './fixtures/reactor-cli.js';

const SECRET = 'an-hmac-secret-for-the-token-tests-0123456789';
const STATIC = 'static-token-0123456789';
const ed = generateKeyPairSync('ed25519');
const edPublicPem = ed.publicKey.export({ type: 'spki', format: 'pem' }).toString();
const edPrivatePem = ed.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
/** The "platform": its own Ed25519 key, published as a JWKS on loopback. */
const platform = generateKeyPairSync('ed25519');

let jwks: Server;
let dir: string;
let run: RunningCli;
let base: string;
const clients: ReactorClient[] = [];

beforeAll(async () => {
  const jwk = { ...(await exportJWK(platform.publicKey)), kid: 'platform-1', alg: 'EdDSA', use: 'sig' };
  jwks = createServer((req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ keys: [jwk] }));
  });
  await new Promise<void>((r) => jwks.listen(0, '127.0.0.1', r));
  const jwksUrl = `http://127.0.0.1:${(jwks.address() as AddressInfo).port}/jwks.json`;
  dir = cameraWorkspace('reactor-tokens-', ['port: 0', `token: ${STATIC}`, 'auth:', '  public_key: keys/ed.pub.pem', `  jwks_url: ${jwksUrl}`], {});
  const { mkdirSync, writeFileSync } = await import('node:fs');
  mkdirSync(join(dir, 'keys'));
  writeFileSync(join(dir, 'keys/ed.pub.pem'), edPublicPem);
  writeFileSync(join(dir, 'keys/ed.pem'), edPrivatePem);
  run = runCli(dir, { REACTOR_AUTH_SECRET: SECRET });
  base = new URL(await run.url).origin;
}, 60_000);

afterAll(async () => {
  for (const c of clients) c.close();
  await run?.stop();
  await new Promise<void>((r) => (jwks ? jwks.close(() => r()) : r()));
  if (dir) removeDir(dir);
});

/** `reactor token` as typed, with the test's key in the environment. */
function reactorToken(args: string[], env: Record<string, string> = { REACTOR_AUTH_SECRET: SECRET }): string {
  const r = cliSync(['token', '--manifest', join(dir, 'reactor.yaml'), ...args], env);
  expect(r.status, r.stderr).toBe(0);
  const token = r.stdout.trim();
  expect(token.split('.')).toHaveLength(3);
  return token;
}

/** What a refused request says: its status, code, message and `WWW-Authenticate`. */
interface Refusal {
  status: number;
  code?: string;
  message?: string;
  challenge?: string | null;
}

/** The HTTP status and error code of `GET /schema` with a bearer token. */
async function http(token: string | undefined, full = false): Promise<Refusal> {
  // A fresh connection each time: a kept-alive one may be closed by the server's idle timeout between two spawns of the CLI.
  const headers: Record<string, string> = { connection: 'close', ...(token !== undefined && { authorization: `Bearer ${token}` }) };
  const res = await fetch(`${base}/schema`, { headers });
  const body = (await res.json()) as { error?: { code: string; message: string } };
  return {
    status: res.status,
    ...(body.error && { code: body.error.code }),
    ...(full && body.error && { message: body.error.message, challenge: res.headers.get('www-authenticate') }),
  };
}

/** The status (and refusal code) of a WebSocket upgrade with `?token=`; `full`: its message and `WWW-Authenticate` too. */
function upgrade(token: string | undefined, full = false): Promise<Refusal> {
  const url = `${base.replace('http', 'ws')}/ws${token === undefined ? '' : `?token=${encodeURIComponent(token)}`}`;
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.once('open', () => {
      ws.close();
      resolve({ status: 101 });
    });
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => {
        const error = (JSON.parse(body) as { error: { code: string; message: string } }).error;
        resolve({
          status: res.statusCode!,
          code: error.code,
          ...(full && { message: error.message, challenge: (res.headers['www-authenticate'] as string | undefined) ?? null }),
        });
      });
    });
    ws.once('error', (err) => {
      if (!/Unexpected server response/.test(err.message)) reject(err);
    });
  });
}

/** Both doors answer alike. */
async function expectBoth(token: string | undefined, status: number, code?: string): Promise<void> {
  expect(await http(token)).toEqual({ status: status === 101 ? 200 : status, ...(code && { code }) });
  expect(await upgrade(token)).toEqual({ status, ...(code && { code }) });
}

/** Tokens of the server's secret, minted in this process (`reactor token` mints the same; each spawn of it costs seconds on a busy machine). */
const minter = new TokenMinter({ secret: SECRET });
const now = (): number => Math.floor(Date.now() / 1000);
const hmac = new TextEncoder().encode(SECRET);
const b64 = (o: object): string => Buffer.from(JSON.stringify(o)).toString('base64url');

describe('session tokens through reactor run', () => {
  it('accepts a token of reactor token (HMAC and Ed25519), a platform token of the JWKS, and the static token', async () => {
    await expectBoth(reactorToken([]), 101);
    await expectBoth(reactorToken(['--role', 'spectator', '--ttl', '15m'], { REACTOR_AUTH_PRIVATE_KEY: join(dir, 'keys/ed.pem') }), 101);
    const platformToken = await new SignJWT({ role: 'controller', sid: '*' })
      .setProtectedHeader({ alg: 'EdDSA', kid: 'platform-1' })
      .setIssuedAt()
      .setExpirationTime('10m')
      .sign(createPrivateKey(platform.privateKey.export({ type: 'pkcs8', format: 'pem' })));
    await expectBoth(platformToken, 101);
    await expectBoth(STATIC, 101);
    await expectBoth(undefined, 401, 'unauthorized');
    await expectBoth('not-a-token', 401, 'unauthorized');
  });

  it('refuses each bad token with its own code', async () => {
    const expired = await new SignJWT({ role: 'controller' })
      .setProtectedHeader({ alg: 'HS256' })
      .setIssuedAt(now() - 7200)
      .setExpirationTime(now() - 3600)
      .sign(hmac);
    await expectBoth(expired, 401, 'token_expired');
    await expectBoth(await minter.mint({ notBeforeS: 600 }), 401, 'token_not_yet_valid');
    const otherKey = await new TokenMinter({ secret: 'another-secret-that-is-long-enough-000000' }).mint();
    await expectBoth(otherKey, 401, 'token_wrong_key');
    const otherEd = await new TokenMinter({ privateKey: generateKeyPairSync('ed25519').privateKey }).mint();
    await expectBoth(otherEd, 401, 'token_wrong_key');
    await expectBoth(await minter.mint({ session: 'some-other-session' }), 403, 'token_wrong_session');
    // A spectator's token with its role changed to controller: the signature no longer matches.
    const [h, p, s] = (await minter.mint({ role: 'spectator' })).split('.');
    const claims = JSON.parse(Buffer.from(p!, 'base64url').toString()) as Record<string, unknown>;
    await expectBoth(`${h}.${b64({ ...claims, role: 'controller' })}.${s}`, 401, 'token_tampered');
    await expectBoth(`${b64({ alg: 'none', typ: 'JWT' })}.${b64({ role: 'controller', exp: now() + 600 })}.`, 401, 'token_alg_not_allowed');
    await expectBoth(`${b64({ alg: 'HS512' })}.${b64({ exp: now() + 600 })}.c2ln`, 401, 'token_alg_not_allowed');
    await expectBoth('eyJub3QiOiJqc29u.eyJ9.c2ln', 401, 'token_malformed');
    // A header of this server's key and a payload that is not JSON: unreadable, not tampered.
    await expectBoth(`${h}.${Buffer.from('not json').toString('base64url')}.${s}`, 401, 'token_malformed');
    const tooLong = await new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setIssuedAt().setExpirationTime('7h').sign(hmac);
    await expectBoth(tooLong, 401, 'token_invalid_claims');
  });

  it('accepts a token bound to the session the server holds', async () => {
    const first = await connect(base, { token: await minter.mint(), WebSocket: WebSocket as never });
    clients.push(first);
    const sessionId = first.session.sessionId!;
    expect(sessionId).toBeTruthy();
    await expectBoth(reactorToken(['--session', sessionId]), 101);
  });

  it('answers a refused token with WWW-Authenticate: Bearer error="invalid_token" on both doors, and never names the session it holds', async () => {
    const holder = await connect(base, { token: await minter.mint(), WebSocket: WebSocket as never });
    clients.push(holder);
    const sessionId = holder.session.sessionId!;
    expect(sessionId).toBeTruthy();
    const wrong = await minter.mint({ session: 'some-other-session' });
    for (const answer of [await http(wrong, true), await upgrade(wrong, true)]) {
      expect(answer).toMatchObject({ status: 403, code: 'token_wrong_session' });
      expect(answer.message).toContain('"some-other-session"');
      expect(answer.message).not.toContain(sessionId);
    }
    const expired = await new SignJWT({})
      .setProtectedHeader({ alg: 'HS256' })
      .setIssuedAt(now() - 7200)
      .setExpirationTime(now() - 3600)
      .sign(hmac);
    for (const answer of [await http(expired, true), await upgrade(expired, true)])
      expect(answer).toMatchObject({ status: 401, code: 'token_expired', challenge: 'Bearer error="invalid_token"' });
    // No credential: a plain challenge (RFC 6750: no error code when none was presented).
    for (const answer of [await http(undefined, true), await upgrade(undefined, true)])
      expect(answer).toMatchObject({ status: 401, code: 'unauthorized', challenge: 'Bearer' });
  });

  it("refuses a spectator's command, publication and upload with clear codes; a controller's go through", async () => {
    const viewer = await connect(base, { token: await minter.mint({ role: 'spectator' }), WebSocket: WebSocket as never });
    const steer = await connect(base, { token: await minter.mint(), WebSocket: WebSocket as never });
    clients.push(viewer, steer);
    expect(viewer.role).toBe('spectator');
    await expect(viewer.send('set_effect', { effect: 'blur' })).rejects.toMatchObject({ code: 'forbidden_role' });
    await expect(viewer.send('set_effect', { effect: 'blur' })).rejects.toThrow(/your role "spectator" may not/);
    await expect(viewer.publish('webcam', (async function* () {})())).rejects.toMatchObject({ code: 'forbidden_role' });
    await expect(viewer.upload(new Uint8Array([1, 2, 3]), { name: 'x.bin' })).rejects.toMatchObject({ code: 'upload_not_allowed' });
    // The spectator still watches: frames and the state arrive.
    const state = new Promise((r) => viewer.once('state', r));
    await steer.send('set_effect', { effect: 'blur' });
    expect(await state).toMatchObject({ effect: 'blur' });
    await new Promise<void>((r) => viewer.once('frame', () => r()));
    // A token with a byte grant: within it accepted, past it refused.
    const granted = reactorToken(['--upload-bytes', '10']);
    const res = (size: number) =>
      fetch(`${base}/uploads`, {
        method: 'POST',
        headers: { connection: 'close', authorization: `Bearer ${granted}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'a', size }),
      });
    expect((await res(8)).status).toBe(201);
    const over = await res(8);
    expect(over.status).toBe(413);
    expect(((await over.json()) as { error: { code: string } }).error.code).toBe('upload_grant_exceeded');
  });
});

describe('reactor.yaml and reactor token refuse bad input', () => {
  it('names an unknown server.auth key and a short secret', () => {
    const bad = cameraWorkspace('reactor-tokens-bad-', ['port: 0', 'auth:', '  secrte: x', '  secret: short']);
    try {
      const r = cliSync(['run', '--manifest', join(bad, 'reactor.yaml')]);
      expect(r.status).toBe(1);
      expect(r.stderr).toContain('server.auth.secrte: unknown key (allowed: secret, public_key, private_key, jwks_url, issuer, audience, max_ttl_s)');
      expect(r.stderr).toContain('server.auth.secret: must be at least 32 characters');
      expect(r.stderr).toContain('[manifest_invalid]');
    } finally {
      removeDir(bad);
    }
  });

  it('reactor token without a key says where to put one; a ttl past 6 h is refused', () => {
    const none = cameraWorkspace('reactor-tokens-none-', ['port: 0']);
    try {
      // Empty counts as unset: whatever the test's own environment holds.
      const r = cliSync(['token', '--manifest', join(none, 'reactor.yaml')], { REACTOR_AUTH_SECRET: '', REACTOR_AUTH_PRIVATE_KEY: '' });
      expect(r.status).toBe(1);
      expect(r.stderr).toMatch(/no key to sign with: set REACTOR_AUTH_SECRET .* \[token_no_key\]/);
      const long = cliSync(['token', '--manifest', join(none, 'reactor.yaml'), '--ttl', '7h'], { REACTOR_AUTH_SECRET: SECRET });
      expect(long.status).toBe(1);
      expect(long.stderr).toContain('--ttl is at most 6 h');
    } finally {
      removeDir(none);
    }
  });
});
