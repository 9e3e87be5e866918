/**
 * The session router (`@reactor/router`) against the mock Kubernetes API
 * (`fixtures/agones/kube-api.ts`, a real HTTP server backed by `FakeAgonesCluster`), reached
 * through `@kubernetes/client-node` with a generated kubeconfig. Exercised: allocation through
 * GameServerAllocation (atomicity under 100 concurrent requests, 429 with Retry-After, 409
 * retries), session lookup by label, relaying to an instance (404 for one without a session, 502
 * for a dead pod, HTTP and WebSocket bytes to a live one), the server's token/origin rules,
 * health and metrics. Not exercised: Agones itself (scheduling, its allocation controller).
 */
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { silentLogger } from '@reactor/log';
import { SESSION_LABEL, loadKubeConfig, route, type RouterOptions, type SessionRouter } from '@reactor/router';
import { FakeAgonesCluster, FLEET_LABEL } from './fixtures/agones/cluster.js';
import { MockKubeApi } from './fixtures/agones/kube-api.js';
import { until } from '@reactor/test-kit';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

interface Setup {
  cluster: FakeAgonesCluster;
  api: MockKubeApi;
  router: SessionRouter;
}

/** A cluster with `ready` Ready GameServers (at addresses nothing listens on unless given), the mock API, and a router. */
async function setup(
  ready: number,
  options: Partial<RouterOptions> = {},
  address = (i: number) => ({ address: `10.0.0.${i + 1}`, port: 7000 }),
): Promise<Setup> {
  const cluster = new FakeAgonesCluster();
  for (let i = 0; i < ready; i++) {
    const a = address(i);
    cluster.addServer(`reactor-${i}`, a.address, a.port);
    cluster.setState(`reactor-${i}`, 'Ready');
  }
  const api = await new MockKubeApi(cluster).start();
  cleanups.push(() => api.close());
  const { kubeConfig, namespace } = loadKubeConfig({ file: api.writeKubeconfig(), env: {} });
  // The instances here are addresses nothing listens on or bare servers without /health/ready: the router's
  // check before handing one out is off unless a test turns it on (test/cluster-faults.test.ts pins it with real instances).
  const router = await route({ kubeConfig, namespace, fleet: cluster.fleet, port: 0, logger: silentLogger, allocationCheckTimeoutMs: 0, ...options });
  cleanups.push(() => router.close());
  // The router has listed the fleet; its watch is open too before a test injects failures.
  await until(() => api.counts.watches > 0, 'the router watching GameServers', 5000, 10);
  return { cluster, api, router };
}

async function post(router: SessionRouter, path = '/sessions', headers: Record<string, string> = {}): Promise<{ status: number; body: any; headers: Headers }> {
  const res = await fetch(`${router.url}${path}`, { method: 'POST', headers });
  return { status: res.status, body: await res.json(), headers: res.headers };
}

async function get(
  router: SessionRouter,
  path: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: any; headers: Headers; text: string }> {
  const res = await fetch(`${router.url}${path}`, { headers });
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return { status: res.status, body, headers: res.headers, text };
}

/**
 * A raw WebSocket upgrade through the router: the status line and body the router (or the
 * instance) answered; for a socket the router accepted only to close it, the close code and reason.
 */
