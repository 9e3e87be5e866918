#!/usr/bin/env node
// stream.latency with the codec, in Chromium: a served app plays 512x512 frames at 30 fps (the
// stream bench's picture), the viewer in Debian's Chromium decodes them (JPEG: createImageBitmap;
// H.264 / VP8: WebCodecs VideoDecoder), and each frame's latency is its due time (when playout
// scheduled it, in this process) -> decoded in the page (the VideoDecoder output, or the JPEG
// bitmap). Both clocks are read as epoch ms (performance.timeOrigin + now()); the page's offset
// is calibrated by round trips (the one with the shortest round trip wins).
//
//   {"bench":"stream.latency","codec":"h264","to":"decoded","p50Ms":..,"p99Ms":..,"addedP50Ms":..}
//
// addedP50Ms is the codec's p50 minus JPEG's in the same run; the target is <= one frame interval
// (33.3 ms). Run after `pnpm build`: node bench/codec-latency.bench.mjs
import { chromium } from '../test/node_modules/playwright-core/index.mjs';
import { Frames, Output, ReactorApp, Video, reactorApp } from '../packages/runtime/dist/index.js';
import { serve } from '../packages/server/dist/index.js';

const W = 512;
const H = 512;
const FPS = 30;
const WARMUP_MS = 3000;
const MEASURE_MS = Number(process.env.CODEC_BENCH_MS ?? 8000);

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
Video({ width: W, height: H })(BenchOutput.prototype, 'main');
class BenchApp extends ReactorApp {
  i = 0;
  generate() {
    return new BenchOutput({ main: new Frames(FRAMES[this.i++ % FRAMES.length], [1, H, W, 3]) });
  }
}
reactorApp({ output: BenchOutput, fps: FPS, bufferSize: 4, name: 'codec-latency-bench' })(BenchApp);

const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const pct = (sorted, p) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : NaN);
const r2 = (x) => Math.round(x * 100) / 100;
const epoch = () => performance.timeOrigin + performance.now();

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
});

async function run(codec) {
  const server = await serve(BenchApp, {
    port: 0,
    gracePeriodMs: 0,
    logger: quiet,
    ...(codec === 'jpeg' ? {} : { video: { codec, framerate: FPS, tiers: [{ name: 'full', scale: 1, bitrate: 2_000_000 }] } }),
  });
  await server.loaded;
  const due = new Map();
  const host = server.host;
  const original = host.connect.bind(host);
  host.connect = (sink, info) =>
    original(
      { message: (m) => sink.message(m), frame: (f) => (due.set(f.seq, performance.timeOrigin + f.dueAt), sink.frame(f)), close: (r) => sink.close(r) },
      info,
    );
  const page = await browser.newPage();
  await page.goto(server.url);
  await page.waitForFunction(
    (c) => {
      const v = window.reactorViewer;
      return v.framesDrawn > 10 && (c === 'jpeg' ? !v.video : v.video?.codec === c);
    },
    codec,
    { timeout: 30_000 },
  );
  await new Promise((r) => setTimeout(r, WARMUP_MS));
  // page clock - this clock, from the round trip with the least time
  let best = { rtt: Infinity, offset: 0 };
  for (let i = 0; i < 20; i++) {
    const t0 = epoch();
    const p = await page.evaluate(() => performance.timeOrigin + performance.now());
    const t1 = epoch();
    if (t1 - t0 < best.rtt) best = { rtt: t1 - t0, offset: p - (t0 + t1) / 2 };
  }
  const start = await page.evaluate(() => window.reactorViewer.decodeLog.length);
  await new Promise((r) => setTimeout(r, MEASURE_MS));
  const log = await page.evaluate((from) => window.reactorViewer.decodeLog.slice(from).map((e) => ({ ...e, origin: performance.timeOrigin })), start);
  const lat = [];
  const recv = [];
  for (const e of log) {
    const d = due.get(e.seq);
    if (d === undefined) continue;
    lat.push(e.origin + e.decodedAt - best.offset - d);
    recv.push(e.origin + e.receivedAt - best.offset - d);
  }
  lat.sort((a, b) => a - b);
  recv.sort((a, b) => a - b);
  const counters = codec === 'jpeg' ? undefined : await page.evaluate(() => window.reactorViewer.video.counters());
  await page.close();
  await server.close();
  return {
    frames: lat.length,
    fps: lat.length / (MEASURE_MS / 1000),
    p50: pct(lat, 50),
    p99: pct(lat, 99),
    recvP50: pct(recv, 50),
    clockRttMs: best.rtt,
    counters,
  };
}

const results = {};
for (const codec of ['jpeg', 'h264', 'vp8']) {
  const r = await run(codec);
  results[codec] = r;
  const line = {
    bench: 'stream.latency',
    codec,
    to: 'decoded',
    client: 'chromium',
    width: W,
    height: H,
    frames: r.frames,
    fps: r2(r.fps),
    p50Ms: r2(r.p50),
    p99Ms: r2(r.p99),
    receivedP50Ms: r2(r.recvP50),
    clockRttMs: r2(r.clockRttMs),
  };
  if (codec !== 'jpeg') {
    line.addedP50Ms = r2(r.p50 - results.jpeg.p50);
    line.targetAddedP50Ms = r2(1000 / FPS);
    line.discarded = Object.values(r.counters).reduce((a, c) => a + c.discarded, 0);
  }
  console.log(JSON.stringify(line));
}
await browser.close();
