// Issue 39: pipelines over ranks with calls in flight (gloo on CPU ranks). Plain JS against the
// compiled dist/. Prints one JSON object per line:
//   pipeline.compute  a compute-bound two-stage pipeline (packages/distributed/test/fixtures/
//                     python/pipeline_worker.py: tanh(x @ W) layers, one thread a rank): calls a
//                     second on 1 rank (both stages, one call at a time) and on 2 ranks (a stage
//                     each, PIPELINE_BENCH_IN_FLIGHT calls in flight, default 3), and their ratio
//   pipeline.world    the world model's small config (apps/world): chunks a second on 1 rank and
//                     as a 2-rank pipeline of each shape (blocks split, steps split), 2 in flight
// Each line carries the load average when it was measured (the machine may be shared).
// PIPELINE_BENCH_QUICK=1: fewer calls. PIPELINE_BENCH_PARTS=compute,world (default both).
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { DistributedRunner, pythonWorker } from '../packages/distributed/dist/index.js';

const quick = process.env.PIPELINE_BENCH_QUICK === '1';
const parts = (process.env.PIPELINE_BENCH_PARTS ?? 'compute,world').split(',');
const inFlight = Number(process.env.PIPELINE_BENCH_IN_FLIGHT ?? 3);
const PY = process.env.REACTOR_PYTHON ?? '/usr/bin/python3';
const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const round = (x) => Math.round(x * 1000) / 1000;
const load = () => loadavg().map((x) => Math.round(x * 100) / 100);
const fixtures = fileURLToPath(new URL('../packages/distributed/test/fixtures/python/', import.meta.url));
const worldPython = fileURLToPath(new URL('../apps/world/python/', import.meta.url));

/** `calls` calls through `runner`, keeping `depth` in flight; returns calls a second (after `warm` untimed calls). */
async function throughput(runner, input, calls, depth, warm = 2) {
  for (let i = 0; i < warm; i++) await runner.generate(input(i));
  const t0 = performance.now();
  const pending = [];
  for (let i = 0; i < calls; i++) {
    pending.push(runner.generate(input(warm + i)));
    if (pending.length >= depth) await pending.shift();
  }
  await Promise.all(pending);
  return (calls / (performance.now() - t0)) * 1000;
}

async function compute() {
  const dim = 256;
  const work = Number(process.env.PIPELINE_BENCH_WORK ?? 24);
  const calls = quick ? 12 : 40;
  const x = Float32Array.from({ length: 16 * dim }, (_, k) => Math.sin(k));
  const run = async (worldSize, depth) => {
    const r = new DistributedRunner(pythonWorker('pipeline_worker:PipelineWorker', { path: [fixtures], interpreter: PY }), {
      worldSize,
      devices: 'cpu',
      logger: quiet,
      maxInFlight: Math.max(1, depth),
      outputRank: worldSize - 1,
      loadArgs: { stages: 2, dim, work },
    });
    await r.start();
    try {
      return await throughput(r, () => ({ x }), calls, depth);
    } finally {
      await r.shutdown();
    }
  };
  const loadBefore = load();
  const one = await run(1, 1);
  const two = await run(2, inFlight);
  emit({
    bench: 'pipeline.compute',
    stages: 2,
    dim,
    layersPerStage: work,
    calls,
    oneRankCallsPerS: round(one),
    twoRanksCallsPerS: round(two),
    ratio: round(two / one),
    inFlight,
    loadBefore,
    loadAfter: load(),
  });
}

async function world() {
  const chunks = quick ? 4 : 10;
  const run = async (worldSize, pipeline) => {
    const r = new DistributedRunner(pythonWorker('reactor_world.worker:WorldWorker', { path: [worldPython], interpreter: PY }), {
      worldSize,
      devices: 'cpu',
      logger: quiet,
      callTimeoutMs: 120_000,
      maxInFlight: 2,
      outputRank: worldSize - 1,
      loadArgs: { model: 'small', compile: 'off', warmup: true, threads: 1, pipeline },
    });
    await r.start();
    try {
      return await throughput(r, (i) => ({ prompt: 'a forest at dawn', seed: i }), chunks, 2);
    } finally {
      await r.shutdown();
    }
  };
  const loadBefore = load();
  const one = await run(1, 'none');
  const blocks = await run(2, 'blocks');
  const steps = await run(2, 'steps');
  emit({
    bench: 'pipeline.world',
    model: 'small',
    chunks,
    oneRankChunksPerS: round(one),
    blocksChunksPerS: round(blocks),
    stepsChunksPerS: round(steps),
    blocksRatio: round(blocks / one),
    stepsRatio: round(steps / one),
    loadBefore,
    loadAfter: load(),
  });
}

if (parts.includes('compute')) await compute();
if (parts.includes('world')) await world();
