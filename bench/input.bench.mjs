#!/usr/bin/env node
// Inbound frame benchmark: one publisher sends 640x480 JPEG frames at 30 fps to an app's inbound
// video track over a real WebSocket on 127.0.0.1; the server checks each frame, decodes it to RGB
// (sharp, on the thread pool) and hands it to the app host.
//
//   input.latency  client send -> the frame available to the app: a read() the app keeps
//                  pending on this.input.webcam resolves with it (p50/p99); also send -> the
//                  host's pushFrame (the server's share), the server process's CPU time per
//                  frame (event loop + decode threads) and the decode time alone
//                  (reactor_input_decode_seconds)
//
// The publisher runs in a child process (this file with the argument `client`), so the server's
// CPU figure is its own; it stamps each frame's send time in the header's pts as
// performance.timeOrigin + performance.now(), a clock both processes share. The app also streams
// a small 16x16 track at 30 fps (a session needs one to run), whose cost is included.
// Run after `pnpm build`: node bench/input.bench.mjs
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import sharp from '../packages/server/node_modules/sharp/dist/index.mjs';
import { Frames, Input, Output, ReactorApp, Video, reactorApp, trackPublished, AppHost } from '../packages/runtime/dist/index.js';
import { serveHost } from '../packages/server/dist/index.js';
import { FrameEncoding, encodeFrameHeader } from '../packages/client/dist/index.js';
import { WebSocket } from '../packages/server/node_modules/ws/wrapper.mjs';
import { parseMetrics, seriesOf } from './lib/metrics-text.mjs';

const W = 640;
const H = 480;
const FPS = 30;
const WARMUP_MS = 1500;
const MEASURE_MS = Number(process.env.INPUT_BENCH_MS ?? 8000);

const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const now = () => performance.timeOrigin + performance.now();

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}
const r2 = (x) => Math.round(x * 100) / 100;

if (process.argv[2] === 'client') await publisher(process.argv[3]);
else await server();

/** The child: publishes `webcam` and sends pre-encoded camera-like JPEGs at 30 fps until told to stop. */
async function publisher(url) {
  const jpegs = [];
  for (let k = 0; k < 8; k++) {
    const rgb = new Uint8Array(W * H * 3);
    let s = 777 + k;
    for (let y = 0; y < H; y++) {
      for (let x = 0; x < W; x++) {
        s = (s * 1103515245 + 12345) >>> 0;
        const n = (s >>> 24) & 15;
        const i = (y * W + x) * 3;
        const d = Math.hypot(x - 320 - k * 12, y - 240) < 140 ? 70 : 0;
        rgb[i] = (x / 3 + k * 8 + n + d) & 255;
        rgb[i + 1] = (y / 2 + n) & 255;
        rgb[i + 2] = (100 + ((x + y) >> 3) + n - d) & 255;
      }
    }
    jpegs.push(
      await sharp(rgb, { raw: { width: W, height: H, channels: 3 } })
        .jpeg({ quality: 80 })
        .toBuffer(),
    );
  }
  const ws = new WebSocket(url);
  ws.on('message', (data, isBinary) => {
    if (isBinary) return;
    const m = JSON.parse(String(data));
    if (m.type === 'welcome') ws.send(JSON.stringify({ type: 'publish', id: 'p', track: 'webcam' }));
    else if (m.type === 'reply' && m.id === 'p') start();
    else if (m.type === 'error') process.send({ error: m });
  });
  let timer;
  let sent = 0;
  let bytes = 0;
  function start() {
    const t0 = performance.now();
    const tick = () => {
      const jpeg = jpegs[sent % jpegs.length];
      const header = encodeFrameHeader({ encoding: FrameEncoding.Jpeg, track: 0, seq: sent, width: W, height: H, ptsMs: now() });
      ws.send(Buffer.concat([header, jpeg]));
      sent++;
      bytes += jpeg.length;
      // Drift-free pacing: the next frame is due at t0 + sent / FPS.
      timer = setTimeout(tick, Math.max(0, t0 + (sent * 1000) / FPS - performance.now()));
    };
    tick();
  }
  process.on('message', (m) => {
    if (m === 'stop') {
      clearTimeout(timer);
      process.send({ sent, kbPerFrame: bytes / Math.max(1, sent) / 1024 });
      ws.close();
      process.disconnect();
    }
  });
}

