/**
 * The cluster's faults through real processes (issue 38): seven `reactor run --agones` instances
 * (the CPU sample app, one rank each) on loopback, each with its own fake Agones SDK sidecar that
 * writes behind Agones' real 500 ms `request-rate-limit`; the real `reactor route` (as typed, with
 * its defaults) on the mock Kubernetes API over the same cluster state; `@reactor/client` and raw
 * WebSockets through the router. Agones' health check is its default here (5 s x 3), so the
 * windows in which Agones still says `Ready` are as long as in a cluster.
 *
 * Promised for each fault: nobody is handed an instance that is draining, hung or unready, and
 * every viewer gets a close with a code and a reason within 2 s of the router knowing.
 *
 * Not exercised: a real Agones controller or API server, separate machines (all on one kernel).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { connect as netConnect, createServer, type AddressInfo, type Socket } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { connect, type ConnectionStatus, type ReactorClient } from '@reactor/client';
import { FakeAgonesCluster, SDK_LABEL_PREFIX } from './fixtures/agones/cluster.js';
import { MockKubeApi } from './fixtures/agones/kube-api.js';
import { AGONES_REQUEST_RATE_LIMIT_MS, FakeAgonesSidecar } from './fixtures/agones/sidecar.js';
import { descendants } from './fixtures/processes.js';
import { sampleWorkspace } from './fixtures/sample-workspace.js';
import { until } from '@reactor/test-kit';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(repo, 'packages/cli/dist/main.js');
const TOKEN = 'cluster-faults-token-0123456789';
const INSTANCES = 8;
/** Longer than the runner's 10 s signal backstop (SIGNAL_DEFER_MS): the session must still run to this deadline. */
const DRAIN_MS = 12_000;
const DRAINING = `${SDK_LABEL_PREFIX}reactor-draining`;
/** The router's defaults (`reactor route` has no flags for them): relayResponseTimeoutMs, allocationCheckTimeoutMs. */
const RESPONSE_TIMEOUT_MS = 5000;
const CHECK_TIMEOUT_MS = 1000;
/** "Within 2 s of the router knowing". */
const TOLD_WITHIN_MS = 2000;

interface Instance {
  name: string;
  port: number;
  child: ChildProcess;
  sidecar: FakeAgonesSidecar;
  stderr: () => string;
  exited: Promise<number | null>;
}

const cleanups: Array<() => unknown> = [];
const clients: ReactorClient[] = [];
let cluster: FakeAgonesCluster;
let routerUrl = '';
let instances: Instance[] = [];

function killTree(child: ChildProcess, signal: NodeJS.Signals = 'SIGKILL'): void {
  if (child.exitCode !== null || child.signalCode !== null) return;
  for (const p of descendants(child.pid!)) {
    try {
      process.kill(p, signal);
    } catch {
      // already gone
    }
  }
  child.kill(signal);
}

/**
 * Starts one instance and returns once it listens. It listens on a port of its own choosing
 * (`port: 0`), and the GameServer gets that port, as Agones' status gets the pod's: a port picked
 * here and bound by the instance later could be taken in between, by the next instance started or
 * by anything else on the machine (pair 6 B: reactor-4 was handed reactor-3's port before reactor-3
 * bound it, exited with `port_unavailable`, and the setup waited 200 s for it to be Ready).
 */
async function startInstance(name: string): Promise<Instance> {
  cluster.addServer(name, '127.0.0.1', 0);
  const sidecar = await FakeAgonesSidecar.start(cluster, name);
  cleanups.push(() => sidecar.stop());
  const dir = sampleWorkspace({
    prefix: 'reactor-cluster-faults-',
    name: 'cluster-faults',
    config: 'width: 32\nheight: 24\nframesPerChunk: 2\nworldSize: 1\ndevices: cpu\nbackend: wasm\n',
    server: '{ port: 0, encoding: rgb }',
    runtime: ['session_grace_ms: 300'],
    extra: ['agones: { enabled: true }'],
  });
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const child = spawn(process.execPath, [cli, 'run', '--manifest', join(dir, 'reactor.yaml'), '--token', TOKEN], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...sidecar.env(), REACTOR_DRAIN_TIMEOUT_MS: String(DRAIN_MS) },
  });
  cleanups.push(() => killTree(child));
  child.stdout!.resume();
  let err = '';
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const port = await new Promise<number>((res, rej) => {
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
      const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(err);
      if (m) res(Number(m[1]));
    });
    void exited.then((code) => rej(new Error(`${name} exited with ${code} before it listened:\n${err}`)));
  });
  cluster.setAddress(name, '127.0.0.1', port);
  return { name, port, child, sidecar, stderr: () => err, exited };
}

