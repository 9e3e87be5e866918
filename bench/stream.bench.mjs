#!/usr/bin/env node
// Streaming benchmark: a served app plays 512x512 RGB frames at 30 fps, JPEG-encoded once per
// frame by the server, to N Node clients over real WebSockets on 127.0.0.1.
//
//   stream.latency  frame due time (when playout scheduled it) -> the client's message handler
//   stream.fanout   8 clients: delivered fps per client and frames dropped, then the same with
//                   one extra client that completes the handshake and never reads again
//   stream.abuse    2 viewers, then 30 clients that never read and send the messages that earn
//                   the most answer bytes (60 KB messages, floods of 1-byte ones): the process's
//                   peak RSS against its idle RSS, and the viewers' frame intervals before/during
//
// Server and clients share this process so both ends read one clock (performance.now()); the
// machine is small, so this is also the harsher setting (the clients' work competes with the
// server's). Run after `pnpm build`: node bench/stream.bench.mjs
import { connect as netConnect } from 'node:net';
import { once } from 'node:events';
import { Frames, Output, ReactorApp, Video, reactorApp } from '../packages/runtime/dist/index.js';
import { serve } from '../packages/server/dist/index.js';
import { decodeFrame } from '../packages/client/dist/index.js';
import { WebSocket } from '../packages/server/node_modules/ws/wrapper.mjs';

const W = 512;
const H = 512;
const FPS = 30;
const WARMUP_MS = 1500;
const MEASURE_MS = Number(process.env.STREAM_BENCH_MS ?? 8000);

// A few precomputed frames with image-like content (gradients, shapes, mild texture).
const FRAMES = Array.from({ length: 8 }, (_, k) => {
  const rgb = new Uint8Array(W * H * 3);
  let s = 12345 + k;
  for (let y = 0; y < H; y++) {
    for (let x = 0; x < W; x++) {
      s = (s * 1103515245 + 12345) >>> 0;
      const n = (s >>> 24) & 15;
      const i = (y * W + x) * 3;
      const d = Math.hypot(x - 256 - k * 10, y - 256) < 120 ? 80 : 0;
      rgb[i] = (x / 2 + k * 8 + n + d) & 255;
      rgb[i + 1] = (y / 2 + n) & 255;
      rgb[i + 2] = (128 + ((x + y) >> 3) + n - d) & 255;
    }
  }
  return rgb;
});

class BenchOutput extends Output {}
Video({ width: W, height: H })(BenchOutput.prototype, 'mainVideo');

class BenchApp extends ReactorApp {
  i = 0;
  generate() {
    return new BenchOutput({ mainVideo: new Frames(FRAMES[this.i++ % FRAMES.length], [1, H, W, 3]) });
  }
}
reactorApp({ output: BenchOutput, fps: FPS, bufferSize: 4, name: 'stream-bench' })(BenchApp);

const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}
const r2 = (x) => Math.round(x * 100) / 100;

async function stalled(port) {
  const socket = netConnect(port, '127.0.0.1');
  await once(socket, 'connect');
  socket.write(
    `GET /ws HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`,
  );
  await once(socket, 'data');
  socket.pause();
  return socket;
}

