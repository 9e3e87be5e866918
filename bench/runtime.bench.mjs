#!/usr/bin/env node
// Step-loop overhead of @reactor/runtime (compiled dist/): an app whose model returns a ready
// frame, 1 and 8 in-process clients (sinks that only count). Measures, per step, the time from
// generate() returning to the next generate() call: processOutput, frame checks, playout,
// delivery to every sink, the step lock, processInput and one event-loop turn; the model's own
// time is excluded. Prints one JSON line per client count, without (`stages: "off"`) and with
// (`"on"`) a step listener that records every stage into a prom-client histogram as the server
// does for reactor_step_stage_seconds (issue 26), interleaved so both see the same machine.
import { createRequire } from 'node:module';
import { AppHost, Frames, Output, ReactorApp, Video, reactorApp } from '../packages/runtime/dist/index.js';
import { consoleLogger } from '../packages/log/dist/index.js';

// prom-client as the server resolves it (the workspace root does not depend on it).
const { Histogram, Registry } = createRequire(new URL('../packages/server/package.json', import.meta.url))('prom-client');

const WARMUP_STEPS = 2_000;
const MEASURE_MS = 2_000;
const W = 64;
const H = 64;

class BenchOutput extends Output {}
Video({ width: W, height: H })(BenchOutput.prototype, 'main');

const frame = new Frames(new Uint8Array(W * H * 3), [1, H, W, 3]);

async function run(clients, stages) {
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
  reactorApp({ output: BenchOutput, bufferSize: 4 })(BenchApp);

  const silent = consoleLogger({ level: 'error' });
  const host = new AppHost(BenchApp, { statsIntervalMs: 0, logger: silent });
  await host.load();
  let off;
  if (stages) {
    const h = new Histogram({ name: 'bench_stage_seconds', help: 'bench', labelNames: ['stage'], registers: [new Registry()] });
    const [input, gen, output] = ['process_input', 'generate', 'process_output'].map((s) => h.labels(s));
    off = host.onStep((s) => {
      gen.observe(s.elapsedMs / 1000);
      input.observe(s.processInputMs / 1000);
      if (s.processOutputMs !== undefined) output.observe(s.processOutputMs / 1000);
    });
  }
  let framesSeen = 0;
  for (let i = 0; i < clients; i++) {
    host.connect({
      message() {},
      frame() {
        framesSeen++;
      },
      close() {},
    });
  }
  await finished;
  off?.();
  await host.close();
  gaps.sort((a, b) => a - b);
  const q = (p) => gaps[Math.min(gaps.length - 1, Math.floor(p * gaps.length))];
  const total = gaps.reduce((a, b) => a + b, 0);
  if (framesSeen < gaps.length) throw new Error(`sinks saw ${framesSeen} frames for ${gaps.length} steps`);
  return {
    bench: 'runtime.step',
    clients,
    stages: stages ? 'on' : 'off',
    steps: gaps.length,
    stepsPerSec: Math.round((gaps.length / total) * 1000),
    p50Ms: Number(q(0.5).toFixed(4)),
    p99Ms: Number(q(0.99).toFixed(4)),
  };
}

const rounds = Number(process.env.REACTOR_BENCH_ROUNDS ?? 1);
for (let r = 0; r < rounds; r++) {
  for (const clients of [1, 8]) {
    for (const stages of [false, true]) console.log(JSON.stringify(await run(clients, stages)));
  }
}
