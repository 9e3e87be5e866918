#!/usr/bin/env node
// Upload benchmark: a served app with a session, one 20 MB file announced (POST /uploads) and
// sent (PUT /uploads/{id}) over loopback HTTP, the server checking it as it streams (limit, type,
// length) and writing it into the session's temporary folder.
//
//   upload.throughput  MB/s from the PUT's first byte to its 200 answer (median of 5, and best),
//                      and the process's RSS growth over its idle RSS during the uploads, against
//                      the session quota (target: >= 200 MB/s, growth <= 2x the quota)
//
//   upload.memory      the RSS of a server in its own process (sampled from /proc every 10 ms)
//                      over its idle RSS: while one 512 MiB upload is stored, and while six
//                      32 MiB uploads that its one upload field (maxBytes 20 MB, like the sample
//                      app's set_image) cannot take are tried: announced without naming a field,
//                      PUT when the announcement is taken, then named by a command
//                      (target: growth <= 64 MiB each)
//
// Client and server share this process for upload.throughput (the harsher setting on a small
// machine). Run after `pnpm build`: node bench/upload.bench.mjs
// (`node bench/upload.bench.mjs memory` runs upload.memory alone).
import { spawn } from 'node:child_process';
import { createServer, request } from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ApplicationError, ReactorApp, UploadField, event, reactorApp } from '../packages/runtime/dist/index.js';
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

// upload.memory's apps: one upload field without a size limit (the 512 MiB file), or one of 20 MB.
function fieldApp(name, maxBytes) {
  class Params {}
  UploadField(maxBytes === undefined ? {} : { maxBytes })(Params.prototype, 'image');
  class App extends ReactorApp {
    processInput() {
      throw new ApplicationError('no model: uploads only');
    }
    generate() {
      return null;
    }
    take(p) {
      return p.image.size;
    }
  }
  event({ name: 'set_image', params: Params })(App.prototype, 'take', Object.getOwnPropertyDescriptor(App.prototype, 'take'));
  reactorApp({ name })(App);
  return App;
}

// A child process: `--serve open|image <dir>` serves one of those apps and prints its URL.
if (process.argv[2] === '--serve') {
  const app = process.argv[3] === 'open' ? fieldApp('upload-open') : fieldApp('upload-image', 20_000_000);
  const srv = await serve(app, {
    port: 0,
    gracePeriodMs: 0,
    logger: quiet,
    maxUploadBytes: 600 * 1024 * 1024,
    uploadQuotaBytes: 700 * 1024 * 1024,
    uploadDir: process.argv[4],
  });
  await srv.loaded;
  console.log(srv.url);
  process.on('SIGTERM', () => void srv.close().then(() => process.exit(0)));
  await new Promise(() => undefined);
}

// The body: a PNG signature, then filler; one buffer reused for every chunk.
const body = Buffer.alloc(CHUNK, 7);
body.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

function put(url, size = SIZE) {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'PUT', headers: { 'content-length': String(size) } });
    req.on('response', (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => (res.statusCode === 200 ? resolve(JSON.parse(text)) : reject(new Error(`PUT ${res.statusCode}: ${text}`))));
    });
    req.on('error', reject);
    let sent = 0;
    const pump = () => {
      while (sent < size) {
        const n = Math.min(CHUNK, size - sent);
        sent += n;
        if (!req.write(n === CHUNK ? body : body.subarray(0, n))) return void req.once('drain', pump);
      }
      req.end();
    };
    pump();
  });
}

const MIB = 1024 * 1024;

/** The RSS of process `pid`, bytes (VmRSS in /proc). */
function rssOf(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
}

