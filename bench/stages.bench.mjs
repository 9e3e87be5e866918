#!/usr/bin/env node
// What issue 26's stage timing costs a runner call (compiled dist/): p50/p99 of a tiny
// generate() (24 bytes) and of a 512x512 RGB frame (786432 bytes) on 1 and 2 CPU ranks, with
// nobody subscribed to RUNNER_CALL_CHANNEL ("off": the call is not timed at all) and with a
// subscriber ("on": what an app host serving /metrics does), in alternating rounds so that load
// from other processes hits both alike. Prints one JSON object per line:
//   {"bench":"stages.runnerCall","worldSize":N,"payloadBytes":B,"timing":"off"|"on","p50Ms":..,"p99Ms":..}
// Then the sample app (apps/video, wasm/cpu ranks) at 512x512 through `reactor run --manifest`,
// one WebSocket JPEG client on loopback for STAGES_BENCH_SECONDS: the mean of each stage of
// reactor_step_stage_seconds and, for the step stages, its share of the step:
//   {"bench":"stages.share","width":512,"height":512,"steps":..,"stepMs":..,"stages":{"generate":{"meanMs":..,"share":..},...}}
// Env: STAGES_BENCH_ROUNDS (default 3), STAGES_BENCH_ITERS (calls per round, default 2000),
// STAGES_BENCH_SECONDS (default 20).
import { spawn } from 'node:child_process';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { WebSocket } from 'ws';
import { connect } from '../packages/client/dist/index.js';
import { DistributedRunner, RUNNER_CALL_CHANNEL } from '../packages/distributed/dist/index.js';
import { BenchWorker } from '../packages/distributed/test/fixtures/bench.mjs';
import { scrapeMetrics } from './lib/metrics-text.mjs';

const rounds = Number(process.env.STAGES_BENCH_ROUNDS ?? 3);
const iters = Number(process.env.STAGES_BENCH_ITERS ?? 2000);
const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const round = (x) => Math.round(x * 1000) / 1000;
const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];

let seen = 0;
const onCall = () => seen++;

async function measure(r, payloadBytes) {
  const input = { payloadBytes };
  for (let i = 0; i < 100; i++) await r.generate(input);
  const t = new Float64Array(iters);
  for (let i = 0; i < iters; i++) {
    const t0 = performance.now();
    await r.generate(input);
    t[i] = performance.now() - t0;
  }
  t.sort();
  return t;
}

for (const worldSize of [1, 2]) {
  const r = new DistributedRunner(BenchWorker, { worldSize, devices: 'cpu', logger: quiet });
  await r.start();
  try {
    for (const payloadBytes of [24, 786432]) {
      const samples = { off: [], on: [] };
      for (let k = 0; k < rounds; k++) {
        for (const timing of ['off', 'on']) {
          if (timing === 'on') subscribe(RUNNER_CALL_CHANNEL, onCall);
          const before = seen;
          samples[timing].push(await measure(r, payloadBytes));
          if (timing === 'on') {
            unsubscribe(RUNNER_CALL_CHANNEL, onCall);
            if (seen - before < iters) throw new Error(`the subscriber saw ${seen - before} calls of ${iters}`);
          }
        }
      }
      for (const timing of ['off', 'on']) {
        const all = Float64Array.from(samples[timing].flatMap((t) => [...t])).sort();
        process.stdout.write(
          `${JSON.stringify({ bench: 'stages.runnerCall', worldSize, payloadBytes, timing, rounds, p50Ms: round(pct(all, 50)), p99Ms: round(pct(all, 99)) })}\n`,
        );
      }
    }
  } finally {
    await r.shutdown();
  }
}

// ---- the sample app at 512x512: where a step's time goes ----------------------------------------

const repo = join(dirname(fileURLToPath(import.meta.url)), '..');
const seconds = Number(process.env.STAGES_BENCH_SECONDS ?? 20);
const dir = mkdtempSync(join(tmpdir(), 'reactor-stages-bench-'));
try {
  const config = readFileSync(join(repo, 'apps/video/config.yaml'), 'utf8')
    .replace(/^width: .*$/m, 'width: 512')
    .replace(/^height: .*$/m, 'height: 512');
  writeFileSync(join(dir, 'config.yaml'), config);
  writeFileSync(
    join(dir, 'reactor.yaml'),
    [
      'runtime:',
      `  import: ${join(repo, 'apps/video/dist/index.js')}:VideoApp`,
      `  config: ${join(dir, 'config.yaml')}`,
      `  weights_path: ${join(repo, 'apps/video/weights')}`,
      'server: { port: 0 }',
      '',
    ].join('\n'),
  );
  const child = spawn(process.execPath, [join(repo, 'packages/cli/dist/main.js'), 'run', '--manifest', join(dir, 'reactor.yaml')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  try {
    const url = await new Promise((res, rej) => {
      let out = '';
      child.stdout.on('data', (d) => {
        out += d;
        const m = /Viewer: (\S+)/.exec(out);
        if (m) res(m[1]);
      });
      child.once('exit', (code) => rej(new Error(`reactor run exited ${code}: ${err}`)));
    });
    const base = new URL(url).origin;
    const client = await connect(url, { WebSocket, reconnect: false });
    const scrape = async () => parseStages(await scrapeMetrics(base));
    await new Promise((r) => setTimeout(r, 3000)); // warm-up: the first chunks compile kernels
    const before = await scrape();
    await new Promise((r) => setTimeout(r, seconds * 1000));
    const after = await scrape();
    client.close();
    const steps = after.generate.count - before.generate.count;
    const mean = (s) => {
      const n = after[s].count - before[s].count;
      return n > 0 ? (after[s].sum - before[s].sum) / n : undefined;
    };
    const stepStages = ['process_input', 'generate', 'process_output'];
    const stepMs = stepStages.reduce((a, s) => a + (mean(s) ?? 0), 0) * 1000;
    const stages = {};
    for (const s of Object.keys(after)) {
      const m = mean(s);
      if (m === undefined) continue;
      stages[s] = {
        meanMs: round(m * 1000),
        count: after[s].count - before[s].count,
        ...(s !== 'encode' && s !== 'queue' && s !== 'send' ? { share: round((m * 1000) / stepMs) } : {}),
      };
    }
    process.stdout.write(`${JSON.stringify({ bench: 'stages.share', width: 512, height: 512, seconds, steps, stepMs: round(stepMs), stages })}\n`);
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => (child.exitCode !== null ? r() : child.once('exit', r)));
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}

function parseStages(metrics) {
  const out = {};
  for (const [key, value] of metrics) {
    const m = /^reactor_step_stage_seconds_(sum|count)\{stage="(\w+)"\}$/.exec(key);
    if (!m) continue;
    out[m[2]] ??= { sum: 0, count: 0 };
    out[m[2]][m[1]] = value;
  }
  return out;
}
