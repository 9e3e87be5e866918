/**
 * Fork through the session router, end to end on one machine (issue 41): two real `reactor run`
 * processes of seed-video (its snapshot-taking app, one Python rank each on CPU) are the fleet's
 * instances, registered Ready in a `FakeAgonesCluster` behind the mock Kubernetes API (as in
 * router-join.test.ts), `reactor route` (the real bin) in front, and clients that connect with
 * `connect(routerUrl, { session })`. A fork is `POST /sessions/{id}/fork`: the router allocates
 * the other instance, streams the snapshot from one instance's `GET /snapshot` to the other's
 * `PUT /snapshot`, and the fork's first viewer starts a session from it. seed-video is
 * deterministic (float64 on CPU, rgb frames), so the fork's frames are the original's frames
 * from the snapshot on, byte for byte.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { connect, type ReactorClient } from '@reactor/client';
import { TokenMinter } from '@reactor/server';
import { launchChromium } from './fixtures/chromium.js';
import { FakeAgonesCluster } from './fixtures/agones/cluster.js';
import { MockKubeApi } from './fixtures/agones/kube-api.js';
import { until } from '@reactor/test-kit';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(repo, 'packages/cli/dist/main.js');
const seed = join(repo, 'apps/seed-video');
const PY = process.env['REACTOR_PYTHON'] ?? '/usr/bin/python3';
const TOKEN = 'fleet-secret';
const SECRET = 'fork-test-signing-secret-of-32-bytes!';
/** seed-video's snapshot is ~25 kB; the instances read at most this (reactor.yaml's snapshots.max_bytes). */
const MAX_BYTES = 200_000;

const cleanups: Array<() => unknown> = [];
const clients: ReactorClient[] = [];
const dir = mkdtempSync(join(tmpdir(), 'reactor-fork-'));
cleanups.push(() => rmSync(dir, { recursive: true, force: true }));

/** seed-video's reactor.yaml with absolute paths, one GPU (one rank), port 0, rgb frames and a small max_bytes. */
function manifest(): string {
  const text = readFileSync(join(seed, 'reactor.yaml'), 'utf8')
    .replace('import: dist/index.js', `import: ${join(seed, 'dist/index.js')}`)
    .replace('weights_path: weights', `weights_path: ${join(seed, 'weights')}`)
    .replace('path: [worker]', `path: [${join(seed, 'worker')}]`)
    .replace('count: 2', 'count: 1')
    .replace('port: 8080', 'port: 0\n  encoding: rgb')
    .replace('runtime:\n', 'runtime:\n  session_grace_ms: 200\n');
  const file = join(dir, 'reactor.yaml');
  writeFileSync(file, `${text}\nsnapshots:\n  max_bytes: ${MAX_BYTES}\n`);
  return file;
}

/** Spawns the `reactor` bin and resolves the URL it prints after `prefix` on stdout. */
function spawnBin(args: string[], prefix: string, env: Record<string, string> = {}): { child: ChildProcess; url: Promise<string>; stderr: () => string } {
  const child = spawn(process.execPath, [cli, ...args], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, REACTOR_PYTHON: PY, ...env } });
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
    const exited = new Promise((res) => child.once('exit', res));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  });
  return { child, url, stderr: () => err };
}

const hash = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

/** A client through the router that records each frame's hash by seq. */
async function open(session: string): Promise<{ c: ReactorClient; frames: Map<number, string> }> {
  const c = await connect(router.url, { session, token: TOKEN, WebSocket: WebSocket as never, reconnect: false });
  clients.push(c);
  const frames = new Map<number, string>();
  c.on('frame', (f) => frames.set(f.seq, hash(f.payload)));
  return { c, frames };
}

const fork = (sessionId: string, query = '', token = TOKEN): Promise<Response> =>
  fetch(`${router.url}/sessions/${sessionId}/fork${query}`, { method: 'POST', headers: { authorization: `Bearer ${token}` } });

const putSnapshot = (port: number, body: Uint8Array, token = TOKEN, session = '2b1c0f4e-7d1a-4c55-9a53-000000000001'): Promise<Response> =>
  fetch(`http://127.0.0.1:${port}/snapshot?session=${session}`, { method: 'PUT', headers: { authorization: `Bearer ${token}` }, body: Buffer.from(body) });

