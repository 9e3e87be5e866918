// Issue 39: a pipeline of Python ranks (torch.distributed send/recv on gloo) with calls in flight:
// the runner's maxInFlight and outputRank, the same answers as one rank, a stall named by the
// peer it waits on, and stages that disagree on shapes.
import { describe, expect, it } from 'vitest';
import { DistributedRunner, type StallInfo, pythonWorker } from '../src/index.js';
import { captureLogger, expectNothingLeft, quiet, trackRunners } from './helpers.js';
import { FIXTURES, PY } from './python-helpers.js';

const track = trackRunners();
const WORKER = 'pipeline_worker:PipelineWorker';
const DIM = 64;

function pipeline(worldSize: number, extra: Record<string, unknown> = {}) {
  return track(
    new DistributedRunner<any, any, any>(pythonWorker(WORKER, { path: [FIXTURES], interpreter: PY }), {
      worldSize,
      logger: quiet,
      loadArgs: { stages: 2, dim: DIM, work: 2 },
      ...extra,
    }),
  );
}

/** A deterministic input of `rows` x DIM. */
function input(i: number, rows = 8): Float32Array {
  return Float32Array.from({ length: rows * DIM }, (_, k) => Math.sin(i * 7919 + k));
}

describe('a pipeline of Python ranks', () => {
  it('gives the one-rank answers, in call order, from the last stage, with calls in flight', async () => {
    const one = pipeline(1);
    await one.start();
    const expected: Float32Array[] = [];
    for (let i = 0; i < 5; i++) expected.push((await one.generate({ x: input(i) })).y);
    await one.shutdown();

    const two = pipeline(2, { maxInFlight: 3, outputRank: 1 });
    await two.start();
    // Three calls at once (every slot), then one more as each settles.
    const pending = [0, 1, 2].map((i) => two.generate({ x: input(i), tag: i }));
    const got: { y: Float32Array; stage: number; tag: number }[] = [];
    for (let next = 3; pending.length > 0; next++) {
      got.push(await pending.shift()!);
      if (next < 5) pending.push(two.generate({ x: input(next), tag: next }));
    }
    expect(got.map((r) => r.tag)).toEqual([0, 1, 2, 3, 4]);
    expect(got.map((r) => r.stage)).toEqual([1, 1, 1, 1, 1]);
    // Bit-exact: the same float32 operations in the same order, one thread a rank.
    for (let i = 0; i < 5; i++) expect(got[i]!.y).toEqual(expected[i]);
    await two.shutdown();
    expectNothingLeft(two);
  });

  it('names the peer a stalled stage waits on, and fails every call in flight when stages disagree on shapes', async () => {
    const log = captureLogger();
    const runner = pipeline(2, { maxInFlight: 2, outputRank: 1, stallMs: 300, logger: log });
    await runner.start();
    const stalls: StallInfo[] = [];
    runner.on('stall', (s) => stalls.push(s));
    // Rank 0 sleeps before it sends: rank 1 waits in recv from it.
    const slow = await runner.generate({ x: input(0), sleepBeforeSendOn: [0], ms: 1500 });
    expect(slow.stage).toBe(1);
    expect(stalls.find((s) => s.rank === 1)).toMatchObject({ phase: 'collective', waitsOn: { op: 'recv', rank: 0 } });
    expect(log.lines.join('\n')).toContain('in collective (receiving from rank 0: rank 1 waits on rank 0) during generate()');
    expect(runner.healthy).toBe(true);

    const bad = runner.generate({ x: input(1), wrongShapeOn: [1] }).catch((e: unknown) => e);
    const behind = runner.generate({ x: input(2) }).catch((e: unknown) => e);
    const err = (await bad) as Error & { cause: Error & { code: string; rank: number; rankStack: string } };
    expect(err).toMatchObject({ code: 'rank_desync' });
    expect(err.cause).toMatchObject({ name: 'PipelineShapeError', code: 'pipeline_shape', rank: 1 });
    expect(err.cause.message).toBe(
      'pipeline stages disagree: rank 1 expected [8, 128] float32 from rank 0, which sent [8, 64] float32. ' +
        "Give every stage the same config (the split of the blocks, the chunk's shape, the dtype).",
    );
    expect(err.cause.rankStack).toContain('pipeline_worker.py');
    // The call behind it fails with it, at once.
    expect(await behind).toBe(err);
    await runner.shutdown();
    expectNothingLeft(runner);
  });
});
