// runner.snapshot() / runner.restore() (docs/snapshots.md): rank 0's snapshot() comes back with
// its typed arrays; restore() gives every rank the same value; a worker without the hooks is
// refused with snapshot_unsupported and the runner stays healthy. TypeScript and Python ranks.
import { describe, expect, it } from 'vitest';
import { DistributedRunner, pythonWorker } from '../src/index.js';
import { fixture, quiet, trackRunners } from './helpers.js';
import { FIXTURES, PY } from './python-helpers.js';

type Step = { step: number; drift: number[]; restores: number };

describe('runner snapshot() and restore()', () => {
  const track = trackRunners();

  async function roundTrip(runner: DistributedRunner<any, Step, any>): Promise<void> {
    await runner.start();
    await runner.generate({});
    await runner.generate({});
    const snap = (await runner.snapshot()) as { step: number; drift: Float32Array; rank: number };
    expect(snap.step).toBe(2);
    expect(snap.rank).toBe(0);
    expect(snap.drift).toBeInstanceOf(Float32Array);
    expect([...snap.drift]).toEqual([2, 2, 2, 2]);
    const next = await runner.generate({});
    await runner.generate({});
    await runner.restore(snap);
    // The same step again, from the snapshot's state.
    const again = await runner.generate({});
    expect(again.step).toBe(next.step);
    expect(again.drift).toEqual(next.drift);
    expect(again.restores).toBe(1);
    expect(runner.healthy).toBe(true);
  }

  it('TypeScript ranks: a snapshot round trip gives the same step again', async () => {
    const { SnapshotWorker } = await fixture('snapshot');
    await roundTrip(track(new DistributedRunner(SnapshotWorker, { worldSize: 2, logger: quiet })));
  });

  it('Python ranks: a snapshot round trip gives the same step again', async () => {
    await roundTrip(
      track(new DistributedRunner(pythonWorker('snapshot_worker:SnapshotWorker', { path: [FIXTURES], interpreter: PY }), { worldSize: 2, logger: quiet })),
    );
  });

  it('a worker without snapshot()/restore() is refused with snapshot_unsupported; the runner stays healthy', async () => {
    const { NoSnapshotWorker } = await fixture('snapshot');
    const runners = [
      track(new DistributedRunner(NoSnapshotWorker, { worldSize: 1, logger: quiet })),
      track(new DistributedRunner(pythonWorker('snapshot_worker:NoSnapshotWorker', { path: [FIXTURES], interpreter: PY }), { worldSize: 1, logger: quiet })),
    ];
    for (const runner of runners) {
      await runner.start();
      await expect(runner.snapshot()).rejects.toMatchObject({ code: 'snapshot_unsupported', message: expect.stringContaining('has no snapshot()') });
      await expect(runner.restore({})).rejects.toMatchObject({ code: 'snapshot_unsupported' });
      expect(runner.healthy).toBe(true);
      expect(await runner.generate({})).toBe(1);
    }
  });
});
