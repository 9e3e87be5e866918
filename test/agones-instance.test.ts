/**
 * `reactor run --agones` against a FAKE Agones SDK sidecar (test/fixtures/agones/sidecar.ts: a
 * real gRPC server built from the SDK package's own service definition, on a FakeAgonesCluster),
 * not a real cluster: a real CLI process serving the sample app (2 CPU ranks), the official SDK
 * inside it, real sockets. What Agones itself would do around it (delete the pod after
 * Shutdown, replace an Unhealthy server) is not exercised; the cluster's health controller is
 * the fake's, with Agones' defaults scaled down where a test says so.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createServer, type AddressInfo } from 'node:net';
import { rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import type { WelcomeMessage } from '@reactor/client';
import { FakeAgonesCluster, SDK_LABEL_PREFIX } from './fixtures/agones/cluster.js';
import { FakeAgonesSidecar } from './fixtures/agones/sidecar.js';
import { alive, descendants } from './fixtures/processes.js';
import { sampleWorkspace } from './fixtures/sample-workspace.js';
import { until } from '@reactor/test-kit';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(repo, 'packages/cli/dist/main.js');
const SESSION_LABEL = `${SDK_LABEL_PREFIX}reactor-session`;

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A workspace with the sample app on 2 CPU ranks and the given `agones:` section. */
function workspace(agones: string, extra: { grace?: number } = {}): string {
  const dir = sampleWorkspace({
    prefix: 'reactor-agones-',
    name: 'agones-test',
    config: 'width: 32\nheight: 32\nframesPerChunk: 2\nworldSize: 2\ndevices: cpu\nbackend: wasm\n',
    runtime: [`session_grace_ms: ${extra.grace ?? 200}`],
    server: '{ port: 0 }',
    extra: [agones],
  });
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

interface Instance {
  child: ChildProcess;
  url: Promise<string>;
  stderr: () => string;
  exited: Promise<number | null>;
}

function startInstance(dir: string, env: Record<string, string>, ...args: string[]): Instance {
  const child = spawn(process.execPath, [cli, 'run', '--manifest', join(dir, 'reactor.yaml'), ...args], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const url = new Promise<string>((res, rej) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /Viewer: (\S+)/.exec(out);
      if (m) res(m[1]!);
    });
    child.once('exit', (code) => rej(new Error(`reactor run exited with ${code} before printing the viewer URL:\n${err}`)));
  });
  url.catch(() => undefined);
  cleanups.push(() => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    for (const p of descendants(child.pid!)) process.kill(p, 'SIGKILL');
    child.kill('SIGKILL');
  });
  return { child, url, stderr: () => err, exited };
}

async function cluster(options: ConstructorParameters<typeof FakeAgonesCluster>[0] = {}): Promise<{ cluster: FakeAgonesCluster; sidecar: FakeAgonesSidecar }> {
  const c = new FakeAgonesCluster(options);
  c.addServer('reactor-gs-1', '127.0.0.1', 0);
  const sidecar = await FakeAgonesSidecar.start(c, 'reactor-gs-1');
  cleanups.push(() => sidecar.stop());
  return { cluster: c, sidecar };
}

/** A viewer: resolves its welcome; `close()` leaves. */
async function viewerJoins(url: string): Promise<{ ws: WebSocket; welcome: WelcomeMessage; closed: Promise<number> }> {
  const ws = new WebSocket(url.replace(/^http/, 'ws').replace(/\/?(\?.*)?$/, '/ws'));
  cleanups.push(() => ws.terminate());
  const closed = new Promise<number>((r) => ws.once('close', (code) => r(code)));
  const welcome = await new Promise<WelcomeMessage>((res, rej) => {
    ws.on('message', (data, binary) => {
      if (binary) return;
      const msg = JSON.parse(String(data)) as { type: string };
      if (msg.type === 'welcome') res(msg as WelcomeMessage);
    });
    ws.once('error', rej);
  });
  return { ws, welcome, closed };
}

const health = async (url: string) => (await fetch(new URL('/health', url))).json() as Promise<{ ready: boolean; instance?: string; sessionId?: string }>;

