#!/usr/bin/env node
// What applied-at acknowledgements (issue 26) cost the step loop: @reactor/runtime (compiled
// dist/) runs an app whose model returns a ready 64x64 frame, with one in-process client that
// sends a generated setter (`set_value`) as soon as its previous reply came, so every step has
// a command that changed state. Measures, per step, the time from generate() returning to the
// next generate() call (as runtime.bench.mjs: processOutput, playout, delivery, the lock, the
// commands that ran between the steps, processInput, one event-loop turn); and, from the
// client's side, the time from sending a command to its `applied` message (the frame it names
// played), in process, no transport.
//
// `REACTOR_BENCH_ROOT=/path/to/other/checkout node bench/applied.bench.mjs` runs another
// checkout's dist (a build without acknowledgements: `appliedP50Ms` is then null), for a
// before/after figure. Prints one JSON line.
import { pathToFileURL } from 'node:url';

const root = process.env.REACTOR_BENCH_ROOT ? pathToFileURL(`${process.env.REACTOR_BENCH_ROOT.replace(/\/$/, '')}/`) : new URL('..', import.meta.url);
const { AppHost, Frames, InputField, InputState, Output, ReactorApp, Video, reactorApp } = await import(new URL('packages/runtime/dist/index.js', root).href);
const { consoleLogger } = await import(new URL('packages/log/dist/index.js', root).href);
// The runtime's own class-validator (its metadata is what the state checks read).
const { IsInt } = await import(new URL('packages/runtime/node_modules/class-validator/cjs/index.js', root).href);

const WARMUP_STEPS = 1_000;
const MEASURE_MS = 3_000;
const W = 64;
const H = 64;

class BenchOutput extends Output {}
Video({ width: W, height: H })(BenchOutput.prototype, 'main');

class BenchState extends InputState {}
InputField({ default: 0 })(BenchState.prototype, 'value');
IsInt()(BenchState.prototype, 'value');

const frame = new Frames(new Uint8Array(W * H * 3), [1, H, W, 3]);

const gaps = [];
let last = -1;
let steps = 0;
let measuring = false;
let done;
const finished = new Promise((r) => (done = r));
let stopAt = Infinity;

class BenchApp extends ReactorApp {
  generate() {
    const now = performance.now();
    if (last >= 0 && measuring) gaps.push(now - last);
    steps++;
    if (!measuring && steps === WARMUP_STEPS) {
      measuring = true;
      stopAt = now + MEASURE_MS;
    }
    if (now >= stopAt) done();
    const out = new BenchOutput({ main: frame });
    last = performance.now();
    return out;
  }
}
reactorApp({ state: BenchState, output: BenchOutput, bufferSize: 4 })(BenchApp);

const host = new AppHost(BenchApp, { statsIntervalMs: 0, logger: consoleLogger({ level: 'error' }) });
await host.load();
const sentAt = new Map();
const toApplied = [];
let outcomes = 0;
const handle = host.connect({
  message(m) {
    if (m.type !== 'applied') return;
    outcomes++;
    const t = sentAt.get(m.id);
    sentAt.delete(m.id);
    if (measuring && t !== undefined && m.outcome === 'applied') toApplied.push(performance.now() - t);
  },
  frame() {},
  close() {},
});
let n = 0;
let stopped = false;
async function commands() {
  while (!stopped) {
    const id = String(++n);
    sentAt.set(id, performance.now());
    const r = await handle.command({ type: 'command', id, name: 'set_value', params: { value: n } });
    if (r.type !== 'reply') throw new Error(`set_value failed: ${JSON.stringify(r)}`);
    // A remote client's next command arrives in a later turn of the event loop (here: the next one).
    await new Promise((r) => setImmediate(r));
  }
}
const sending = commands();
await finished;
stopped = true;
await sending;
await host.close();

const q = (xs, p) => (xs.length === 0 ? null : Number(xs[Math.min(xs.length - 1, Math.floor(p * xs.length))].toFixed(4)));
gaps.sort((a, b) => a - b);
toApplied.sort((a, b) => a - b);
const total = gaps.reduce((a, b) => a + b, 0);
console.log(
  JSON.stringify({
    bench: 'applied.step',
    steps: gaps.length,
    commands: n,
    outcomes,
    stepsPerSec: Math.round((gaps.length / total) * 1000),
    p50Ms: q(gaps, 0.5),
    p99Ms: q(gaps, 0.99),
    appliedP50Ms: q(toApplied, 0.5),
    appliedP99Ms: q(toApplied, 0.99),
  }),
);
