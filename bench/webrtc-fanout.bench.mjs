#!/usr/bin/env node
// WebRTC fan-out (issue 24): one 1280x720 session at 30 fps, H.264 from the server's shared
// encoders, watched by N WebRTC viewers (default 20): Node clients on werift, in a child
// process of their own (bench/webrtc-viewers.mjs), signalled over the WebSocket as
// docs/protocol.md says. One JSON line:
//
//   webrtc.fanout   encoder calls per frame played, per tier (one per tier whatever the number of
//                   viewers is the design); the server process's CPU (cores; this process: the
//                   app, the playout, the encoders, werift's SRTP/RTCP for every peer) and the
//                   viewers' process's; every viewer's fps of complete frames, min / median / max,
//                   and how many are at >= 28 fps; kbit/s per viewer. Load-robust beside the
//                   wall-clock figures: the server's CPU milliseconds per frame played
//                   (`serverCpuMsPerFrame`, process.cpuUsage over the window) and that divided by
//                   the viewers (`serverCpuMsPerViewerFrame`), which do not depend on how many
//                   frames a starved machine managed to play.
//
// The frames are precomputed, image-like and moving (gradients, a moving disc, noise), so the
// encoder does realistic work. Run after `pnpm build`: node bench/webrtc-fanout.bench.mjs
// Env: FANOUT_VIEWERS (default 20), FANOUT_MEASURE_MS (default 10000), FANOUT_WARMUP_MS (default
// 6000: every viewer connected and past its first key frame), FANOUT_CPU_PROF (a directory: the
// server process's V8 CPU profile of the measured window goes there as a .cpuprofile),
// FANOUT_TRANSPORT (`ws`: the viewers take the WebSocket media path, H.264 frames over their
// sockets; the line is then `ws.fanout`), FANOUT_ROOT (another checkout, built: its packages serve).
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { cpus, loadavg } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
// FANOUT_ROOT: another checkout whose built packages serve (a before/after comparison runs this
// same script and the same viewers against each).
const root = resolve(process.env.FANOUT_ROOT ?? join(here, '..'));
const { Frames, Output, ReactorApp, Video, reactorApp } = await import(pathToFileURL(join(root, 'packages/runtime/dist/index.js')).href);
const { serve, webCodecsEncoderFactory } = await import(pathToFileURL(join(root, 'packages/server/dist/index.js')).href);
const TRANSPORT = process.env.FANOUT_TRANSPORT === 'ws' ? 'ws' : 'webrtc';
const W = 1280;
const H = 720;
const FPS = 30;
const N = Number(process.env.FANOUT_VIEWERS ?? 20);
const MEASURE_MS = Number(process.env.FANOUT_MEASURE_MS ?? 10_000);
const WARMUP_MS = Number(process.env.FANOUT_WARMUP_MS ?? 6000);
const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const r2 = (x) => Math.round(x * 100) / 100;
const machine = { cpus: cpus().length, cpuModel: cpus()[0]?.model, loadAvg1m: r2(loadavg()[0]) };
// The native encoder's callbacks do not keep the event loop alive.
const keepAlive = setInterval(() => undefined, 1000);

const FRAMES = Array.from({ length: 30 }, (_, k) => {
  const rgb = new Uint8Array(W * H * 3);
  let s = 7 + k;
  const cx = 200 + k * 30;
  for (let y = 0; y < H; y++) {
    for (let x = 0; x < W; x++) {
      s = (s * 1103515245 + 12345) >>> 0;
      const n = (s >>> 26) & 7;
      const i = (y * W + x) * 3;
      const d = (x - cx) ** 2 + (y - 360) ** 2 < 150 ** 2 ? 90 : 0;
      rgb[i] = ((x >> 2) + k * 4 + n + d) & 255;
      rgb[i + 1] = ((y >> 2) + n) & 255;
      rgb[i + 2] = (128 + ((x + y) >> 4) + n - d) & 255;
    }
  }
  return rgb;
});

