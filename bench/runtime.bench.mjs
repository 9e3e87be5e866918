#!/usr/bin/env node
// Step-loop overhead of @reactor/runtime (compiled dist/): an app whose model returns a ready
// frame, 1 and 8 in-process clients (sinks that only count). Measures, per step, the time from
// generate() returning to the next generate() call: processOutput, frame checks, playout,
// delivery to every sink, the step lock, processInput and one event-loop turn; the model's own
// time is excluded. Prints one JSON line per client count.
import { AppHost, Frames, Output, ReactorApp, Video, reactorApp } from '../packages/runtime/dist/index.js';
import { consoleLogger } from '../packages/log/dist/index.js';

const WARMUP_STEPS = 2_000;
const MEASURE_MS = 2_000;
const W = 64;
const H = 64;

class BenchOutput extends Output {}
Video({ width: W, height: H })(BenchOutput.prototype, 'main');

const frame = new Frames(new Uint8Array(W * H * 3), [1, H, W, 3]);

async function run(clients) {
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
  await host.close();
  gaps.sort((a, b) => a - b);
  const q = (p) => gaps[Math.min(gaps.length - 1, Math.floor(p * gaps.length))];
  const total = gaps.reduce((a, b) => a + b, 0);
  if (framesSeen < gaps.length) throw new Error(`sinks saw ${framesSeen} frames for ${gaps.length} steps`);
  return {
    bench: 'runtime.step',
    clients,
    steps: gaps.length,
    stepsPerSec: Math.round((gaps.length / total) * 1000),
    p50Ms: Number(q(0.5).toFixed(4)),
    p99Ms: Number(q(0.99).toFixed(4)),
  };
}

for (const clients of [1, 8]) {
  console.log(JSON.stringify(await run(clients)));
}
