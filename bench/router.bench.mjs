#!/usr/bin/env node
// Session router benchmark (issue 16): `@reactor/router` in this process, the mock Kubernetes API
// of the tests (test/fixtures/agones/kube-api.ts, transpiled here) backed by FakeAgonesCluster,
// reached through @kubernetes/client-node as in a cluster.
//
//   router.allocation   POST /sessions -> 201 with the instance URL, one at a time, ms p50/p99
//                       (target <= 100 ms), and the same for a 429 (no free instance)
//   router.sustained    sessions per minute for 10 s with 10 instances and 10 clients that each
//                       allocate, end the session (the instance back to Ready) and allocate again
//   router.bursts       bursts of 100 concurrent POST /sessions on 10 Ready instances: sessions,
//                       429s and double allocations (two sessions on one instance; must be 0), and
//                       each allocated request's latency inside the burst, p50/p99 (target <= 100 ms)
//   router.join         with a real `reactor run` (the CPU sample app) as the instance:
//                       connect(router, { session: 'new' }) to its welcome, a joiner's
//                       connect(router, { session: id }) to its welcome, and time to the first
//                       frame, against connecting to the instance directly; ms p50 of 5
//
// Run after `pnpm build`: node bench/router.bench.mjs
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import ts from '../node_modules/typescript/lib/typescript.js';
import { route, loadKubeConfig } from '../packages/router/dist/index.js';
import { connect } from '../packages/client/dist/index.js';
import { WebSocket } from '../packages/server/node_modules/ws/wrapper.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, '..');
const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const r2 = (x) => Math.round(x * 100) / 100;
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

// The fixtures are TypeScript: transpile them (types only) into a temporary module folder.
const tmp = mkdtempSync(join(tmpdir(), 'router-bench-'));
mkdirSync(join(tmp, 'agones'));
writeFileSync(join(tmp, 'package.json'), '{"type":"module"}');
for (const f of ['cluster', 'kube-api']) {
  const src = readFileSync(join(repo, 'test/fixtures/agones', `${f}.ts`), 'utf8');
  const out = ts.transpileModule(src, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, verbatimModuleSyntax: true } });
  writeFileSync(join(tmp, 'agones', `${f}.js`), out.outputText);
}
const { FakeAgonesCluster } = await import(pathToFileURL(join(tmp, 'agones/cluster.js')).href);
const { MockKubeApi } = await import(pathToFileURL(join(tmp, 'agones/kube-api.js')).href);

async function fleet(n, address = (i) => ({ address: `10.0.0.${i + 1}`, port: 7000 })) {
  const cluster = new FakeAgonesCluster();
  for (let i = 0; i < n; i++) {
    const a = address(i);
    cluster.addServer(`reactor-${i}`, a.address, a.port);
    cluster.setState(`reactor-${i}`, 'Ready');
  }
  const api = await new MockKubeApi(cluster).start();
  const { kubeConfig, namespace } = loadKubeConfig({ file: api.writeKubeconfig(), env: {} });
  // Nothing listens at the instances' addresses: no readiness check before handing one out (it costs one round trip to the pod in a cluster).
  const router = await route({ kubeConfig, namespace, fleet: cluster.fleet, port: 0, logger: quiet, allocationCheckTimeoutMs: 0 });
  return { cluster, api, router, close: async () => (await router.close(), await api.close()) };
}

async function post(url) {
  const res = await fetch(`${url}/sessions`, { method: 'POST' });
  const body = await res.json();
  return { status: res.status, body };
}

// ---- allocation latency -------------------------------------------------------------------
{
  const { cluster, router, close } = await fleet(10);
  for (let i = 0; i < 20; i++) {
    // warm-up: connections, JIT
    const a = await post(router.url);
    cluster.setState(a.body.instance, 'Ready');
  }
  const ok = [];
  for (let i = 0; i < 200; i++) {
    const t = performance.now();
    const a = await post(router.url);
    ok.push(performance.now() - t);
    if (a.status !== 201) throw new Error(`allocation answered ${a.status}`);
    cluster.setState(a.body.instance, 'Ready');
  }
  for (const gs of cluster.servers.values()) cluster.setState(gs.name, 'Allocated');
  const refused = [];
  for (let i = 0; i < 100; i++) {
    const t = performance.now();
    const a = await post(router.url);
    refused.push(performance.now() - t);
    if (a.status !== 429) throw new Error(`expected 429, got ${a.status}`);
  }
  console.log(
    JSON.stringify({
      bench: 'router.allocation',
      requests: ok.length,
      p50Ms: r2(pct(ok, 50)),
      p99Ms: r2(pct(ok, 99)),
      maxMs: r2(Math.max(...ok)),
      targetP99Ms: 100,
      noFreeP50Ms: r2(pct(refused, 50)),
      noFreeP99Ms: r2(pct(refused, 99)),
    }),
  );
  await close();
}

// ---- sustained sessions per minute --------------------------------------------------------
{
  const { cluster, router, close } = await fleet(10);
  const until = performance.now() + 10_000;
  let sessions = 0;
  let refused = 0;
  const lat = [];
  await Promise.all(
    Array.from({ length: 10 }, async () => {
      while (performance.now() < until) {
        const t = performance.now();
        const a = await post(router.url);
        lat.push(performance.now() - t);
        if (a.status === 201) {
          sessions++;
          cluster.setState(a.body.instance, 'Ready'); // the session ends; Agones' Ready() again
        } else refused++;
      }
    }),
  );
  console.log(
    JSON.stringify({
      bench: 'router.sustained',
      instances: 10,
      clients: 10,
      seconds: 10,
      sessionsPerMinute: Math.round(sessions * 6),
      refused,
      p50Ms: r2(pct(lat, 50)),
      p99Ms: r2(pct(lat, 99)),
    }),
  );
  await close();
}

