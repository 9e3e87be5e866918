#!/usr/bin/env node
// Video codec benchmark (issue 14), on the sample app's own frames (apps/video's model, run by a
// DistributedRunner of one rank), at 512x512 and 1280x720, 30 fps. One JSON object per line:
//
//   stream.bitrate  per codec and setting: bits per second of one viewer's stream, and its
//                   quality against the source frames (mean SSIM of luma, 8x8 windows, stride 4;
//                   PSNR of RGB). JPEG at several qualities (the server's encoder: sharp, no
//                   Huffman optimisation), H.264 and VP8 through the server's encoder factory
//                   (@napi-rs/webcodecs) at several bitrates, decoded with its VideoDecoder.
//                   A summary line per size: H.264 at 4 Mbit/s against the cheapest JPEG of at
//                   least its SSIM.
//   stream.encode   a real server (H.264, tier full) playing the 720p frames at 30 fps to 1, then
//                   8 Node viewers (in this process, reading every frame): encoder calls per frame
//                   played, encode time per frame (reactor_video_encode_seconds), and the process's
//                   CPU use (cores) in each phase, with the 8-vs-1 ratio.
//
// Needs only node and the built workspace (no network): `pnpm build && node bench/codec.bench.mjs`.
// Env: CODEC_BENCH_FRAMES (frames per size, default 90 = 3 s), CODEC_BENCH_SIZES (default
// "512x512,1280x720"), CODEC_BENCH_ENCODE_MS (measure window per phase, default 6000),
// CODEC_BENCH_JPEG_QUALITIES (default "10,20,30,50,70,80,90"),
// REACTOR_BACKEND (the model's backend, default auto).
import { createRequire } from 'node:module';
import { loadavg, cpus } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DistributedRunner } from '../packages/distributed/dist/index.js';
import { VideoWorker } from '../apps/video/dist/video-worker.js';
import { Frames, Output, ReactorApp, Video, reactorApp } from '../packages/runtime/dist/index.js';
import { serve, webCodecsEncoderFactory } from '../packages/server/dist/index.js';
import { FrameEncoding, decodeFrame } from '../packages/client/dist/index.js';
import { scrapeMetrics, seriesOf } from './lib/metrics-text.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const serverRequire = createRequire(join(here, '..', 'packages', 'server', 'package.json'));
const sharp = serverRequire('sharp');
// Resolved from the server package, so it works in the workspace and in the hoisted offline bundle.
const { WebSocket } = serverRequire('ws');
const { VideoDecoder, EncodedVideoChunk } = serverRequire('@napi-rs/webcodecs');

const N = Number(process.env.CODEC_BENCH_FRAMES ?? 90);
const SIZES = (process.env.CODEC_BENCH_SIZES ?? '512x512,1280x720').split(',').map((s) => s.split('x').map(Number));
const ENCODE_MS = Number(process.env.CODEC_BENCH_ENCODE_MS ?? 6000);
const JPEG_QUALITIES = (process.env.CODEC_BENCH_JPEG_QUALITIES ?? '10,20,30,50,70,80,90').split(',').map(Number);
const FPS = 30;
const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const r2 = (x) => Math.round(x * 100) / 100;
const r4 = (x) => Math.round(x * 10000) / 10000;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
// The native encoder's and decoder's callbacks do not keep Node's event loop alive: without a
// handle of its own, the process would exit while awaiting an encoded frame.
const keepAlive = setInterval(() => undefined, 1000);
const machine = { cpus: cpus().length, cpuModel: cpus()[0]?.model, loadAvg1m: r2(loadavg()[0]) };

