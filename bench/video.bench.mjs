// Benchmark of the sample video model (issue 5): frames per second delivered by a
// DistributedRunner of VideoWorker ranks, at 256x256, for 1 and 2 ranks. Plain JS against
// the compiled dist/ (`pnpm bench` builds first). Prints one JSON object per line:
//   {"bench":"video.fps","backend":..,"worldSize":N,"width":256,"height":256,"framesPerSec":..,...}
// The two world sizes are measured in alternating rounds (the median round is reported) so
// that load from other processes on a shared machine hits both alike; cpuIdlePctBefore (idle
// share of all cores over the second before the bench) and loadAvg1m say how busy it was. Env: VIDEO_BENCH_SECONDS (per round, default 2), VIDEO_BENCH_ROUNDS
// (default 3), VIDEO_BENCH_FRAMES (frames per chunk, default 4), REACTOR_BACKEND (default auto).
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DistributedRunner } from '../packages/distributed/dist/index.js';
import { VideoWorker } from '../apps/video/dist/video-worker.js';

const here = dirname(fileURLToPath(import.meta.url));
const weightsRoot = join(here, '..', 'apps', 'video', 'weights');
const seconds = Number(process.env.VIDEO_BENCH_SECONDS ?? 2);
const rounds = Number(process.env.VIDEO_BENCH_ROUNDS ?? 3);
const framesPerChunk = Number(process.env.VIDEO_BENCH_FRAMES ?? 4);
const width = 256;
const height = 256;
const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const round2 = (x) => Math.round(x * 100) / 100;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function startRunner(worldSize) {
  const runner = new DistributedRunner(VideoWorker, {
    worldSize,
    loadArgs: { weightsRoot, width, height, framesPerChunk, rolloutChunks: 1_000_000, backend: 'auto' },
    logger: quiet,
  });
  await runner.start();
  let backend = 'unknown';
  for (let i = 0; i < 3; i++) backend = (await runner.generate({ prompt: 'warm-up' })).backends.map((b) => b.backend).join('+');
  return { runner, backend };
}

/** Frames per second over `seconds` of back-to-back generate() calls, and the p50 chunk time. */
async function measure(runner) {
  const prompts = ['A walk through a forest.', 'neon city at night'];
  const times = [];
  let frames = 0;
  const t0 = performance.now();
  let i = 0;
  while (performance.now() - t0 < seconds * 1000) {
    const c0 = performance.now();
    // The prompt changes now and then, as with a live user.
    const res = await runner.generate({ prompt: prompts[Math.floor(i++ / 20) % 2] });
    times.push(performance.now() - c0);
    if (res.frames.length !== res.n * width * height * 3) throw new Error('wrong chunk size');
    frames += res.n;
  }
  return { fps: (frames * 1000) / (performance.now() - t0), p50: median(times) };
}

/** Idle share of all cores over `ms` (Linux /proc/stat), or null elsewhere. */
async function cpuIdlePct(ms) {
  const read = () => {
    const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
    return { idle: f[3] + f[4], total: f.reduce((a, b) => a + b, 0) };
  };
  try {
    const a = read();
    await new Promise((r) => setTimeout(r, ms));
    const b = read();
    return Math.round((100 * (b.idle - a.idle)) / Math.max(1, b.total - a.total));
  } catch {
    return null;
  }
}

const idle0 = await cpuIdlePct(1000);
const load0 = loadavg()[0];
const runners = { 1: await startRunner(1), 2: await startRunner(2) };
const results = { 1: [], 2: [] };
try {
  for (let r = 0; r < rounds; r++) {
    for (const n of [1, 2]) results[n].push(await measure(runners[n].runner));
  }
} finally {
  await Promise.all(Object.values(runners).map((x) => x.runner.shutdown()));
}
const fps = { 1: median(results[1].map((x) => x.fps)), 2: median(results[2].map((x) => x.fps)) };
for (const n of [1, 2]) {
  emit({
    bench: 'video.fps',
    backend: runners[n].backend,
    worldSize: n,
    width,
    height,
    framesPerSec: round2(fps[n]),
    framesPerChunk,
    chunkP50Ms: round2(median(results[n].map((x) => x.p50))),
    roundsFps: results[n].map((x) => round2(x.fps)),
    ...(n === 2 ? { speedupVs1: round2(fps[2] / fps[1]) } : {}),
    cpuIdlePctBefore: idle0,
    loadAvg1m: round2(load0),
  });
}
