/**
 * The router's waiting line and its keys, against the mock Kubernetes API: `POST
 * /sessions?wait=` answers 202 and streams the place in line (NDJSON) until an instance is
 * allocated; 30 requests for 3 instances are served first come first served as instances come
 * back Ready; a cancelled one leaves the line; none waits past its limit without an answer; the
 * line in /metrics. With `apiKey` + `tokenKey`: the caller's key on the router's routes, a
 * short-lived instance token in the answer, and every refused-token case on relayed routes.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { SignJWT, decodeJwt } from 'jose';
import { silentLogger } from '@reactor/log';
import { loadKubeConfig, route, type QueueLine, type RouterOptions, type SessionRouter } from '@reactor/router';
import { requestSession } from '@reactor/client';
import { FakeAgonesCluster } from './fixtures/agones/cluster.js';
import { MockKubeApi } from './fixtures/agones/kube-api.js';
import { until } from '@reactor/test-kit';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function setup(ready: number, options: Partial<RouterOptions> = {}, address?: (i: number) => { address: string; port: number }) {
  const cluster = new FakeAgonesCluster();
  for (let i = 0; i < ready; i++) {
    const a = address?.(i) ?? { address: `10.0.0.${i + 1}`, port: 7000 };
    cluster.addServer(`reactor-${i}`, a.address, a.port);
    cluster.setState(`reactor-${i}`, 'Ready');
  }
  const api = await new MockKubeApi(cluster).start();
  cleanups.push(() => api.close());
  const { kubeConfig, namespace } = loadKubeConfig({ file: api.writeKubeconfig(), env: {} });
  // No instance here answers /health/ready (nothing listens at their addresses): the router's check before handing one out is off (test/cluster-faults.test.ts pins it).
  const router = await route({
    kubeConfig,
    namespace,
    fleet: cluster.fleet,
    port: 0,
    logger: silentLogger,
    queuePollMs: 50,
    allocationCheckTimeoutMs: 0,
    ...options,
  });
  cleanups.push(() => router.close());
  await until(() => api.counts.watches > 0, 'the router watching GameServers', 10_000, 10);
  return { cluster, router };
}

/** A `POST /sessions?wait=` whose NDJSON lines are collected as they arrive. */
interface Waiting {
  status: number;
  lines: QueueLine[];
  done: Promise<void>;
  abort(): void;
}

async function wait(router: SessionRouter, waitS: number, headers: Record<string, string> = {}): Promise<Waiting> {
  const abort = new AbortController();
  const res = await fetch(`${router.url}/sessions?wait=${waitS}`, { method: 'POST', headers, signal: abort.signal });
  const lines: QueueLine[] = [];
  const done = (async () => {
    if (res.status !== 202) return;
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let buf = '';
    try {
      for (;;) {
        const { value, done: end } = await reader.read();
        if (end) return;
        buf += dec.decode(value, { stream: true });
        let nl: number;
        while ((nl = buf.indexOf('\n')) >= 0) {
          lines.push(JSON.parse(buf.slice(0, nl)) as QueueLine);
          buf = buf.slice(nl + 1);
        }
      }
    } catch {
      // aborted
    }
  })();
  return { status: res.status, lines, done, abort: () => abort.abort() };
}

const post = (router: SessionRouter, headers: Record<string, string> = {}) => fetch(`${router.url}/sessions`, { method: 'POST', headers });
const metrics = async (router: SessionRouter, headers: Record<string, string> = {}) => (await fetch(`${router.url}/metrics`, { headers })).text();
const last = (w: Waiting) => w.lines.at(-1);

