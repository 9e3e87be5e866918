#!/usr/bin/env node
// The move gap as a viewer sees it (issue 41, docs/snapshots.md "Move"): real `reactor run`
// processes of seed-video (1 CPU rank) under the tests' FAKE Agones (a fake SDK sidecar each on
// one FakeAgonesCluster, served to `reactor route` by the mock Kubernetes API), one client
// through the router. Each round SIGTERMs the instance that holds the session; the router moves
// it to the other; a fresh instance replaces the one that exited (what the Fleet would do).
//
//   move.gap   the longest wait between two frames across each move, ms (p50, max over the rounds),
//              and SIGTERM -> the client's socket open again on the new instance
//
// Run after `pnpm build`: node bench/move.bench.mjs [rounds=5] [app=seed-video|world]   (REACTOR_PYTHON: a python3 with torch)
//   world: the world model (apps/world, 1 rank) at its `small` config on CPU (model: auto picks it without a GPU)
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import ts from '../node_modules/typescript/lib/typescript.js';
import { WebSocket } from '../packages/server/node_modules/ws/wrapper.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, '..');
const rounds = Number(process.argv[2] ?? 5);
const appName = process.argv[3] ?? 'seed-video';
if (appName !== 'seed-video' && appName !== 'world') throw new Error(`app must be seed-video or world, got ${appName}`);
const TOKEN = 'bench-token';
const seed = join(repo, 'apps/seed-video');
const cli = join(repo, 'packages/cli/dist/main.js');
const PY = process.env.REACTOR_PYTHON ?? '/usr/bin/python3';

// The fixtures are TypeScript: transpiled into a folder under test/ (so they resolve test/'s packages), removed at exit.
const tmp = mkdtempSync(join(repo, 'test', '.move-bench-'));
const procs = new Set();
const cleanup = () => {
  for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL');
  rmSync(tmp, { recursive: true, force: true });
};
process.on('exit', cleanup);
process.on('SIGINT', () => process.exit(130));
writeFileSync(join(tmp, 'package.json'), '{"type":"module"}');
for (const f of ['cluster', 'kube-api', 'sidecar']) {
  const src = readFileSync(join(repo, 'test/fixtures/agones', `${f}.ts`), 'utf8');
  const out = ts.transpileModule(src, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, verbatimModuleSyntax: true } });
  writeFileSync(join(tmp, `${f}.js`), out.outputText);
}
const { FakeAgonesCluster } = await import(pathToFileURL(join(tmp, 'cluster.js')).href);
const { MockKubeApi } = await import(pathToFileURL(join(tmp, 'kube-api.js')).href);
const { FakeAgonesSidecar } = await import(pathToFileURL(join(tmp, 'sidecar.js')).href);
const { connect } = await import(pathToFileURL(join(repo, 'packages/client/dist/index.js')).href);

const manifest = join(tmp, 'reactor.yaml');
const world = join(repo, 'apps/world');
writeFileSync(
  manifest,
  appName === 'world'
    ? `${readFileSync(join(world, 'reactor.yaml'), 'utf8')
        .replace('import: dist/index.js', `import: ${join(world, 'dist/index.js')}`)
        .replace('config: config.yaml', `config: ${join(world, 'config.yaml')}`)
        .replace('path: [python]', `path: [${join(world, 'python')}]`)
        .replace('runtime:\n', 'runtime:\n  session_grace_ms: 200\n')
        .replace('port: 8080', 'port: 0\n  encoding: rgb')}\nagones: { enabled: true }\n`
    : `${readFileSync(join(seed, 'reactor.yaml'), 'utf8')
        .replace('import: dist/index.js', `import: ${join(seed, 'dist/index.js')}`)
        .replace('weights_path: weights', `weights_path: ${join(seed, 'weights')}`)
        .replace('path: [worker]', `path: [${join(seed, 'worker')}]`)
        .replace('count: 2', 'count: 1')
        .replace('runtime:\n', 'runtime:\n  session_grace_ms: 200\n')
        .replace('port: 8080', 'port: 0\n  encoding: rgb')}\nagones: { enabled: true }\n`,
);

