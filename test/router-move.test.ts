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
 *
 * Two routers watch the fleet, as a deployment of several would: both see each drain, and
 * exactly one moves the session (it claims the move on the GameServer, with its resourceVersion
 * as precondition); a viewer relayed by the other router follows too (the moved-to annotation).
 * The router's `DELETE /instances/{name}` drains an instance the same way as SIGTERM.
 *
 * Nothing is lost in the transfer window: each instance sits behind a {@link Gate} (a TCP proxy
 * that can hold the router's `PUT /snapshot`), so the test sends a command exactly while the
 * move's snapshot is taken and not yet on the new instance. The old instance holds it (the move
 * froze the session); after the move it applies on the new instance (the client sends it again),
 * after a failed move on the old one.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { createConnection, createServer as createTcpServer, type AddressInfo, type Socket } from 'node:net';
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
import { until } from '@reactor/test-kit';

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

/**
 * A TCP proxy in front of an instance: everything passes, but while `onPut` is set the next
 * `PUT /snapshot?session=` waits for it to say `go` (pass it on) or `cut` (drop the connection).
 */
class Gate {
  onPut: ((go: () => void, cut: () => void) => void) | undefined;
  readonly #server = createTcpServer((down: Socket) => {
    const up = createConnection(this.target, '127.0.0.1');
    const both = (): void => {
      down.destroy();
      up.destroy();
    };
    down.on('error', both);
    up.on('error', both);
    down.on('close', () => up.destroy());
    up.on('close', () => down.destroy());
    up.pipe(down);
    down.on('data', (chunk: Buffer) => {
      const onPut = this.onPut;
      if (onPut && chunk.includes('PUT /snapshot?session=')) {
        this.onPut = undefined;
        down.pause();
        onPut(() => {
          up.write(chunk);
          down.resume();
        }, both);
        return;
      }
      up.write(chunk);
    });
  });
  constructor(readonly target: number) {}
  async listen(): Promise<number> {
    await new Promise<void>((r) => this.#server.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise((r) => this.#server.close(r)));
    return (this.#server.address() as AddressInfo).port;
  }
  /** Resolves at the next `PUT /snapshot` with its `go` and `cut`. */
  nextPut(): Promise<{ go: () => void; cut: () => void }> {
    return new Promise((resolve) => (this.onPut = (go, cut) => resolve({ go, cut })));
  }
}

let cluster: FakeAgonesCluster;
const gates = new Map<string, Gate>();
let router: Proc & { base: string };
let router2: Proc & { base: string };
const instances = new Map<string, Proc>();
const NAMES = ['reactor-a', 'reactor-b', 'reactor-c'];

beforeAll(async () => {
  cluster = new FakeAgonesCluster();
  const api = await new MockKubeApi(cluster).start();
  cleanups.push(() => api.close());
  const file = manifest();
  await Promise.all(
    NAMES.map(async (name) => {
      cluster.addServer(name, '127.0.0.1', 0);
      const sidecar = await FakeAgonesSidecar.start(cluster, name);
      cleanups.push(() => sidecar.stop());
      // A short drain: the failed move below ends at its deadline instead of 60 s.
      const proc = spawnBin(['run', '--manifest', file, '--token', TOKEN], 'Viewer', { ...sidecar.env(), REACTOR_DRAIN_TIMEOUT_MS: '30000' });
      instances.set(name, proc);
      const gate = new Gate(Number(new URL(await proc.url).port));
      gates.set(name, gate);
      cluster.get(name).port = await gate.listen();
    }),
  );
  await until(() => NAMES.every((n) => cluster.get(n).state === 'Ready'), 'every instance Ready', 60_000);
  const kubeconfig = api.writeKubeconfig();
  const [r, r2] = [1, 2].map(() => spawnBin(['route', '--kubeconfig', kubeconfig, '--port', '0', '--token', TOKEN], 'Router'));
  router = { ...r!, base: await r!.url };
  router2 = { ...r2!, base: await r2!.url };
}, 600_000);

afterAll(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
}, 60_000);