/** The first Ready instance in the cluster's order: the one Agones' allocation hands out next. */
function firstReady(): Instance {
  const name = [...cluster.servers.values()].find((g) => g.state === 'Ready' && g.labels[DRAINING] === undefined)?.name;
  const i = instances.find((x) => x.name === name);
  if (!i) throw new Error('no Ready instance left');
  return i;
}

async function open(session = 'new'): Promise<ReactorClient> {
  const c = await connect(routerUrl, { session, token: TOKEN, WebSocket: WebSocket as never });
  clients.push(c);
  return c;
}

const firstFrame = (c: ReactorClient): Promise<void> => new Promise((r) => c.once('frame', () => r()));

/** When the client is told its connection is over (state `closed`), why, and whether it tried to reconnect first. */
function closedAt(c: ReactorClient): Promise<{ at: number; reason: string; reconnects: number }> {
  let reconnects = 0;
  return new Promise((r) =>
    c.on('status', (st: ConnectionStatus) => {
      if (st.state === 'reconnecting') reconnects++;
      if (st.state === 'closed') r({ at: performance.now(), reason: st.reason ?? '', reconnects });
    }),
  );
}

/** A raw socket through the router: its close code and reason, and when it closed. */
function rawSocket(path: string): { opened: Promise<void>; closed: Promise<{ code: number; reason: string; at: number }> } {
  const ws = new WebSocket(`${routerUrl.replace(/^http/, 'ws')}${path}?token=${TOKEN}`);
  cleanups.push(() => ws.terminate());
  ws.on('error', () => undefined);
  return {
    opened: new Promise((r) => ws.once('open', () => r())),
    closed: new Promise((r) => ws.once('close', (code: number, reason: Buffer) => r({ code, reason: reason.toString(), at: performance.now() }))),
  };
}

