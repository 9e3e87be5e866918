// Benchmarks of the rank-to-rank collectives (issue 12). Plain JS against the compiled dist/.
// One JSON object per line:
//   {"bench":"collective.gather"|"collective.allGather","impl","worldSize","bytes","p50Ms","p99Ms","memcpyP50Ms","ratio"}
// bytes: each rank's part. One collective per generate() call, as a model's step does.
// p50Ms/p99Ms: that collective as rank 0 sees it (from the moment every rank has left a barrier
// to the moment rank 0 holds every part). memcpyP50Ms: one Uint8Array.set of one part into a
// reused buffer, in rank 0's process, right after each collective.
// ratio = p50Ms / memcpyP50Ms (target for gather of an 11 MB part: <= 1.5).
//
// COLL_BENCH_BASELINE=<path of another build's packages/distributed/dist/index.js> adds, for each
// world size, the same lines measured with that build (impl "baseline"), right after ours.
// COLL_BENCH_QUICK=1: fewer iterations. COLL_BENCH_WORLD_SIZES (default 2,4), COLL_BENCH_BYTES
// (default 65536,1048576,11059200).
import { DistributedRunner } from '../packages/distributed/dist/index.js';
import { CollBenchWorker } from '../packages/distributed/test/fixtures/coll-bench.mjs';

const quick = process.env.COLL_BENCH_QUICK === '1';
const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const round = (x) => Math.round(x * 1000) / 1000;
const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
const list = (v, d) => (v ?? d).split(',').map(Number);

const impls = [{ impl: 'new', Runner: DistributedRunner }];
if (process.env.COLL_BENCH_BASELINE) {
  const mod = await import(new URL(`file://${process.env.COLL_BENCH_BASELINE}`).href);
  impls.push({ impl: 'baseline', Runner: mod.DistributedRunner });
}

for (const worldSize of list(process.env.COLL_BENCH_WORLD_SIZES, '2,4')) {
  for (const { impl, Runner } of impls) {
    const r = new Runner(CollBenchWorker, { worldSize, devices: 'cpu', logger: quiet, callTimeoutMs: 600_000 });
    await r.start();
    try {
      for (const bytes of list(process.env.COLL_BENCH_BYTES, '65536,1048576,11059200')) {
        const iters = quick ? 30 : bytes > 4e6 ? 200 : 1000;
        for (const op of ['gather', 'allGather']) {
          await r.generate({ op, bytes, check: true });
          for (let i = 0; i < (quick ? 3 : 20); i++) await r.generate({ op, bytes });
          const t = new Float64Array(iters);
          const m = new Float64Array(iters);
          for (let i = 0; i < iters; i++) ({ ms: t[i], memcpyMs: m[i] } = await r.generate({ op, bytes }));
          t.sort();
          m.sort();
          const res = { p50: pct(t, 50), p99: pct(t, 99), memcpyP50: pct(m, 50) };
          emit({
            bench: `collective.${op}`,
            impl,
            worldSize,
            bytes,
            p50Ms: round(res.p50),
            p99Ms: round(res.p99),
            memcpyP50Ms: round(res.memcpyP50),
            ratio: round(res.p50 / res.memcpyP50),
          });
        }
      }
    } finally {
      await r.shutdown();
    }
  }
}
