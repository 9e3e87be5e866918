/**
 * Move on drain (issue 41), through the doors a user and an operator open: two real
 * `reactor run --manifest` processes of seed-video under the FAKE Agones (each with its fake SDK
 * sidecar on one `FakeAgonesCluster`, which the mock Kubernetes API serves to `reactor route`),
 * and a client connected through the router. SIGTERM on the session's instance: it labels itself
 * draining, the router moves the session (snapshot, the other instance allocated for the same
 * session id, restore there), the client is told 4307 `session_moved` and reconnects there, and
 * the old instance exits once empty. The move gap is what the client sees: the longest wait
 * between two frames across the move. Then a move whose target dies mid-transfer: the session
 * stays where it was and streams on.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { connect, type ReactorClient } from '@reactor/client';
import { SESSION_LABEL } from '@reactor/router';
import { FakeAgonesCluster } from './fixtures/agones/cluster.js';
import { MockKubeApi } from './fixtures/agones/kube-api.js';
import { FakeAgonesSidecar } from './fixtures/agones/sidecar.js';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(repo, 'packages/cli/dist/main.js');
const seed = join(repo, 'apps/seed-video');
const PY = process.env['REACTOR_PYTHON'] ?? '/usr/bin/python3';
const TOKEN = 'fleet-secret';

const cleanups: Array<() => unknown> = [];
const dir = mkdtempSync(join(tmpdir(), 'reactor-move-'));
cleanups.push(() => rmSync(dir, { recursive: true, force: true }));

/** seed-video's reactor.yaml with absolute paths, one rank, port 0, rgb frames, under Agones. */
function manifest(): string {
  const text = readFileSync(join(seed, 'reactor.yaml'), 'utf8')
    .replace('import: dist/index.js', `import: ${join(seed, 'dist/index.js')}`)
    .replace('weights_path: weights', `weights_path: ${join(seed, 'weights')}`)
    .replace('path: [worker]', `path: [${join(seed, 'worker')}]`)
    .replace('count: 2', 'count: 1')
    .replace('runtime:\n', 'runtime:\n  session_grace_ms: 200\n')
    .replace('port: 8080', 'port: 0\n  encoding: rgb');
  const file = join(dir, 'reactor.yaml');
  writeFileSync(file, `${text}\nagones: { enabled: true }\n`);
  return file;
}

interface Proc {
  child: ChildProcess;
  url: Promise<string>;
  exited: Promise<number | null>;
  stderr: () => string;
}

function spawnBin(args: string[], prefix: string, env: Record<string, string> = {}): Proc {
  const child = spawn(process.execPath, [cli, ...args], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, REACTOR_PYTHON: PY, ...env } });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const url = new Promise<string>((res, rej) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = new RegExp(`${prefix}: (\\S+)`).exec(out);
      if (m) res(m[1]!);
    });
    child.once('exit', (code) => rej(new Error(`reactor ${args[0]} exited with ${code} before printing its URL:\n${err}`)));
  });
  url.catch(() => undefined);
  cleanups.push(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  });
  return { child, url, exited, stderr: () => err };
}

