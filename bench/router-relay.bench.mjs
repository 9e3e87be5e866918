#!/usr/bin/env node
// What relaying video through the session router costs (issue 30): `reactor route` as its own
// process (its CPU read from /proc/<pid>/stat), the tests' mock Kubernetes API, and a fake
// instance in this process that streams binary WebSocket frames at a viewer's bitrate (4 Mbit/s:
// 30 frames a second of 16.7 KB) to every viewer that connects through the router's relay.
//
//   router.relay   for 10, 40 and 80 viewers for 8 s: router CPU-seconds per second, per viewer,
//                  and per GB relayed; the viewers one CPU core (and the chart's 100m request)
//                  carries at 4 Mbit/s
//
// Run after `pnpm build`: node bench/router-relay.bench.mjs
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import ts from '../node_modules/typescript/lib/typescript.js';
import { WebSocket, WebSocketServer } from '../packages/server/node_modules/ws/wrapper.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, '..');
const r2 = (x) => Math.round(x * 100) / 100;
const TICKS = 100; // USER_HZ of /proc/<pid>/stat on Linux
const FRAME_BYTES = Math.round(4e6 / 8 / 30);

const tmp = mkdtempSync(join(tmpdir(), 'router-relay-bench-'));
mkdirSync(join(tmp, 'agones'));
writeFileSync(join(tmp, 'package.json'), '{"type":"module"}');
for (const f of ['cluster', 'kube-api']) {
  const src = readFileSync(join(repo, 'test/fixtures/agones', `${f}.ts`), 'utf8');
  const out = ts.transpileModule(src, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, verbatimModuleSyntax: true } });
  writeFileSync(join(tmp, 'agones', `${f}.js`), out.outputText);
}
const { FakeAgonesCluster } = await import(pathToFileURL(join(tmp, 'agones/cluster.js')).href);
const { MockKubeApi } = await import(pathToFileURL(join(tmp, 'agones/kube-api.js')).href);

// The fake instance: every socket gets FRAME_BYTES 30 times a second.
const http = createServer((_req, res) => res.end('ok'));
const wss = new WebSocketServer({ server: http, path: '/ws' });
const frame = Buffer.alloc(FRAME_BYTES, 7);
const sockets = new Set();
wss.on('connection', (ws) => {
  sockets.add(ws);
  ws.on('close', () => sockets.delete(ws));
});
const pump = setInterval(() => {
  for (const ws of sockets) if (ws.bufferedAmount < 4 * FRAME_BYTES) ws.send(frame);
}, 1000 / 30);
await new Promise((r) => http.listen(0, '127.0.0.1', r));
const port = http.address().port;

const cluster = new FakeAgonesCluster();
cluster.addServer('reactor-0', '127.0.0.1', port);
cluster.setState('reactor-0', 'Ready');
const api = await new MockKubeApi(cluster).start();
// REACTOR_CLI=<main.js of another checkout> compares another router build under the same load.
const router = spawn(
  process.execPath,
  [process.env.REACTOR_CLI ?? join(repo, 'packages/cli/dist/main.js'), 'route', '--kubeconfig', api.writeKubeconfig(), '--port', '0'],
  {
    stdio: ['ignore', 'pipe', 'pipe'],
  },
);
let routerLog = '';
router.stderr.on('data', (d) => (routerLog += d));
const routerUrl = await new Promise((resolve, reject) => {
  let out = '';
  router.stdout.on('data', (d) => {
    out += d;
    const m = /Router: (\S+)/.exec(out);
    if (m) resolve(m[1]);
  });
  router.once('exit', (code) => reject(new Error(`reactor route exited ${code}`)));
});
const alloc = await (await fetch(`${routerUrl}/sessions`, { method: 'POST' })).json();

const cpuTicks = () => {
  const stat = readFileSync(`/proc/${router.pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(f[11]) + Number(f[12]); // utime + stime
};

for (const viewers of [10, 40, 80]) {
  const clients = [];
  let bytes = 0;
  for (let i = 0; i < viewers; i++) {
    const ws = new WebSocket(`${routerUrl.replace('http', 'ws')}${alloc.path}/ws`);
    ws.on('message', (m) => (bytes += m.length));
    clients.push(ws);
  }
  await Promise.all(clients.map((ws) => new Promise((r) => ws.once('open', r))));
  await new Promise((r) => setTimeout(r, 1000)); // settle
  const b0 = bytes;
  const c0 = cpuTicks();
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, 8000));
  const seconds = (performance.now() - t0) / 1000;
  const cpu = (cpuTicks() - c0) / TICKS;
  const gb = (bytes - b0) / 1e9;
  const perViewer = cpu / seconds / viewers;
  console.log(
    JSON.stringify({
      bench: 'router.relay',
      viewers,
      mbitPerViewer: r2(((bytes - b0) * 8) / 1e6 / seconds / viewers),
      routerCpuPerSecond: r2(cpu / seconds),
      routerCpuMsPerViewerSecond: r2(perViewer * 1000),
      cpuSecondsPerGB: r2(cpu / gb),
      viewersPerCore: Math.round(1 / perViewer),
      viewersPer100mCpu: Math.round(0.1 / perViewer),
    }),
  );
  for (const ws of clients) ws.terminate();
  await new Promise((r) => setTimeout(r, 500));
}

clearInterval(pump);
if (/failed/.test(routerLog)) console.error(routerLog);
router.kill('SIGTERM');
await new Promise((r) => router.once('exit', r));
for (const ws of sockets) ws.terminate();
wss.close();
http.close();
await api.close();
rmSync(tmp, { recursive: true, force: true });