describe('router: the waiting line', () => {
  it('serves 30 requests for 3 instances in the order they came, as instances free up, each told its place', async () => {
    const { cluster, router } = await setup(3);
    const held: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await post(router);
      expect(r.status).toBe(201);
      held.push(((await r.json()) as { instance: string }).instance);
    }
    const waiting: Waiting[] = [];
    for (let i = 0; i < 30; i++) {
      const w = await wait(router, 60);
      expect(w.status).toBe(202);
      await until(() => w.lines.length > 0, `request ${i}'s first line`, 10_000, 10);
      expect(w.lines[0]).toEqual({ state: 'queued', position: i + 1, estimateS: null });
      waiting.push(w);
    }
    // A request without wait does not jump the line.
    const impatient = await post(router);
    expect(impatient.status).toBe(429);
    expect(((await impatient.json()) as { error: { message: string } }).error.message).toMatch(/30 request\(s\) wait for one/);
    expect(await metrics(router)).toMatch(/^reactor_router_queue_length 30$/m);
    const served: number[] = [];
    for (let k = 0; k < 30; k++) {
      // The session on one instance ends: Agones returns it to Ready.
      cluster.setState(held[k % 3]!, 'Ready');
      await until(() => waiting.filter((w) => last(w)?.state === 'allocated').length === k + 1, `the ${k + 1}th allocation`, 10_000, 10);
      served.push(...waiting.map((w, i) => (last(w)?.state === 'allocated' && !served.includes(i) ? i : -1)).filter((i) => i >= 0));
      const got = last(waiting[served.at(-1)!]!) as Extract<QueueLine, { state: 'allocated' }>;
      held[k % 3] = got.instance;
    }
    expect(served).toEqual([...Array(30).keys()]);
    // Each request saw its place go down to 1 before it was served, and later ones an estimate.
    for (const [i, w] of waiting.entries()) {
      const places = w.lines.filter((l) => l.state === 'queued').map((l) => (l as { position: number }).position);
      expect(places).toEqual([...Array(i + 1).keys()].map((k) => i + 1 - k));
    }
    expect((waiting[29]!.lines.filter((l) => l.state === 'queued').at(-1) as { estimateS: number | null }).estimateS).toEqual(expect.any(Number));
    await Promise.all(waiting.map((w) => w.done));
    const m = await metrics(router);
    expect(m).toMatch(/^reactor_router_queue_length 0$/m);
    expect(m).toMatch(/^reactor_router_queue_wait_seconds_count\{result="allocated"\} 30$/m);
  });

  it('a cancelled request leaves the line and the ones behind move up', async () => {
    const { cluster, router } = await setup(1);
    const first = await post(router);
    const instance = ((await first.json()) as { instance: string }).instance;
    const [a, b, c] = [await wait(router, 60), await wait(router, 60), await wait(router, 60)];
    await until(() => c.lines.length > 0, 'c queued', 10_000, 10);
    b.abort();
    await until(() => (last(c) as { position?: number })?.position === 2, 'c to move up to 2', 10_000, 10);
    expect(await metrics(router)).toMatch(/^reactor_router_queue_length 2$/m);
    cluster.setState(instance, 'Ready');
    await until(() => last(a)?.state === 'allocated', 'a allocated', 10_000, 10);
    cluster.setState(instance, 'Ready');
    await until(() => last(c)?.state === 'allocated', 'c allocated', 10_000, 10);
    expect(b.lines.some((l) => l.state === 'allocated')).toBe(false);
    expect(await metrics(router)).toMatch(/^reactor_router_queue_wait_seconds_count\{result="cancelled"\} 1$/m);
  });

  it('answers every request by its limit: queue_timeout; refuses a bad wait and a full line', async () => {
    const { router } = await setup(0, { queueMaxLength: 3 });
    const started = performance.now();
    const ws = await Promise.all([wait(router, 1), wait(router, 1), wait(router, 2)]);
    await Promise.all(ws.map((w) => w.done));
    for (const w of ws) {
      expect(last(w)).toEqual({ state: 'timeout', error: { code: 'queue_timeout', message: expect.stringMatching(/^no instance became free within [12] s/) } });
    }
    const took = performance.now() - started;
    expect(took).toBeGreaterThanOrEqual(1900);
    // The longest wait is 2 s; room for a loaded machine (the error says which limit answered).
    expect(took).toBeLessThan(6000);
    const bad = await fetch(`${router.url}/sessions?wait=soon`, { method: 'POST' });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string } }).error.code).toBe('bad_wait');
    expect((await fetch(`${router.url}/sessions?wait=9999`, { method: 'POST' })).status).toBe(400);
    const full = await Promise.all([wait(router, 30), wait(router, 30), wait(router, 30)]);
    const fourth = await fetch(`${router.url}/sessions?wait=30`, { method: 'POST' });
    expect(fourth.status).toBe(429);
    expect(((await fourth.json()) as { error: { code: string } }).error.code).toBe('queue_full');
    for (const w of full) w.abort();
    expect(await metrics(router)).toMatch(/^reactor_router_queue_wait_seconds_count\{result="timeout"\} 3$/m);
  });

  it('@reactor/client waits in the line with waitS and reports its place', async () => {
    const { cluster, router } = await setup(1);
    const first = await requestSession(router.url, { session: 'new' });
    const places: number[] = [];
    const pending = requestSession(router.url, { session: 'new', waitS: 30, onQueue: (p) => places.push(p.position) });
    await until(() => places.length > 0, 'the client queued', 10_000, 10);
    cluster.setState(first.instance, 'Ready');
    const got = await pending;
    expect(got.instance).toBe(first.instance);
    expect(places).toEqual([1]);
  });
});