/** The same snapshot with its header changed (and its SHA-256 made right again): another app's, as far as the codec can tell. */
function reheader(bytes: Uint8Array, patch: Record<string, unknown>): Uint8Array {
  const buf = Buffer.from(bytes);
  const headerLength = buf.readUInt32LE(8);
  const align8 = (n: number): number => Math.ceil(n / 8) * 8;
  const data = buf.subarray(align8(12 + headerLength), buf.length - 32);
  const header = Buffer.from(JSON.stringify({ ...(JSON.parse(buf.subarray(12, 12 + headerLength).toString('utf8')) as object), ...patch }), 'utf8');
  const start = align8(12 + header.length);
  const out = Buffer.alloc(start + data.length + 32);
  buf.copy(out, 0, 0, 8);
  out.writeUInt32LE(header.length, 8);
  header.copy(out, 12);
  data.copy(out, start);
  createHash('sha256')
    .update(out.subarray(0, out.length - 32))
    .digest()
    .copy(out, out.length - 32);
  return new Uint8Array(out);
}

let cluster: FakeAgonesCluster;
let api: MockKubeApi;
let router: { child: ChildProcess; url: string; stderr: () => string };
const ports = new Map<string, number>();

beforeAll(async () => {
  cluster = new FakeAgonesCluster();
  api = await new MockKubeApi(cluster).start();
  cleanups.push(() => api.close());
  const file = manifest();
  const instances = [0, 1].map(() => spawnBin(['run', '--manifest', file, '--token', TOKEN], 'Viewer', { REACTOR_AUTH_SECRET: SECRET }));
  const urls = await Promise.all(instances.map((i) => i.url));
  urls.forEach((u, i) => {
    const name = `reactor-${'ab'[i]}`;
    const port = Number(new URL(u).port);
    ports.set(name, port);
    cluster.addServer(name, '127.0.0.1', port);
    cluster.setState(name, 'Ready');
  });
  const r = spawnBin(['route', '--kubeconfig', api.writeKubeconfig(), '--port', '0', '--token', TOKEN], 'Router');
  router = { child: r.child, url: await r.url, stderr: r.stderr };
}, 600_000);

afterAll(async () => {
  for (const c of clients) c.close();
  for (const c of cleanups.splice(0).reverse()) await c();
}, 60_000);