/** The sample app's frames: the video model run for N frames, the prompt changing now and then. */
async function modelFrames(width, height) {
  const runner = new DistributedRunner(VideoWorker, {
    worldSize: 1,
    loadArgs: { weightsRoot: join(here, '..', 'apps', 'video', 'weights'), width, height, framesPerChunk: 6, rolloutChunks: 1_000_000, backend: 'auto' },
    logger: quiet,
  });
  await runner.start();
  const frames = [];
  const prompts = ['A walk through a forest.', 'neon city at night', 'waves on a beach at sunset'];
  let backend = 'unknown';
  const t0 = performance.now();
  try {
    for (let i = 0; frames.length < N; i++) {
      const res = await runner.generate({ prompt: prompts[Math.floor(i / 8) % prompts.length] });
      backend = res.backends?.map((b) => b.backend).join('+') ?? backend;
      const f = width * height * 3;
      for (let k = 0; k < res.n && frames.length < N; k++) frames.push(Uint8Array.from(res.frames.subarray(k * f, (k + 1) * f)));
    }
  } finally {
    await runner.shutdown();
  }
  return { frames, backend, generateMs: Math.round(performance.now() - t0) };
}

/** Luma of RGB (BT.601). */
function luma(rgb, n) {
  const y = new Float32Array(n);
  for (let i = 0, j = 0; i < n; i++, j += 3) y[i] = 0.299 * rgb[j] + 0.587 * rgb[j + 1] + 0.114 * rgb[j + 2];
  return y;
}

/** Mean SSIM of two luma planes over 8x8 windows, stride 4. */
function ssim(a, b, w, h) {
  const C1 = (0.01 * 255) ** 2;
  const C2 = (0.03 * 255) ** 2;
  let sum = 0;
  let count = 0;
  for (let y = 0; y + 8 <= h; y += 4) {
    for (let x = 0; x + 8 <= w; x += 4) {
      let ma = 0,
        mb = 0,
        va = 0,
        vb = 0,
        cov = 0;
      for (let dy = 0; dy < 8; dy++) {
        const o = (y + dy) * w + x;
        for (let dx = 0; dx < 8; dx++) {
          const p = a[o + dx];
          const q = b[o + dx];
          ma += p;
          mb += q;
          va += p * p;
          vb += q * q;
          cov += p * q;
        }
      }
      ma /= 64;
      mb /= 64;
      va = va / 64 - ma * ma;
      vb = vb / 64 - mb * mb;
      cov = cov / 64 - ma * mb;
      sum += ((2 * ma * mb + C1) * (2 * cov + C2)) / ((ma * ma + mb * mb + C1) * (va + vb + C2));
      count++;
    }
  }
  return sum / count;
}

function psnr(a, b) {
  let se = 0;
  for (let i = 0; i < a.length; i++) se += (a[i] - b[i]) ** 2;
  const mse = se / a.length;
  return mse === 0 ? 99 : 10 * Math.log10((255 * 255) / mse);
}

/** Quality of decoded RGB frames against the sources. */
function quality(src, decoded, w, h) {
  const s = [];
  const p = [];
  for (let i = 0; i < src.length; i++) {
    s.push(ssim(luma(src[i], w * h), luma(decoded[i], w * h), w, h));
    p.push(psnr(src[i], decoded[i]));
  }
  return { ssim: r4(s.reduce((a, b) => a + b, 0) / s.length), ssimMin: r4(Math.min(...s)), psnrDb: r2(p.reduce((a, b) => a + b, 0) / p.length) };
}

async function jpegRun(frames, w, h, q) {
  let bytes = 0;
  const decoded = [];
  const times = [];
  for (const rgb of frames) {
    const t = performance.now();
    const jpg = await sharp(rgb, { raw: { width: w, height: h, channels: 3 } })
      .jpeg({ quality: q, optimiseCoding: false })
      .toBuffer();
    times.push(performance.now() - t);
    bytes += jpg.byteLength;
    decoded.push(new Uint8Array(await sharp(jpg).raw().toBuffer()));
  }
  return { bitsPerSec: Math.round((bytes * 8 * FPS) / frames.length), encodeMsP50: r2(median(times)), ...quality(frames, decoded, w, h) };
}