describe('router: API key and instance tokens', () => {
  const SECRET = 'router-and-instances-share-this-secret-0123';
  const API_KEY = 'backend-api-key-0123456789';

  /** A stand-in for an instance's pod: answers what the router relayed. */
  async function instancePod(): Promise<number> {
    const http: Server = createServer((req, res) => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ path: req.url, authorization: req.headers.authorization ?? null }));
    });
    await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise<void>((r) => http.close(() => r())));
    return (http.address() as AddressInfo).port;
  }

  it('takes the API key on its routes and hands out a short-lived token for the instance only', async () => {
    const pod = await instancePod();
    const { router } = await setup(1, { apiKey: API_KEY, tokenKey: { secret: SECRET }, instanceTokenTtlS: 300 }, () => ({ address: '127.0.0.1', port: pod }));
    expect((await post(router)).status).toBe(401);
    const r = await post(router, { authorization: `Bearer ${API_KEY}` });
    expect(r.status).toBe(201);
    const answer = (await r.json()) as { instance: string; sessionId: string; token: string; tokenExpiresAt: number; path: string };
    const claims = decodeJwt(answer.token);
    expect(claims).toMatchObject({ sid: answer.instance, role: 'controller', sub: answer.sessionId });
    expect(claims.exp! - claims.iat!).toBe(300);
    expect(JSON.stringify(answer)).not.toContain(API_KEY);
    // The instance token opens the instance's routes through the router, and is no key to the router itself.
    const relayed = await fetch(`${router.url}${answer.path}/schema`, { headers: { authorization: `Bearer ${answer.token}` } });
    expect(relayed.status).toBe(200);
    expect(((await relayed.json()) as { path: string }).path).toBe('/schema');
    expect((await post(router, { authorization: `Bearer ${answer.token}` })).status).toBe(401);
    expect((await fetch(`${router.url}${answer.path}/schema`, { headers: { authorization: `Bearer ${API_KEY}` } })).status).toBe(401);
    // /metrics is the backend's (and the autoscaler's) too.
    expect((await fetch(`${router.url}/metrics`)).status).toBe(401);
    expect(await metrics(router, { authorization: `Bearer ${API_KEY}` })).toMatch(/reactor_router_queue_length/);
  });

  it('refuses every bad token on relayed routes (HTTP and the upgrade) with its own code', async () => {
    const pod = await instancePod();
    const { router } = await setup(1, { apiKey: API_KEY, tokenKey: { secret: SECRET } }, () => ({ address: '127.0.0.1', port: pod }));
    const answer = (await (await post(router, { authorization: `Bearer ${API_KEY}` })).json()) as { instance: string; path: string; token: string };
    const key = new TextEncoder().encode(SECRET);
    const now = Math.floor(Date.now() / 1000);
    const b64 = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
    const [h, p, s] = answer.token.split('.');
    const cases: Array<[string, string, number]> = [
      [
        await new SignJWT({ sid: answer.instance })
          .setProtectedHeader({ alg: 'HS256' })
          .setIssuedAt(now - 7200)
          .setExpirationTime(now - 3600)
          .sign(key),
        'token_expired',
        401,
      ],
      [
        await new SignJWT({ sid: answer.instance })
          .setProtectedHeader({ alg: 'HS256' })
          .setIssuedAt()
          .setNotBefore(now + 600)
          .setExpirationTime(now + 1200)
          .sign(key),
        'token_not_yet_valid',
        401,
      ],
      [
        await new SignJWT({ sid: answer.instance })
          .setProtectedHeader({ alg: 'HS256', kid: 'another-key' })
          .setIssuedAt()
          .setExpirationTime('5m')
          .sign(new TextEncoder().encode('x'.repeat(40))),
        'token_wrong_key',
        401,
      ],
      [
        await new SignJWT({ sid: 'reactor-other' }).setProtectedHeader({ alg: 'HS256' }).setIssuedAt().setExpirationTime('5m').sign(key),
        'token_wrong_session',
        403,
      ],
      [`${h}.${b64({ ...decodeJwt(answer.token), role: 'admin' })}.${s}`, 'token_tampered', 401],
      [`${b64({ alg: 'none' })}.${p}.`, 'token_alg_not_allowed', 401],
      ['eyJub3QiOiJqc29u.eyJ9.c2ln', 'token_malformed', 401],
      [
        await new SignJWT({ sid: answer.instance }).setProtectedHeader({ alg: 'HS256' }).setIssuedAt().setExpirationTime('7h').sign(key),
        'token_invalid_claims',
        401,
      ],
    ];
    for (const [token, code, status] of cases) {
      const res = await fetch(`${router.url}${answer.path}/schema`, { headers: { authorization: `Bearer ${token}` } });
      expect([res.status, ((await res.json()) as { error: { code: string } }).error.code], code).toEqual([status, code]);
      const upgrade = await new Promise<{ status: number; code: string }>((resolve, reject) => {
        const ws = new WebSocket(`${router.url.replace('http', 'ws')}${answer.path}/ws?token=${encodeURIComponent(token)}`);
        ws.once('unexpected-response', (_req, r) => {
          let body = '';
          r.on('data', (d: Buffer) => (body += d.toString()));
          r.on('end', () => resolve({ status: r.statusCode!, code: (JSON.parse(body) as { error: { code: string } }).error.code }));
        });
        ws.once('open', () => reject(new Error(`${code}: the upgrade went through`)));
        ws.once('error', () => undefined);
      });
      expect(upgrade, code).toEqual({ status, code });
    }
  });
});