class FanoutOutput extends Output {}
Video({ width: W, height: H })(FanoutOutput.prototype, 'mainVideo');
class FanoutApp extends ReactorApp {
  i = 0;
  generate() {
    return new FanoutOutput({ mainVideo: new Frames(FRAMES[this.i++ % FRAMES.length], [1, H, W, 3]) });
  }
}
reactorApp({ output: FanoutOutput, fps: FPS, bufferSize: 4, name: 'webrtc-fanout-bench' })(FanoutApp);

/** Encoder calls by tier (its size and bitrate); `framesByTier`: the distinct frames they were for, in the measured window. */
const encodes = new Map();
const framesByTier = new Map();
let measuring = false;
const counting = async (config) => {
  const e = await webCodecsEncoderFactory(config);
  const key = `${config.width}x${config.height}@${Math.round(config.bitrate / 1000)}k`;
  encodes.set(key, encodes.get(key) ?? 0);
  const count = (ts) => {
    encodes.set(key, encodes.get(key) + 1);
    // A frame's timestamp is its pts in µs (one frame every 33 ms); one encoded again would get the next µs, so the same ms.
    if (measuring) framesByTier.set(key, (framesByTier.get(key) ?? new Set()).add(Math.floor(ts / 1000)));
  };
  return {
    encode: (rgb, ts, keyFrame) => (count(ts), e.encode(rgb, ts, keyFrame)),
    get codecString() {
      return e.codecString;
    },
    close: () => e.close(),
  };
};

const server = await serve(FanoutApp, { port: 0, logger: quiet, gracePeriodMs: 0, video: { codec: 'h264', encoderFactory: counting } });
await server.loaded;
const child = spawn(process.execPath, [join(here, 'webrtc-viewers.mjs'), server.wsUrl, String(N)], { stdio: ['pipe', 'pipe', 'inherit'] });
const lines = createInterface({ input: child.stdout });
const next = () => new Promise((resolve) => lines.once('line', (l) => resolve(JSON.parse(l))));
/** The server's counters that explain a viewer's broken frames (from its /metrics registry). */
const serverCounters = async () => {
  const out = {};
  for (const m of await server.metrics.registry.getMetricsAsJSON()) {
    if (m.name === 'reactor_frames_dropped_total') for (const v of m.values) out[`dropped_${v.labels.reason}`] = v.value;
    if (m.name === 'reactor_webrtc_nack_packets_total') out.nackedPackets = m.values[0]?.value ?? 0;
    if (m.name === 'reactor_webrtc_feedback_total') for (const v of m.values) out[`feedback_${v.labels.kind}`] = v.value;
    if (m.name === 'reactor_webrtc_tier_switches_total') for (const v of m.values) out[`tier_${v.labels.direction}`] = v.value;
  }
  return out;
};
const delta = (a, b) =>
  Object.fromEntries(
    Object.keys(b)
      .map((k) => [k, b[k] - (a[k] ?? 0)])
      .filter(([, v]) => v !== 0),
  );
