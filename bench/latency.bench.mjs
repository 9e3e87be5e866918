#!/usr/bin/env node
// Command-to-pixel latency (issue 26): the sample app (VideoApp) at 512x512 served on 127.0.0.1,
// WebSocket JPEG, a Node client of @reactor/client (frames presented at delivery) sending
// `set_prompt` at random moments; each sample is the client's own measure, from the send to the
// delivery of the frame the server named as applied. Prints one JSON object per line:
//   latency.c2p       p50/p99/mean of the client's samples, how many reached /metrics, and where
//                     the time goes: the mean of each `reactor_step_stage_seconds` stage per step
//                     (when the server has that histogram) and its share of the mean sample
//   latency.overhead  mean step time (reactor_step_duration_seconds) with the client's measuring
//                     and reporting on vs off, in alternating rounds (median round each), and the
//                     measured cost of the measuring itself: the tracker's bookkeeping per frame
//                     and per command, the server's parse of a full report, as a share of a step
// Env: LATENCY_BENCH_COMMANDS (default 30), LATENCY_BENCH_ROUND_S (default 8), LATENCY_BENCH_ROUNDS
// (default 4), LATENCY_BENCH_SIZE (default 512), LATENCY_BENCH_FRAMES (frames per chunk, default 4),
// LATENCY_BENCH_WORLD (ranks, default 1), REACTOR_BACKEND (default auto). Run after `pnpm build`.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { serve } from '../packages/server/dist/index.js';
import { connect, LatencyTracker } from '../packages/client/dist/index.js';
import { parseClientMessage } from '../packages/protocol/dist/index.js';
import { VideoApp } from '../apps/video/dist/index.js';
import { WebSocket } from '../packages/server/node_modules/ws/wrapper.mjs';
import { scrapeMetrics as scrape } from './lib/metrics-text.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const weightsPath = join(here, '..', 'apps', 'video', 'weights');
const COMMANDS = Number(process.env.LATENCY_BENCH_COMMANDS ?? 30);
const ROUND_S = Number(process.env.LATENCY_BENCH_ROUND_S ?? 8);
const ROUNDS = Number(process.env.LATENCY_BENCH_ROUNDS ?? 4);
const SIZE = Number(process.env.LATENCY_BENCH_SIZE ?? 512);
const FRAMES = Number(process.env.LATENCY_BENCH_FRAMES ?? 4);
const WORLD = Number(process.env.LATENCY_BENCH_WORLD ?? 1);
const STAGES = ['process_input', 'generate', 'runner_dispatch', 'runner_ranks', 'runner_handback', 'process_output', 'encode', 'queue', 'send'];

const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const r2 = (x) => (x === undefined || Number.isNaN(x) ? null : Math.round(x * 100) / 100);
const r5 = (x) => Math.round(x * 1e5) / 1e5;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const percentile = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];

