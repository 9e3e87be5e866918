/**
 * `@reactor/client` through the session router, end to end on one machine: two real
 * `reactor run` processes (the CPU sample app, one rank each) are the fleet's instances, the test
 * registers their GameServers as Ready in a `FakeAgonesCluster` (what the Agones SDK sidecar
 * flow does in a cluster, tested elsewhere), `reactor route` (the real bin) talks to the mock
 * Kubernetes API, and clients connect with `connect(routerUrl, { session })`. Exercised: a new
 * session lands on a free instance and streams, a joiner reaches its session's instance (same
 * session state), a second new session takes the other instance, a third gets `no_free_instance`
 * with its Retry-After, an unknown session is `unknown_session`, a wrong token is refused by the
 * router, an upload goes through the relay, and SIGTERM stops the router cleanly.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { connect, SessionRouteError, type ReactorClient } from '@reactor/client';
import { SESSION_LABEL } from '@reactor/router';
import { FakeAgonesCluster } from './fixtures/agones/cluster.js';
import { MockKubeApi } from './fixtures/agones/kube-api.js';
import { sampleWorkspace } from './fixtures/sample-workspace.js';
import { chromium } from 'playwright-core';
import { chromiumPath } from './fixtures/chromium.js';
import { until } from '@reactor/test-kit';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(repo, 'packages/cli/dist/main.js');
const TOKEN = 'fleet-secret';
/** A 1x1 PNG: enough for the server's type sniffing. */
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==', 'base64');

const cleanups: Array<() => unknown> = [];
const clients: ReactorClient[] = [];

/** Spawns the `reactor` bin and resolves the URL it prints after `prefix` on stdout. */
function spawnBin(args: string[], prefix: string, cwd: string): { child: ChildProcess; url: Promise<string>; stderr: () => string } {
  const child = spawn(process.execPath, [cli, ...args], { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const url = new Promise<string>((res, rej) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = new RegExp(`${prefix}: (\\S+)`).exec(out);
      if (m) res(m[1]!);
    });
    child.once('exit', (code) => rej(new Error(`reactor ${args[0]} exited with ${code} before printing its URL:\n${err}`)));
  });
  cleanups.push(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    // SIGTERM: an orderly exit removes the instance's upload folder (a SIGKILL could not).
    const exited = new Promise((res) => child.once('exit', res));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  });
  return { child, url, stderr: () => err };
}

/** One `reactor run` of the sample app on CPU, one rank, port 0, with the fleet's token. */
function startInstance(): { child: ChildProcess; url: Promise<string> } {
  const dir = sampleWorkspace({
    prefix: 'reactor-fleet-',
    name: 'fleet-test',
    config: 'width: 32\nheight: 24\nframesPerChunk: 2\nworldSize: 1\ndevices: cpu\nbackend: wasm\n',
    server: '{ port: 0, encoding: rgb }',
  });
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return spawnBin(['run', '--manifest', join(dir, 'reactor.yaml'), '--token', TOKEN], 'Viewer', dir);
}