function rawUpgrade(
  router: SessionRouter,
  path: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string; closeCode?: number; closeReason?: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${router.url.replace('http', 'ws')}${path}`, { headers });
    ws.on('unexpected-response', (_req, res: IncomingMessage) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    let opened = false;
    ws.on('open', () => {
      opened = true;
      setTimeout(() => {
        if (ws.readyState === ws.OPEN) {
          ws.close();
          resolve({ status: 101, body: '' });
        }
      }, 100);
    });
    ws.on('close', (code: number, reason: Buffer) => {
      if (opened) resolve({ status: 101, body: '', closeCode: code, closeReason: reason.toString() });
    });
    ws.on('error', (err) => {
      if (!/Unexpected server response/.test(err.message)) reject(err);
    });
  });
}

describe('SessionRouter', () => {
  describe('POST /sessions', () => {
    it('gives exactly 10 sessions and 90 clean 429s for 100 concurrent requests and 10 Ready instances, never two sessions on one instance', async () => {
      const { api, cluster, router } = await setup(10);
      const answers = await Promise.all(Array.from({ length: 100 }, () => post(router)));
      // The cache knows 10 are free: most of the surplus is answered without an API call (a few
      // single probes as the watch brings the allocations in).
      expect(api.counts.allocations).toBeLessThan(50);
      const created = answers.filter((a) => a.status === 201);
      const refused = answers.filter((a) => a.status === 429);
      expect(created).toHaveLength(10);
      expect(refused).toHaveLength(90);
      // Each session on its own instance, each instance Allocated with its session's label.
      expect(new Set(created.map((a) => a.body.instance)).size).toBe(10);
      expect(new Set(created.map((a) => a.body.sessionId)).size).toBe(10);
      for (const a of created) {
        const gs = cluster.get(a.body.instance);
        expect(gs.state).toBe('Allocated');
        expect(gs.labels[SESSION_LABEL]).toBe(a.body.sessionId);
        expect(a.body.url).toBe(`${router.url}/s/${a.body.instance}`);
        expect(a.headers.get('location')).toBe(`/sessions/${a.body.sessionId}`);
      }
      expect(cluster.list({}, 'Allocated')).toHaveLength(10);
      for (const r of refused) {
        expect(r.headers.get('retry-after')).toBe('2');
        expect(r.body).toEqual({
          error: { code: 'no_free_instance', message: expect.stringMatching(/^no free instance: every instance of fleet "reactor" .* retry after 2 s$/) },
          retryAfterS: 2,
        });
      }
      const metrics = await get(router, '/metrics');
      expect(metrics.text).toMatch(/reactor_router_allocations_total\{result="allocated"\} 10/);
      expect(metrics.text).toMatch(/reactor_router_allocations_total\{result="no_free_instance"\} 90/);
      expect(metrics.text).toMatch(/reactor_router_no_free_instance_total 90/);
      expect(metrics.text).toMatch(/reactor_router_allocation_duration_seconds_count\{result="allocated"\} 10/);
    }, 180_000); // 100 requests at once, each a Kubernetes API call: minutes on a loaded 2-core machine

    it('answers 429 while the API finds no Ready instance, and allocates again once one is Ready', async () => {
      const { api, cluster, router } = await setup(1);
      api.noReady = true;
      expect((await post(router)).status).toBe(429);
      api.noReady = false;
      cluster.setState('reactor-0', 'Allocated');
      expect((await post(router)).status).toBe(429);
      cluster.setState('reactor-0', 'Ready');
      // The router's cache follows the watch (ms); until then it may still answer 429 from what it knew.
      await until(() => router.registry.instances()[0]?.state === 'Ready', 'the watch', 5000, 10);
      const ok = await post(router);
      expect(ok.status).toBe(201);
      expect(ok.body.instance).toBe('reactor-0');
    });

    it('only allocates from its own fleet', async () => {
      const { cluster, router } = await setup(0);
      cluster.addServer('other-0', '10.0.1.1', 7000, { [FLEET_LABEL]: 'other' });
      cluster.setState('other-0', 'Ready');
      expect((await post(router)).status).toBe(429);
      expect(cluster.get('other-0').state).toBe('Ready');
    });

    it('retries a 409 Conflict from the API and then allocates', async () => {
      const { api, router } = await setup(1);
      api.conflictNext(3);
      const a = await post(router);
      expect(a.status).toBe(201);
      expect(api.counts.conflicts).toBe(3);
      expect(api.counts.allocations).toBe(1);
      expect((await get(router, '/metrics')).text).toMatch(/reactor_router_allocation_conflicts_total 3/);
    });

    it('answers 503 allocation_conflict with Retry-After after a bounded number of 409s', async () => {
      const { api, cluster, router } = await setup(1, { conflictRetries: 2 });
      api.conflictNext(1000);
      const a = await post(router);
      expect(a.status).toBe(503);
      expect(a.headers.get('retry-after')).toBe('2');
      expect(a.body.error.code).toBe('allocation_conflict');
      expect(a.body.error.message).toMatch(/409 Conflict 3 times in a row/);
      expect(api.counts.conflicts).toBe(3);
      expect(cluster.get('reactor-0').state).toBe('Ready');
    });

    it('answers 503 registry_unavailable when the Kubernetes API fails, and keeps serving', async () => {
      const { api, router } = await setup(1);
      api.failNext(500);
      const a = await post(router);
      expect(a.status).toBe(503);
      expect(a.body.error.code).toBe('registry_unavailable');
      expect(a.body.error.message).toMatch(/the Kubernetes API answered 500/);
      api.failNext(403);
      const b = await post(router);
      expect(b.body.error.message).toMatch(/answered 403: the router's service account may not do this; grant it .* create on gameserverallocations/);
      expect((await post(router)).status).toBe(201);
    });

    it('takes only POST', async () => {
      const { router } = await setup(1);
      const a = await get(router, '/sessions');
      expect(a.status).toBe(405);
      expect(a.headers.get('allow')).toBe('POST');
      expect(a.body.error.code).toBe('method_not_allowed');
    });
  });

  describe('GET /sessions/:id', () => {
    it('finds the instance that holds the session, and 404 once it no longer does', async () => {
      const { cluster, router } = await setup(3);
      const made = (await post(router)).body;
      const found = await get(router, `/sessions/${made.sessionId}`);
      expect(found.status).toBe(200);
      expect(found.body).toEqual(made);
      // The session ended: the instance is Ready again (Agones keeps the label; the router must not route to it).
      cluster.setState(made.instance, 'Ready');
      // The router's cache hears of it through its watch (no API call per lookup).
      await until(async () => (await get(router, `/sessions/${made.sessionId}`)).status === 404, 'the lookup to follow the watch', 5000, 10);
      const gone = await get(router, `/sessions/${made.sessionId}`);
      expect(gone.status).toBe(404);
      expect(gone.body.error.code).toBe('unknown_session');
      expect(gone.body.error.message).toMatch(/no instance holds session .*: it ended, or never existed; start a new one with POST \/sessions/);
    });

    it('finds a session an instance labelled itself through the SDK (allocated without the router)', async () => {
      const { cluster, router } = await setup(2);
      cluster.setState('reactor-1', 'Allocated');
      cluster.setSdkLabel('reactor-1', 'reactor-session', 'self-made-1');
      await until(() => router.registry.instances().some((i) => i.sessionId === 'self-made-1'), 'the watch to bring the label', 5000, 10);
      const found = await get(router, '/sessions/self-made-1');
      expect(found.status).toBe(200);
      expect(found.body.instance).toBe('reactor-1');
    });

    it('answers 404 unknown_session for an unknown id, and for one that is not a label value (no selector injection)', async () => {
      const { api, router } = await setup(2);
      expect((await get(router, '/sessions/0b6f6a6e-0000-4000-8000-000000000000')).body.error.code).toBe('unknown_session');
      const lists = api.counts.lists;
      for (const bad of ['x%2Cagones.dev%2Ffleet%3Dreactor', '-x', 'a'.repeat(64), '%E0%A4%A']) {
        const a = await get(router, `/sessions/${bad}`);
        expect(a.status, bad).toBe(404);
        expect(a.body.error.code).toBe('unknown_session');
      }
      expect(api.counts.lists).toBe(lists);
    });
  });

  describe('/s/:instance relay', () => {
    it('answers 404 unknown_instance for an instance without a session and 502 instance_unreachable for a dead pod', async () => {
      const closed = createNetServer();
      await new Promise<void>((r) => closed.listen(0, '127.0.0.1', () => r()));
      const deadPort = (closed.address() as AddressInfo).port;
      await new Promise<void>((r) => closed.close(() => r()));
      const { router } = await setup(2, {}, () => ({ address: '127.0.0.1', port: deadPort }));
      const ready = await get(router, '/s/reactor-1/schema');
      expect(ready.status).toBe(404);
      expect(ready.body.error).toEqual({
        code: 'unknown_instance',
        message: expect.stringMatching(/no instance "reactor-1" holds a session .*\(it is Ready\)/),
      });
      expect((await get(router, '/s/nope/schema')).body.error.code).toBe('unknown_instance');
      // A browser cannot read a refused upgrade's status: the router accepts and closes with the code as the reason.
      const notHeld = await rawUpgrade(router, '/s/reactor-1/ws');
      expect(notHeld.closeCode).toBe(4404);
      expect(notHeld.closeReason).toMatch(/^unknown_instance: no instance "reactor-1" holds a session/);
      const { instance } = (await post(router)).body;
      const dead = await get(router, `/s/${instance}/schema`);
      expect(dead.status).toBe(502);
      expect(dead.body.error.code).toBe('instance_unreachable');
      const ws = await rawUpgrade(router, `/s/${instance}/ws`);
      expect(ws.closeCode).toBe(4502);
      expect(ws.closeReason).toMatch(/^instance_unreachable: instance reactor-\d does not answer/);
    });

    it('relays HTTP (method, path, query, body) and WebSocket messages both ways to the allocated instance', async () => {
      const seen: Array<{ method: string; url: string; body: string; host: string; origin: string | undefined; prefix: string }> = [];
      const http: Server = createServer((req, res) => {
        let body = '';
        req.on('data', (d: Buffer) => (body += d.toString()));
        req.on('end', () => {
          seen.push({
            method: req.method!,
            url: req.url!,
            body,
            host: req.headers.host!,
            origin: req.headers.origin,
            prefix: String(req.headers['x-forwarded-prefix']),
          });
          res.writeHead(207, { 'x-instance': 'yes', 'content-type': 'text/plain' });
          res.end(`echo ${body}`);
        });
      });
      const wss = new WebSocketServer({ server: http, path: '/ws' });
      wss.on('connection', (ws, req) => {
        ws.send(`hello ${req.url}`);
        ws.on('message', (m: Buffer, binary: boolean) => ws.send(binary ? Buffer.concat([m, Buffer.from([255])]) : `echo ${m.toString()}`));
      });
      await new Promise<void>((r) => http.listen(0, '127.0.0.1', () => r()));
      cleanups.push(() => new Promise<void>((r) => (wss.close(), http.closeAllConnections(), http.close(() => r()))));
      const port = (http.address() as AddressInfo).port;
      const { router } = await setup(1, {}, () => ({ address: '127.0.0.1', port }));
      const { instance } = (await post(router)).body;

      const res = await fetch(`${router.url}/s/${instance}/uploads/abc?x=1`, { method: 'PUT', body: 'payload', headers: { origin: router.url } });
      expect(res.status).toBe(207);
      expect(res.headers.get('x-instance')).toBe('yes');
      expect(await res.text()).toBe('echo payload');
      expect(seen[0]).toEqual({
        method: 'PUT',
        url: '/uploads/abc?x=1',
        body: 'payload',
        host: `127.0.0.1:${port}`,
        origin: undefined,
        prefix: `/s/${instance}`,
      });

      const ws = new WebSocket(`${router.url.replace('http', 'ws')}/s/${instance}/ws?token=t`);
      const got: Array<string | Buffer> = [];
      ws.on('message', (m: Buffer, binary: boolean) => got.push(binary ? m : m.toString()));
      await new Promise((r) => ws.once('open', r));
      ws.send('ping');
      ws.send(Buffer.from([1, 2, 3]));
      const end = Date.now() + 10_000;
      while (got.length < 3 && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
      expect(got).toEqual(['hello /ws?token=t', 'echo ping', Buffer.from([1, 2, 3, 255])]);
      expect((await get(router, '/metrics')).text).toMatch(/reactor_router_proxied_websockets 1/);
      ws.close();
      await new Promise((r) => ws.once('close', r));
      const m2 = Date.now() + 10_000;
      while (!/reactor_router_proxied_websockets 0/.test((await get(router, '/metrics')).text) && Date.now() < m2) await new Promise((r) => setTimeout(r, 20));
      expect((await get(router, '/metrics')).text).toMatch(/reactor_router_proxied_total\{kind="ws",result="ok"\} 1/);
      expect((await get(router, '/metrics')).text).toMatch(/reactor_router_proxied_websockets 0/);
    });
  });

  describe("access rules (the server's: Host, token, Origin)", () => {
    it('requires the token on every route but health, as reactor run does', async () => {
      const { cluster, router } = await setup(2, { token: 's3cret' });
      const none = await post(router);
      expect(none.status).toBe(401);
      expect(none.headers.get('www-authenticate')).toBe('Bearer');
      expect(none.body.error.code).toBe('unauthorized');
      expect((await post(router, '/sessions', { authorization: 'Bearer wrong' })).status).toBe(401);
      expect(cluster.list({}, 'Allocated')).toHaveLength(0);
      const ok = await post(router, '/sessions', { authorization: 'Bearer s3cret' });
      expect(ok.status).toBe(201);
      expect((await post(router, '/sessions?token=s3cret')).status).toBe(201);
      expect((await get(router, `/sessions/${ok.body.sessionId}`)).status).toBe(401);
      expect((await get(router, `/sessions/${ok.body.sessionId}?token=s3cret`)).status).toBe(200);
      expect((await get(router, '/metrics')).status).toBe(401);
      expect((await get(router, '/health/live')).status).toBe(200);
      const up = await rawUpgrade(router, `/s/${ok.body.instance}/ws`);
      expect(up.status).toBe(401);
      expect(JSON.parse(up.body).error.code).toBe('unauthorized');
      expect((await get(router, '/metrics?token=s3cret')).text).toMatch(/reactor_router_rejected_total\{reason="unauthorized"\} 5/);
    });

    it('refuses pages of other origins, lets listed ones in with CORS headers, and guards the Host on loopback', async () => {
      const { router } = await setup(3, { allowedOrigins: ['https://app.example.com'] });
      const evil = await post(router, '/sessions', { origin: 'https://evil.example.com' });
      expect(evil.status).toBe(403);
      expect(evil.body.error.code).toBe('origin_not_allowed');
      const preflightEvil = await fetch(`${router.url}/sessions`, { method: 'OPTIONS', headers: { origin: 'https://evil.example.com' } });
      expect(preflightEvil.status).toBe(403);
      const preflight = await fetch(`${router.url}/sessions`, {
        method: 'OPTIONS',
        headers: { origin: 'https://app.example.com', 'access-control-request-method': 'POST' },
      });
      expect(preflight.status).toBe(204);
      expect(preflight.headers.get('access-control-allow-origin')).toBe('https://app.example.com');
      expect(preflight.headers.get('access-control-allow-headers')).toMatch(/Authorization/);
      const ok = await post(router, '/sessions', { origin: 'https://app.example.com' });
      expect(ok.status).toBe(201);
      expect(ok.headers.get('access-control-allow-origin')).toBe('https://app.example.com');
      expect(ok.headers.get('access-control-expose-headers')).toMatch(/Retry-After/);
      const own = await post(router, '/sessions', { origin: router.url });
      expect(own.status).toBe(201);
      const wsEvil = await rawUpgrade(router, `/s/${ok.body.instance}/ws`, { origin: 'https://evil.example.com' });
      expect(wsEvil.status).toBe(403);
      // fetch() sets Host itself: a raw request carries the rebinding page's name.
      const rebound = await new Promise<{ status: number; body: any }>((resolve, reject) => {
        const req = httpRequest(`${router.url}/sessions`, { method: 'POST', headers: { host: 'attacker.example.com' } }, (res) => {
          let text = '';
          res.on('data', (d: Buffer) => (text += d.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
        });
        req.on('error', reject);
        req.end();
      });
      expect(rebound.status).toBe(403);
      expect(rebound.body.error.code).toBe('host_not_allowed');
    });
  });

  describe('health', () => {
    it('is live always, and ready while its GameServer cache follows the Kubernetes API', async () => {
      const { api, router } = await setup(1, { readyCacheMs: 0 });
      expect((await get(router, '/health/live')).body).toEqual({ status: 'live' });
      expect((await get(router, '/health/ready')).body).toEqual({ ready: true, fleet: 'reactor', namespace: 'default' });
      // The watch ends and the API refuses the router's LIST and watch from then on.
      api.failNext(503, 1000);
      api.dropWatches();
      await until(async () => (await get(router, '/health/ready')).status === 503, 'readiness to fail', 5000, 10);
      const down = await get(router, '/health/ready');
      expect(down.body.error.code).toBe('not_ready');
      expect(down.body.error.message).toMatch(/(listing|watching) GameServers failed: the Kubernetes API answered 503/);
      api.failNext(503, 0);
      await until(async () => (await get(router, '/health/ready')).status === 200, 'readiness to recover', 10_000, 10);
      await api.close();
      await until(async () => (await get(router, '/health')).status === 503, 'readiness to fail with the API gone', 10_000, 10);
      const gone = await get(router, '/health');
      expect(gone.body.error.message).toMatch(/cannot reach the Kubernetes API/);
    });
  });
});

describe('SessionRouter on a real cluster (issue 30)', () => {
  it('answers lookups and relays from its GameServer cache: no API call per request, and a resync after a missed event', async () => {
    const http: Server = createServer((_req, res) => res.end('ok'));
    await new Promise<void>((r) => http.listen(0, '127.0.0.1', () => r()));
    cleanups.push(() => new Promise<void>((r) => (http.closeAllConnections(), http.close(() => r()))));
    const port = (http.address() as AddressInfo).port;
    const { api, cluster, router } = await setup(3, { resyncMs: 300 }, () => ({ address: '127.0.0.1', port }));
    const made = (await post(router)).body;
    const before = { ...api.counts };
    const t0 = performance.now();
    for (let i = 0; i < 20; i++) {
      expect((await get(router, `/sessions/${made.sessionId}`)).status).toBe(200);
      expect((await fetch(`${router.url}/s/${made.instance}/schema`)).status).toBe(200);
    }
    const resyncsDue = Math.floor((performance.now() - t0) / 300) + 1;
    expect(api.counts.gets).toBe(before.gets);
    // A LIST per resync the 300 ms period brought meanwhile (a busy machine takes longer over the 40 requests), never one per request.
    expect(api.counts.lists - before.lists).toBeLessThanOrEqual(resyncsDue);
    expect(api.counts.lists - before.lists).toBeLessThan(40);
    // A change the watch never delivers (the watch is cut and the event lost) shows after the resync.
    api.hang = true;
    api.dropWatches();
    cluster.setState(made.instance, 'Ready');
    api.hang = false;
    await until(async () => (await get(router, `/sessions/${made.sessionId}`)).status === 404, 'the resync to bring the change', 5000, 10);
  });

  it('sees an instance back to Ready at once when the watch confirmed its allocation before the allocation answer reached the router', async () => {
    const { cluster, router } = await setup(1);
    const made = (await post(router)).body;
    const cache = router.registry.cache;
    // The watch's Allocated event is in...
    await until(
      () => cache.get(made.instance)?.state === 'Allocated' && cache.get(made.instance)?.sessionId === made.sessionId,
      'the watch to show the allocation',
      5000,
      10,
    );
    // ...and the allocation's own answer comes after it (the race, made certain): the router learns what the watch said already.
    cache.learn(cache.get(made.instance)!);
    cluster.setState(made.instance, 'Ready');
    // Well within the 5 s a Ready older than the router's own allocation is ignored for.
    await until(() => cache.get(made.instance)?.state === 'Ready', 'the Ready that followed the allocation', 4000, 10);
  });

  it('gives up on a Kubernetes API that does not answer after apiTimeoutMs (503 registry_unavailable), then serves again', async () => {
    const { api, router } = await setup(2, { apiTimeoutMs: 300 });
    api.hang = true;
    const t = performance.now();
    const a = await post(router);
    // apiTimeoutMs (300 ms) answered, not a hang; room for a loaded machine.
    expect(performance.now() - t).toBeLessThan(5000);
    expect(a.status).toBe(503);
    expect(a.body.error.code).toBe('registry_unavailable');
    expect(a.body.error.message).toMatch(/creating a GameServerAllocation failed: .*no answer from the Kubernetes API within 300 ms/);
    api.hang = false;
    expect((await post(router)).status).toBe(201);
  });

  it('DELETE /sessions/:id asks the instance to end the session (an annotation on its GameServer), 404 for an unknown one', async () => {
    const { api, cluster, router } = await setup(2);
    const made = (await post(router)).body;
    const res = await fetch(`${router.url}/sessions/${made.sessionId}`, { method: 'DELETE' });
    expect(res.status).toBe(202);
    expect(await res.json()).toEqual({ sessionId: made.sessionId, instance: made.instance, released: true });
    expect(api.counts.patches).toBe(1);
    expect(cluster.get(made.instance).annotations['reactor.dev/release-session']).toBe(made.sessionId);
    const unknown = await fetch(`${router.url}/sessions/0b6f6a6e-0000-4000-8000-000000000000`, { method: 'DELETE' });
    expect(unknown.status).toBe(404);
    expect(((await unknown.json()) as any).error.code).toBe('unknown_session');
  });

  it('never allocates an instance that is draining (its SDK label), and skips one whose circuit is open', async () => {
    const closed = createNetServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', () => r()));
    const deadPort = (closed.address() as AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const { cluster, router } = await setup(3, {}, () => ({ address: '127.0.0.1', port: deadPort }));
    cluster.setSdkLabel('reactor-0', 'reactor-draining', '1');
    const a = (await post(router)).body;
    expect(a.instance).not.toBe('reactor-0');
    // Its pod does not answer: the relay fails and opens its circuit.
    expect((await get(router, `/s/${a.instance}/schema`)).status).toBe(502);
    expect((await get(router, `/sessions/${a.sessionId}`)).body.error.code).toBe('instance_unreachable');
    // Agones would hand it out again once Ready (its pings have not timed out yet): the router allocates past it.
    cluster.setState(a.instance, 'Ready');
    await until(() => router.registry.instances().find((i) => i.name === a.instance)?.state === 'Ready', 'the watch', 5000, 10);
    const others = cluster.list({}, 'Ready').filter((g) => g.name !== a.instance && g.name !== 'reactor-0');
    const b = (await post(router)).body;
    expect(b.instance).toBe(others[0]!.name);
    expect(b.instance).not.toBe(a.instance);
    expect(await router.metrics.registry.getSingleMetricAsString('reactor_router_dead_allocations_total')).toMatch(/ 1$/m);
  });

  it('closes a relayed socket whose instance falls silent (the router pings it) with instance_unreachable, and opens its circuit', async () => {
    // An instance that accepts and upgrades, then stops answering anything (a silent drop: no FIN, no RST).
    const http: Server = createServer();
    const wss = new WebSocketServer({ server: http, path: '/ws', autoPong: false });
    let silent = false;
    wss.on('connection', (ws) => {
      const t = setInterval(() => !silent && ws.send('frame'), 20);
      ws.on('close', () => clearInterval(t));
    });
    await new Promise<void>((r) => http.listen(0, '127.0.0.1', () => r()));
    cleanups.push(() => new Promise<void>((r) => (wss.close(), http.closeAllConnections(), http.close(() => r()))));
    const port = (http.address() as AddressInfo).port;
    const { router } = await setup(1, { relayPingIntervalMs: 200, relayPingTimeoutMs: 300, relayConnectTimeoutMs: 300 }, () => ({
      address: '127.0.0.1',
      port,
    }));
    const { instance } = (await post(router)).body;
    const ws = new WebSocket(`${router.url.replace('http', 'ws')}/s/${instance}/ws`);
    let frames = 0;
    ws.on('message', () => frames++);
    await new Promise((r) => ws.once('open', r));
    await until(() => frames > 5, 'frames through the relay', 5000, 10);
    const closed = new Promise<{ code: number; reason: string; at: number }>((r) =>
      ws.once('close', (code, reason) => r({ code, reason: reason.toString(), at: performance.now() })),
    );
    const t = performance.now();
    silent = true;
    const c = await closed;
    expect(c.code).toBe(4502);
    expect(c.reason).toMatch(/^instance_unreachable: instance reactor-0 stopped answering \(no answer to a ping within 300 ms\)/);
    // Told within the ping interval + timeout (+ a tick), not when TCP gives up.
    expect(c.at - t).toBeLessThan(200 + 300 + 500);
    // The circuit is open: a joiner is told at once, and the instance is handed to nobody.
    const { sessionId } = router.registry.instances().find((i) => i.name === instance)!;
    expect((await get(router, `/sessions/${sessionId}`)).body.error.code).toBe('instance_unreachable');
  });

  it('closes the viewer with 4502 and a reason when the instance drops the connection before answering the upgrade (issue 38)', async () => {
    // A pod that accepts the connection, reads the upgrade and closes without a byte (a process dying mid-connect).
    const pod = createNetServer((s) => s.once('data', () => s.destroy()));
    await new Promise<void>((r) => pod.listen(0, '127.0.0.1', () => r()));
    cleanups.push(() => new Promise<void>((r) => pod.close(() => r())));
    const port = (pod.address() as AddressInfo).port;
    const { router } = await setup(1, {}, () => ({ address: '127.0.0.1', port }));
    const { instance } = (await post(router)).body;
    const r = await rawUpgrade(router, `/s/${instance}/ws`);
    expect(r.status).toBe(101);
    expect(r.closeCode).toBe(4502);
    expect(r.closeReason).toMatch(/^instance_unreachable: instance reactor-0 closed the connection before answering the upgrade/);
  });

  it('passes on a socket cut by an instance that still serves (a missed heartbeat) as it came, without declaring its session lost (issue 38)', async () => {
    const http: Server = createServer((_req, res) => res.end('{"status":"live"}'));
    const wss = new WebSocketServer({ server: http, path: '/ws' });
    wss.on('connection', (ws) => {
      ws.send('hello');
      // The instance cuts this one socket without a close frame, as its heartbeat does.
      setTimeout(() => ws.terminate(), 50);
    });
    await new Promise<void>((r) => http.listen(0, '127.0.0.1', () => r()));
    cleanups.push(() => new Promise<void>((r) => (wss.close(), http.closeAllConnections(), http.close(() => r()))));
    const port = (http.address() as AddressInfo).port;
    const { router } = await setup(1, {}, () => ({ address: '127.0.0.1', port }));
    const { instance, sessionId } = (await post(router)).body;
    const ws = new WebSocket(`${router.url.replace('http', 'ws')}/s/${instance}/ws`);
    const code = await new Promise<number>((r) => ws.once('close', (c: number) => r(c)));
    expect(code).toBe(1006);
    // Its circuit stays closed: the client may come back to its session.
    expect((await get(router, `/sessions/${sessionId}`)).status).toBe(200);
  });
});