// ---- bursts: double allocations ----------------------------------------------------------
{
  const { cluster, router, close } = await fleet(10);
  let doubles = 0;
  let created = 0;
  let refused = 0;
  let other = 0;
  const took = [];
  /** Each allocated request's own latency (request to 201), inside the bursts. */
  const each = [];
  for (let b = 0; b < 10; b++) {
    const t = performance.now();
    const answers = await Promise.all(
      Array.from({ length: 100 }, async () => {
        const t0 = performance.now();
        const a = await post(router.url);
        if (a.status === 201) each.push(performance.now() - t0);
        return a;
      }),
    );
    took.push(performance.now() - t);
    const ok = answers.filter((a) => a.status === 201);
    created += ok.length;
    refused += answers.filter((a) => a.status === 429).length;
    other += answers.filter((a) => a.status !== 201 && a.status !== 429).length;
    const perInstance = new Map();
    for (const a of ok) perInstance.set(a.body.instance, (perInstance.get(a.body.instance) ?? 0) + 1);
    for (const n of perInstance.values()) if (n > 1) doubles += n - 1;
    for (const gs of cluster.servers.values()) cluster.setState(gs.name, 'Ready');
    // The next burst meets 10 Ready instances as the router knows them (its cache follows the watch).
    while (router.registry.instances().filter((i) => i.state === 'Ready').length < 10) await new Promise((r) => setTimeout(r, 5));
  }
  console.log(
    JSON.stringify({
      bench: 'router.bursts',
      bursts: 10,
      requestsPerBurst: 100,
      instances: 10,
      sessions: created,
      noFreeInstance: refused,
      otherAnswers: other,
      doubleAllocations: doubles,
      burstP50Ms: r2(pct(took, 50)),
      allocationInBurstP50Ms: r2(pct(each, 50)),
      allocationInBurstP99Ms: r2(pct(each, 99)),
      targetP99Ms: 100,
    }),
  );
  await close();
}

// ---- join latency and time to first frame through the router ------------------------------
{
  const dir = mkdtempSync(join(tmpdir(), 'router-bench-app-'));
  writeFileSync(join(dir, 'config.yaml'), 'width: 64\nheight: 48\nframesPerChunk: 2\nworldSize: 1\ndevices: cpu\nbackend: wasm\n');
  writeFileSync(
    join(dir, 'reactor.yaml'),
    [
      'model: { name: router-bench, version: 0.0.1 }',
      'runtime:',
      `  import: ${join(repo, 'apps/video/dist/index.js')}:VideoApp`,
      '  config: config.yaml',
      `  weights_path: ${join(repo, 'apps/video/weights')}`,
      'server: { port: 0, encoding: rgb }',
      '',
    ].join('\n'),
  );
  const child = spawn(process.execPath, [join(repo, 'packages/cli/dist/main.js'), 'run', '--manifest', join(dir, 'reactor.yaml')], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const instanceUrl = await new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = /Viewer: (\S+)/.exec(out);
      if (m) resolve(m[1]);
    });
    child.once('exit', (code) => reject(new Error(`reactor run exited ${code}`)));
  });
  const port = Number(new URL(instanceUrl).port);
  const { cluster, router, close } = await fleet(1, () => ({ address: '127.0.0.1', port }));
  const firstFrame = (client, t0) => new Promise((resolve) => client.once('frame', () => resolve(performance.now() - t0)));
  const waitSessionGone = async () => {
    // The instance ends its session once its last client leaves; wait for that before the next run.
    for (let i = 0; i < 500; i++) {
      const h = await (await fetch(`${instanceUrl.replace(/\/$/, '')}/health`)).json();
      if (h.clients === 0) return;
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  const rows = { direct: [], directFrame: [], allocate: [], allocateFrame: [], join: [], joinFrame: [] };
  for (let i = 0; i < 6; i++) {
    let t = performance.now();
    const direct = await connect(instanceUrl, { WebSocket, reconnect: false });
    const directJoin = performance.now() - t;
    const directFrame = await firstFrame(direct, t);
    direct.close();
    await waitSessionGone();

    t = performance.now();
    const host = await connect(router.url, { session: 'new', WebSocket, reconnect: false });
    const alloc = performance.now() - t;
    const allocFrame = await firstFrame(host, t);
    t = performance.now();
    const guest = await connect(router.url, { session: host.route.sessionId, WebSocket, reconnect: false });
    const join_ = performance.now() - t;
    const joinFrame = await firstFrame(guest, t);
    guest.close();
    host.close();
    await waitSessionGone();
    cluster.setState('reactor-0', 'Ready'); // what the instance's Agones integration does when its session ends
    if (i === 0) continue; // warm-up
    rows.direct.push(directJoin);
    rows.directFrame.push(directFrame);
    rows.allocate.push(alloc);
    rows.allocateFrame.push(allocFrame);
    rows.join.push(join_);
    rows.joinFrame.push(joinFrame);
  }
  console.log(
    JSON.stringify({
      bench: 'router.join',
      runs: rows.join.length,
      directWelcomeMs: r2(pct(rows.direct, 50)),
      directFirstFrameMs: r2(pct(rows.directFrame, 50)),
      newSessionWelcomeMs: r2(pct(rows.allocate, 50)),
      newSessionFirstFrameMs: r2(pct(rows.allocateFrame, 50)),
      joinWelcomeMs: r2(pct(rows.join, 50)),
      joinFirstFrameMs: r2(pct(rows.joinFrame, 50)),
    }),
  );
  await close();
  child.kill('SIGTERM');
  await new Promise((r) => child.once('exit', r));
  rmSync(dir, { recursive: true, force: true });
}
rmSync(tmp, { recursive: true, force: true });
