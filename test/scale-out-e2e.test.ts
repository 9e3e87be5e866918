/**
 * Scale-out end to end on this machine, as close to a cluster as one host gets without one:
 * six `reactor run --agones` processes (the CPU sample app, one rank each), each in its own
 * network namespace as a "machine" (a veth pair on a private /30 that the test creates; traffic
 * stays on those addresses), each with its own fake Agones SDK sidecar (the official SDK in the
 * instance talks gRPC to it through a relay in its namespace, since the SDK always dials
 * localhost; the relay also plays the sidecar's health server on :8080 of the namespace, as in a
 * GameServer pod), all on one FakeAgonesCluster; the real `reactor route` in front, talking to
 * the mock Kubernetes API (list + watch) on the same cluster state; `@reactor/client` viewers
 * through the router.
 *
 * Exercised, each with who got a dead instance, how long viewers froze before being told and
 * whether a session was cut before its drain deadline (figures printed as JSON lines):
 * new sessions spread over idle instances, a joiner reaches its session with the same session id
 * end to end; kill -9 of an idle instance (Agones still says Ready) and of a busy one; a silent
 * drop (the machine's link down: no FIN, no RST); SIGTERM of an idle instance (it leaves the pool
 * at once) and of a busy one (its session goes on and ends on its own); an eviction (SIGTERM of a
 * busy instance whose session outlasts the drain deadline: cut at the deadline, not before).
 * Agones' health check is scaled by 1/5: period 1 s x 3 failures (5 s x 3 in a cluster), the
 * instances ping every 400 ms (2 s); the drain deadline is 4 s.
 *
 * Not exercised: a real Kubernetes API or Agones controller (no pod deletion or replacement,
 * no fleet scaling), real machines (one kernel, one CPU), TLS.
 *
 * Needs root (`ip netns`); CI runs as root. Skipped, with the reason printed, only when network
 * namespaces are unavailable.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { createConnection, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { connect, SessionRouteError, type ConnectionStatus, type ReactorClient } from '@reactor/client';
import { FakeAgonesCluster } from './fixtures/agones/cluster.js';
import { MockKubeApi } from './fixtures/agones/kube-api.js';
import { FakeAgonesSidecar } from './fixtures/agones/sidecar.js';
import { createMachines, netnsUnavailable, type Machine } from './fixtures/netns.js';
import { descendants } from './fixtures/processes.js';
import { sampleWorkspace } from './fixtures/sample-workspace.js';
import { until } from '@reactor/test-kit';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(repo, 'packages/cli/dist/main.js');
const forwarder = join(repo, 'test/fixtures/tcp-forward.mjs');
const TOKEN = 'scale-out-e2e-token-0123456789';
/** Each machine has its own network namespace, so every instance can take the same port; never 8080, the sidecar's health port there. */
const INSTANCE_PORT = 8000;
/** The Agones SDK sidecar's health port in every GameServer pod. */
const SIDECAR_HEALTH_PORT = 8080;
/** After SIGTERM, how long a running session may go on (agones.drainSeconds, scaled). */
const DRAIN_MS = 4000;
const INSTANCES = 6;
/** Where the SDK in each namespace dials (localhost:AGONES_SDK_GRPC_PORT): the relay to that machine's sidecar. */
const SDK_PORT = 9357;
/** Agones' health check scaled by 1/5: 1 s x 3 (a cluster: 5 s x 3 = 15 s). */
const HEALTH_SCALE = 1 / 5;
const HEALTH_PERIOD_MS = 5000 * HEALTH_SCALE;
const HEALTH_FAILURES = 3;
/** Instances ping every 2 s x 1/5 (agones.health_interval_ms). */
const PING_MS = 2000 * HEALTH_SCALE;

const unavailable = netnsUnavailable();
if (unavailable) console.warn(`scale-out end-to-end test skipped: ${unavailable}`);

/** Figures for docs/benchmarks.md, one JSON line each. */
function figure(name: string, value: number, unit: string): void {
  process.stdout.write(`${JSON.stringify({ bench: 'scale-out-e2e', name, value: Math.round(value * 10) / 10, unit })}\n`);
}

interface Instance {
  name: string;
  machine: Machine;
  child: ChildProcess;
  stderr: () => string;
  exited: Promise<number | null>;
}