async function codedRun(codec, frames, w, h, bitrate) {
  const enc = await webCodecsEncoderFactory({ codec, width: w, height: h, bitrate, framerate: FPS });
  const chunks = [];
  const times = [];
  let bytes = 0;
  for (let i = 0; i < frames.length; i++) {
    const t = performance.now();
    const c = await enc.encode(frames[i], Math.round((i * 1e6) / FPS), i === 0);
    times.push(performance.now() - t);
    if (!c) continue;
    bytes += c.data.byteLength;
    chunks.push({ ...c, i });
  }
  const codecString = enc.codecString;
  enc.close();
  const decoded = new Map();
  const errors = [];
  const copies = [];
  const dec = new VideoDecoder({
    output: (f) => copies.push(copyOut(f)),
    error: (e) => errors.push(e.message),
  });
  const copyOut = async (f) => {
    const buf = new Uint8Array(f.allocationSize({ format: 'RGBA' }));
    const ts = f.timestamp;
    await f.copyTo(buf, { format: 'RGBA' });
    f.close();
    const rgb = new Uint8Array(w * h * 3);
    for (let p = 0, q = 0; p < w * h; p++, q += 4) {
      rgb[p * 3] = buf[q];
      rgb[p * 3 + 1] = buf[q + 1];
      rgb[p * 3 + 2] = buf[q + 2];
    }
    decoded.set(ts, rgb);
  };
  dec.configure({ codec: codecString, codedWidth: w, codedHeight: h });
  for (const c of chunks) dec.decode(new EncodedVideoChunk({ type: c.key ? 'key' : 'delta', timestamp: c.i, data: c.data }));
  await dec.flush();
  await Promise.all(copies);
  dec.close();
  if (errors.length || decoded.size !== chunks.length) throw new Error(`${codec}: decoded ${decoded.size} of ${chunks.length} frames; ${errors.join('; ')}`);
  const srcs = chunks.map((c) => frames[c.i]);
  const outs = chunks.map((c) => decoded.get(c.i));
  return {
    codecString,
    targetBitrate: bitrate,
    bitsPerSec: Math.round((bytes * 8 * FPS) / frames.length),
    keyFrames: chunks.filter((c) => c.key).length,
    encodeMsP50: r2(median(times)),
    ...quality(srcs, outs, w, h),
  };
}

// ---- stream.bitrate ------------------------------------------------------------------------
const byKey = new Map();
for (const [w, h] of SIZES) {
  const { frames, backend, generateMs } = await modelFrames(w, h);
  byKey.set(`${w}x${h}`, frames);
  const base = {
    bench: 'stream.bitrate',
    width: w,
    height: h,
    fps: FPS,
    frames: frames.length,
    modelBackend: backend,
    modelGenerateMs: generateMs,
    ...machine,
  };
  const jpegs = [];
  for (const q of JPEG_QUALITIES) {
    const r = await jpegRun(frames, w, h, q);
    jpegs.push({ q, ...r });
    emit({ ...base, codec: 'jpeg', jpegQuality: q, ...r });
  }
  const coded = {};
  for (const codec of ['h264', 'vp8']) {
    for (const bitrate of [1_000_000, 2_000_000, 4_000_000]) {
      const r = await codedRun(codec, frames, w, h, bitrate);
      if (bitrate === 4_000_000) coded[codec] = r;
      emit({ ...base, codec, ...r });
    }
  }
  for (const codec of ['h264', 'vp8']) {
    const c = coded[codec];
    const match = jpegs.filter((j) => j.ssim >= c.ssim).sort((a, b) => a.bitsPerSec - b.bitsPerSec)[0];
    emit({
      bench: 'stream.bitrate.summary',
      width: w,
      height: h,
      codec,
      bitsPerSec: c.bitsPerSec,
      ssim: c.ssim,
      jpegAtLeastThatSsim: match ? { jpegQuality: match.q, bitsPerSec: match.bitsPerSec, ssim: match.ssim } : null,
      timesLessThanJpeg: match ? r2(match.bitsPerSec / c.bitsPerSec) : null,
      targets720p: w === 1280 ? { bitsPerSecMax: 4_000_000, ssimMin: 0.95, timesLessThanJpegMin: 5 } : undefined,
    });
  }
}