/** POST /sessions the router refused with no_free_instance so far (its own count: the cache answers most without asking the API). */
async function refusals(): Promise<number> {
  const text = await (await fetch(`${router.url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
  const m = /^reactor_router_allocations_total\{result="no_free_instance"\} (\d+)$/m.exec(text);
  return m ? Number(m[1]) : 0;
}

let cluster: FakeAgonesCluster;
let api: MockKubeApi;
let router: { child: ChildProcess; url: string; stderr: () => string };
const ports = new Map<string, number>();

beforeAll(async () => {
  cluster = new FakeAgonesCluster();
  api = await new MockKubeApi(cluster).start();
  cleanups.push(() => api.close());
  const instances = [startInstance(), startInstance()];
  const urls = await Promise.all(instances.map((i) => i.url));
  urls.forEach((u, i) => {
    const name = `reactor-${'ab'[i]}`;
    const port = Number(new URL(u).port);
    ports.set(name, port);
    cluster.addServer(name, '127.0.0.1', port);
    cluster.setState(name, 'Ready');
  });
  const r = spawnBin(['route', '--kubeconfig', api.writeKubeconfig(), '--port', '0', '--token', TOKEN], 'Router', repo);
  router = { child: r.child, url: await r.url, stderr: r.stderr };
}, 600_000); // two `reactor run` and a `reactor route` starting at once: slow on a loaded 2-core machine

afterAll(async () => {
  for (const c of clients) c.close();
  for (const c of cleanups.splice(0).reverse()) await c();
}, 60_000);

async function open(session: string, token = TOKEN): Promise<ReactorClient> {
  const c = await connect(router.url, { session, token, WebSocket: WebSocket as never, reconnect: false });
  clients.push(c);
  return c;
}

describe('connect(routerUrl, { session }) through reactor route', { timeout: 120_000 }, () => {
  it('puts a new session on a free instance, a joiner on its instance, and refuses a third with no_free_instance', async () => {
    const host = await open('new');
    expect(host.route).toMatchObject({ instance: expect.stringMatching(/^reactor-[ab]$/), url: `${router.url}/s/${host.route!.instance}` });
    expect(cluster.get(host.route!.instance).labels[SESSION_LABEL]).toBe(host.route!.sessionId);
    let frames = 0;
    host.on('frame', () => frames++);
    await until(() => frames >= 2, 'frames through the router', 60_000);

    const guest = await open(host.route!.sessionId);
    expect(guest.route).toEqual(host.route);
    // The same session: the joiner sees the host's command, and the instance counts both.
    await host.send('set_prompt', { prompt: 'Two viewers, one session.' });
    await until(() => guest.state['prompt'] === 'Two viewers, one session.', "the host's prompt on the guest", 60_000);
    const health = (await (await fetch(`http://127.0.0.1:${ports.get(host.route!.instance)}/health`)).json()) as { clients: number };
    expect(health.clients).toBe(2);

    // Uploads go through the relay too (the ticket's path is resolved under /s/{instance}).
    const ref = await host.upload(PNG, { name: 'dot.png', type: 'image/png' });
    expect(ref.uploadId).toMatch(/\S+/);

    const second = await open('new');
    expect(second.route!.instance).not.toBe(host.route!.instance);
    expect(cluster.list({}, 'Allocated')).toHaveLength(2);

    const refused = await open('new').catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(SessionRouteError);
    expect(refused).toMatchObject({ code: 'no_free_instance', status: 429, retryAfterMs: 2000 });
    expect((refused as Error).message).toMatch(
      /^the session router refused a new session \(no_free_instance\): no free instance: every instance of fleet "reactor"/,
    );
  });

  it('waits for a free instance with allocationRetry, bounded', async () => {
    // Both instances hold sessions (previous test); free one after the first refusal.
    const a = [...cluster.servers.values()].find((gs) => gs.state === 'Allocated')!;
    const before = await refusals();
    const pending = connect(router.url, {
      session: 'new',
      token: TOKEN,
      WebSocket: WebSocket as never,
      reconnect: false,
      allocationRetry: { maxAttempts: 100, maxDelayMs: 200 },
    });
    await until(async () => (await refusals()) > before, 'the first refusal', 60_000);
    cluster.setState(a.name, 'Ready');
    const c = await pending;
    clients.push(c);
    expect(c.route!.instance).toBe(a.name);
    // Bounded: with every instance busy, maxAttempts requests and then the refusal.
    const n = await refusals();
    await expect(
      connect(router.url, {
        session: 'new',
        token: TOKEN,
        WebSocket: WebSocket as never,
        reconnect: false,
        allocationRetry: { maxAttempts: 2, maxDelayMs: 10 },
      }),
    ).rejects.toMatchObject({ code: 'no_free_instance' });
    expect((await refusals()) - n).toBe(2);
  });

  it('serves the viewer page under the router prefix: in Chromium it loads its scripts and socket under /s/{instance} and plays', async () => {
    const held = cluster.list({}, 'Allocated')[0]!;
    const browser = await chromium.launch({
      executablePath: chromiumPath,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
      ],
    });
    cleanups.push(() => browser.close());
    const page = await browser.newPage();
    const failed: string[] = [];
    page.on('response', (r) => r.status() >= 400 && failed.push(`${r.status()} ${r.url()}`));
    await page.goto(`${router.url}/s/${held.name}/?token=${TOKEN}`);
    await page.waitForFunction(() => (window as unknown as { reactorViewer?: { framesDrawn: number } }).reactorViewer!.framesDrawn > 5, null, {
      timeout: 30_000,
    });
    await expect.poll(() => page.textContent('#connection')).toBe('connected');
    expect(failed).toEqual([]);
    // Everything it asked for went through the prefix (nothing at the router's root).
    const html = await page.content();
    expect(html).toContain(`src="/s/${held.name}/viewer/app.js"`);
  });

  it('answers unknown_session for a session no instance holds, and unauthorized for a wrong token', async () => {
    await expect(open('2b1c0f4e-7d1a-4c55-9a53-000000000000')).rejects.toMatchObject({ name: 'SessionRouteError', code: 'unknown_session', status: 404 });
    await expect(open('new', 'wrong')).rejects.toMatchObject({ code: 'unauthorized', status: 401 });
    expect(cluster.list({}, 'Ready')).toHaveLength(0);
  });

  it('stops on SIGTERM and exits 0', async () => {
    const exited = new Promise<number | null>((r) => router.child.once('exit', (code) => r(code)));
    router.child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(router.stderr()).toMatch(/SIGTERM: closing the router/);
  });
});

describe('reactor route', { timeout: 120_000 }, () => {
  it('refuses to start without a Kubernetes configuration, naming what it tried', async () => {
    const child = spawn(process.execPath, [cli, 'route', '--kubeconfig', '/nonexistent/kubeconfig', '--port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
    expect(code).toBe(1);
    expect(err).toMatch(/reactor: no Kubernetes configuration: --kubeconfig \/nonexistent\/kubeconfig does not exist; .* \[kube_config_invalid\]/);
  });

  it('refuses a non-loopback address without a token', async () => {
    const file = api.writeKubeconfig();
    const { REACTOR_TOKEN: _, ...withoutToken } = process.env;
    const child = spawn(process.execPath, [cli, 'route', '--kubeconfig', file, '--host', '0.0.0.0', '--port', '0'], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: withoutToken,
    });
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
    expect(code).toBe(1);
    expect(err).toMatch(/refusing to route on 0\.0\.0\.0 without an access token.*\[insecure_bind\]/);
  });
});