const cleanups: Array<() => unknown> = [];
const clients: ReactorClient[] = [];
let cluster: FakeAgonesCluster;
let api: MockKubeApi;
let routerUrl = '';
let instances: Instance[] = [];

/** A TCP relay in this (root) namespace from the machine's link address to the sidecar on loopback. */
async function relay(listenHost: string, targetPort: number): Promise<Server> {
  const sockets = new Set<Socket>();
  const server = createServer((inbound) => {
    const outbound = createConnection({ host: '127.0.0.1', port: targetPort });
    for (const s of [inbound, outbound]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => {
        inbound.destroy();
        outbound.destroy();
      });
    }
    inbound.pipe(outbound).pipe(inbound);
  });
  await new Promise<void>((r) => server.listen(0, listenHost, r));
  cleanups.push(
    () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  );
  return server;
}

/** Kills a process and its descendants (rank processes) unless it has exited. */
function killTree(child: ChildProcess): void {
  if (child.exitCode !== null || child.signalCode !== null) return;
  for (const p of descendants(child.pid!)) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  child.kill('SIGKILL');
}

/** One machine: its sidecar (+ relays) and `reactor run --agones` inside its namespace. */
async function startInstance(machine: Machine, name: string): Promise<Instance> {
  cluster.addServer(name, machine.ip, INSTANCE_PORT);
  const sidecar = await FakeAgonesSidecar.start(cluster, name);
  cleanups.push(() => sidecar.stop());
  const hostRelay = await relay(machine.hostIp, sidecar.port);
  const fwd = machine.spawn(
    process.execPath,
    [forwarder, '127.0.0.1', String(SDK_PORT), machine.hostIp, String((hostRelay.address() as AddressInfo).port), String(SIDECAR_HEALTH_PORT)],
    {
      stdio: ['pipe', 'pipe', 'pipe'],
    },
  );
  cleanups.push(() => killTree(fwd));
  await new Promise<void>((res, rej) => {
    fwd.stdout!.once('data', () => res());
    fwd.once('exit', (code) => rej(new Error(`the SDK relay in ${machine.ns} exited with ${code}`)));
  });

  const dir = sampleWorkspace({
    prefix: 'reactor-scale-out-',
    name: 'scale-out-e2e',
    config: 'width: 32\nheight: 24\nframesPerChunk: 2\nworldSize: 1\ndevices: cpu\nbackend: wasm\n',
    server: `{ port: ${INSTANCE_PORT}, encoding: rgb }`,
    // A session ends 300 ms after its last viewer leaves (60 s by default), so instances come back quickly.
    runtime: ['session_grace_ms: 300'],
    extra: [`agones: { health_interval_ms: ${PING_MS} }`],
  });
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const child = machine.spawn(process.execPath, [cli, 'run', '--agones', '--manifest', join(dir, 'reactor.yaml'), '--host', '0.0.0.0', '--token', TOKEN], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, AGONES_SDK_GRPC_PORT: String(SDK_PORT), REACTOR_DRAIN_TIMEOUT_MS: String(DRAIN_MS) },
  });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  child.stdout!.resume();
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  cleanups.push(() => killTree(child));
  return { name, machine, child, stderr: () => err, exited };
}

async function open(session: string): Promise<ReactorClient> {
  const c = await connect(routerUrl, { session, token: TOKEN, WebSocket: WebSocket as never, reconnect: false });
  clients.push(c);
  return c;
}

async function refused(session: string): Promise<SessionRouteError> {
  const err = await open(session).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(SessionRouteError);
  return err as SessionRouteError;
}

const firstFrame = (c: ReactorClient): Promise<void> => new Promise((r) => c.once('frame', () => r()));

/** When `client` is told its connection is over (state `closed`), and why. */
function closedAt(c: ReactorClient): Promise<{ at: number; reason: string }> {
  return new Promise((r) => c.on('status', (st: ConnectionStatus) => st.state === 'closed' && r({ at: performance.now(), reason: st.reason ?? '' })));
}

/** Frames `c` receives from now on, counted. */
function counter(c: ReactorClient): { n: number; last: number } {
  const f = { n: 0, last: 0 };
  c.on('frame', () => {
    f.n++;
    f.last = performance.now();
  });
  return f;
}

