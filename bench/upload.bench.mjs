#!/usr/bin/env node
// Upload benchmark: a served app with a session, one 20 MB file announced (POST /uploads) and
// sent (PUT /uploads/{id}) over loopback HTTP, the server checking it as it streams (limit, type,
// length) and writing it into the session's temporary folder.
//
//   upload.throughput  MB/s from the PUT's first byte to its 200 answer (median of 5, and best),
//                      and the process's RSS growth over its idle RSS during the uploads, against
//                      the session quota (target: >= 200 MB/s, growth <= 2x the quota)
//
// Client and server share this process (the harsher setting on a small machine). Run after
// `pnpm build`: node bench/upload.bench.mjs
import { createServer, request } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApplicationError, ReactorApp, reactorApp } from '../packages/runtime/dist/index.js';
import { serve } from '../packages/server/dist/index.js';
import { WebSocket } from '../packages/server/node_modules/ws/wrapper.mjs';

const SIZE = 20_000_000;
const RUNS = 5;
const CHUNK = 64 * 1024;
const QUOTA = 200 * 1024 * 1024;

class BenchApp extends ReactorApp {
  processInput() {
    throw new ApplicationError('no model: uploads only'); // the step loop waits, it does not spin
  }
  generate() {
    return null;
  }
}
reactorApp({ name: 'upload-bench' })(BenchApp);

const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const r2 = (x) => Math.round(x * 100) / 100;

// The body: a PNG signature, then filler; one buffer reused for every chunk.
const body = Buffer.alloc(CHUNK, 7);
body.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

function put(url) {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'PUT', headers: { 'content-length': String(SIZE) } });
    req.on('response', (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => (res.statusCode === 200 ? resolve(JSON.parse(text)) : reject(new Error(`PUT ${res.statusCode}: ${text}`))));
    });
    req.on('error', reject);
    let sent = 0;
    const pump = () => {
      while (sent < SIZE) {
        const n = Math.min(CHUNK, SIZE - sent);
        sent += n;
        if (!req.write(n === CHUNK ? body : body.subarray(0, n))) return void req.once('drain', pump);
      }
      req.end();
    };
    pump();
  });
}

const dir = mkdtempSync(join(tmpdir(), 'upload-bench-'));
const server = await serve(BenchApp, { port: 0, gracePeriodMs: 0, logger: quiet, maxUploadBytes: 50 * 1024 * 1024, uploadQuotaBytes: QUOTA, uploadDir: dir });
await server.loaded;
const ws = new WebSocket(server.wsUrl);
await new Promise((resolve) => ws.on('message', (d) => JSON.parse(String(d)).type === 'welcome' && resolve()));

globalThis.gc?.();
const idleRss = process.memoryUsage().rss;
let peakRss = idleRss;
const sampler = setInterval(() => (peakRss = Math.max(peakRss, process.memoryUsage().rss)), 2);
const rates = [];
for (let i = 0; i < RUNS; i++) {
  const ann = await fetch(`${server.url}/uploads`, { method: 'POST', body: JSON.stringify({ name: `run-${i}.png`, size: SIZE }) });
  if (ann.status !== 201) throw new Error(`POST ${ann.status}: ${await ann.text()}`);
  const { url } = await ann.json();
  const t0 = performance.now();
  const info = await put(`${server.url}${url}`);
  const s = (performance.now() - t0) / 1000;
  if (info.size !== SIZE || info.mimeType !== 'image/png') throw new Error(`unexpected answer ${JSON.stringify(info)}`);
  rates.push(SIZE / 1e6 / s);
  // Every file stays stored in the session: the runs together must fit its quota.
  if ((i + 2) * SIZE > QUOTA) throw new Error('quota too small for the runs');
}
clearInterval(sampler);
// The loopback ceiling in the same sitting: a bare node:http server that reads and drops the body.
const bare = createServer((req, res) => {
  req.resume();
  req.on('end', () => res.end(JSON.stringify({ size: SIZE, mimeType: 'image/png' })));
});
await new Promise((resolve) => bare.listen(0, '127.0.0.1', resolve));
const bareRates = [];
for (let i = 0; i < RUNS; i++) {
  const t0 = performance.now();
  await put(`http://127.0.0.1:${bare.address().port}/`);
  bareRates.push(SIZE / 1e6 / ((performance.now() - t0) / 1000));
}
bare.close();
bareRates.sort((a, b) => a - b);
peakRss = Math.max(peakRss, process.memoryUsage().rss);
const sorted = [...rates].sort((a, b) => a - b);
console.log(
  JSON.stringify({
    bench: 'upload.throughput',
    sizeMB: SIZE / 1e6,
    runs: RUNS,
    mbPerS: r2(sorted[Math.floor(RUNS / 2)]),
    bestMbPerS: r2(sorted.at(-1)),
    worstMbPerS: r2(sorted[0]),
    bareHttpMbPerS: r2(bareRates[Math.floor(RUNS / 2)]),
    idleRssMB: r2(idleRss / 1e6),
    rssGrowthMB: r2((peakRss - idleRss) / 1e6),
    quotaMB: r2(QUOTA / 1e6),
    growthVsQuota: r2((peakRss - idleRss) / QUOTA),
  }),
);
ws.close();
await server.close();
rmSync(dir, { recursive: true, force: true });