/** CPU seconds of this process's main thread only (the event loop: the app, playout and every viewer's send), without the encoders' native threads, whose time moves with how many cores the machine leaves them. */
const mainThreadCpu = () => {
  const f = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
};
const childCpu = () => {
  // utime + stime of the viewers' process, in clock ticks (100 a second on Linux).
  return import('node:fs').then(({ readFileSync }) => {
    const f = readFileSync(`/proc/${child.pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12])) / 100;
  });
};
try {
  await next(); // started
  await new Promise((r) => setTimeout(r, WARMUP_MS));
  const profiler = process.env.FANOUT_CPU_PROF ? new Session() : undefined;
  if (profiler) {
    profiler.connect();
    await profiler.post('Profiler.enable');
    await profiler.post('Profiler.start');
  }
  const played0 = server.host.counters.framesPlayed;
  const enc0 = new Map(encodes);
  const counters0 = await serverCounters();
  measuring = true;
  const cpu0 = process.cpuUsage();
  const main0 = mainThreadCpu();
  const vcpu0 = await childCpu();
  const t0 = performance.now();
  child.stdin.write('measure\n');
  await new Promise((r) => setTimeout(r, MEASURE_MS));
  const wall = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  const mainMs = (mainThreadCpu() - main0) * 1000;
  const vcpu = (await childCpu()) - vcpu0;
  const played = server.host.counters.framesPlayed - played0;
  // The encoder calls at the same moment as the frames played (the encoder keeps going while the viewers report).
  const enc1 = new Map(encodes);
  measuring = false;
  const counters = delta(counters0, await serverCounters());
  if (profiler) {
    const { profile } = await profiler.post('Profiler.stop');
    writeFileSync(join(process.env.FANOUT_CPU_PROF, `fanout-server-${Date.now()}.cpuprofile`), JSON.stringify(profile));
    profiler.disconnect();
  }
  const cpuMs = (cpu.user + cpu.system) / 1000;
  child.stdin.write('stop\n');
  const result = await next();
  const fps = result.viewers.map((v) => r2(v.fps)).sort((a, b) => a - b);
  const perTier = Object.fromEntries([...enc1].map(([k, n]) => [k, r2((n - (enc0.get(k) ?? 0)) / Math.max(1, played))]));
  // Calls over the distinct frames they were for (frames played counts also the encoder's backlog at either end of the window).
  const perFrame = Object.fromEntries([...enc1].map(([k, n]) => [k, r2((n - (enc0.get(k) ?? 0)) / Math.max(1, framesByTier.get(k)?.size ?? 0))]));
  emit({
    bench: TRANSPORT === 'ws' ? 'ws.fanout' : 'webrtc.fanout',
    ...(process.env.FANOUT_ROOT ? { root } : {}),
    codec: 'h264',
    width: W,
    height: H,
    fps: FPS,
    viewers: N,
    connected: result.viewers.filter((v) => v.state === 'connected').length,
    framesPlayedPerSec: r2((played * 1000) / wall),
    encoderCallsPerFramePlayed: perTier,
    encoderCallsPerFrameEncoded: perFrame,
    serverCpuCores: r2(cpuMs / wall),
    serverCpuMsPerFrame: r2(cpuMs / Math.max(1, played)),
    serverCpuMsPerViewerFrame: r2(cpuMs / Math.max(1, played) / N),
    // The main thread's share: what the media path costs per viewer and frame (the shared encoder's threads left out).
    serverMainThreadCpuMsPerViewerFrame: r2(mainMs / Math.max(1, played) / N),
    // Per frame encoded (all tiers): the same when the encoder keeps up; larger frames-played figures when it does not (frames skipped).
    serverCpuMsPerFrameEncoded: r2(
      cpuMs /
        Math.max(
          1,
          [...enc1].reduce((a, [k, n]) => a + n - (enc0.get(k) ?? 0), 0),
        ),
    ),
    viewersCpuCores: r2((vcpu * 1000) / wall),
    viewersCpuMsPerFrame: r2((vcpu * 1000) / Math.max(1, played)),
    viewerFpsMin: fps[0],
    viewerFpsMedian: fps[Math.floor(fps.length / 2)],
    viewerFpsMax: fps.at(-1),
    viewersAtLeast28Fps: fps.filter((f) => f >= 28).length,
    brokenFramesTotal: result.viewers.reduce((a, v) => a + v.broken, 0),
    // Why frames broke: packets the kernel dropped at the viewers' sockets (receive buffer full), sequence gaps and
    // late (retransmitted or reordered) packets the viewers saw, and the server's drops, NACKs, PLIs and tier moves.
    viewerUdpDrops: result.udpDrops,
    viewerSeqGaps: result.viewers.reduce((a, v) => a + v.gaps, 0),
    viewerLatePackets: result.viewers.reduce((a, v) => a + v.late, 0),
    server: counters,
    kbpsPerViewerMedian: r2(result.viewers.map((v) => v.kbps).sort((a, b) => a - b)[Math.floor(N / 2)]),
    errors: [...new Set(result.viewers.flatMap((v) => v.errors))].slice(0, 5),
    measureMs: Math.round(wall),
    ...machine,
  });
} finally {
  child.kill();
  await server.close();
  clearInterval(keepAlive);
}