async function until(cond: () => boolean | Promise<boolean>, what: string, ms = 60_000): Promise<void> {
  const end = performance.now() + ms;
  while (!(await cond())) {
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

let cluster: FakeAgonesCluster;
let router: Proc & { base: string };
const instances = new Map<string, Proc>();

beforeAll(async () => {
  cluster = new FakeAgonesCluster();
  const api = await new MockKubeApi(cluster).start();
  cleanups.push(() => api.close());
  const file = manifest();
  await Promise.all(
    ['reactor-a', 'reactor-b'].map(async (name) => {
      cluster.addServer(name, '127.0.0.1', 0);
      const sidecar = await FakeAgonesSidecar.start(cluster, name);
      cleanups.push(() => sidecar.stop());
      // A short drain: the failed move below ends at its deadline instead of 60 s.
      const proc = spawnBin(['run', '--manifest', file, '--token', TOKEN], 'Viewer', { ...sidecar.env(), REACTOR_DRAIN_TIMEOUT_MS: '30000' });
      instances.set(name, proc);
      cluster.get(name).port = Number(new URL(await proc.url).port);
    }),
  );
  await until(() => [...instances.keys()].every((n) => cluster.get(n).state === 'Ready'), 'both instances Ready');
  const r = spawnBin(['route', '--kubeconfig', api.writeKubeconfig(), '--port', '0', '--token', TOKEN], 'Router');
  router = { ...r, base: await r.url };
}, 600_000);

afterAll(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
}, 60_000);

describe('move on drain (SIGTERM under the fake Agones, through reactor route)', { timeout: 180_000 }, () => {
  let client: ReactorClient;
  const arrivals: { seq: number; at: number }[] = [];

  it("SIGTERM on the session's instance moves the session: the viewer resumes on the other instance with the state, the old one exits once empty", async () => {
    client = await connect(router.base, { session: 'new', token: TOKEN, WebSocket: WebSocket as never });
    cleanups.push(() => client.close());
    const { sessionId, instance: from } = client.route!;
    const to = from === 'reactor-a' ? 'reactor-b' : 'reactor-a';
    client.on('frame', (f) => arrivals.push({ seq: f.seq, at: performance.now() }));
    await client.send('set_prompt', { prompt: 'Moved, not lost.' }).applied;
    await until(() => arrivals.length >= 12, 'frames before the move');
    const statuses: string[] = [];
    client.on('status', (s: { state: string }) => statuses.push(s.state));

    const before = arrivals.length;
    const t0 = performance.now();
    instances.get(from)!.child.kill('SIGTERM');
    // The viewer is on the other instance: the session's label is there, its frames come again.
    await until(() => cluster.get(to).labels[SESSION_LABEL] === sessionId && cluster.get(to).state === 'Allocated', `the session on ${to}`);
    await until(() => statuses.includes('reconnecting') && statuses.at(-1) === 'open', 'the client reconnected');
    const after = arrivals.length;
    await until(() => arrivals.length >= after + 8, 'frames after the move');
    // The state came along (the snapshot holds it); the old instance ended the session and exited.
    expect(client.state['prompt']).toBe('Moved, not lost.');
    expect(await instances.get(from)!.exited).toBe(0);
    expect(instances.get(from)!.stderr()).toMatch(/moved to another instance/);

    // The gap a viewer sees: the longest wait between two frames from the SIGTERM on.
    const across = arrivals.slice(before - 1);
    let gap = 0;
    for (let i = 1; i < across.length; i++) gap = Math.max(gap, across[i]!.at - across[i - 1]!.at);
    console.log(
      JSON.stringify({ figure: 'move gap (viewer, max frame-to-frame)', ms: Math.round(gap), sigtermToReopenMs: Math.round(performance.now() - t0) }),
    );
    expect(gap).toBeGreaterThan(0);
    expect(statuses).not.toContain('closed');
  });

  it('a move target that dies mid-transfer: the session stays on its instance and streams on, the target is released', async () => {
    const holder = client.route!.instance === 'reactor-a' ? 'reactor-b' : 'reactor-a';
    // After the move the client's session is on `holder` (its route is the one it first had).
    const on = [...instances.keys()].find((n) => cluster.get(n).state === 'Allocated' && instances.get(n)!.child.exitCode === null)!;
    expect(on).toBe(holder);
    const dying: Server = createServer((req, res) => {
      if (req.url === '/health/ready') res.end('{"ready":true}');
      else req.socket.destroy();
    });
    await new Promise<void>((r) => dying.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise((r) => dying.close(r)));
    cluster.addServer('reactor-dying', '127.0.0.1', (dying.address() as AddressInfo).port);
    cluster.setState('reactor-dying', 'Ready');
    const statuses: string[] = [];
    client.on('status', (s: { state: string }) => statuses.push(s.state));
    instances.get(on)!.child.kill('SIGTERM');
    await until(() => cluster.get('reactor-dying').annotations['reactor.dev/release-session'] !== undefined, 'the failed target released');
    const seen = arrivals.length;
    await until(() => arrivals.length >= seen + 8, 'frames on the old instance after the failed move');
    expect(statuses).not.toContain('reconnecting');
    expect(router.stderr()).toMatch(/moving session \S+ from \S+ to reactor-dying failed \(fork_failed\)/);
  });
});
