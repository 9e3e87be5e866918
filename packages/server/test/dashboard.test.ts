/**
 * The dashboard's data (issue 26): `GET /dashboard/data` through HTTP against a served pattern
 * app (shape, rates, metrics read by name, `?since=`, bad input, access as `/metrics`), and the
 * parts underneath: the bounded sample ring, histogram quantiles from bucket deltas, the ring of
 * recent errors and warnings.
 */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { Gauge, Histogram, Registry } from 'prom-client';
import { connect } from '@reactor/client';
import type { DashboardData, SessionStatus } from '@reactor/protocol';
import { mintToken } from '../src/index.js';
import { DASHBOARD_HISTORY, DASHBOARD_METRICS, DashboardSampler } from '../src/dashboard/dashboard.js';
import { DASHBOARD_EVENTS, DashboardEvents } from '../src/dashboard/dashboard-events.js';
import { bucketQuantile, readHistogram } from '../src/dashboard/dashboard-metrics.js';
import { usePatternServers } from './pattern-servers.js';

const { start, cleanups } = usePatternServers();
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function data(url: string, query = ''): Promise<DashboardData> {
  const res = await fetch(`${url}/dashboard/data${query}`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  return (await res.json()) as DashboardData;
}

describe('GET /dashboard/data', () => {
  it('samples once a second: fps per track, delivery, clients, step time; absent metrics are listed, present ones charted', async () => {
    const server = await start({ token: 'dash-token' });
    const client = await connect(server.url, { WebSocket, reconnect: false, token: 'dash-token' });
    cleanups.push(() => client.close());
    await sleep(3300);
    const d = await data(server.url, '?token=dash-token');
    expect(d.intervalMs).toBe(1000);
    expect(d.historyS).toBe(600);
    expect(d.t.length).toBeGreaterThanOrEqual(2);
    for (let i = 1; i < d.t.length; i++) expect(d.t[i]! - d.t[i - 1]!).toBeGreaterThan(0.5);
    const track = server.host.schema.tracks.find((t) => t.direction === 'out')!.name;
    const fps = d.series[`fps/${track}`]!;
    expect(fps).toHaveLength(d.t.length);
    // The pattern app plays out at most 30 fps (fewer on a loaded machine); its one client is sent what it plays.
    expect(fps.some((v) => v! > 0)).toBe(true);
    for (const v of fps) expect(v).toBeLessThanOrEqual(40);
    const sent = d.series['delivery/sent']!;
    fps.forEach((v, i) => expect(Math.abs(sent[i]! - v!)).toBeLessThanOrEqual(Math.max(4, 0.3 * v!)));
    expect(d.series['clients/connected']!.at(-1)).toBe(1);
    const mean = d.series['step/mean']!.filter((v): v is number => v !== null);
    expect(mean.length).toBeGreaterThan(0);
    for (const v of mean) expect(v).toBeGreaterThanOrEqual(0);
    // Every metric it reads is either listed as absent or registered, never both.
    for (const name of Object.values(DASHBOARD_METRICS)) {
      expect(d.absent.includes(name), name).toBe(server.metrics.registry.getSingleMetric(name) === undefined);
    }
    expect(d.absent).not.toContain('reactor_frames_emitted_total');
    expect(d.now.session).toMatchObject({ state: 'streaming', clients: 1 });
    expect(d.now.clients).toEqual([
      expect.objectContaining({ id: client.clientId, role: 'controller', transport: 'websocket', codec: 'jpeg', tier: '-', connectedS: expect.any(Number) }),
    ]);
    expect(d.now.clients[0]!.framesSent).toBeGreaterThan(30);
    expect(d.now.sampleCostUs.p50).toBeGreaterThan(0);
    expect(d.now.sampleCostUs.mean).toBeGreaterThan(0);
  }, 20_000);

  it('reads the metrics of issue 26 by name once they exist: GPU busy per rank, command-to-pixel quantiles, time to first frame, load progress', async () => {
    // A registry of its own: the server's may have these metrics fed by the host, whose values a test cannot pin.
    const reg = new Registry();
    const sampler = new DashboardSampler({ registry: reg, events: new DashboardEvents(), clients: () => [], status: () => ({ state: 'ready', clients: 0 }) });
    expect((await sampler.data()).absent).toContain(DASHBOARD_METRICS.gpuBusy);
    const gpu = new Gauge({ name: DASHBOARD_METRICS.gpuBusy, help: 'test', labelNames: ['rank'], registers: [reg] });
    const buckets = [0.025, 0.05, 0.1, 0.25];
    const c2p = new Histogram({ name: DASHBOARD_METRICS.commandToPixel, help: 'test', labelNames: ['command', 'transport'], buckets, registers: [reg] });
    const load = new Gauge({ name: DASHBOARD_METRICS.loadProgress, help: 'test', registers: [reg] });
    const first = new Histogram({
      name: DASHBOARD_METRICS.firstFrame,
      help: 'test',
      labelNames: ['transport'],
      buckets: [0.1, 0.25, 0.5, 1],
      registers: [reg],
    });
    const stages = new Histogram({ name: DASHBOARD_METRICS.stageSeconds, help: 'test', labelNames: ['stage'], buckets: [0.001, 0.01, 0.1], registers: [reg] });
    gpu.set({ rank: '0' }, 0.5);
    gpu.set({ rank: '1' }, 0.25);
    load.set(0.63);
    for (let i = 0; i < 4; i++) first.observe({ transport: 'websocket' }, 0.3);
    await sampler.sample(); // the baseline
    await sampler.sample(); // an interval that saw nothing
    for (let i = 0; i < 30; i++) c2p.observe({ command: 'set_color', transport: i % 2 ? 'websocket' : 'webrtc' }, 0.06);
    for (let i = 0; i < 10; i++) c2p.observe({ command: 'set_color', transport: 'websocket' }, 0.2);
    stages.observe({ stage: 'generate' }, 0.004);
    stages.observe({ stage: 'generate' }, 0.006);
    stages.observe({ stage: 'encode' }, 0.002);
    await sampler.sample();
    const d = await sampler.data();
    expect(d.absent).not.toContain(DASHBOARD_METRICS.gpuBusy);
    expect(d.absent).not.toContain(DASHBOARD_METRICS.commandToPixel);
    expect(d.t).toHaveLength(2);
    expect(d.series['gpu/rank 0']).toEqual([50, 50]);
    expect(d.series['gpu/rank 1']).toEqual([25, 25]);
    // Quantiles of what each interval observed: nothing in the first, 30 at 60 ms and 10 at 200 ms in the second.
    expect(d.series['c2p/p50']![0]).toBeNull();
    expect(d.series['c2p/p50']![1]).toBeCloseTo(50 + 50 * (20 / 30)); // rank 20 of the 30 in (50, 100] ms
    expect(d.series['c2p/p99']![1]).toBeCloseTo(100 + 150 * ((39.6 - 30) / 10)); // in (100, 250] ms
    expect(d.series['stage/generate']).toEqual([null, 5]);
    expect(d.series['stage/encode']).toEqual([null, 2]);
    expect(d.now.loadProgress).toBeCloseTo(0.63);
    expect(d.now.firstFrameMs).toEqual({ p50: expect.any(Number), p99: expect.any(Number), count: 4 });
    expect(d.now.firstFrameMs!.p50).toBeGreaterThan(250);
    expect(d.now.firstFrameMs!.p50).toBeLessThanOrEqual(500);
  });

  it('?since= answers only the samples after it; a since that is no number is refused with bad_request', async () => {
    const server = await start();
    await sleep(2300);
    const all = await data(server.url);
    expect(all.t.length).toBeGreaterThanOrEqual(1);
    const last = all.t.at(-1)!;
    expect((await data(server.url, `?since=${last}`)).t).toEqual([]);
    await sleep(1100);
    const next = await data(server.url, `?since=${last}`);
    expect(next.t.length).toBeGreaterThanOrEqual(1);
    for (const t of next.t) expect(t).toBeGreaterThan(last);
    for (const arr of Object.values(next.series)) expect(arr).toHaveLength(next.t.length);
    for (const bad of ['abc', '', 'Infinity']) {
      const res = await fetch(`${server.url}/dashboard/data?since=${bad}`);
      expect(res.status, bad).toBe(400);
      const body = (await res.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe('bad_request');
      expect(body.error.message).toMatch(/since must be a time in seconds since the epoch/);
    }
  }, 20_000);

  it('lists the error answers it sent (by code), the refused connections and what it logged, newest first', async () => {
    const server = await start({ token: 'tok', heartbeatMs: 300 });
    const client = await connect(server.url, { WebSocket, reconnect: false, token: 'tok' });
    cleanups.push(() => client.close());
    await expect(client.send('refuse', {})).rejects.toThrow(/always refuses/);
    await expect(client.send('refuse', {})).rejects.toThrow(/always refuses/);
    expect((await fetch(`${server.url}/schema?token=nope`)).status).toBe(401);
    // A socket that stops reading never answers the heartbeat's ping: the server logs a warning and drops it.
    const deaf = new WebSocket(`${server.wsUrl}?token=tok`);
    await new Promise((r) => deaf.once('open', r));
    (deaf as unknown as { _socket: { pause(): void } })._socket.pause();
    cleanups.push(() => deaf.terminate());
    await sleep(2200);
    const d = await data(server.url, '?token=tok');
    expect(d.events).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ source: 'clients', level: 'warn', code: 'not_today', count: 2 }),
        expect.objectContaining({ source: 'clients', code: 'unauthorized', count: 1 }),
        expect.objectContaining({ source: 'clients', code: 'heartbeat', count: 1 }),
        expect.objectContaining({ source: 'log', level: 'warn', message: expect.stringMatching(/^client \S+ missed a heartbeat; dropping it$/) }),
      ]),
    );
    const times = d.events.map((e) => e.t);
    expect(times).toEqual([...times].sort((a, b) => b - a)); // newest first
  }, 20_000);

  it('is refused as /metrics is: no token, a wrong one (401 unauthorized); the token as query, bearer or the page cookie passes', async () => {
    const server = await start({ token: 's3cret' });
    for (const path of ['/metrics', '/dashboard', '/dashboard/data']) {
      for (const query of ['', '?token=wrong']) {
        const res = await fetch(`${server.url}${path}${query}`);
        expect(res.status, path + query).toBe(401);
        expect(res.headers.get('www-authenticate')).toBe('Bearer');
        expect(((await res.json()) as { error: { code: string } }).error.code).toBe('unauthorized');
      }
      expect((await fetch(`${server.url}${path}?token=s3cret`)).status, path).toBe(200);
      expect((await fetch(`${server.url}${path}`, { headers: { authorization: 'Bearer s3cret' } })).status, path).toBe(200);
      expect((await fetch(`${server.url}${path}`, { headers: { cookie: 'reactor_token=s3cret' } })).status, path).toBe(200);
    }
    const page = await fetch(`${server.url}/dashboard?token=s3cret`);
    expect(page.headers.get('set-cookie')).toMatch(/^reactor_token=s3cret; HttpOnly; SameSite=Strict/);
    expect(page.headers.get('content-security-policy')).toMatch(/default-src 'none'.*frame-ancestors 'none'/);
    const html = await page.text();
    expect(html).toContain('/viewer/dashboard.js');
    expect(html).toContain('/viewer/uplot/uPlot.min.css');
    expect((await fetch(`${server.url}/dashboard`, { method: 'POST' })).status).toBe(405);
  });

  it('with signed session tokens, answers every credential as /metrics does (a spectator may look; a foreign or forged token is refused with its code)', async () => {
    const secret = 'a-dashboard-test-hmac-secret-0123456789';
    const server = await start({ auth: { secret } });
    const spectator = await mintToken({ secret }, { role: 'spectator', ttlS: 600 });
    const foreign = await mintToken({ secret }, { role: 'controller', session: 'another-instance', ttlS: 600 });
    const forged = await mintToken({ secret: 'not-the-servers-secret-0123456789abcdef' }, { ttlS: 600 });
    const answers: Record<string, { status: number; code?: string }> = {};
    for (const [name, token] of Object.entries({ spectator, foreign, forged, none: undefined })) {
      for (const path of ['/metrics', '/dashboard', '/dashboard/data']) {
        const res = await fetch(`${server.url}${path}`, token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } });
        const code = res.status === 200 ? undefined : ((await res.json()) as { error: { code: string } }).error.code;
        if (path === '/metrics') answers[name] = code === undefined ? { status: res.status } : { status: res.status, code };
        else expect(code === undefined ? { status: res.status } : { status: res.status, code }, `${name} ${path}`).toEqual(answers[name]);
      }
    }
    expect(answers['spectator']).toEqual({ status: 200 });
    expect(answers['none']).toEqual({ status: 401, code: 'unauthorized' });
    expect(answers['foreign']!.status).toBe(403);
    expect(answers['forged']!.status).toBe(401);
  });

  it('behind a session router (X-Forwarded-Prefix) asks for its modules and data under the prefix, and its CSP allows that import map', async () => {
    const server = await start();
    const res = await fetch(`${server.url}/dashboard`, { headers: { 'x-forwarded-prefix': '/s/gs-abc12' } });
    const html = await res.text();
    expect(html).toContain('src="/s/gs-abc12/viewer/dashboard.js"');
    expect(html).toContain('href="/s/gs-abc12/viewer/uplot/uPlot.min.css"');
    expect(html).toContain('"dataPath":"/s/gs-abc12/dashboard/data"');
    const map = /<script type="importmap">(.*?)<\/script>/.exec(html)![1]!;
    expect(JSON.parse(map)).toEqual({ imports: { uplot: '/s/gs-abc12/viewer/uplot/uPlot.esm.js' } });
    const hash = `'sha256-${createHash('sha256').update(map).digest('base64')}'`;
    expect(res.headers.get('content-security-policy')).toContain(`script-src 'self' ${hash}`);
  });

  it('serves uPlot from the package, not from a CDN, with the access rules of the viewer modules', async () => {
    const server = await start({ token: 't' });
    expect((await fetch(`${server.url}/viewer/uplot/uPlot.esm.js`)).status).toBe(401);
    const js = await fetch(`${server.url}/viewer/uplot/uPlot.esm.js?token=t`);
    expect(js.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(await js.text()).toMatch(/export \{ uPlot as default \}|export default uPlot/);
    const css = await fetch(`${server.url}/viewer/uplot/uPlot.min.css?token=t`);
    expect(css.headers.get('content-type')).toBe('text/css; charset=utf-8');
    expect(await css.text()).toContain('.uplot');
    expect((await fetch(`${server.url}/viewer/uplot/package.json?token=t`)).status).toBe(404);
  });
});

