// Benchmarks of @reactor/distributed (issue 3). Plain JS against the compiled dist/.
// Prints one JSON object per line:
//   runner.step        p50/p99 of generate() for a worker whose rank 0 returns a ready payload
//   runner.stepZeroCopy the same with the payload allocated by worker.resultArray() (no copy)
//   (both through generateView(): zero-copy views, valid until the next call)
//   runner.stepOwned / runner.stepOwnedZeroCopy  the same through generate(), the safe default
//                      whose result the caller owns (one copy out of shared memory)
//   runner.stepViewPlusAppCopyZeroCopy  generateView() + the app's own .slice(): what an app paid
//                      before (compare with runner.stepOwnedZeroCopy, measured in the same run)
//   runner.crashDetect SIGKILL of rank 1 mid-call -> rejected generate()
//   runner.idleCrash   SIGKILL of rank 1 between calls -> the runner's 'unhealthy' event (issue 13)
//   runner.stallDetect SIGSTOP of rank 1 mid-call -> the runner's 'stall' event, default stallMs 5000 (issue 13)
//   runner.start       start() of 4 ranks with a trivial load
//   runner.rss         parent RSS growth over 2000 steps of 44 MB
// Set RUNNER_BENCH_QUICK=1 for fewer iterations, RUNNER_BENCH_WORLD_SIZES (default 1,2,4) for other N. RUNNER_BENCH_BASELINE=1 adds a
// {"bench":"runner.baseline",...} line with this machine's floor right now (a bare fork-IPC
// round trip to one child, and a 44 MB memcpy into a reused buffer), since shared machines
// vary by 3x within minutes.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { DistributedRunner } from '../packages/distributed/dist/index.js';
import { BenchWorker } from '../packages/distributed/test/fixtures/bench.mjs';

const quick = process.env.RUNNER_BENCH_QUICK === '1';
const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);

function pct(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}
const round = (x) => Math.round(x * 1000) / 1000;

// owned: generate() (the default: the caller owns the result, one copy out of shared memory);
// otherwise generateView() (zero-copy views), the figure the earlier runs measured; appCopy:
// generateView() plus the .slice() an app had to make before generate() returned owned data.
async function step(worldSize, payloadBytes, shared = false, owned = false, appCopy = false) {
  const r = new DistributedRunner(BenchWorker, { worldSize, devices: 'cpu', logger: quiet });
  await r.start();
  try {
    const input = { payloadBytes, shared };
    const iters = quick ? 50 : payloadBytes > 10e6 ? 300 : 3000;
    for (let i = 0; i < Math.min(100, iters); i++) await (owned ? r.generate(input) : r.generateView(input)); // warm-up
    const t = new Float64Array(iters);
    for (let i = 0; i < iters; i++) {
      const t0 = performance.now();
      let res = owned ? await r.generate(input) : (await r.generateView(input)).value;
      if (appCopy) res = { frames: res.frames.slice() };
      t[i] = performance.now() - t0;
      if (res.frames.byteLength !== payloadBytes) throw new Error('wrong payload size');
    }
    t.sort();
    const name = `runner.step${owned ? 'Owned' : ''}${appCopy ? 'ViewPlusAppCopy' : ''}${shared ? 'ZeroCopy' : ''}`;
    emit({ bench: name, worldSize, payloadBytes, p50Ms: round(pct(t, 50)), p99Ms: round(pct(t, 99)) });
  } finally {
    await r.shutdown();
  }
}

async function crashDetect() {
  const trials = quick ? 3 : 9;
  const t = [];
  for (let i = 0; i < trials; i++) {
    const r = new DistributedRunner(BenchWorker, { worldSize: 2, devices: 'cpu', logger: quiet });
    await r.start();
    const call = r.generate({ hang: true });
    await new Promise((res) => setTimeout(res, 20)); // let the call reach the ranks
    const t0 = performance.now();
    process.kill(r.pids[1], 'SIGKILL');
    try {
      await call;
      throw new Error('expected a crash');
    } catch (err) {
      if (err.code !== 'worker_crashed') throw err;
      t.push(performance.now() - t0);
    }
    await r.shutdown();
  }
  t.sort((a, b) => a - b);
  emit({ bench: 'runner.crashDetect', worldSize: 2, p50Ms: round(pct(t, 50)) });
}

async function idleCrash() {
  const trials = quick ? 3 : 9;
  const t = [];
  for (let i = 0; i < trials; i++) {
    const r = new DistributedRunner(BenchWorker, { worldSize: 2, devices: 'cpu', logger: quiet });
    await r.start();
    await r.generate({ payloadBytes: 24 });
    const unhealthy = once(r, 'unhealthy');
    // An idle runner does not keep the process alive (by design): this script must.
    const alive = setInterval(() => {}, 1000);
    const t0 = performance.now();
    process.kill(r.pids[1], 'SIGKILL');
    await unhealthy;
    t.push(performance.now() - t0);
    clearInterval(alive);
    await r.shutdown();
  }
  t.sort((a, b) => a - b);
  emit({ bench: 'runner.idleCrash', worldSize: 2, p50Ms: round(pct(t, 50)), maxMs: round(t[t.length - 1]) });
}