describe.skipIf(unavailable !== undefined)(`scale-out end to end: ${INSTANCES} instances in network namespaces, reactor route, @reactor/client`, () => {
  let net: ReturnType<typeof createMachines>;
  const byName = (name: string): Instance => instances.find((i) => i.name === name)!;

  beforeAll(async () => {
    net = createMachines(INSTANCES);
    cleanups.push(net.remove);
    cluster = new FakeAgonesCluster({ healthPeriodMs: HEALTH_PERIOD_MS, healthFailureThreshold: HEALTH_FAILURES, healthInitialDelayMs: HEALTH_PERIOD_MS });
    cleanups.push(cluster.startHealthChecks());
    api = await new MockKubeApi(cluster).start();
    cleanups.push(() => api.close());
    instances = [];
    // Started one after another: six loads at once on two cores would only slow each other.
    for (const [i, m] of net.machines.entries()) instances.push(await startInstance(m, `reactor-${i}`));
    await until(
      () => instances.every((i) => cluster.get(i.name).state === 'Ready'),
      `every instance Ready (states: ${instances.map((i) => `${i.name}=${cluster.get(i.name).state}`).join(', ')})`,
      150_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${instances.map((i) => `--- ${i.name} stderr:\n${i.stderr()}`).join('\n')}`);
    });
    const router = spawn(process.execPath, [cli, 'route', '--kubeconfig', api.writeKubeconfig(), '--port', '0', '--token', TOKEN], {
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
  }, 240_000);

  afterAll(async () => {
    for (const c of clients) c.close();
    for (const c of cleanups.splice(0).reverse()) await c();
  }, 60_000);

  it('refuses port 8080 under --agones: the sidecar health server holds it in the pod', async () => {
    // The fake sidecar really listens there, in the instance's namespace.
    const m = net.machines[0]!;
    const probe = spawnSync(
      'ip',
      [
        'netns',
        'exec',
        m.ns,
        process.execPath,
        '-e',
        `fetch('http://127.0.0.1:${SIDECAR_HEALTH_PORT}/gshealthz').then(async (r) => console.log(r.status, await r.text()))`,
      ],
      {
        encoding: 'utf8',
      },
    );
    expect(probe.stdout.trim()).toBe('200 ok');
    const child = m.spawn(process.execPath, [cli, 'run', '--agones', '--manifest', join(repo, 'reactor.yaml'), '--port', String(SIDECAR_HEALTH_PORT)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let err = '';
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
    expect(code).toBe(1);
    expect(err).toContain("port 8080 is the Agones SDK sidecar's health port in every GameServer pod");
    expect(err).toContain('[cli_usage]');
  });

  let a: ReactorClient;
  let b: ReactorClient;
  let joiner: ReactorClient;

  it('spreads new sessions over idle instances and sends a joiner to its instance, with one session id end to end', async () => {
    let t = performance.now();
    a = await open('new');
    const allocateMs = performance.now() - t;
    await firstFrame(a);
    figure('new session: connect(router, new) to welcome', allocateMs, 'ms');
    figure('new session: connect to first frame', performance.now() - t, 'ms');
    b = await open('new');
    await firstFrame(b);
    expect(a.route!.instance).not.toBe(b.route!.instance);
    expect(cluster.get(a.route!.instance).state).toBe('Allocated');
    // The id the viewer's session carries is the router's: GET /sessions/{it} finds it.
    expect(a.session.sessionId).toBe(a.route!.sessionId);
    expect(b.session.sessionId).toBe(b.route!.sessionId);
    t = performance.now();
    joiner = await open(a.session.sessionId!);
    await firstFrame(joiner);
    figure('join: connect(router, id) to first frame', performance.now() - t, 'ms');
    expect(joiner.route!.instance).toBe(a.route!.instance);
    expect(joiner.session.sessionId).toBe(a.session.sessionId);
  }, 60_000);

  it('DELETE /sessions/:id releases a session: one allocated but never joined, and one running (its viewer told why); both instances Ready again', async () => {
    const del = (id: string): Promise<Response> => fetch(`${routerUrl}/sessions/${id}`, { method: 'DELETE', headers: { authorization: `Bearer ${TOKEN}` } });
    // Allocated by POST, nobody joins: released at once instead of after allocation_timeout_ms (60 s).
    const held = (await (await fetch(`${routerUrl}/sessions`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } })).json()) as {
      sessionId: string;
      instance: string;
    };
    expect(cluster.get(held.instance).state).toBe('Allocated');
    expect((await del(held.sessionId)).status).toBe(202);
    await until(() => cluster.get(held.instance).state === 'Ready', `${held.instance} Ready after DELETE`, 10_000);
    // A running session: its viewer gets the reason, the instance goes back to the fleet.
    const v = await open('new');
    await firstFrame(v);
    const closed = closedAt(v);
    expect((await del(v.route!.sessionId)).status).toBe(202);
    expect((await closed).reason).toContain('the session was released (DELETE /sessions)');
    await until(() => cluster.get(v.route!.instance).state === 'Ready', `${v.route!.instance} Ready after DELETE`, 10_000);
    expect(cluster.get(v.route!.instance).labels['agones.dev/sdk-reactor-session'] ?? '').toBe('');
    expect((await del(v.route!.sessionId)).status).toBe(404);
  }, 60_000);

  it('kill -9 of an idle instance: the one user Agones still hands it to is moved to another at once; nobody after', async () => {
    // Agones allocates the first Ready server: make the killed one that.
    const idle = instances.find((i) => cluster.get(i.name).state === 'Ready')!;
    killTree(idle.child);
    await idle.exited;
    const t = performance.now();
    const c = await open('new');
    figure('kill -9 idle: connect(router, new) to welcome, the dead instance allocated first', performance.now() - t, 'ms');
    expect(cluster.get(idle.name).state).toBe('Allocated'); // Agones gave it out (its pings had not timed out)...
    expect(c.route!.instance).not.toBe(idle.name); // ...but the client was moved on to a live one.
    await firstFrame(c);
    c.close();
    // Nobody else is handed the dead one: it is Allocated to the lost session, and the router's circuit is open.
    const lost = cluster.get(idle.name).labels['agones.dev/sdk-reactor-session']!;
    const err = await refused(lost);
    expect(err.code).toBe('instance_unreachable');
    figure('kill -9 idle: users given the dead instance after the router knew', 0, 'users');
  }, 60_000);

  it('kill -9 of a busy instance: its viewers are told at once (the reset), a joiner hears instance_unreachable, not a token problem', async () => {
    const busy = byName(a.route!.instance);
    const aClosed = closedAt(a);
    const jClosed = closedAt(joiner);
    const t = performance.now();
    killTree(busy.child);
    const [ca, cj] = await Promise.all([aClosed, jClosed]);
    figure('kill -9 busy: viewers frozen before being told', Math.max(ca.at, cj.at) - t, 'ms');
    expect(Math.max(ca.at, cj.at) - t).toBeLessThan(2000);
    const late = await refused(a.route!.sessionId);
    expect(late.code).toBe('instance_unreachable');
    expect(late.message).not.toMatch(/A 401 means/);
    await until(() => cluster.get(busy.name).state === 'Unhealthy', `${busy.name} Unhealthy`, 30_000);
    const unhealthyMs = performance.now() - t;
    figure(`killed instance Unhealthy (health ${HEALTH_PERIOD_MS} ms x ${HEALTH_FAILURES}, scale ${HEALTH_SCALE})`, unhealthyMs, 'ms');
    figure('killed instance Unhealthy, scaled back to Agones defaults (x5)', unhealthyMs / HEALTH_SCALE, 'ms');
    expect(unhealthyMs).toBeLessThanOrEqual(15_000 * HEALTH_SCALE + 1000);
  }, 60_000);

  it("a silent drop (the machine's link down): its viewer is told within ~10 s (the router's ping, or Agones' Unhealthy first), not left frozen", async () => {
    const dropped = byName(b.route!.instance);
    const frames = counter(b);
    const bClosed = closedAt(b);
    const t = performance.now();
    execFileSync('ip', ['link', 'set', dropped.machine.hostIf, 'down']);
    cleanups.push(() => spawnSync('ip', ['link', 'set', dropped.machine.hostIf, 'up']));
    const c = await bClosed;
    const frozen = c.at - Math.max(t, frames.last);
    figure('silent drop: viewer frozen before being told (the first of the router ping, 5 s + 5 s, and Agones Unhealthy, 3 s scaled)', frozen, 'ms');
    expect(c.reason).toContain('instance_unreachable');
    expect(c.at - t).toBeLessThan(5000 + 5000 + 2000);
    // A joiner now is told at once, never relayed into the void: instance_unreachable while the
    // router's circuit is open, unknown_session once Agones marked the instance Unhealthy.
    const j0 = performance.now();
    const err = await refused(b.route!.sessionId);
    expect(['instance_unreachable', 'unknown_session']).toContain(err.code);
    figure('silent drop: a joiner told (instance_unreachable or unknown_session) after', performance.now() - j0, 'ms');
  }, 60_000);

  let busyDrain: Instance;
  let c: ReactorClient;
  let e: ReactorClient;

  it('SIGTERM of an idle instance: it leaves the pool at once; no new session is sent to it', async () => {
    // The instance of the kill -9 test's session is back once its session's grace is over.
    await until(() => instances.filter((i) => cluster.get(i.name).state === 'Ready').length >= 3, 'three Ready instances', 10_000);
    // Two sessions first (on the two lowest Ready), then SIGTERM the next idle one and ask at once.
    c = await open('new');
    await firstFrame(c);
    const idle = instances.find((i) => cluster.get(i.name).state === 'Ready')!;
    const t = performance.now();
    idle.child.kill('SIGTERM');
    await until(() => cluster.get(idle.name).state === 'Shutdown', `${idle.name} Shutdown`, 10_000);
    figure('SIGTERM idle: out of the pool (Shutdown) after', performance.now() - t, 'ms');
    e = await open('new');
    expect(e.route!.instance).not.toBe(idle.name);
    await firstFrame(e);
    expect(await idle.exited).toBe(0);
    figure('SIGTERM idle: users given the draining instance', 0, 'users');
    busyDrain = byName(c.route!.instance);
  }, 60_000);

  it('SIGTERM of a busy instance: its session goes on (labelled draining) and ends on its own within the deadline, never cut', async () => {
    const frames = counter(c);
    let cut = '';
    c.on('status', (st: ConnectionStatus) => st.state === 'closed' && (cut = st.reason ?? ''));
    const t = performance.now();
    busyDrain.child.kill('SIGTERM');
    await until(() => cluster.get(busyDrain.name).labels['agones.dev/sdk-reactor-draining'] !== undefined, 'the draining label', 5000);
    const before = frames.n;
    await new Promise((r) => setTimeout(r, 1000));
    expect(frames.n - before).toBeGreaterThan(5); // still streaming
    expect(cut).toBe('');
    c.close(); // the user is done: the session ends, the drain finishes early
    expect(await busyDrain.exited).toBe(0);
    figure('SIGTERM busy: session ended by its user, instance gone after', performance.now() - t, 'ms');
    expect(performance.now() - t).toBeLessThan(DRAIN_MS + 3000);
    // The sidecar writes Shutdown behind Agones' 500 ms rate limit.
    await until(() => cluster.get(busyDrain.name).state === 'Shutdown', `${busyDrain.name} Shutdown`, 2000);
    figure('SIGTERM busy: sessions cut before the drain deadline', 0, 'sessions');
  }, 60_000);

  it('an eviction (SIGTERM of a busy instance whose session outlasts the deadline): the session goes on until the deadline, then its viewer is told why', async () => {
    const evicted = byName(e.route!.instance);
    const frames = counter(e);
    const eClosed = closedAt(e);
    const t = performance.now();
    evicted.child.kill('SIGTERM');
    const closed = await eClosed;
    figure(`eviction: the session went on for (drain deadline ${DRAIN_MS} ms)`, closed.at - t, 'ms');
    expect(closed.at - t).toBeGreaterThanOrEqual(DRAIN_MS - 100);
    expect(frames.last - t).toBeGreaterThan(DRAIN_MS - 1000); // frames until near the deadline, not a freeze
    // The drain's own close (4003), which the client does not reconnect after.
    expect(closed.reason).toMatch(/^drain_deadline: the instance is shutting down and the session outlived its 4 s drain/);
    expect(await evicted.exited).toBe(0);
    expect(cluster.allocations).toBeGreaterThanOrEqual(5);
  }, 60_000);
});