const dir = mkdtempSync(join(tmpdir(), 'latency-bench-'));
const configPath = join(dir, 'config.yaml');
writeFileSync(configPath, `width: ${SIZE}\nheight: ${SIZE}\nframesPerChunk: ${FRAMES}\nworldSize: ${WORLD}\nbackend: auto\nrolloutChunks: 1000000\n`);
const server = await serve(VideoApp, { port: 0, gracePeriodMs: 0, logger: quiet, configPath, weightsPath });
try {
  await server.loaded;
  const client = await connect(server.url, { WebSocket, reconnect: false });
  let backend = 'unknown';
  client.onMessage('backend_info', (info) => (backend = info.backends?.map((b) => b.backend).join('+') ?? backend));
  // Warm-up: the first frames, the model's first steps.
  for await (const f of client.frames()) if (f.seq > 8) break;
  await sleep(1000);

  // ---- command-to-pixel -------------------------------------------------------------------
  const before = await scrape(server.url);
  const samples = [];
  const outcomes = {};
  for (let i = 0; i < COMMANDS; i++) {
    const n = client.latency.summary().samples;
    const p = client.send('set_prompt', { prompt: `A lighthouse on a cliff, take ${i}.` });
    await p;
    const applied = await p.applied;
    outcomes[applied.outcome] = (outcomes[applied.outcome] ?? 0) + 1;
    if (applied.outcome === 'applied') {
      const end = performance.now() + 30_000;
      while (client.latency.summary().samples === n && performance.now() < end) await sleep(5);
      const s = client.latency.summary();
      if (s.samples > n) samples.push(s.lastMs);
    }
    // The next command at a random phase of the step.
    await sleep(100 + Math.random() * 600);
  }
  await sleep(2500); // the last report reaches the server
  const after = await scrape(server.url);
  const d = (k) => (after.get(k) ?? 0) - (before.get(k) ?? 0);
  const sorted = [...samples].sort((a, b) => a - b);
  const meanMs = samples.reduce((a, b) => a + b, 0) / Math.max(1, samples.length);
  const steps = d('reactor_step_duration_seconds_count');
  const stepMs = (d('reactor_step_duration_seconds_sum') / Math.max(1, steps)) * 1000;
  let stages = null;
  let sharePct = null;
  if ([...after.keys()].some((k) => k.startsWith('reactor_step_stage_seconds_count'))) {
    stages = {};
    sharePct = {};
    for (const stage of STAGES) {
      const count = d(`reactor_step_stage_seconds_count{stage="${stage}"}`);
      if (count === 0) continue;
      const ms = (d(`reactor_step_stage_seconds_sum{stage="${stage}"}`) / count) * 1000;
      stages[stage] = r2(ms);
      sharePct[stage] = r2((ms / meanMs) * 100);
    }
  }
  emit({
    bench: 'latency.c2p',
    width: SIZE,
    height: SIZE,
    framesPerChunk: FRAMES,
    worldSize: WORLD,
    backend,
    transport: 'websocket',
    encoding: 'jpeg',
    commands: COMMANDS,
    outcomes,
    samples: samples.length,
    p50Ms: r2(percentile(sorted, 50)),
    p99Ms: r2(percentile(sorted, 99)),
    meanMs: r2(meanMs),
    reportedToServer: d('reactor_command_to_pixel_seconds_count{command="set_prompt",transport="websocket"}'),
    stepMs: r2(stepMs),
    stagesMs: stages,
    stageSharePct: sharePct,
    cores: cpus().length,
    loadAvg1m: r2(loadavg()[0]),
  });
  client.close();

  // ---- overhead: step time with the measuring on and off -----------------------------------
  const stepTime = async (stats) => {
    const c = await connect(server.url, { WebSocket, reconnect: false, stats });
    await sleep(500);
    const a = await scrape(server.url);
    const end = performance.now() + ROUND_S * 1000;
    let i = 0;
    // A live user: a command every ~700 ms, so applied acknowledgements and samples flow.
    while (performance.now() < end) {
      const p = c.send('set_prompt', { prompt: `round prompt ${i++}` });
      await p.catch(() => undefined);
      await sleep(700);
    }
    const b = await scrape(server.url);
    c.close();
    const n = (b.get('reactor_step_duration_seconds_count') ?? 0) - (a.get('reactor_step_duration_seconds_count') ?? 0);
    const s = (b.get('reactor_step_duration_seconds_sum') ?? 0) - (a.get('reactor_step_duration_seconds_sum') ?? 0);
    return (s / Math.max(1, n)) * 1000;
  };
  const on = [];
  const off = [];
  for (let r = 0; r < ROUNDS; r++) {
    // Off first, then on first: a drift of the machine's load over the run hits both alike.
    if (r % 2 === 0) {
      off.push(await stepTime(false));
      on.push(await stepTime(true));
    } else {
      on.push(await stepTime(true));
      off.push(await stepTime(false));
    }
  }
  // The tracker's own cost, measured alone: one presented frame, one command's bookkeeping, one report.
  const t = new LatencyTracker();
  const N = 200_000;
  let t0 = performance.now();
  for (let i = 0; i < N; i++) t.presented('main', i, i * 33);
  const perFrameUs = ((performance.now() - t0) / N) * 1000;
  t0 = performance.now();
  for (let i = 0; i < 10_000; i++) {
    t.applied('set_prompt', 0, { outcome: 'applied', seq: N + i, track: 'main' });
    t.presented('main', N + i, (N + i) * 33);
    if (i % 64 === 63) t.takeReport();
  }
  const perCommandUs = ((performance.now() - t0) / 10_000) * 1000;
  // The server's side of one full report (64 samples): its parse and shape check, once a second per client.
  const full = JSON.stringify({
    type: 'client_stats',
    transport: 'websocket',
    samples: Array.from({ length: 64 }, (_, i) => ({ command: 'set_prompt', ms: 100 + i })),
    firstFrameMs: 300,
    freezes: 1,
    freezeMs: 250,
    dropped: 2,
    fps: 30,
  });
  t0 = performance.now();
  for (let i = 0; i < 20_000; i++) if (!parseClientMessage(full).ok) throw new Error('report refused');
  const parseUsPerReport = ((performance.now() - t0) / 20_000) * 1000;
  const stepOn = median(on);
  const stepOff = median(off);
  emit({
    bench: 'latency.overhead',
    width: SIZE,
    height: SIZE,
    rounds: ROUNDS,
    roundS: ROUND_S,
    stepMsOff: r2(stepOff),
    stepMsOn: r2(stepOn),
    stepChangePct: r2(((stepOn - stepOff) / stepOff) * 100),
    trackerUsPerFrame: r2(perFrameUs),
    trackerUsPerCommand: r2(perCommandUs),
    serverParseUsPerReport: r2(parseUsPerReport),
    // What the measuring costs per step: the client's bookkeeping (the frames of a chunk and one
    // command) and the server's share of one report a second, against the step.
    measuringPctOfStep: r5(((perFrameUs * FRAMES + perCommandUs + parseUsPerReport * (stepOff / 1000)) / 1000 / stepOff) * 100),
    loadAvg1m: r2(loadavg()[0]),
  });
} finally {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
}
