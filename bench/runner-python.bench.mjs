// Benchmarks of Python ranks (issue 23), beside TypeScript ranks in the same run. Plain JS
// against the compiled dist/. Prints one JSON object per line:
//   runner.python.step   p50/p99 of a step, `kind` ts|py, N = 1 and 2, a tiny result (24 B) and
//                        a 44 MB one: `path` view (generateView of a ready payload: rank 0 copies
//                        it into shared memory once), owned (generate(): one more copy out), and
//                        zeroCopy (result_array()/resultArray(): no copy at all)
//   runner.python.memcpy a 44 MB memcpy into a reused buffer in this process, the same run (the floor)
//   runner.python.killToClient  a Python rank of apps/seed-video SIGKILLed mid-stream under
//                        `reactor run` -> the session error at a client in this process (3 trials)
// REACTOR_PYTHON names the Python (default /usr/bin/python3 here); RUNNER_BENCH_QUICK=1 for fewer iterations.
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { WebSocket } from '../packages/server/node_modules/ws/wrapper.mjs';
import { connect } from '../packages/client/dist/index.js';
import { DistributedRunner, pythonWorker } from '../packages/distributed/dist/index.js';
import { BenchWorker } from '../packages/distributed/test/fixtures/bench.mjs';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const PY = process.env.REACTOR_PYTHON ?? '/usr/bin/python3';
const quick = process.env.RUNNER_BENCH_QUICK === '1';
const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const pct = (s, p) => s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
const round = (x) => Math.round(x * 1000) / 1000;
const BIG = 44 * 1024 * 1024;

function runner(kind, worldSize) {
  const worker =
    kind === 'py'
      ? pythonWorker('bench_worker:BenchWorker', { path: [join(repo, 'packages/distributed/test/fixtures/python')], interpreter: PY })
      : BenchWorker;
  return new DistributedRunner(worker, { worldSize, devices: 'cpu', logger: quiet });
}

async function steps(kind, worldSize) {
  const r = runner(kind, worldSize);
  await r.start();
  try {
    for (const [payloadBytes, path] of [
      [24, 'view'],
      [BIG, 'view'],
      [BIG, 'owned'],
      [BIG, 'zeroCopy'],
    ]) {
      const input = { payloadBytes, shared: path === 'zeroCopy' };
      const iters = quick ? 30 : payloadBytes > 1e6 ? 150 : 2000;
      const call = () => (path === 'owned' ? r.generate(input) : r.generateView(input).then((v) => v.value));
      for (let i = 0; i < Math.min(50, iters); i++) await call();
      const t = new Float64Array(iters);
      for (let i = 0; i < iters; i++) {
        const t0 = performance.now();
        const res = await call();
        t[i] = performance.now() - t0;
        if (res.frames.byteLength !== payloadBytes) throw new Error('wrong payload size');
      }
      t.sort();
      emit({ bench: 'runner.python.step', kind, worldSize, payloadBytes, path, p50Ms: round(pct(t, 50)), p99Ms: round(pct(t, 99)) });
    }
  } finally {
    await r.shutdown();
  }
}

function memcpy() {
  const src = new Uint8Array(BIG).fill(7);
  const dst = new Uint8Array(BIG);
  const t = [];
  for (let i = 0; i < (quick ? 10 : 40); i++) {
    const t0 = performance.now();
    dst.set(src);
    t.push(performance.now() - t0);
  }
  t.sort((a, b) => a - b);
  emit({ bench: 'runner.python.memcpy', bytes: BIG, p50Ms: round(pct(t, 50)) });
}

/** Python rank processes below `pid`. */
function pythonRanks(pid) {
  const parent = new Map();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) continue;
      parent.set(Number(d), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {}
  }
  const below = (p) => {
    for (let q = parent.get(p); q !== undefined && q > 1; q = parent.get(q)) if (q === pid) return true;
    return false;
  };
  return [...parent.keys()].filter((p) => {
    try {
      return below(p) && readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('reactor_worker._rank');
    } catch {
      return false;
    }
  });
}

async function killToClient() {
  const cli = join(repo, 'packages/cli/dist/main.js');
  const app = join(repo, 'apps/seed-video');
  const t = [];
  for (let trial = 0; trial < 3; trial++) {
    const child = spawn(process.execPath, [cli, 'run', '--manifest', join(app, 'reactor.yaml'), '--port', '0'], {
      cwd: app,
      stdio: ['ignore', 'pipe', 'ignore'],
      env: { ...process.env, REACTOR_PYTHON: PY },
    });
    try {
      const url = await new Promise((res, rej) => {
        let out = '';
        child.stdout.on('data', (d) => {
          out += d;
          const m = /Viewer: (\S+)/.exec(out);
          if (m) res(m[1]);
        });
        child.once('exit', (code) => rej(new Error(`reactor run exited ${code}`)));
      });
      const client = await connect(url, { WebSocket, reconnect: false });
      let frames = 0;
      client.on('frame', () => frames++);
      while (frames < 8) await new Promise((r) => setTimeout(r, 10));
      const told = new Promise((res) => client.on('session', (s) => s.error && res(performance.now())));
      const ranks = pythonRanks(child.pid);
      const t0 = performance.now();
      process.kill(ranks[1], 'SIGKILL');
      t.push((await told) - t0);
      client.close();
      const left = () => pythonRanks(child.pid).length;
      const end = performance.now() + 5000;
      while (left() > 0 && performance.now() < end) await new Promise((r) => setTimeout(r, 10));
      if (left() > 0) throw new Error('a rank outlived the failed session');
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
  }
  t.sort((a, b) => a - b);
  emit({ bench: 'runner.python.killToClient', trials: t.length, p50Ms: round(pct(t, 50)), maxMs: round(t[t.length - 1]) });
}

memcpy();
for (const worldSize of [1, 2]) for (const kind of ['ts', 'py']) await steps(kind, worldSize);
memcpy();
await killToClient();