/** One run: `clients` readers (plus `stalledClients` that never read); returns the figures. */
async function run(clients, stalledClients = 0) {
  const server = await serve(BenchApp, { port: 0, gracePeriodMs: 0, logger: quiet, encoding: 'jpeg', jpegQuality: 80 });
  await server.loaded;
  // Record each frame's due time as the host hands it to the transport (same object for every sink).
  const due = new Map();
  const host = server.host;
  const original = host.connect.bind(host);
  host.connect = (sink, info) =>
    original({ message: (m) => sink.message(m), frame: (f) => (due.set(f.seq, f.dueAt), sink.frame(f)), close: (r) => sink.close(r) }, info);

  const conns = [];
  for (let c = 0; c < clients; c++) {
    const ws = new WebSocket(server.wsUrl);
    ws.binaryType = 'nodebuffer';
    const st = { ws, latencies: [], frames: 0, lastSeq: -1, outOfOrder: 0, measuring: false, bytes: 0 };
    ws.on('message', (data, isBinary) => {
      if (!isBinary) return;
      const now = performance.now();
      const f = decodeFrame(data);
      if (f.seq <= st.lastSeq) st.outOfOrder++;
      st.lastSeq = f.seq;
      if (!st.measuring) return;
      st.frames++;
      st.bytes += data.byteLength;
      const d = due.get(f.seq);
      if (d !== undefined) st.latencies.push(now - d);
    });
    await once(ws, 'open');
    conns.push(st);
  }
  const sockets = [];
  for (let s = 0; s < stalledClients; s++) sockets.push(await stalled(server.port));

  await new Promise((r) => setTimeout(r, WARMUP_MS));
  const emitted0 = host.counters.framesPlayed;
  const dropped0 = server.connections().map((c) => c.framesDropped);
  for (const c of conns) c.measuring = true;
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, MEASURE_MS));
  for (const c of conns) c.measuring = false;
  const seconds = (performance.now() - t0) / 1000;
  const emitted = host.counters.framesPlayed - emitted0;
  const infos = server.connections();
  const droppedAll = infos.map((c, i) => c.framesDropped - (dropped0[i] ?? 0));
  // Connections are listed in arrival order: the stalled sockets joined after the readers.
  const stalledIdx = new Set(infos.map((_, i) => i).filter((i) => i >= clients));
  const droppedReaders = droppedAll.filter((_, i) => !stalledIdx.has(i)).reduce((a, b) => a + b, 0);
  const droppedStalled = droppedAll.filter((_, i) => stalledIdx.has(i)).reduce((a, b) => a + b, 0);
  const lat = conns.flatMap((c) => c.latencies).sort((a, b) => a - b);
  for (const s of sockets) s.destroy();
  for (const c of conns) c.ws.close();
  await server.close();
  due.clear();
  return {
    emittedFps: emitted / seconds,
    fps: conns.reduce((a, c) => a + c.frames, 0) / conns.length / seconds,
    minClientFps: Math.min(...conns.map((c) => c.frames / seconds)),
    dropped: droppedReaders,
    droppedStalled,
    outOfOrder: conns.reduce((a, c) => a + c.outOfOrder, 0),
    p50: percentile(lat, 50),
    p99: percentile(lat, 99),
    kbPerFrame: conns[0].bytes / Math.max(1, conns[0].frames) / 1024,
  };
}

const ONLY_ABUSE = process.env.STREAM_BENCH_ONLY === 'abuse';
if (!ONLY_ABUSE) {
  const one = await run(1);
  console.log(
    JSON.stringify({
      bench: 'stream.latency',
      clients: 1,
      p50Ms: r2(one.p50),
      p99Ms: r2(one.p99),
      fps: r2(one.fps),
      width: W,
      height: H,
      kbPerFrame: r2(one.kbPerFrame),
    }),
  );

  const eight = await run(8);
  console.log(JSON.stringify({ bench: 'stream.latency', clients: 8, p50Ms: r2(eight.p50), p99Ms: r2(eight.p99), width: W, height: H }));
  console.log(
    JSON.stringify({
      bench: 'stream.fanout',
      clients: 8,
      fps: r2(eight.fps),
      minClientFps: r2(eight.minClientFps),
      modelFps: r2(eight.emittedFps),
      dropped: eight.dropped,
      outOfOrder: eight.outOfOrder,
    }),
  );

  const withStalled = await run(8, 1);
  console.log(
    JSON.stringify({
      bench: 'stream.fanout',
      clients: 8,
      stalled: 1,
      fps: r2(withStalled.fps),
      minClientFps: r2(withStalled.minClientFps),
      modelFps: r2(withStalled.emittedFps),
      dropped: withStalled.dropped,
      droppedStalled: withStalled.droppedStalled,
      p50Ms: r2(withStalled.p50),
      p99Ms: r2(withStalled.p99),
      fpsChangePct: r2(((withStalled.fps - eight.fps) / eight.fps) * 100),
    }),
  );
}
/** A masked client text frame (zero mask key) carrying `text`. */
function clientText(text) {
  const payload = Buffer.from(text);
  const head = payload.length < 126 ? Buffer.from([0x81, 0x80 | payload.length]) : Buffer.from([0x81, 0x80 | 126, payload.length >> 8, payload.length & 255]);
  return Buffer.concat([head, Buffer.alloc(4), payload]);
}

/** Process RSS after a collection, MB. */
function rssMb() {
  globalThis.gc?.();
  return process.memoryUsage().rss / 1024 / 1024;
}

