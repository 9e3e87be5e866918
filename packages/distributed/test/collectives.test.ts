import { describe, expect, it } from 'vitest';
import { DistributedRunner, RankDesyncError, SharedMemoryCapacityError, WorkerCrashedError, WorkerStalledError, WorkerTimeoutError } from '../src/index.js';
import { TYPED_ARRAY_CONSTRUCTORS } from '../src/collectives/types.js';
import { expectNothingLeft, fixture, quiet, segments, trackRunners } from './helpers.js';

describe('Collectives', () => {
  const track = trackRunners();

  async function start(worldSize: number, shm?: 'file', extra: Record<string, unknown> = {}) {
    const { CollectivesWorker } = await fixture('collectives');
    const runner: DistributedRunner<any, any, any> = track(
      new DistributedRunner(CollectivesWorker, { worldSize, logger: quiet, callTimeoutMs: 20_000, ...(shm ? { shm } : {}), ...extra }),
    );
    await runner.start();
    return runner;
  }

  it('barrier() returns once every rank has arrived', async () => {
    const runner = await start(3);
    expect(await runner.generate({ op: 'barrier' })).toEqual({ rank: 0, ok: true });
  });

  it("broadcast() copies root's array into every rank's array and resolves to that array", async () => {
    const runner = await start(3);
    const out = await runner.generate({ op: 'broadcast' });
    expect(out.same).toBe(true);
    expect(out.all).toEqual([Float32Array.from([1.5, 2.5, 3.5]), Float32Array.from([1.5, 2.5, 3.5]), Float32Array.from([1.5, 2.5, 3.5])]);
  });

  it("gather() gives root every rank's array in rank order (its own included, lengths may differ); others get null", async () => {
    const runner = await start(3);
    const out = await runner.generate({ op: 'gather' });
    expect(out.got).toEqual([Uint16Array.from([10]), Uint16Array.from([11, 11]), Uint16Array.from([12, 12, 12])]);
    expect(out.ownIsSame).toBe(true);
  });

  it('allGather() gives every rank every array in rank order', async () => {
    const runner = await start(3);
    const out = await runner.generate({ op: 'allGather' });
    const expected = [Int32Array.from([0, 0]), Int32Array.from([1, 100]), Int32Array.from([2, 200])];
    expect(out.got).toEqual(expected);
    const flat = Int32Array.from([0, 0, 1, 100, 2, 200]);
    expect(out.seenByAll).toEqual([flat, flat, flat]);
  });

  it('assembles a chunk of frames split by rank on rank 0', async () => {
    const runner = await start(2);
    const bytesPerFrame = 512 * 512 * 3;
    const out = (await runner.generate({ op: 'frames', frames: 4, bytesPerFrame })) as Uint8Array;
    expect(out.byteLength).toBe(4 * bytesPerFrame);
    expect(out[0]).toBe(1);
    expect(out[2 * bytesPerFrame]).toBe(2);
    expect(out[4 * bytesPerFrame - 1]).toBe(2);
  });

  it('reuses and grows its slots over many collectives and calls', async () => {
    const runner = await start(2);
    for (let call = 0; call < 3; call++) {
      const out = await runner.generate({ op: 'many', rounds: 20, grow: 20_000 });
      // sum over rounds i of (0 + i) + (1 + i)
      expect(out.sum).toBe(Array.from({ length: 20 }, (_, i) => 2 * i + 1).reduce((a, b) => a + b, 0));
    }
  });

  it('works over the file fallback', async () => {
    const runner = await start(3, 'file');
    expect(runner.shmBackend).toBe('file');
    const out = await runner.generate({ op: 'allGather' });
    expect(out.got).toEqual([Int32Array.from([0, 0]), Int32Array.from([1, 100]), Int32Array.from([2, 200])]);
  });

  it('with one rank, needs no other process', async () => {
    const runner = await start(1);
    expect((await runner.generate({ op: 'gather' })).got).toEqual([Uint16Array.from([10])]);
  });

  it('a rank that returns while its peers wait in a collective is a RankDesyncError at once', async () => {
    const runner = await start(3);
    const t0 = performance.now();
    const err = await runner.generate({ op: 'skipOnRank0' }).catch((e: unknown) => e);
    expect(performance.now() - t0).toBeLessThan(5_000);
    expect(err).toBeInstanceOf(RankDesyncError);
    expect((err as Error).message.split('\n')[0]).toMatch(
      /^Ranks disagreed in generate\(\): rank 0 finished generate\(\) while ranks? [12](, [12])? waits? for it in barrier\(\) \(collective #1\)\.$/,
    );
    await runner.shutdown();
    expectNothingLeft(runner);
  });

  it('a rank that returned before its peers reach a collective is a RankDesyncError when they arrive, not at the deadline', async () => {
    const runner = await start(2);
    const t0 = performance.now();
    const err = await runner.generate({ op: 'lateBarrier' }).catch((e: unknown) => e);
    expect(performance.now() - t0).toBeLessThan(10_000);
    expect(err).toBeInstanceOf(RankDesyncError);
    expect((err as Error).message.split('\n')[0]).toBe(
      'Ranks disagreed in generate(): rank 0 finished generate() while rank 1 waits for it in barrier() (collective #1).',
    );
    expectNothingLeft(runner);
  });

  it('collectives work in load(); a rank that skips one there fails start() with RankDesyncError', async () => {
    const { CollectivesWorker } = await fixture('collectives');
    const runner = track(new DistributedRunner(CollectivesWorker, { worldSize: 2, loadArgs: { skipBarrierOn: 1 }, logger: quiet }));
    const err = await runner.start().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RankDesyncError);
    expect((err as Error).message.split('\n')[0]).toBe(
      'Ranks disagreed in start(): rank 1 finished load() while rank 0 waits for it in barrier() (collective #0).',
    );
    expectNothingLeft(runner);
  });

  it('ranks calling different collectives is a RankDesyncError', async () => {
    const runner = await start(2);
    const err = await runner.generate({ op: 'mismatch' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RankDesyncError);
    expect((err as Error).message).toMatch(/collective #1: rank \d called (barrier|allGather)\(root 0\) but rank \d called (barrier|allGather)\(root 0\)/);
  });

  it('a receive array of the wrong length fails every rank that misuses it', async () => {
    const runner = await start(2);
    const err = await runner.generate({ op: 'badReceive' }).catch((e: unknown) => e);
    // rank 0 (root) succeeds, rank 1 fails: the ranks disagree.
    expect(err).toBeInstanceOf(RankDesyncError);
    expect(((err as Error).cause as Error).message).toMatchInlineSnapshot(
      `"broadcast(): rank 1 passed a Float32Array(2) to receive rank 0's Float32Array(4); pass an array of the same type and length."`,
    );
  });

  it('a bad root is a CollectiveError on every rank (healthy)', async () => {
    const runner = await start(2);
    const err = await runner.generate({ op: 'badRoot' }).catch((e: unknown) => e);
    expect(err).toMatchObject({ name: 'CollectiveError', code: 'collective_misuse', rank: 0 });
    expect((err as Error).message).toBe('gather(): root must be a rank between 0 and 1, got 99 (rank 0).');
    expect(runner.healthy).toBe(true);
  });

  describe('rank to rank', () => {
    const types = TYPED_ARRAY_CONSTRUCTORS.map((T) => T.name);

    async function expectMatrix(runner: DistributedRunner<any, any, any>, worldSize: number, calls: number) {
      const { matrixPart } = await fixture('collectives');
      // Repeated calls reuse the destination blocks; the roots move with the call number.
      for (let call = 0; call < calls; call++) {
        const out = await runner.generate({ op: 'matrix', call, types });
        for (const T of TYPED_ARRAY_CONSTRUCTORS) {
          const parts = Array.from({ length: worldSize }, (_, r) => matrixPart(T, r, call));
          const got = out[T.name];
          expect(got.allGather, `${T.name} allGather, call ${call}`).toEqual(parts);
          expect(got.gather, `${T.name} gather, call ${call}`).toEqual(call % worldSize === 0 ? parts : null);
          expect(got.broadcast, `${T.name} broadcast, call ${call}`).toEqual(parts[(call + 1) % worldSize]);
        }
      }
    }

    it.each([1, 2, 3, 4])(
      'gather, allGather and broadcast deliver every typed array type, uneven and empty parts included, over repeated calls (%i ranks)',
      async (worldSize) => {
        const runner = await start(worldSize);
        await expectMatrix(runner, worldSize, worldSize === 1 ? 2 : worldSize + 1);
        await runner.shutdown();
        expectNothingLeft(runner);
      },
      60_000,
    );

    it('does the same over the file fallback', async () => {
      const runner = await start(3, 'file');
      await expectMatrix(runner, 3, 3);
      await runner.shutdown();
      expectNothingLeft(runner);
    }, 60_000);

    it("writes each rank's part into that rank's block in /dev/shm, which grows when needed, is reused, and is gone after shutdown", async () => {
      const runner = await start(2);
      const blocks = () => segments(runner.segmentPrefix).filter((f) => f.includes('-coll-'));
      expect(await runner.generate({ op: 'sizes', bytes: 1000 })).toEqual([0, 1000]);
      // Only rank 1 sent a part: only its block exists.
      expect(blocks()).toEqual([expect.stringMatching(/-r1-coll-g1$/)]);
      // 3 MiB does not fit the first 1 MiB block: a new generation (the old one is unlinked when the next call begins).
      expect(await runner.generate({ op: 'sizes', bytes: 3 << 20 })).toEqual([0, 3 << 20]);
      expect(blocks()).toEqual(expect.arrayContaining([expect.stringMatching(/-r1-coll-g2$/)]));
      // The next calls fit in it: no new generation, and the old one is gone.
      expect(await runner.generate({ op: 'sizes', bytes: 3 << 20 })).toEqual([0, 3 << 20]);
      expect(blocks()).toEqual([expect.stringMatching(/-r1-coll-g2$/)]);
      await runner.shutdown();
      expectNothingLeft(runner);
    });

    it("a result stays valid through the call: passed on as the next collective's input, it is intact", async () => {
      const runner = await start(3);
      expect(await runner.generate({ op: 'passOn' })).toEqual({ again: [1.5, 2.5, 0.5] });
    });

    it('a part larger than maxShmBytes is a SharedMemoryCapacityError on every rank, not a desync (healthy)', async () => {
      const runner = await start(2, undefined, { maxShmBytes: 2 << 20 });
      const err = await runner.generate({ op: 'sizes', bytes: 3 << 20 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SharedMemoryCapacityError);
      expect((err as Error).message).toContain(
        "Shared memory for rank 1's collective parts needs 3.0 MiB but only 2.0 MiB are allowed by options.maxShmBytes.",
      );
      expect(runner.healthy).toBe(true);
      expect(await runner.generate({ op: 'sizes', bytes: 1000 })).toEqual([0, 1000]);
      await runner.shutdown();
      expectNothingLeft(runner);
    });

    it('collectives started together on one rank each get their own parts', async () => {
      const runner = await start(3);
      expect(await runner.generate({ op: 'concurrent' })).toEqual({ a: [0, 1, 2], b: [10, 11, 12] });
    });

    it('a rank that dies in a gather its peers wait in is a WorkerCrashedError at once, and no segment is left', async () => {
      const runner = await start(3);
      expect(await runner.generate({ op: 'sizes', bytes: 1 << 20 })).toEqual([0, 1 << 20, 1 << 20]);
      expect(segments(runner.segmentPrefix).filter((f) => f.includes('-coll-'))).toHaveLength(2);
      const t0 = performance.now();
      const err = await runner.generate({ op: 'crashInGather' }).catch((e: unknown) => e);
      expect(performance.now() - t0).toBeLessThan(10_000);
      expect(err).toBeInstanceOf(WorkerCrashedError);
      expect(err).toMatchObject({ code: 'worker_crashed', rank: 1, signal: 'SIGKILL' });
      expect(runner.healthy).toBe(false);
      await runner.shutdown();
      expectNothingLeft(runner);
    });

    it('a rank that never arrives fails the call at callTimeoutMs (WorkerTimeoutError), and no segment is left', async () => {
      const runner = await start(3, undefined, { callTimeoutMs: 1500 });
      const err = await runner.generate({ op: 'neverArrives' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WorkerTimeoutError);
      // Every rank that has not answered is named: rank 1, and its peers waiting for it in the gather.
      expect(err).toMatchObject({ code: 'worker_timeout', ranks: [0, 1, 2] });
      await runner.shutdown();
      expectNothingLeft(runner);
    });

    it('a rank blocked before it arrives fails the call at stallTimeoutMs (WorkerStalledError naming it)', async () => {
      const runner = await start(2, undefined, { stallMs: 300, stallTimeoutMs: 600 });
      const err = await runner.generate({ op: 'neverArrives', busy: true }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WorkerStalledError);
      expect(err).toMatchObject({ code: 'worker_stalled', ranks: [1] });
      await runner.shutdown();
      expectNothingLeft(runner);
    });
  });
});