describe(`the cluster's faults: ${INSTANCES} reactor run --agones, the sidecar's ${AGONES_REQUEST_RATE_LIMIT_MS} ms rate limit, reactor route, @reactor/client`, () => {
  beforeAll(async () => {
    cluster = new FakeAgonesCluster();
    cleanups.push(cluster.startHealthChecks());
    const api = await new MockKubeApi(cluster).start();
    cleanups.push(() => api.close());
    instances = [];
    // One after another, each to its listening port; their loads overlap.
    for (let i = 0; i < INSTANCES; i++) instances.push(await startInstance(`reactor-${i}`));
    await until(
      () => instances.every((i) => cluster.get(i.name).state === 'Ready'),
      () => `every instance Ready (at the timeout: ${instances.map((i) => `${i.name}=${cluster.get(i.name).state}`).join(', ')})`,
      200_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${instances.map((i) => `--- ${i.name}:\n${i.stderr()}`).join('\n')}`);
    });
    const router = spawn(process.execPath, [cli, 'route', '--kubeconfig', api.writeKubeconfig(), '--port', '0', '--token', TOKEN, '--no-move'], {
      cwd: repo,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    cleanups.push(() => killTree(router));
    let rerr = '';
    router.stderr!.on('data', (d: Buffer) => (rerr += d.toString()));
    routerUrl = await new Promise<string>((res, rej) => {
      let out = '';
      router.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /Router: (\S+)/.exec(out);
        if (m) res(m[1]!);
      });
      router.once('exit', (code) => rej(new Error(`reactor route exited with ${code}:\n${rerr}`)));
    });
  }, 300_000);

  afterAll(async () => {
    for (const c of clients) c.close();
    for (const c of cleanups.splice(0).reverse()) await c();
  }, 60_000);

  it('a SIGTERMed idle instance is never handed out, inside the 500 ms before its draining label lands', async () => {
    const draining = firstReady();
    draining.child.kill('SIGTERM');
    // The instance told its sidecar at once; the sidecar writes the label only after its rate limit.
    await until(() => draining.sidecar.callsOf('SetLabel').some((c) => c.key === 'reactor-draining'), 'the SetLabel(reactor-draining) call', 5000);
    expect(cluster.get(draining.name).labels[DRAINING]).toBeUndefined();
    expect(cluster.get(draining.name).state).toBe('Ready');
    const c = await open();
    expect(c.route!.instance).not.toBe(draining.name);
    await firstFrame(c);
    c.close();
    expect(await draining.exited).toBe(0);
    await until(() => cluster.get(draining.name).state === 'Shutdown', 'Shutdown after the rate limit', 5000);
  }, 60_000);

  it('a SIGSTOPped idle instance is never handed out: the router checks it, gives up within its 1 s check and hands out another', async () => {
    const hung = firstReady();
    process.kill(hung.child.pid!, 'SIGSTOP');
    cleanups.push(() => killTree(hung.child));
    const t = performance.now();
    const c = await open();
    const took = performance.now() - t;
    expect(c.route!.instance).not.toBe(hung.name);
    // Agones handed it out (stopped, it sends no pings, but Agones counts it Ready for 15-20 s after the last)...
    expect(cluster.get(hung.name).state).toBe('Allocated');
    // ...and the router waited its check only, not a socket's 15-40 s.
    expect(took).toBeLessThan(CHECK_TIMEOUT_MS + TOLD_WITHIN_MS);
    await firstFrame(c);
    c.close();
  }, 60_000);

  it('an instance with a stalled rank (readiness 503 rank_stalled) is not handed out while Agones still says Ready', async () => {
    await until(() => [...cluster.servers.values()].filter((g) => g.state === 'Ready' && g.labels[DRAINING] === undefined).length >= 4, 'four Ready', 10_000);
    const stalled = firstReady();
    const ranks = descendants(stalled.child.pid!);
    expect(ranks.length).toBeGreaterThan(0);
    for (const p of ranks) process.kill(p, 'SIGSTOP');
    cleanups.push(() => killTree(stalled.child));
    await until(
      async () => {
        const r = await fetch(`http://127.0.0.1:${stalled.port}/health/ready`);
        const body = (await r.json()) as { reasons: Array<{ code: string }> };
        return r.status === 503 && body.reasons.some((x) => x.code === 'rank_stalled');
      },
      'readiness 503 rank_stalled',
      20_000,
    );
    expect(cluster.get(stalled.name).state).toBe('Ready');
    const c = await open();
    expect(c.route!.instance).not.toBe(stalled.name);
    await firstFrame(c);
    c.close();
  }, 60_000);

  it('kill -9 of a busy instance: its viewer is told the session is lost (4502 with a reason) within 2 s, and does not reconnect forever', async () => {
    const c = await open();
    await firstFrame(c);
    const busy = instances.find((i) => i.name === c.route!.instance)!;
    const raw = rawSocket(`/s/${busy.name}/ws`);
    await raw.opened;
    const told = closedAt(c);
    const t = performance.now();
    killTree(busy.child);
    const [client, socket] = await Promise.all([told, raw.closed]);
    expect(socket.code).toBe(4502);
    expect(socket.reason).toMatch(/^instance_unreachable: instance reactor-\d+ stopped answering/);
    expect(socket.at - t).toBeLessThan(TOLD_WITHIN_MS);
    expect(client.reason).toMatch(/^the session is lost/);
    expect(client.reason).toContain('instance_unreachable');
    expect(client.at - t).toBeLessThan(TOLD_WITHIN_MS);
    expect(client.reconnects).toBe(0);
  }, 60_000);

  it('a SIGSTOPped busy instance: a joiner and an HTTP relay give up after relayResponseTimeoutMs, and its viewer is told within 2 s of that', async () => {
    const c = await open();
    await firstFrame(c);
    const hung = instances.find((i) => i.name === c.route!.instance)!;
    const told = closedAt(c);
    process.kill(hung.child.pid!, 'SIGSTOP');
    cleanups.push(() => killTree(hung.child));
    const t = performance.now();
    const joiner = rawSocket(`/s/${hung.name}/ws`);
    const http = fetch(`${routerUrl}/s/${hung.name}/schema`, { headers: { authorization: `Bearer ${TOKEN}` } }).then(async (r) => ({
      status: r.status,
      body: (await r.json()) as { error: { code: string; message: string } },
      at: performance.now(),
    }));
    const [j, h, v] = await Promise.all([joiner.closed, http, told]);
    expect(j.code).toBe(4502);
    // The first of the two to time out trips the instance, which cuts the other at once.
    expect(j.reason).toMatch(/^instance_unreachable: instance reactor-\d+ .*within 5000 ms \(relayResponseTimeoutMs\)/);
    expect(h.status).toBe(502);
    expect(h.body.error.code).toBe('instance_unreachable');
    expect(h.body.error.message).toContain('relayResponseTimeoutMs');
    const knew = Math.min(j.at, h.at);
    expect(knew - t).toBeGreaterThanOrEqual(RESPONSE_TIMEOUT_MS - 100);
    expect(knew - t).toBeLessThan(RESPONSE_TIMEOUT_MS + TOLD_WITHIN_MS);
    expect(Math.max(j.at, h.at) - knew).toBeLessThan(TOLD_WITHIN_MS);
    // The viewer: told by the same trip (or its own ping, 5 s + 5 s, whichever first), with the code.
    expect(v.reason).toContain('instance_unreachable');
    expect(v.at - knew).toBeLessThan(TOLD_WITHIN_MS);
  }, 60_000);

  it('a routed client whose link dropped (1006) and whose reconnect the router refuses (the instance died meanwhile) is told its session is lost, once', async () => {
    // A TCP hop between the client and the router that the test can hold and cut, as a flaky link would.
    const router = new URL(routerUrl);
    const links = new Set<{ client: Socket; upstream: Socket }>();
    let hold = false;
    const hop = createServer((client) => {
      const upstream = netConnect({ host: router.hostname, port: Number(router.port) });
      const link = { client, upstream };
      links.add(link);
      client.on('data', (d: Buffer) => upstream.write(d));
      upstream.on('data', (d: Buffer) => {
        if (!hold) client.write(d);
      });
      const end = (): void => {
        links.delete(link);
        client.destroy();
        upstream.destroy();
      };
      client.on('close', end);
      upstream.on('close', end);
      client.on('error', end);
      upstream.on('error', end);
    });
    await new Promise<void>((r) => hop.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise<void>((r) => (links.forEach((l) => l.client.destroy()), hop.close(() => r()))));
    const via = `http://127.0.0.1:${(hop.address() as AddressInfo).port}`;
    const c = await connect(via, { session: 'new', token: TOKEN, WebSocket: WebSocket as never });
    clients.push(c);
    await firstFrame(c);
    const dead = instances.find((i) => i.name === c.route!.instance)!;
    const told = closedAt(c);
    // The router's 4502 for the viewer is held in the hop; the link then drops without a close frame.
    hold = true;
    killTree(dead.child);
    await dead.exited;
    for (const l of links) l.client.destroy();
    hold = false;
    const v = await told;
    expect(v.reconnects).toBe(1);
    expect(v.reason).toMatch(/^the session is lost: /);
    expect(v.reason).toContain('instance_unreachable');
  }, 60_000);

  it(`a drain that reaches its deadline (${DRAIN_MS} ms, past the runner's 10 s signal backstop) streams to the end, then closes with 4003 drain_deadline`, async () => {
    const c = await open();
    await firstFrame(c);
    const evicted = instances.find((i) => i.name === c.route!.instance)!;
    let last = 0;
    c.on('frame', () => (last = performance.now()));
    const raw = rawSocket(`/s/${evicted.name}/ws`);
    await raw.opened;
    const told = closedAt(c);
    const t = performance.now();
    evicted.child.kill('SIGTERM');
    const [v, socket] = await Promise.all([told, raw.closed]);
    expect(socket.code).toBe(4003);
    expect(socket.reason).toMatch(/^drain_deadline: the instance is shutting down and the session outlived its 12 s drain/);
    expect(socket.at - t).toBeGreaterThanOrEqual(DRAIN_MS - 100);
    expect(socket.at - t).toBeLessThan(DRAIN_MS + TOLD_WITHIN_MS);
    // Frames until near the deadline: the session was not cut at the runner's 10 s backstop.
    expect(last - t).toBeGreaterThan(DRAIN_MS - 1000);
    expect(v.reason).toContain('drain_deadline');
    expect(v.reconnects).toBe(0);
    expect(await evicted.exited).toBe(0);
    expect(evicted.stderr()).not.toContain('RunnerUnusableError');
  }, 60_000);
});