describe('dashboard parts', () => {
  const status: SessionStatus = { state: 'ready', clients: 0 };

  it('keeps at most DASHBOARD_HISTORY samples, oldest out first', async () => {
    const registry = new Registry();
    const sampler = new DashboardSampler({ registry, events: new DashboardEvents(), clients: () => [], status: () => status });
    for (let i = 0; i < DASHBOARD_HISTORY + 6; i++) await sampler.sample();
    // The first reading is the baseline of the rates, not a sample.
    expect(sampler.size).toBe(DASHBOARD_HISTORY);
    const d = await sampler.data();
    expect(d.t).toHaveLength(DASHBOARD_HISTORY);
    expect(d.absent).toEqual(Object.values(DASHBOARD_METRICS));
    expect(d.series).toEqual({});
  });

  it("reads a histogram from prom-client's own state exactly as through get()", async () => {
    const reg = new Registry();
    const h = new Histogram({ name: 'h_seconds', help: 'test', labelNames: ['command', 'transport'], buckets: [0.01, 0.1, 1], registers: [reg] });
    const bare = new Histogram({ name: 'bare_seconds', help: 'test', buckets: [0.5], registers: [reg] });
    for (const [v, command] of [
      [0.005, 'a'],
      [0.05, 'a'],
      [0.5, 'b'],
      [5, 'b'],
      [0.1, 'a'],
    ] as const)
      h.observe({ command, transport: 'websocket' }, v);
    bare.observe(0.2);
    for (const name of ['h_seconds', 'bare_seconds']) {
      const fast = await readHistogram(reg, name);
      expect(fast).toEqual(await readHistogram(reg, name, true));
      expect(fast!.bounds.at(-1)).toBe(Infinity);
    }
    expect((await readHistogram(reg, 'h_seconds'))!.series.get('command=a,transport=websocket')).toEqual({ buckets: [1, 3, 3, 3], sum: 0.155, count: 3 });
    expect(await readHistogram(reg, 'missing_seconds')).toBeUndefined();
  });

  it('estimates quantiles from bucket counts as histogram_quantile does', () => {
    const bounds = [0.1, 0.2, 0.4, Infinity];
    expect(bucketQuantile(bounds, [0, 0, 0, 0], 0.5)).toBeNull();
    expect(bucketQuantile(bounds, [10, 10, 10, 10], 0.5)).toBeCloseTo(0.05);
    expect(bucketQuantile(bounds, [0, 10, 10, 10], 0.5)).toBeCloseTo(0.15);
    expect(bucketQuantile(bounds, [0, 0, 5, 10], 0.99)).toBe(0.4); // in +Inf: the largest finite bound
  });

  it('bounds its ring of errors and counts a repeat instead of listing it again', () => {
    const events = new DashboardEvents(DASHBOARD_EVENTS, () => 1000);
    for (let i = 0; i < DASHBOARD_EVENTS + 20; i++) events.add('error', 'log', `failure ${i}`);
    expect(events.list()).toHaveLength(DASHBOARD_EVENTS);
    expect(events.list()[0]!.message).toBe(`failure ${DASHBOARD_EVENTS + 19}`);
    events.add('warn', 'session', 'the app is not stepping: paused');
    events.add('warn', 'session', 'the app is not stepping: paused');
    expect(events.list()[0]).toMatchObject({ source: 'session', count: 2 });
    events.add('warn', 'log', 'x'.repeat(5000));
    expect(events.list()[0]!.message.length).toBe(500);
  });

  it("records the session's error and each new reason for not stepping once, as the status changes", async () => {
    const events = new DashboardEvents();
    const sampler = new DashboardSampler({ registry: new Registry(), events, clients: () => [], status: () => ({ state: 'ready', clients: 0 }) });
    sampler.status({ state: 'streaming', clients: 1 });
    sampler.status({ state: 'streaming', clients: 1, refused: 'paused' });
    sampler.status({ state: 'streaming', clients: 2, refused: 'paused' });
    sampler.status({ state: 'streaming', clients: 2 });
    sampler.status({ state: 'ready', clients: 0, error: { code: 'step_failed', message: 'the model threw: out of memory' } });
    sampler.status({ state: 'ready', clients: 0, error: { code: 'step_failed', message: 'the model threw: out of memory' } });
    expect(events.list().map((e) => [e.level, e.source, e.code, e.message, e.count])).toEqual([
      ['error', 'session', 'step_failed', 'the model threw: out of memory', 1],
      ['warn', 'session', undefined, 'the app is not stepping: paused', 1],
    ]);
  });

  it("records a tapped logger's warnings and errors and passes every line through", () => {
    const lines: string[] = [];
    const sink =
      (level: string) =>
      (...a: unknown[]) =>
        lines.push(`${level} ${a.map((x) => (typeof x === 'string' ? x : JSON.stringify(x))).join(' ')}`);
    const base = { debug: sink('debug'), info: sink('info'), warn: sink('warn'), error: sink('error'), child: () => base };
    const events = new DashboardEvents();
    const log = events.tap(base).child({ component: 'x' });
    log.info('hello');
    log.warn({ client: 'c1', code: 'slow_client' }, 'client c1 is slow');
    log.error('boom');
    expect(lines).toEqual(['info hello', 'warn {"client":"c1","code":"slow_client"} client c1 is slow', 'error boom']);
    expect(events.list().map((e) => [e.level, e.code, e.message])).toEqual([
      ['error', undefined, 'boom'],
      ['warn', 'slow_client', 'client c1 is slow'],
    ]);
  });
});
