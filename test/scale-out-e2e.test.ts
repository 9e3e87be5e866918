/**
 * Scale-out end to end on this machine, as close to a cluster as one host gets without one:
 * three `reactor run --agones` processes (the CPU sample app, one rank each), each in its own
 * network namespace as a "machine" (a veth pair on a private /30 that the test creates; traffic
 * stays on those addresses), each with its own fake Agones SDK sidecar (the official SDK in the
 * instance talks gRPC to it through a relay in its namespace, since the SDK always dials
 * localhost), all three on one FakeAgonesCluster; the real `reactor route` in front, talking to
 * the mock Kubernetes API on the same cluster state; `@reactor/client` viewers through the router.
 *
 * Exercised: new sessions spread over idle instances; a joiner reaches its session's instance; a
 * draining instance (SIGTERM) gets no new session and its viewers see its close reason; a killed
 * instance (SIGKILL) leaves routing once its pings stop. Agones' health check is scaled by 1/5:
 * period 1 s x 3 failures (5 s x 3 in a cluster), the instances ping every 400 ms (2 s).
 *
 * Not exercised: a real Kubernetes API or Agones controller (no pod deletion or replacement,
 * no fleet scaling), real machines (one kernel, one CPU), TLS.
 *
 * Needs root (`ip netns`); CI runs as root. Skipped, with the reason printed, only when network
 * namespaces are unavailable.
 */
import { spawn, type ChildProcess } from 'node:child_process';
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

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(repo, 'packages/cli/dist/main.js');
const forwarder = join(repo, 'test/fixtures/tcp-forward.mjs');
const TOKEN = 'scale-out-e2e-token-0123456789';
/** Each machine has its own network namespace, so every instance can take the same port (nothing else listens there). */
const INSTANCE_PORT = 8080;
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

async function until(cond: () => boolean | Promise<boolean>, what: string, ms = 60_000): Promise<void> {
  const end = performance.now() + ms;
  while (!(await cond())) {
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
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
  const fwd = machine.spawn(process.execPath, [forwarder, '127.0.0.1', String(SDK_PORT), machine.hostIp, String((hostRelay.address() as AddressInfo).port)], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
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
    extra: [`agones: { health_interval_ms: ${PING_MS} }`],
  });
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const child = machine.spawn(process.execPath, [cli, 'run', '--agones', '--manifest', join(dir, 'reactor.yaml'), '--host', '0.0.0.0', '--token', TOKEN], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, AGONES_SDK_GRPC_PORT: String(SDK_PORT) },
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

describe.skipIf(unavailable !== undefined)('scale-out end to end: 3 instances in network namespaces, reactor route, @reactor/client', () => {
  beforeAll(async () => {
    const net = createMachines(3);
    cleanups.push(net.remove);
    cluster = new FakeAgonesCluster({ healthPeriodMs: HEALTH_PERIOD_MS, healthFailureThreshold: HEALTH_FAILURES, healthInitialDelayMs: HEALTH_PERIOD_MS });
    cleanups.push(cluster.startHealthChecks());
    api = await new MockKubeApi(cluster).start();
    cleanups.push(() => api.close());
    instances = await Promise.all(net.machines.map((m, i) => startInstance(m, `reactor-${i}`)));
    await until(
      () => instances.every((i) => cluster.get(i.name).state === 'Ready'),
      `every instance Ready (states: ${instances.map((i) => `${i.name}=${cluster.get(i.name).state}`).join(', ')})`,
      120_000,
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
  }, 180_000);

  afterAll(async () => {
    for (const c of clients) c.close();
    for (const c of cleanups.splice(0).reverse()) await c();
  }, 60_000);

  it('spreads new sessions over idle instances, sends a joiner to its instance, drains on SIGTERM without new sessions, and drops a killed instance from routing', async () => {
    // Two new sessions land on two different idle instances, each streaming.
    let t = performance.now();
    const a = await open('new');
    const allocateMs = performance.now() - t;
    await firstFrame(a);
    figure('new session: connect(router, new) to welcome', allocateMs, 'ms');
    figure('new session: connect to first frame', performance.now() - t, 'ms');
    const b = await open('new');
    await firstFrame(b);
    expect(a.route!.instance).not.toBe(b.route!.instance);
    expect(cluster.get(a.route!.instance).state).toBe('Allocated');
    expect(cluster.get(b.route!.instance).state).toBe('Allocated');

    // A joiner of a's session reaches a's instance and shares its session.
    t = performance.now();
    const joiner = await open(a.route!.sessionId);
    await firstFrame(joiner);
    figure('join: connect(router, id) to first frame', performance.now() - t, 'ms');
    expect(joiner.route!.instance).toBe(a.route!.instance);
    expect(joiner.session.sessionId).toBe(a.session.sessionId);

    // SIGTERM to b's instance: its viewer is closed with the reason, and while it drains the
    // next new session goes to the third (idle) instance, never to it.
    const draining = instances.find((i) => i.name === b.route!.instance)!;
    const idle = instances.find((i) => i.name !== a.route!.instance && i.name !== b.route!.instance)!;
    const bClosed = new Promise<ConnectionStatus>((r) => b.on('status', (s: ConnectionStatus) => s.state === 'closed' && r(s)));
    draining.child.kill('SIGTERM');
    const c = await open('new');
    expect(c.route!.instance).toBe(idle.name);
    await firstFrame(c);
    const closed = await bClosed;
    expect(closed.reason).toContain('server shutting down');
    expect(await draining.exited).toBe(0);
    expect(cluster.get(draining.name).state).toBe('Shutdown');
    // Nothing is free now (a's and c's instances are Allocated, b's is gone): a clean 429.
    const full = await refused('new');
    expect(full.code).toBe('no_free_instance');
    expect(full.status).toBe(429);

    // SIGKILL to c's instance: its pings stop, Agones' health check marks it Unhealthy, and the
    // router no longer finds its session.
    const killed = instances.find((i) => i.name === c.route!.instance)!;
    t = performance.now();
    killTree(killed.child);
    await until(() => cluster.get(killed.name).state === 'Unhealthy', `${killed.name} Unhealthy`, 30_000);
    const unhealthyMs = performance.now() - t;
    figure(`killed instance Unhealthy (health ${HEALTH_PERIOD_MS} ms x ${HEALTH_FAILURES}, scale ${HEALTH_SCALE})`, unhealthyMs, 'ms');
    figure('killed instance Unhealthy, scaled back to Agones defaults (x5)', unhealthyMs / HEALTH_SCALE, 'ms');
    // Period x failures, plus at most one period for the last ping before the kill and one
    // check tick: within 15 s at Agones' scale.
    expect(unhealthyMs).toBeLessThanOrEqual(15_000 * HEALTH_SCALE + 1000);
    const gone = await refused(c.route!.sessionId);
    expect(gone.code).toBe('unknown_session');
    expect(joiner.connectionState).toBe('open');
    expect(cluster.allocations).toBe(3);
  }, 180_000);
});