describe('reactor route with --api-key and REACTOR_AUTH_SECRET', () => {
  it('serves the queue and mints instance tokens, as a user starts it', async () => {
    const { spawn } = await import('node:child_process');
    const { CLI } = await import('./fixtures/reactor-cli.js');
    // The instance: only its /health/ready, which the router asks before handing it out.
    const pod = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ready":true,"reasons":[]}'));
    await new Promise<void>((r) => pod.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise<void>((r) => pod.close(() => r())));
    const cluster = new FakeAgonesCluster();
    cluster.addServer('reactor-0', '127.0.0.1', (pod.address() as AddressInfo).port);
    cluster.setState('reactor-0', 'Ready');
    const api = await new MockKubeApi(cluster).start();
    cleanups.push(() => api.close());
    const child = spawn(
      process.execPath,
      [
        CLI,
        'route',
        '--kubeconfig',
        api.writeKubeconfig(),
        '--port',
        '0',
        '--api-key',
        'backend-api-key-0123456789',
        '--queue-max-wait',
        '5',
        '--instance-token-ttl',
        '120',
      ],
      {
        env: { ...process.env, REACTOR_AUTH_SECRET: 'router-and-instances-share-this-secret-0123' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    cleanups.push(() => {
      if (child.exitCode === null) child.kill('SIGKILL');
    });
    const url = await new Promise<string>((res, rej) => {
      let out = '';
      let err = '';
      child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /Router: (\S+)/.exec(out);
        if (m) res(m[1]!);
      });
      child.once('exit', (code) => rej(new Error(`reactor route exited with ${code}: ${err}`)));
    });
    const key = { authorization: 'Bearer backend-api-key-0123456789' };
    expect((await fetch(`${url}/sessions`, { method: 'POST' })).status).toBe(401);
    const first = (await (await fetch(`${url}/sessions`, { method: 'POST', headers: key })).json()) as { token: string; instance: string };
    const claims = decodeJwt(first.token);
    expect(claims).toMatchObject({ sid: 'reactor-0', role: 'controller' });
    expect(claims.exp! - claims.iat!).toBe(120);
    expect((await fetch(`${url}/sessions?wait=6`, { method: 'POST', headers: key })).status).toBe(400);
    const abort = new AbortController();
    const waiting = await fetch(`${url}/sessions?wait=5&role=spectator`, { method: 'POST', headers: key, signal: abort.signal });
    expect(waiting.status).toBe(202);
    expect(waiting.headers.get('content-type')).toMatch(/^application\/x-ndjson/);
    const reader = waiting.body!.getReader();
    const firstLine = new TextDecoder().decode((await reader.read()).value);
    expect(JSON.parse(firstLine)).toEqual({ state: 'queued', position: 1, estimateS: null });
    cluster.setState('reactor-0', 'Ready');
    let rest = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      rest += new TextDecoder().decode(value);
    }
    const allocated = JSON.parse(rest.trim().split('\n').at(-1)!) as { state: string; token: string };
    expect(allocated.state).toBe('allocated');
    expect(decodeJwt(allocated.token)).toMatchObject({ role: 'spectator', sid: 'reactor-0' });
    child.kill('SIGTERM');
  });
});