async function abuse(abusers) {
  const server = await serve(BenchApp, { port: 0, gracePeriodMs: 0, logger: quiet, encoding: 'jpeg', jpegQuality: 80 });
  await server.loaded;
  const viewers = [];
  for (let c = 0; c < 2; c++) {
    const ws = new WebSocket(server.wsUrl);
    ws.binaryType = 'nodebuffer';
    const st = { ws, last: 0, intervals: [], phase: 'warmup' };
    ws.on('message', (_data, isBinary) => {
      if (!isBinary) return;
      const now = performance.now();
      if (st.last && st.phase !== 'warmup') st.intervals.push({ phase: st.phase, ms: now - st.last });
      st.last = now;
    });
    await once(ws, 'open');
    viewers.push(st);
  }
  await new Promise((r) => setTimeout(r, WARMUP_MS));
  for (const v of viewers) v.phase = 'idle';
  const idleSamples = [];
  const idleEnd = performance.now() + 3000;
  while (performance.now() < idleEnd) {
    await new Promise((r) => setTimeout(r, 250));
    idleSamples.push(rssMb());
  }
  const idleRss = idleSamples.sort((a, b) => a - b)[Math.floor(idleSamples.length / 2)];

  // The worst messages: 60 KB of unknown keys (each answered malformed_message or rate_limited),
  // then 60 000 one-byte messages (each answered with ~150 bytes: 20x what was sent).
  const bigKeys = {};
  for (let i = 0; bigKeys && JSON.stringify(bigKeys).length < 60_000; i++) bigKeys[`key_${i}_${'x'.repeat(20)}`] = i;
  const big = clientText(JSON.stringify({ type: 'command', id: 'a', name: 'n', ...bigKeys }));
  const tiny = clientText('x');
  const payload = Buffer.concat([...Array.from({ length: 20 }, () => big), ...Array.from({ length: 60_000 }, () => tiny)]);
  for (const v of viewers) v.phase = 'abuse';
  const sockets = [];
  for (let s = 0; s < abusers; s++) {
    const sock = await stalled(server.port);
    sock.write(payload);
    sockets.push(sock);
  }
  let peakRss = 0;
  const abuseEnd = performance.now() + MEASURE_MS;
  while (performance.now() < abuseEnd) {
    await new Promise((r) => setTimeout(r, 100));
    peakRss = Math.max(peakRss, process.memoryUsage().rss / 1024 / 1024);
  }
  const metrics = await server.metrics.registry.metrics();
  const cut = (reason) => Number(new RegExp(`reactor_connections_rejected_total\\{reason="${reason}"\\} (\\d+)`).exec(metrics)?.[1] ?? 0);
  const stats = (phase) => {
    const xs = viewers.flatMap((v) => v.intervals.filter((i) => i.phase === phase).map((i) => i.ms)).sort((a, b) => a - b);
    return { p50: r2(percentile(xs, 50)), p99: r2(percentile(xs, 99)), max: r2(xs[xs.length - 1] ?? NaN), n: xs.length };
  };
  const conns = server.connections();
  const readPaused = conns.filter((c) => c.readPaused).length;
  const readPauses = conns.reduce((n, c) => n + (c.readPauses ?? 0), 0);
  const idle = stats('idle');
  const during = stats('abuse');
  for (const s of sockets) s.destroy();
  for (const v of viewers) v.ws.close();
  await server.close();
  return {
    bench: 'stream.abuse',
    abusers,
    idleRssMb: r2(idleRss),
    peakRssMb: r2(peakRss),
    rssRatio: r2(peakRss / idleRss),
    intervalIdleMs: idle,
    intervalAbuseMs: during,
    cutServerBudget: cut('server_budget'),
    cutUnreadBacklog: cut('unread_backlog'),
    cutUnreadAnswers: cut('unread_answers'),
    stillConnected: sockets.length - cut('server_budget') - cut('unread_backlog') - cut('unread_answers'),
    readPausedAtEnd: readPaused,
    readPausesOfConnected: readPauses,
    answered: [...metrics.matchAll(/reactor_command_results_total\{code="[a-z_]+"\} (\d+)/g)].reduce((n, m) => n + Number(m[1]), 0),
  };
}

console.log(JSON.stringify(await abuse(30)));
process.exit(0);