const routersLog = (): string => router.stderr() + router2.stderr();
const count = (text: string, re: RegExp): number => text.match(new RegExp(re.source, 'g'))?.length ?? 0;
const live = (): string[] => NAMES.filter((n) => instances.get(n)!.child.exitCode === null && cluster.get(n).state === 'Allocated');

/** Waits for the router's PUT of the snapshot on any of `names` (the move's target): its name, `go` and `cut`. */
async function nextPutOn(names: string[]): Promise<{ name: string; go: () => void; cut: () => void }> {
  const put = await Promise.race(
    names.map((name) =>
      gates
        .get(name)!
        .nextPut()
        .then((p) => ({ name, ...p })),
    ),
  );
  for (const n of names) if (n !== put.name) gates.get(n)!.onPut = undefined;
  return put;
}

describe('move on drain (SIGTERM under the fake Agones, through reactor route)', { timeout: 180_000 }, () => {
  let client: ReactorClient;
  const arrivals: { seq: number; at: number }[] = [];

  it("SIGTERM on the session's instance moves the session, once across two routers: a command sent in the transfer window applies on the new instance, the old one exits once empty", async () => {
    client = await connect(router.base, { session: 'new', token: TOKEN, WebSocket: WebSocket as never });
    cleanups.push(() => client.close());
    const { sessionId, instance: from } = client.route!;
    client.on('frame', (f) => arrivals.push({ seq: f.seq, at: performance.now() }));
    await client.send('set_prompt', { prompt: 'Moved, not lost.' }).applied;
    await until(() => arrivals.length >= 12, 'frames before the move', 60_000);
    const statuses: string[] = [];
    client.on('status', (s: { state: string }) => statuses.push(s.state));
    const allocations = cluster.allocations;

    const before = arrivals.length;
    const t0 = performance.now();
    const put = nextPutOn(NAMES.filter((n) => n !== from));
    instances.get(from)!.child.kill('SIGTERM');
    // The transfer window: the snapshot is taken (the session froze), the new instance does not have it yet.
    const { name: to, go } = await put;
    const inWindow = client.send('set_prompt', { prompt: 'Sent in the window.' });
    await until(() => /frozen for a move: holding its commands/.test(instances.get(from)!.stderr()), 'the old instance holding the command', 60_000);
    go();
    // The viewer is on the other instance: the session's label is there, its frames come again.
    await until(() => cluster.get(to).labels[SESSION_LABEL] === sessionId && cluster.get(to).state === 'Allocated', `the session on ${to}`, 60_000);
    await until(() => statuses.includes('reconnecting') && statuses.at(-1) === 'open', 'the client reconnected', 60_000);
    // The command sent in the window was not applied on the old instance; the client sent it again to the new one.
    await expect(inWindow).resolves.toBeUndefined();
    expect(await inWindow.applied).toMatchObject({ outcome: 'applied' });
    const after = arrivals.length;
    await until(() => arrivals.length >= after + 8, 'frames after the move', 60_000);
    expect(client.state['prompt']).toBe('Sent in the window.');
    // The old instance ended the session and exited.
    expect(await instances.get(from)!.exited).toBe(0);
    expect(instances.get(from)!.stderr()).toMatch(/moved to another instance/);
    expect(instances.get(from)!.stderr()).toMatch(/ended frozen \(moved\): 1 held command\(s\) were not applied here/);
    // One router moved it (one allocation: the third instance is still free); the other saw the claim and left it.
    await until(() => /claimed its move; leaving it/.test(routersLog()), 'the other router leaving the move', 60_000);
    expect(count(routersLog(), /moved from draining/)).toBe(1);
    expect(cluster.allocations).toBe(allocations + 1);
    expect(NAMES.filter((n) => cluster.get(n).state === 'Ready')).toHaveLength(1);

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

  it("the router's DELETE /instances/{name} drains the instance as SIGTERM does: the session moves, the instance exits", async () => {
    const [from] = live();
    const free = NAMES.filter((n) => cluster.get(n).state === 'Ready');
    expect(free).toHaveLength(1);
    const statuses: string[] = [];
    client.on('status', (s: { state: string }) => statuses.push(s.state));
    await client.send('set_prompt', { prompt: 'Drained by the router.' }).applied;
    // Through the other router than the viewer's: the drain is the fleet's, not one router's.
    const res = await fetch(`${router2.base}/instances/${from}`, { method: 'DELETE', headers: { authorization: `Bearer ${TOKEN}` } });
    expect(res.status).toBe(202);
    expect(await res.json()).toMatchObject({ instance: from, draining: true, sessionId: client.route!.sessionId, move: true });
    await until(
      () => cluster.get(free[0]!).state === 'Allocated' && cluster.get(free[0]!).labels[SESSION_LABEL] === client.route!.sessionId,
      'the session on the free instance',
      60_000,
    );
    await until(() => statuses.includes('reconnecting') && statuses.at(-1) === 'open', 'the client reconnected', 60_000);
    const seen = arrivals.length;
    await until(() => arrivals.length >= seen + 8, 'frames after the move', 60_000);
    expect(client.state['prompt']).toBe('Drained by the router.');
    expect(await instances.get(from!)!.exited).toBe(0);
    expect(instances.get(from!)!.stderr()).toMatch(/asked this instance to drain \(DELETE \/instances/);
    const unknown = await fetch(`${router.base}/instances/reactor-nope`, { method: 'DELETE', headers: { authorization: `Bearer ${TOKEN}` } });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toMatchObject({ error: { code: 'unknown_instance' } });
  });

  it('a move target that dies mid-transfer: the session stays on its instance and streams on, a command held in the window applies there', async () => {
    const [on] = live();
    expect(on).toBeDefined();
    // It takes the snapshot's headers, then dies once the test sent a command in the window.
    let reachedPut!: () => void;
    const atPut = new Promise<void>((r) => (reachedPut = r));
    let die!: () => void;
    const dead = new Promise<void>((r) => (die = r));
    const dying: Server = createServer((req, res) => {
      if (req.url === '/health/ready') res.end('{"ready":true}');
      else if (req.method === 'PUT' && req.url?.startsWith('/snapshot')) {
        reachedPut();
        void dead.then(() => req.socket.destroy());
      } else req.socket.destroy();
    });
    await new Promise<void>((r) => dying.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise((r) => dying.close(r)));
    cluster.addServer('reactor-dying', '127.0.0.1', (dying.address() as AddressInfo).port);
    cluster.setState('reactor-dying', 'Ready');
    const statuses: string[] = [];
    client.on('status', (s: { state: string }) => statuses.push(s.state));
    const logged = instances.get(on!)!.stderr().length;
    instances.get(on!)!.child.kill('SIGTERM');
    await atPut;
    // Sent while the session is frozen: held on its instance, then applied there when the move fails.
    const inWindow = client.send('set_prompt', { prompt: 'Held, then applied here.' });
    await until(() => /frozen for a move: holding its commands/.test(instances.get(on!)!.stderr().slice(logged)), 'the instance holding the command', 60_000);
    die();
    await until(() => cluster.get('reactor-dying').annotations['reactor.dev/release-session'] !== undefined, 'the failed target released', 60_000);
    await expect(inWindow).resolves.toBeUndefined();
    await until(() => client.state['prompt'] === 'Held, then applied here.', 'the held command applied on the old instance', 60_000);
    const seen = arrivals.length;
    await until(() => arrivals.length >= seen + 8, 'frames on the old instance after the failed move', 60_000);
    expect(statuses).not.toContain('reconnecting');
    expect(routersLog()).toMatch(/moving session \S+ from \S+ to reactor-dying failed \(fork_failed\).*thawed \(1 held command\(s\) apply there\)/);
    expect(instances.get(on!)!.stderr().slice(logged)).toMatch(/thawed: 1 held command\(s\) apply here/);
  });
});