/** Starts a `--serve` child; resolves with its URL, pid and a stop(). */
async function child(kind, dir) {
  const proc = spawn(process.execPath, [fileURLToPath(import.meta.url), '--serve', kind, dir], { stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise((resolve, reject) => {
    proc.stdout.once('data', (d) => resolve(String(d).trim()));
    proc.once('exit', (code) => reject(new Error(`the ${kind} server exited with ${code}`)));
  });
  const stop = () =>
    new Promise((resolve) => {
      proc.once('exit', resolve);
      proc.kill('SIGTERM');
    });
  return { url, pid: proc.pid, stop };
}

/** Runs `work` against a fresh server; the peak RSS growth over its idle RSS (after it loaded and a client joined), MiB. */
async function measure(kind, work) {
  const dir = mkdtempSync(join(tmpdir(), 'upload-mem-'));
  const srv = await child(kind, dir);
  const ws = new WebSocket(srv.url.replace(/^http/, 'ws') + '/ws');
  await new Promise((resolve) => ws.on('message', (d) => JSON.parse(String(d)).type === 'welcome' && resolve()));
  await new Promise((r) => setTimeout(r, 500));
  const idle = rssOf(srv.pid);
  let peak = idle;
  const sampler = setInterval(() => (peak = Math.max(peak, rssOf(srv.pid))), 10);
  const out = await work(srv.url, ws);
  await new Promise((r) => setTimeout(r, 200));
  clearInterval(sampler);
  peak = Math.max(peak, rssOf(srv.pid));
  ws.close();
  await srv.stop();
  rmSync(dir, { recursive: true, force: true });
  return { idleMiB: r2(idle / MIB), growthMiB: r2((peak - idle) / MIB), ...out };
}

/** One upload: announce `size` bytes (no field named), PUT them when taken; the HTTP statuses and the upload id. */
async function tryUpload(url, size, name) {
  const ann = await fetch(`${url}/uploads`, { method: 'POST', body: JSON.stringify({ name, size }) });
  const ticket = await ann.json();
  if (ann.status !== 201) return { post: ann.status, code: ticket.error?.code };
  const info = await put(`${url}${ticket.url}`, size);
  return { post: 201, put: 200, uploadId: info.uploadId };
}

/** A command naming an upload; resolves with its answer's code (`ok` for a reply). */
function command(ws, id, uploadId) {
  return new Promise((resolve) => {
    const on = (d) => {
      const m = JSON.parse(String(d));
      if ((m.type === 'reply' || m.type === 'error') && m.id === id) {
        ws.off('message', on);
        resolve(m.type === 'reply' ? 'ok' : m.code);
      }
    };
    ws.on('message', on);
    ws.send(JSON.stringify({ type: 'command', id, name: 'set_image', params: { image: { uploadId } } }));
  });
}

if (process.argv[2] === 'memory' || process.argv[2] === undefined) {
  const stored = await measure('open', async (url) => {
    const t0 = performance.now();
    const r = await tryUpload(url, 512 * MIB, 'big.png');
    if (r.put !== 200) throw new Error(`the 512 MiB upload was refused: ${JSON.stringify(r)}`);
    return { mbPerS: r2((512 * MIB) / 1e6 / ((performance.now() - t0) / 1000)) };
  });
  const refused = await measure('image', async (url, ws) => {
    const outcomes = [];
    for (let i = 0; i < 6; i++) {
      const r = await tryUpload(url, 32 * MIB, `too-big-${i}.png`);
      outcomes.push(r.uploadId === undefined ? `POST ${r.post} ${r.code}` : `stored, command ${await command(ws, `c${i}`, r.uploadId)}`);
    }
    return { outcomes: [...new Set(outcomes)] };
  });
  console.log(
    JSON.stringify({
      bench: 'upload.memory',
      storedMiB: 512,
      storedGrowthMiB: stored.growthMiB,
      storedMbPerS: stored.mbPerS,
      refusedUploads: 6,
      refusedMiBEach: 32,
      refusedGrowthMiB: refused.growthMiB,
      refusedOutcome: refused.outcomes.join('; '),
      idleRssMiB: stored.idleMiB,
      targetGrowthMiB: 64,
    }),
  );
  if (process.argv[2] === 'memory') process.exit(0);
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
