#!/usr/bin/env node
// What issue 26's stage timing costs a runner call (compiled dist/): p50/p99 of a tiny
// generate() (24 bytes) and of a 512x512 RGB frame (786432 bytes) on 1 and 2 CPU ranks, with
// nobody subscribed to RUNNER_CALL_CHANNEL ("off": the call is not timed at all) and with a
// subscriber ("on": what an app host serving /metrics does), in alternating rounds so that load
// from other processes hits both alike. Prints one JSON object per line:
//   {"bench":"stages.runnerCall","worldSize":N,"payloadBytes":B,"timing":"off"|"on","p50Ms":..,"p99Ms":..}
// Env: STAGES_BENCH_ROUNDS (default 3), STAGES_BENCH_ITERS (calls per round, default 2000).
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { DistributedRunner, RUNNER_CALL_CHANNEL } from '../packages/distributed/dist/index.js';
import { BenchWorker } from '../packages/distributed/test/fixtures/bench.mjs';

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
        process.stdout.write(`${JSON.stringify({ bench: 'stages.runnerCall', worldSize, payloadBytes, timing, rounds, p50Ms: round(pct(all, 50)), p99Ms: round(pct(all, 99)) })}\n`);
      }
    }
  } finally {
    await r.shutdown();
  }
}