// ---- stream.encode -------------------------------------------------------------------------
const [EW, EH] = SIZES[SIZES.length - 1];
const FR = byKey.get(`${EW}x${EH}`);
class BenchOutput extends Output {}
Video({ width: EW, height: EH })(BenchOutput.prototype, 'mainVideo');
class BenchApp extends ReactorApp {
  i = 0;
  generate() {
    return new BenchOutput({ mainVideo: new Frames(FR[this.i++ % FR.length], [1, EH, EW, 3]) });
  }
}
reactorApp({ output: BenchOutput, fps: FPS, bufferSize: 4, name: 'codec-bench' })(BenchApp);

let encodes = 0;
const counting = async (config) => {
  const e = await webCodecsEncoderFactory(config);
  return {
    encode: (rgb, ts, key) => (encodes++, e.encode(rgb, ts, key)),
    get codecString() {
      return e.codecString;
    },
    close: () => e.close(),
  };
};
const server = await serve(BenchApp, { port: 0, logger: quiet, gracePeriodMs: 0, video: { codec: 'h264', encoderFactory: counting } });
await server.loaded;
const viewers = [];
async function addViewer() {
  const ws = new WebSocket(server.wsUrl);
  const v = { ws, frames: 0, bytes: 0 };
  ws.on('message', (data, isBinary) => {
    if (!isBinary) {
      const m = JSON.parse(String(data));
      if (m.type === 'welcome') ws.send(JSON.stringify({ type: 'select_video', id: 'v', codec: 'h264' }));
      return;
    }
    const f = decodeFrame(new Uint8Array(data));
    if (f.encoding === FrameEncoding.H264) {
      v.frames++;
      v.bytes += data.byteLength;
    }
  });
  viewers.push(v);
  await new Promise((r) => ws.once('open', r));
}
const metric = async (name) => seriesOf(await scrapeMetrics(server.url), name)[0]?.[1] ?? 0;
async function phase(n) {
  while (viewers.length < n) await addViewer();
  await new Promise((r) => setTimeout(r, 2000)); // warm-up: every viewer at its first key frame
  const played0 = server.host.counters.framesPlayed;
  const enc0 = encodes;
  const sum0 = await metric('reactor_video_encode_seconds_sum');
  const cnt0 = await metric('reactor_video_encode_seconds_count');
  const got0 = viewers.map((v) => v.frames);
  const bytes0 = viewers.reduce((a, v) => a + v.bytes, 0);
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, ENCODE_MS));
  const wall = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  const played = server.host.counters.framesPlayed - played0;
  const sum = (await metric('reactor_video_encode_seconds_sum')) - sum0;
  const cnt = (await metric('reactor_video_encode_seconds_count')) - cnt0;
  const fpsPerViewer = viewers.map((v, i) => r2(((v.frames - got0[i]) * 1000) / wall));
  return {
    viewers: n,
    framesPlayedPerSec: r2((played * 1000) / wall),
    encoderCallsPerFramePlayed: r2((encodes - enc0) / Math.max(1, played)),
    encodeMsMean: r2((sum / Math.max(1, cnt)) * 1000),
    cpuCores: r2((cpu.user + cpu.system) / 1000 / wall),
    fpsPerViewerMin: Math.min(...fpsPerViewer),
    bitsPerSecPerViewer: Math.round(((viewers.reduce((a, v) => a + v.bytes, 0) - bytes0) * 8 * 1000) / wall / n),
  };
}
try {
  const one = await phase(1);
  emit({ bench: 'stream.encode', codec: 'h264', tier: 'full', width: EW, height: EH, fps: FPS, ...one, ...machine });
  const eight = await phase(8);
  emit({
    bench: 'stream.encode',
    codec: 'h264',
    tier: 'full',
    width: EW,
    height: EH,
    fps: FPS,
    ...eight,
    cpuVs1Viewer: r2(eight.cpuCores / one.cpuCores),
    encodeMsVs1Viewer: r2(eight.encodeMsMean / one.encodeMsMean),
    ...machine,
  });
} finally {
  for (const v of viewers) v.ws.close();
  await server.close();
}
clearInterval(keepAlive);
