#!/usr/bin/env node
// The world model as a pipeline over ranks (issue 39), for scripts/gpu/world.sh's `pipeline` part:
// chunks a second of the plain model (one rank) and of a 2-rank pipeline of each shape (`blocks`:
// the DiT's blocks split; `steps`: the denoising steps split), 2 calls in flight, generated weights.
// One JSON line per configuration on stdout, progress on stderr.
//   WORLD_PIPE_MODEL    model config (default wan-1.3b; small for a CPU rehearsal)
//   WORLD_PIPE_DEVICE   gpu (default): both stages share GPU 0 (gloo, through host memory: the
//                       runner gives each rank its own GPU, so this is the overhead's upper bound;
//                       on two GPUs NCCL moves the tensors); cpu: CPU ranks, one thread each
//   WORLD_PIPE_CHUNKS   timed chunks (default 12), after the warm-up in load() and 2 untimed
//   WORLD_PIPE_SHAPES   default none,blocks,steps
//   WORLD_PIPE_COMPILE  the world config's compile (default off: the same eager code in every shape)
import { fileURLToPath } from 'node:url';
import { DistributedRunner, pythonWorker } from '../../packages/distributed/dist/index.js';

const model = process.env.WORLD_PIPE_MODEL ?? 'wan-1.3b';
const gpu = (process.env.WORLD_PIPE_DEVICE ?? 'gpu') === 'gpu';
const chunks = Number(process.env.WORLD_PIPE_CHUNKS ?? 12);
const shapes = (process.env.WORLD_PIPE_SHAPES ?? 'none,blocks,steps').split(',');
const compile = process.env.WORLD_PIPE_COMPILE ?? 'off';
const PY = process.env.REACTOR_PYTHON ?? 'python3';
const python = fileURLToPath(new URL('../../apps/world/python/', import.meta.url));
const round = (x) => Math.round(x * 1000) / 1000;
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? round(s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]) : null;
};
const log = {
  debug() {},
  info: (m) => process.stderr.write(`${m}\n`),
  warn: (m) => process.stderr.write(`${m}\n`),
  error: (m) => process.stderr.write(`${m}\n`),
};
log.child = () => log;

async function measure(shape) {
  const worldSize = shape === 'none' ? 1 : 2;
  // One rank alone runs on its GPU as the app runs it; two stages share GPU 0 (see above).
  const devices = !gpu ? 'cpu' : worldSize === 1 ? [0] : 'cpu';
  const runner = new DistributedRunner(pythonWorker('reactor_world.worker:WorldWorker', { path: [python], interpreter: PY }), {
    worldSize,
    devices,
    logger: log,
    callTimeoutMs: 600_000,
    startTimeoutMs: 1_800_000,
    maxInFlight: 2,
    outputRank: worldSize - 1,
    loadArgs: {
      model,
      compile,
      warmup: true,
      pipeline: shape,
      ...(gpu && worldSize > 1 ? { share_gpu: 0, dist_backend: 'gloo' } : {}),
      ...(!gpu && { threads: 1 }),
    },
  });
  const t0 = performance.now();
  await runner.start();
  const loadS = (performance.now() - t0) / 1000;
  try {
    const input = (i) => ({ prompt: 'a forest at dawn', seed: i });
    for (let i = 0; i < 2; i++) await runner.generate(input(i));
    const gaps = [];
    const hashes = [];
    let last = performance.now();
    const start = last;
    const pending = [];
    const settle = async () => {
      const r = await pending.shift();
      const now = performance.now();
      gaps.push(now - last);
      last = now;
      hashes.push(r.latentHash);
      return r;
    };
    for (let i = 0; i < chunks; i++) {
      pending.push(runner.generate(input(2 + i)));
      if (pending.length >= 2) await settle();
    }
    while (pending.length) await settle();
    const seconds = (performance.now() - start) / 1000;
    return { shape, worldSize, chunksPerS: round(chunks / seconds), chunkGapMs: { p50: pct(gaps, 50), p99: pct(gaps, 99) }, loadS: round(loadS), hashes };
  } finally {
    await runner.shutdown();
  }
}

const results = [];
for (const shape of shapes) {
  try {
    const r = await measure(shape);
    results.push(r);
    process.stderr.write(`[world-pipeline] ${shape}: ${r.chunksPerS} chunks/s\n`);
  } catch (err) {
    process.stdout.write(`${JSON.stringify({ bench: 'error.world.pipeline', shape, message: String(err?.message ?? err).split('\n')[0] })}\n`);
  }
}
const plain = results.find((r) => r.shape === 'none');
for (const r of results) {
  const { hashes, ...rest } = r;
  process.stdout.write(
    `${JSON.stringify({
      bench: 'world.pipeline',
      model,
      device: gpu ? 'gpu (stages share GPU 0)' : 'cpu',
      compile,
      chunks,
      ...rest,
      ...(plain && r !== plain && { vsPlain: round(r.chunksPerS / plain.chunksPerS), sameLatents: JSON.stringify(hashes) === JSON.stringify(plain.hashes) }),
    })}\n`,
  );
}