/** A router metric's value (0 when absent). */
async function metric(name: string): Promise<number> {
  const text = await (await fetch(`${router.url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
  return Number(new RegExp(`^${name.replace(/[{}]/g, '\\$&')} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
}

/** Closes a client, waits until its instance's session ended (the grace is 200 ms) and gives the instance back to the fleet, as its agent would. */
async function free(client: ReactorClient): Promise<string> {
  const name = client.route!.instance;
  client.close();
  const health = async (): Promise<{ sessionId?: string }> =>
    (await fetch(`http://127.0.0.1:${ports.get(name)}/health`)).json() as Promise<{ sessionId?: string }>;
  await until(async () => (await health()).sessionId === undefined, `the session on ${name} to end`, 60_000);
  cluster.setState(name, 'Ready');
  return name;
}

describe('POST /sessions/{id}/fork through reactor route (seed-video instances)', { timeout: 180_000 }, () => {
  let original: { c: ReactorClient; frames: Map<number, string> };
  let firstFork: ReactorClient;

  it('forks a running session onto the other instance: its own id and URL, the state and frames from the snapshot on; the original goes on', async () => {
    original = await open('new');
    const source = original.c.route!;
    await original.c.send('set_prompt', { prompt: 'A forked forest.' }).applied;
    await until(() => original.frames.size >= 12, 'frames of the original', 60_000);

    const r = await fork(source.sessionId);
    expect(r.status).toBe(201);
    const answer = (await r.json()) as { sessionId: string; instance: string; url: string; forkOf: string; bytes: number; step: number };
    expect(answer.forkOf).toBe(source.sessionId);
    expect(answer.sessionId).not.toBe(source.sessionId);
    expect(answer.instance).not.toBe(source.instance);
    expect(answer.url).toBe(`${router.url}/s/${answer.instance}`);
    expect(answer.bytes).toBeGreaterThan(48 * 64 * 8); // the motion state: 48 patches x 64 float64
    expect(answer.step).toBeGreaterThan(0);
    expect(r.headers.get('location')).toBe(`/sessions/${answer.sessionId}`);

    const forked = await open(answer.sessionId);
    firstFork = forked.c;
    expect(forked.c.route!.instance).toBe(answer.instance);
    await until(() => forked.c.state['prompt'] === 'A forked forest.', "the original's prompt in the fork", 60_000);
    await until(() => forked.frames.size >= 8, 'frames of the fork', 60_000);
    // The snapshot was taken before step `step` of the original: 4 frames a chunk, so the fork's
    // frame i is the original's frame 4 * step + i (the same bytes: the model is deterministic).
    const from = 4 * answer.step;
    await until(() => original.frames.has(from + 7), "the original's frames after the snapshot", 60_000);
    const ranges = [...Array(8).keys()].map((i) => [forked.frames.get(i), original.frames.get(from + i)]);
    for (const [i, [f, o]] of ranges.entries()) expect(f, `fork frame ${i} = original frame ${from + i}`).toBe(o);
    // The original keeps running, on its own instance.
    const seen = Math.max(...original.frames.keys());
    await until(() => Math.max(...original.frames.keys()) > seen + 8, 'the original streaming on', 60_000);
    expect(cluster.get(source.instance).state).toBe('Allocated');
  });

  it('answers no_free_instance (429, Retry-After) when no instance is free, and a queue position with ?wait=', async () => {
    const id = original.c.route!.sessionId;
    const r = await fork(id);
    expect(r.status).toBe(429);
    expect(r.headers.get('retry-after')).toBe('2');
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe('no_free_instance');

    const waiting = await fork(id, '?wait=1');
    expect(waiting.status).toBe(202);
    const lines = (await waiting.text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { state: string; position?: number; error?: { code: string } });
    expect(lines[0]).toMatchObject({ state: 'queued', position: 1 });
    expect(lines.at(-1)).toMatchObject({ state: 'timeout', error: { code: 'queue_timeout' } });
  });

  it('refuses a fork of a session nobody holds with unknown_session', async () => {
    const r = await fork('2b1c0f4e-7d1a-4c55-9a53-000000000000');
    expect(r.status).toBe(404);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe('unknown_session');
  });

  it("the instance's /snapshot: a viewer's token is snapshot_forbidden; corrupt, truncated, another app's and too big snapshots get their codes", async () => {
    const port = ports.get(original.c.route!.instance)!;
    const viewerToken = await new TokenMinter({ secret: SECRET }).mint({ role: 'controller' });
    const asViewer = await fetch(`http://127.0.0.1:${port}/snapshot`, { headers: { authorization: `Bearer ${viewerToken}` } });
    expect(asViewer.status).toBe(403);
    expect(((await asViewer.json()) as { error: { code: string } }).error.code).toBe('snapshot_forbidden');
    expect(((await (await putSnapshot(port, new Uint8Array(10), viewerToken)).json()) as { error: { code: string } }).error.code).toBe('snapshot_forbidden');

    const taken = await fetch(`http://127.0.0.1:${port}/snapshot`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(taken.status).toBe(200);
    const bytes = new Uint8Array(await taken.arrayBuffer());
    const code = async (r: Promise<Response>): Promise<[number, string]> => {
      const res = await r;
      return [res.status, ((await res.json()) as { error: { code: string } }).error.code];
    };
    const damaged = bytes.slice();
    damaged[damaged.length - 100]! ^= 0xff;
    expect(await code(putSnapshot(port, damaged))).toEqual([400, 'snapshot_corrupt']);
    expect(await code(putSnapshot(port, bytes.subarray(0, 200)))).toEqual([400, 'snapshot_truncated']);
    expect(await code(putSnapshot(port, reheader(bytes, { app: 'another-app' })))).toEqual([409, 'snapshot_app_mismatch']);
    expect(await code(putSnapshot(port, reheader(bytes, { version: '9.9.9' })))).toEqual([409, 'snapshot_version_mismatch']);
    expect(await code(putSnapshot(port, new Uint8Array(MAX_BYTES + 1)))).toEqual([413, 'snapshot_too_big']);
    // Whole, it is kept for the session it names (nothing starts until that session's viewer comes).
    const kept = await putSnapshot(port, bytes);
    expect(kept.status).toBe(202);
    expect(await kept.json()).toMatchObject({ bytes: bytes.byteLength });
  });

  it('a fork target that dies while taking the snapshot: fork_failed (502), the allocation released, the original goes on', async () => {
    // An instance that answers its readiness check and then drops the connection of the PUT.
    const dying: Server = createServer((req, res) => {
      if (req.url === '/health/ready') res.end('{"ready":true}');
      else req.socket.destroy();
    });
    await new Promise<void>((r) => dying.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise((r) => dying.close(r)));
    cluster.addServer('reactor-dying', '127.0.0.1', (dying.address() as AddressInfo).port);
    cluster.setState('reactor-dying', 'Ready');
    // The router allocates from its watch of the fleet: wait until it knows the new Ready instance.
    await until(async () => (await metric('reactor_router_instances{state="Ready"}')) === 1, 'the router to see the Ready instance', 60_000);
    const id = original.c.route!.sessionId;
    const r = await fork(id);
    expect(r.status).toBe(502);
    const body = (await r.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('fork_failed');
    expect(body.error.message).toMatch(/instance reactor-dying did not take the snapshot .*the original session goes on/);
    // The allocation is given back (the release annotation an instance under Agones acts on).
    expect(cluster.get('reactor-dying').annotations['reactor.dev/release-session']).toBeDefined();
    const seen = Math.max(...original.frames.keys());
    await until(() => Math.max(...original.frames.keys()) > seen + 4, 'the original streaming on', 60_000);
  });

  it('a fork that waited in the line (?wait=) gets the snapshot when an instance frees up: its allocated line is the fork', async () => {
    const id = original.c.route!.sessionId;
    const waiting = fork(id, '?wait=60');
    await until(async () => (await metric('reactor_router_queue_length')) === 1, 'the fork in the line', 60_000);
    const name = await free(firstFork);
    const lines = (await (await waiting).text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { state: string; sessionId?: string; instance?: string; forkOf?: string; bytes?: number });
    expect(lines[0]).toMatchObject({ state: 'queued', position: 1 });
    const allocated = lines.at(-1)!;
    expect(allocated).toMatchObject({ state: 'allocated', instance: name, forkOf: id });
    expect(allocated.bytes).toBeGreaterThan(0);
    const forked = await open(allocated.sessionId!);
    await until(() => forked.c.state['prompt'] === 'A forked forest.', "the original's prompt in the queued fork", 60_000);
    firstFork = forked.c;
  });

  it("the viewer behind the router has a Fork button: a click forks the session and links to the fork's viewer, which plays", async () => {
    await free(firstFork);
    const browser = await launchChromium();
    cleanups.push(() => browser.close());
    const context = await browser.newContext();
    const page = await context.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(`${router.url}/s/${original.c.route!.instance}/?token=${TOKEN}`);
    await expect.poll(() => page.textContent('#connection'), { timeout: 30_000 }).toBe('connected');
    await page.locator('button[data-fork]').click();
    const link = page.locator('.result[data-fork] a');
    await link.waitFor({ timeout: 30_000 });
    const href = (await link.getAttribute('href'))!;
    expect(href).toMatch(/^\/s\/reactor-[ab]\/$/);
    expect(href).not.toBe(`/s/${original.c.route!.instance}/`);
    // The same browser context: the page's token cookie goes with the link, as in a user's browser.
    const fork = await context.newPage();
    await fork.goto(`${router.url}${href}`);
    await fork.waitForFunction(() => ((window as unknown as { reactorViewer?: { framesDrawn: number } }).reactorViewer?.framesDrawn ?? 0) > 3, null, {
      timeout: 30_000,
    });
    // The fork's page shows the original's state (the prompt it was forked with).
    await expect
      .poll(() => fork.inputValue('div[data-command=set_prompt] input, div[data-command=set_prompt] textarea').catch((e: Error) => e.message))
      .toBe('A forked forest.');
    expect(errors).toEqual([]);
  });
});
