// CameraWorker through a real DistributedRunner: real rank processes running the compiled
// dist/ (`pnpm build` first, which `pnpm test` does). Two ranks share each frame by rows.
import { DistributedRunner } from '@reactor/distributed';
import { silentLogger } from '@reactor/log';
import { useRunners } from '@reactor/runtime/testing';
import { afterEach, describe, expect, it } from 'vitest';
import { CameraWorker } from '../src/camera-worker.js';
import { effectParams } from '../src/effects.js';
import { reference, testPicture } from './reference.js';

const track = useRunners(afterEach);

describe('CameraWorker', () => {
  it('applies each effect across 2 CPU ranks (each its band of rows) and matches the 2-D reference', async () => {
    const runner = track(new DistributedRunner(CameraWorker, { logger: silentLogger, worldSize: 2, devices: 'cpu', loadArgs: {} }));
    await runner.start();
    const W = 64;
    const H = 41; // odd: the bands are 20 and 21 rows
    const frame = testPicture(W, H, 7);
    for (const [effect, strength] of [
      ['cartoon', 0.5],
      ['blur', 1],
      ['edges', 0.3],
      ['none', 0],
    ] as const) {
      const r = await runner.generate({ frame, width: W, height: H, effect, strength });
      expect(r).toMatchObject({ width: W, height: H });
      expect(Buffer.from(r.frame).equals(Buffer.from(reference(frame, W, H, effectParams(effect, strength)))), effect).toBe(true);
    }
  });

  it("refuses an unknown effect with the rank's RangeError, and keeps working", async () => {
    const runner = track(new DistributedRunner(CameraWorker, { logger: silentLogger, worldSize: 2, devices: 'cpu', loadArgs: {} }));
    await runner.start();
    const frame = testPicture(8, 4);
    const err = await runner.generate({ frame, width: 8, height: 4, effect: 'sepia' as 'none', strength: 0 }).catch((e: unknown) => e);
    expect((err as Error).message).toContain('unknown effect "sepia"; pick one of cartoon, blur, edges, none');
    const ok = await runner.generate({ frame, width: 8, height: 4, effect: 'none', strength: 0 });
    expect(Buffer.from(ok.frame).equals(Buffer.from(frame))).toBe(true);
  });
});
