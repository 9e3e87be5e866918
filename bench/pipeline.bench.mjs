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
// PIPELINE_BENCH_ROUNDS=n (compute): n rounds of 1 rank then 2 ranks, alternated in one run (a
// shared machine's load moves between runs), one line a round and a summary line (the median
// ratio). PIPELINE_BENCH_THREADS: torch threads a rank (default 1).
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { DistributedRunner, pythonWorker } from '../packages/distributed/dist/index.js';

const quick = process.env.PIPELINE_BENCH_QUICK === '1';
const parts = (process.env.PIPELINE_BENCH_PARTS ?? 'compute,world').split(',');
const inFlight = Number(process.env.PIPELINE_BENCH_IN_FLIGHT ?? 3);
const PY = process.env.REACTOR_PYTHON ?? '/usr/bin/python3';
const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const round3 = (x) => Math.round(x * 1000) / 1000;
const load = () => loadavg().map((x) => Math.round(x * 100) / 100);
const fixtures = fileURLToPath(new URL('../packages/distributed/test/fixtures/python/', import.meta.url));
const worldPython = fileURLToPath(new URL('../apps/world/python/', import.meta.url));

/** A process's CPU time (user + system, every thread), ms, from /proc (Linux; 0 elsewhere). */
function cpuMs(pid) {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1000) / 100; // utime, stime in clock ticks (USER_HZ 100)
  } catch {
    return 0;
  }
}

/**
 * `calls` calls through `runner`, keeping `depth` in flight (after `warm` untimed calls): calls a
 * second, and each rank's CPU time per call (ms), which a loaded machine does not change much.
 */
async function throughput(runner, input, calls, depth, warm = 2) {
  for (let i = 0; i < warm; i++) await runner.generate(input(i));
  const pids = runner.pids;
  const cpu0 = pids.map(cpuMs);
  const t0 = performance.now();
  const pending = [];
  for (let i = 0; i < calls; i++) {
    pending.push(runner.generate(input(warm + i)));
    if (pending.length >= depth) await pending.shift();
  }
  await Promise.all(pending);
  const perS = (calls / (performance.now() - t0)) * 1000;
  return { perS, cpuMsPerCall: pids.map((p, i) => round3((cpuMs(p) - cpu0[i]) / calls)) };
}

async function compute() {
  const dim = 256;
  const work = Number(process.env.PIPELINE_BENCH_WORK ?? 24);
  const threads = Number(process.env.PIPELINE_BENCH_THREADS ?? 1);
  const rounds = Number(process.env.PIPELINE_BENCH_ROUNDS ?? 1);
  const calls = quick ? 12 : 40;
  const x = Float32Array.from({ length: 16 * dim }, (_, k) => Math.sin(k));
  const run = async (worldSize, depth) => {
    const r = new DistributedRunner(pythonWorker('pipeline_worker:PipelineWorker', { path: [fixtures], interpreter: PY }), {
      worldSize,
      devices: 'cpu',
      logger: quiet,
      maxInFlight: Math.max(1, depth),
      outputRank: worldSize - 1,
      loadArgs: { stages: 2, dim, work, threads },
    });
    await r.start();
    try {
      return await throughput(r, () => ({ x }), calls, depth);
    } finally {
      await r.shutdown();
    }
  };
  const ratios = [];
  const cpuRatios = [];
  for (let round = 0; round < rounds; round++) {
    const loadBefore = load();
    const a = await run(1, 1);
    const b = await run(2, inFlight);
    const [one, two] = [a.perS, b.perS];
    ratios.push(two / one);
    // What two idle cores would give if CPU time were all that counted: one rank's CPU a call
    // against the busier stage's (the pipeline's own costs, handoffs and IPC, are CPU time).
    const cpuRatio = a.cpuMsPerCall[0] / Math.max(...b.cpuMsPerCall);
    cpuRatios.push(cpuRatio);
    emit({
      bench: 'pipeline.compute',
      round,
      stages: 2,
      dim,
      layersPerStage: work,
      threads,
      calls,
      oneRankCallsPerS: round3(one),
      twoRanksCallsPerS: round3(two),
      ratio: round3(two / one),
      oneRankCpuMsPerCall: a.cpuMsPerCall,
      twoRanksCpuMsPerCall: b.cpuMsPerCall,
      cpuRatio: round3(cpuRatio),
      inFlight,
      loadBefore,
      loadAfter: load(),
    });
  }
  if (rounds > 1) {
    const sorted = [...ratios].sort((x, y) => x - y);
    const cpuSorted = [...cpuRatios].sort((x, y) => x - y);
    emit({
      bench: 'pipeline.compute.summary',
      rounds,
      medianRatio: round3(sorted[Math.floor(rounds / 2)]),
      minRatio: round3(sorted[0]),
      maxRatio: round3(sorted[rounds - 1]),
      medianCpuRatio: round3(cpuSorted[Math.floor(rounds / 2)]),
    });
  }
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
      return (await throughput(r, (i) => ({ prompt: 'a forest at dawn', seed: i }), chunks, 2)).perS;
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
    oneRankChunksPerS: round3(one),
    blocksChunksPerS: round3(blocks),
    stepsChunksPerS: round3(steps),
    blocksRatio: round3(blocks / one),
    stepsRatio: round3(steps / one),
    loadBefore,
    loadAfter: load(),
  });
}

if (parts.includes('compute')) await compute();
if (parts.includes('world')) await world();