describe('reactor run --agones (fake SDK sidecar on a FakeAgonesCluster, not a real cluster)', () => {
  it('goes Ready once loaded, pings every ~2 s, Allocate()s and labels the session when a client joins, and is Ready again with the label cleared when it ends', async () => {
    const { cluster: c, sidecar } = await cluster();
    const inst = startInstance(workspace('agones: { enabled: true }'), sidecar.env());
    const url = await inst.url;
    await until(() => c.get('reactor-gs-1').state === 'Ready', 'Ready');
    // The session descriptor names the instance: /health and the welcome's session status.
    expect(await health(url)).toMatchObject({ ready: true, instance: 'reactor-gs-1' });

    const viewer = await viewerJoins(url);
    expect(viewer.welcome.session.instance).toBe('reactor-gs-1');
    await until(() => c.get('reactor-gs-1').labels[SESSION_LABEL] !== undefined, 'the session label');
    const gs = c.get('reactor-gs-1');
    expect(gs.state).toBe('Allocated');
    const sessionId = (await health(url)).sessionId!;
    expect(gs.labels[SESSION_LABEL]).toBe(sessionId);
    // Not allocated by a router: the instance allocated itself, then labelled.
    expect(sidecar.calls.map((x) => x.method).filter((m) => m !== 'GetGameServer' && m !== 'WatchGameServer')).toEqual(['Ready', 'Allocate', 'SetLabel']);

    viewer.ws.close();
    await until(() => sidecar.callsOf('Ready').length === 2, 'Ready() after the session ended');
    // The sidecar writes behind Agones' 500 ms rate limit: the GameServer says it once the write lands.
    await sidecar.settled();
    expect(c.get('reactor-gs-1').state).toBe('Ready');
    expect(c.get('reactor-gs-1').labels[SESSION_LABEL]).toBe('');
    const clear = sidecar.callsOf('SetLabel').at(-1)!;
    expect(clear.value).toBe('');
    expect(clear.at).toBeLessThanOrEqual(sidecar.callsOf('Ready')[1]!.at);

    // Health pings: every ~2 s (the default), measured over the whole run.
    await until(() => sidecar.pings.length >= 4, '4 pings', 15_000);
    const gaps = sidecar.pings.slice(1).map((t, i) => t - sidecar.pings[i]!);
    const median = gaps.sort((a, b) => a - b)[Math.floor(gaps.length / 2)]!;
    expect(median).toBeGreaterThan(1500);
    expect(median).toBeLessThan(3000);
    expect(inst.stderr()).toContain('component=agones');
  }, 90_000);

  it('an instance the router allocated is labelled but not Allocate()d again when its client comes, and one whose client never comes is Ready again after allocation_timeout_ms', async () => {
    const { cluster: c, sidecar } = await cluster();
    const inst = startInstance(workspace('agones: { enabled: true, allocation_timeout_ms: 1500 }'), sidecar.env());
    const url = await inst.url;
    await until(() => c.get('reactor-gs-1').state === 'Ready', 'Ready');

    // The router's allocation with its session id as the label (what the mock Kubernetes API does with a GameServerAllocation).
    expect(c.allocate([{ matchLabels: {} }], { [SESSION_LABEL]: 'router-session-1' })?.name).toBe('reactor-gs-1');
    const viewer = await viewerJoins(url);
    await until(() => inst.stderr().includes('allocated by the router as session router-session-1'), 'the session to start');
    // Neither Allocate() again nor a label over the router's: its clients look the session up by that id.
    expect(sidecar.callsOf('Allocate')).toEqual([]);
    expect(sidecar.callsOf('SetLabel')).toEqual([]);
    expect(c.get('reactor-gs-1').labels[SESSION_LABEL]).toBe('router-session-1');
    viewer.ws.close();
    await until(() => sidecar.callsOf('Ready').length === 2, 'Ready() after the session ended');
    // The sidecar writes behind Agones' 500 ms rate limit: the GameServer says it once the write lands.
    await sidecar.settled();

    // Allocated again, and nobody joins.
    const allocatedAt = Date.now();
    c.allocate([{ matchLabels: {} }], { [SESSION_LABEL]: 'router-session-2' });
    await until(() => c.get('reactor-gs-1').state === 'Ready', 'Ready after the allocation timeout', 15_000);
    const back = Date.now() - allocatedAt;
    expect(back).toBeGreaterThanOrEqual(1500);
    expect(back).toBeLessThan(1500 + 4000);
    expect(sidecar.callsOf('Allocate')).toEqual([]);
    await until(() => /no client joined within 1500 ms \(agones\.allocationTimeoutMs\): Ready\(\) again/.test(inst.stderr()), 'the log line');
    expect(c.get('reactor-gs-1').labels[SESSION_LABEL]).toBe('');
    console.log(`agones figure: allocated-never-joined back to Ready after ${back} ms (allocation_timeout_ms 1500)`);
  }, 90_000);

  it('stops the health pings while a rank stalls (not a passing state), and resumes them once the self-healing runner has replaced it (Agones defaults scaled 1/5: 1 s x 3)', async () => {
    const { cluster: c, sidecar } = await cluster({ healthPeriodMs: 1000, healthFailureThreshold: 3, healthInitialDelayMs: 1000 });
    cleanups.push(c.startHealthChecks());
    // Rank 1 stops itself (SIGSTOP) in its second generate(): the runner names it after stallMs (5 s),
    // the call fails at once (the session is told) and a new runner is built.
    const faults = JSON.stringify([{ rank: 1, call: 2, kind: 'stall' }]);
    const inst = startInstance(workspace('agones: { enabled: true, health_interval_ms: 200 }'), { ...sidecar.env(), REACTOR_FAULTS: faults });
    const url = await inst.url;
    await until(() => c.get('reactor-gs-1').state === 'Ready', 'Ready');
    await viewerJoins(url);
    await until(() => inst.stderr().includes('Health() pings stop'), 'the pings to stop', 30_000);
    expect(inst.stderr()).toMatch(/not healthy \(rank_stalled: rank 1 has made no progress/);
    const pingsThen = sidecar.pings.length;
    await until(() => inst.stderr().includes('healthy again: Health() pings resume'), 'the pings to resume', 30_000);
    await until(() => sidecar.pings.length > pingsThen + 1, 'pings again', 10_000);
    expect(inst.stderr()).toMatch(/the video runner has a stalled rank; building a new one/);
    // Health reports the server live throughout.
    expect((await fetch(new URL('/health/live', url))).status).toBe(200);
  }, 90_000);

  it('a SIGKILLed instance sends no more pings and is Unhealthy within failureThreshold x period (Agones defaults scaled 1/5: 1 s x 3)', async () => {
    const { cluster: c, sidecar } = await cluster({ healthPeriodMs: 1000, healthFailureThreshold: 3, healthInitialDelayMs: 1000 });
    cleanups.push(c.startHealthChecks());
    const inst = startInstance(workspace('agones: { enabled: true }'), sidecar.env());
    await inst.url;
    await until(() => c.get('reactor-gs-1').state === 'Ready', 'Ready');
    await until(() => sidecar.pings.length >= 2, 'two pings', 10_000);
    const ranks = descendants(inst.child.pid!);
    const killedAt = Date.now();
    inst.child.kill('SIGKILL');
    for (const p of ranks) process.kill(p, 'SIGKILL');
    await until(() => c.get('reactor-gs-1').state === 'Unhealthy', 'Unhealthy', 15_000);
    const took = Date.now() - killedAt;
    const sinceLastPing = Date.now() - sidecar.pings.at(-1)!;
    // 3 missed periods after the last ping, seen by a controller that looks every period/5.
    expect(sinceLastPing).toBeGreaterThan(3000);
    expect(took).toBeLessThan(3000 + 2000 + 1000);
    console.log(`agones figure: SIGKILL -> Unhealthy in ${took} ms (${sinceLastPing} ms after the last ping; period 1 s x 3, pings every 2 s)`);
  }, 60_000);

  it('SIGTERM: the drain to its deadline (clients closed 4003 drain_deadline, ranks stopped), then Shutdown(), exit 0, no process left', async () => {
    const { cluster: c, sidecar } = await cluster();
    const inst = startInstance(workspace('agones: { enabled: true }'), { ...sidecar.env(), REACTOR_DRAIN_TIMEOUT_MS: '1500' });
    const url = await inst.url;
    await until(() => c.get('reactor-gs-1').state === 'Ready', 'Ready');
    const viewer = await viewerJoins(url);
    await until(() => c.get('reactor-gs-1').state === 'Allocated', 'Allocated');
    const tree = descendants(inst.child.pid!);
    expect(tree.length).toBeGreaterThanOrEqual(2);
    let closedAt = 0;
    void viewer.closed.then(() => (closedAt = Date.now()));
    inst.child.kill('SIGTERM');
    expect(await inst.exited).toBe(0);
    // The viewer's session outlived the 1.5 s drain: the drain's own close, not a bare 1001.
    expect(await viewer.closed).toBe(4003);
    await sidecar.settled();
    expect(c.get('reactor-gs-1').state).toBe('Shutdown');
    const shutdown = sidecar.callsOf('Shutdown');
    expect(shutdown).toHaveLength(1);
    // Shutdown() comes after the drain closed the clients.
    expect(shutdown[0]!.at).toBeGreaterThanOrEqual(closedAt);
    expect(sidecar.callsOf('Ready')).toHaveLength(1);
    await until(() => tree.every((p) => !alive(p)), 'every rank to be gone', 10_000);
    expect(inst.stderr()).toContain('told Agones Shutdown() after the drain');
  }, 90_000);

  it('agones.on_session_end: shutdown asks Agones for a fresh process when the session ends', async () => {
    const { cluster: c, sidecar } = await cluster();
    const inst = startInstance(workspace('agones: { enabled: true, on_session_end: shutdown }'), sidecar.env());
    const url = await inst.url;
    await until(() => c.get('reactor-gs-1').state === 'Ready', 'Ready');
    const viewer = await viewerJoins(url);
    await until(() => c.get('reactor-gs-1').state === 'Allocated', 'Allocated');
    viewer.ws.close();
    await until(() => c.get('reactor-gs-1').state === 'Shutdown', 'Shutdown');
    expect(sidecar.callsOf('Ready')).toHaveLength(1);
    await until(() => inst.stderr().includes('Shutdown() (agones.onSessionEnd: shutdown)'), 'the log line');
  }, 90_000);

  it('with no sidecar reachable it logs agones_sdk_unreachable once, keeps serving, and goes Ready once the sidecar appears', async () => {
    const port = await freePort();
    const c = new FakeAgonesCluster();
    c.addServer('reactor-gs-1', '127.0.0.1', 0);
    const inst = startInstance(workspace('', {}), { AGONES_SDK_GRPC_PORT: String(port) }, '--agones');
    const url = await inst.url;
    await until(() => inst.stderr().includes('agones_sdk_unreachable'), 'the unreachable log line');
    expect(inst.stderr()).toContain(`cannot reach the Agones SDK sidecar at localhost:${port} (AGONES_SDK_GRPC_PORT)`);
    expect(inst.stderr()).toContain('The server keeps serving');
    const res = await fetch(new URL('/health/ready', url));
    expect(res.status).toBe(200);
    // Logged once per outage, not once per retry.
    await new Promise((r) => setTimeout(r, 2500));
    expect(inst.stderr().match(/agones_sdk_unreachable/g)).toHaveLength(1);

    const sidecar = await FakeAgonesSidecar.start(c, 'reactor-gs-1', { port });
    cleanups.push(() => sidecar.stop());
    // grpc-js backs off between attempts (1 s, 1.6 s, 2.6 s, ...).
    await until(() => c.get('reactor-gs-1').state === 'Ready', 'Ready once the sidecar is up', 30_000);
    await until(() => inst.stderr().includes('the Agones SDK sidecar answers again'), 'the recovery log line');
    expect(inst.child.exitCode).toBeNull();
  }, 90_000);

  it('names every bad agones key of reactor.yaml and exits 1 before serving', () => {
    const dir = workspace('agones: { enabled: yes-please, on_session_end: restart, health_interval_ms: 10, allocation_timeout_ms: 120000, port: 3 }');
    const r = spawnSync(process.execPath, [cli, 'run', '--manifest', join(dir, 'reactor.yaml')], { encoding: 'utf8', timeout: 30_000 });
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    for (const line of [
      'agones.enabled: must be a boolean value',
      'agones.on_session_end: must be one of the following values: ready, shutdown',
      'agones.health_interval_ms: must not be less than 50',
      'agones.allocation_timeout_ms: must not be greater than 60000',
      'agones.port: unknown key',
    ])
      expect(r.stderr).toContain(line);
  });
});

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  await new Promise((r) => server.close(r));
  return port;
}