function spawnBin(args, prefix, env = {}) {
  const child = spawn(process.execPath, [cli, ...args], { cwd: tmp, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, REACTOR_PYTHON: PY, ...env } });
  procs.add(child);
  const log = { text: '' };
  child.stderr.on('data', (d) => (log.text = (log.text + d).slice(-200_000)));
  const url = new Promise((res, rej) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = new RegExp(`${prefix}: (\\S+)`).exec(out);
      if (m) res(m[1]);
    });
    child.once('exit', (code) => rej(new Error(`reactor ${args[0]} exited with ${code}`)));
  });
  const exited = new Promise((r) => child.once('exit', r));
  return { child, url, exited, log };
}

async function until(cond, what, ms = 120_000) {
  const end = performance.now() + ms;
  while (!(await cond())) {
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const cluster = new FakeAgonesCluster();
const api = await new MockKubeApi(cluster).start();
const instances = new Map();
let made = 0;
async function startInstance() {
  const name = `reactor-${++made}`;
  cluster.addServer(name, '127.0.0.1', 0);
  const sidecar = await FakeAgonesSidecar.start(cluster, name);
  const p = spawnBin(['run', '--manifest', manifest, '--token', TOKEN], 'Viewer', sidecar.env());
  cluster.get(name).port = Number(new URL(await p.url).port);
  instances.set(name, { ...p, sidecar });
  await until(() => cluster.get(name).state === 'Ready', `${name} Ready`);
  return name;
}
await Promise.all([startInstance(), startInstance()]);
const router = spawnBin(['route', '--kubeconfig', api.writeKubeconfig(), '--port', '0', '--token', TOKEN], 'Router');
const client = await connect(await router.url, { session: 'new', token: TOKEN, WebSocket });
const arrivals = [];
client.on('frame', () => arrivals.push(performance.now()));
let opened = 0;
client.on('status', (s) => s.state === 'open' && opened++);
await until(() => arrivals.length >= 24, 'frames');

const gaps = [];
const reopen = [];
const routerMs = [];
let lastBytes;
const count = (text, re) => text.match(re)?.length ?? 0;
for (let i = 0; i < rounds; i++) {
  const holder = [...instances.keys()].find((n) => cluster.get(n).state === 'Allocated');
  const from = arrivals.length;
  const opens = opened;
  const t0 = performance.now();
  instances.get(holder).child.kill('SIGTERM');
  await until(() => opened > opens, 'the client open on the new instance');
  reopen.push(performance.now() - t0);
  const want = arrivals.length + 12;
  await until(() => arrivals.length >= want, 'frames after the move');
  let gap = 0;
  for (let k = from; k < arrivals.length; k++) gap = Math.max(gap, arrivals[k] - arrivals[k - 1]);
  gaps.push(gap);
  await until(() => count(router.log.text, /moved from draining/g) > i, 'the router logging the move');
  const m = [...router.log.text.matchAll(/moved from draining \S+ to \S+ \((\d+) bytes, (\d+) ms\)/g)].at(-1);
  lastBytes = Number(m?.[1]);
  routerMs.push(Number(m?.[2]));
  const old = instances.get(holder);
  await old.exited;
  await old.sidecar.stop();
  instances.delete(holder);
  await startInstance();
}
client.close();
const sorted = (a) => [...a].sort((x, y) => x - y);
const r0 = (x) => Math.round(x);
console.log(
  JSON.stringify({
    bench: 'move.gap',
    app: appName === 'world' ? 'world small (1 CPU rank, 64x48, KV cache of 9 latent frames)' : 'seed-video 1 CPU rank, rgb 48x64, 24 fps',
    snapshotBytes: lastBytes,
    fps: r0((arrivals.length - 1) / ((arrivals.at(-1) - arrivals[0]) / 1000)),
    rounds,
    gapMsP50: r0(sorted(gaps)[Math.floor(gaps.length / 2)]),
    gapMsMax: r0(Math.max(...gaps)),
    sigtermToReopenMsP50: r0(sorted(reopen)[Math.floor(reopen.length / 2)]),
    gapsMs: gaps.map(r0),
    routerMoveMs: routerMs,
  }),
);
router.child.kill('SIGTERM');
for (const { child } of instances.values()) child.kill('SIGTERM');
await Promise.all([router.exited, ...[...instances.values()].map((x) => x.exited)]);
await api.close();
process.exit(0);