async function server() {
  class CamInput extends Input {}
  Video({ width: W, height: H, fps: FPS, maxWidth: 1280, maxHeight: 720 })(CamInput.prototype, 'webcam');
  class SmallOutput extends Output {}
  Video({ width: 16, height: 16 })(SmallOutput.prototype, 'mainVideo');
  // A reader the app keeps pending on its camera from the moment the track is published (outside
  // the step loop, so playout pacing does not add to the figure): it resolves as each frame arrives.
  const readLatencies = [];
  class InputBenchApp extends ReactorApp {
    generate() {
      return new SmallOutput({ mainVideo: new Frames(new Uint8Array(16 * 16 * 3), [1, 16, 16, 3]) });
    }
    onPublished() {
      const buffer = this.input.webcam;
      void (async () => {
        for (;;) {
          const [frame] = await buffer.read({ n: 1, mode: 'fifo' });
          if (measuring) readLatencies.push(now() - frame.ptsMs);
        }
      })().catch(() => undefined);
    }
  }
  trackPublished(InputBenchApp.prototype, 'onPublished', Object.getOwnPropertyDescriptor(InputBenchApp.prototype, 'onPublished'));
  reactorApp({ input: CamInput, output: SmallOutput, fps: FPS, bufferSize: 4, name: 'input-bench' })(InputBenchApp);

  const inner = new AppHost(InputBenchApp, { logger: quiet, gracePeriodMs: 0 });
  await inner.load();
  // Every frame handed to the host, timed on the way through (the real host underneath).
  const latencies = [];
  let measuring = false;
  const host = {
    get schema() {
      return inner.schema;
    },
    get status() {
      return inner.status;
    },
    readiness: () => inner.readiness(),
    close: () => inner.close(),
    connect(sink, info) {
      const h = inner.connect(sink, info);
      return {
        id: h.id,
        command: (m) => h.command(m),
        publish: (id, t) => h.publish(id, t),
        unpublish: (id, t) => h.unpublish(id, t),
        publishes: (t) => h.publishes(t),
        pushFrame: (t, frame) => {
          const at = now();
          const ok = h.pushFrame(t, frame);
          if (measuring && ok) latencies.push(at - frame.ptsMs);
          return ok;
        },
        disconnect: () => h.disconnect(),
        reportDropped: (n) => h.reportDropped(n),
      };
    },
  };
  const server = await serveHost(host, { port: 0, logger: quiet });
  const child = fork(fileURLToPath(import.meta.url), ['client', server.wsUrl], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  child.on('message', (m) => {
    if (m.error) console.error(`publisher got an error: ${JSON.stringify(m.error)}`);
  });
  await new Promise((r) => setTimeout(r, WARMUP_MS));
  const decode0 = await decodeStats(server);
  const cpu0 = process.cpuUsage();
  const wall0 = performance.now();
  measuring = true;
  await new Promise((r) => setTimeout(r, MEASURE_MS));
  measuring = false;
  const cpu = process.cpuUsage(cpu0);
  const wallS = (performance.now() - wall0) / 1000;
  const decode1 = await decodeStats(server);
  child.send('stop');
  const done = await new Promise((r) => child.on('message', (m) => m.sent !== undefined && r(m)));
  await server.close();
  const sorted = readLatencies.slice().sort((a, b) => a - b);
  const pushed = latencies.slice().sort((a, b) => a - b);
  const frames = sorted.length;
  const dropped = await droppedTotal(server);
  console.log(
    JSON.stringify({
      bench: 'input.latency',
      to: 'read',
      width: W,
      height: H,
      encoding: 'jpeg',
      fps: r2(frames / wallS),
      frames,
      p50Ms: r2(percentile(sorted, 50)),
      p99Ms: r2(percentile(sorted, 99)),
      maxMs: r2(sorted.at(-1)),
      pushP50Ms: r2(percentile(pushed, 50)),
      pushP99Ms: r2(percentile(pushed, 99)),
      serverCpuMsPerFrame: r2((cpu.user + cpu.system) / 1000 / Math.max(1, frames)),
      decodeMsPerFrame: r2(((decode1.sum - decode0.sum) * 1000) / Math.max(1, decode1.count - decode0.count)),
      kbPerFrame: r2(done.kbPerFrame),
      dropped,
    }),
  );
}

async function decodeStats(server) {
  const metrics = parseMetrics(await server.metrics.registry.metrics());
  return { sum: metrics.get('reactor_input_decode_seconds_sum') ?? 0, count: metrics.get('reactor_input_decode_seconds_count') ?? 0 };
}

async function droppedTotal(server) {
  return seriesOf(parseMetrics(await server.metrics.registry.metrics()), 'reactor_input_frames_dropped_total').reduce((n, [, v]) => n + v, 0);
}