async function stallDetect() {
  const trials = quick ? 1 : 3;
  const t = [];
  for (let i = 0; i < trials; i++) {
    const r = new DistributedRunner(BenchWorker, { worldSize: 2, devices: 'cpu', logger: quiet });
    await r.start();
    const call = r.generate({ hang: true }).catch(() => {});
    await new Promise((res) => setTimeout(res, 200)); // let the call reach the ranks
    const stalled = once(r, 'stall');
    const pid = r.pids[1];
    const t0 = performance.now();
    process.kill(pid, 'SIGSTOP');
    await stalled;
    t.push(performance.now() - t0);
    process.kill(pid, 'SIGCONT');
    await r.shutdown();
    await call;
  }
  t.sort((a, b) => a - b);
  emit({ bench: 'runner.stallDetect', worldSize: 2, stallMs: 5000, p50Ms: round(pct(t, 50)), maxMs: round(t[t.length - 1]) });
}

async function start() {
  const trials = quick ? 2 : 5;
  const t = [];
  for (let i = 0; i < trials; i++) {
    const r = new DistributedRunner(BenchWorker, { worldSize: 4, devices: 'cpu', logger: quiet });
    const t0 = performance.now();
    await r.start();
    t.push(performance.now() - t0);
    await r.shutdown();
  }
  t.sort((a, b) => a - b);
  emit({ bench: 'runner.start', worldSize: 4, ms: round(pct(t, 50)) });
}

async function rss() {
  const steps = quick ? 200 : 2000;
  const payloadBytes = 44236800;
  const r = new DistributedRunner(BenchWorker, { worldSize: 2, devices: 'cpu', logger: quiet });
  await r.start();
  try {
    for (let i = 0; i < 50; i++) await r.generateView({ payloadBytes });
    globalThis.gc?.();
    const before = process.memoryUsage().rss;
    for (let i = 0; i < steps; i++) await r.generateView({ payloadBytes });
    globalThis.gc?.();
    const after = process.memoryUsage().rss;
    emit({ bench: 'runner.rss', steps, payloadBytes, growthPct: round(((after - before) / before) * 100) });
  } finally {
    await r.shutdown();
  }
}

async function baseline() {
  const child = spawn(process.execPath, ['-e', "process.on('message', (m) => process.send(m))"], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const t = [];
  for (let i = 0; i < 3000; i++) {
    const t0 = performance.now();
    await new Promise((res) => {
      child.once('message', res);
      child.send({ t: 'call', id: i });
    });
    t.push(performance.now() - t0);
  }
  child.kill();
  t.sort((a, b) => a - b);
  const src = new Uint8Array(44236800).fill(1);
  const dst = new Uint8Array(44236800);
  const m = [];
  for (let i = 0; i < 50; i++) {
    const t0 = performance.now();
    dst.set(src);
    m.push(performance.now() - t0);
  }
  m.sort((a, b) => a - b);
  emit({ bench: 'runner.baseline', ipcRoundTripP50Ms: round(pct(t.slice(500), 50)), memcpy44MBP50Ms: round(pct(m, 50)) });
}

const only = process.argv[2];
if (process.env.RUNNER_BENCH_BASELINE === '1') await baseline();
// RUNNER_BENCH_WORLD_SIZES=1,2,4,8 on machines with more cores (the GPU hosts have 16-32).
const sizes = (process.env.RUNNER_BENCH_WORLD_SIZES ?? '1,2,4').split(',').map(Number);
if (!only || only === 'step') {
  for (const n of sizes) await step(n, 24);
  for (const n of sizes) await step(n, 786432);
  for (const n of sizes) await step(n, 44236800);
  // Not in the list: rank 0 renders into worker.resultArray(), so no copy at all.
  await step(2, 786432, true);
  await step(2, 44236800, true);
  // The safe default (issue 17): generate() copies the result out of shared memory once; with
  // resultArray() on rank 0 that is the only copy (the app's own .slice() is no longer needed).
  await step(2, 44236800, false, true);
  await step(2, 44236800, true, true);
  await step(2, 44236800, true, false, true);
}
if (!only || only === 'crash') await crashDetect();
if (!only || only === 'idle') await idleCrash();
if (!only || only === 'stall') await stallDetect();
if (!only || only === 'start') await start();
if (!only || only === 'rss') await rss();
