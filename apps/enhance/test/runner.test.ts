// The model on every rank of a DistributedRunner (real child processes, wasm): 2 ranks give the
// same bytes as 1, split by tiles or by frames, and rank 0 assembles the side-by-side view.
import { createHash } from 'node:crypto';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DistributedRunner } from '@reactor/distributed';
import { silentLogger } from '@reactor/log';
import { afterEach, describe, expect, it } from 'vitest';
import { EnhanceWorker, WeightsCorruptError, type EnhanceInput, type EnhanceLoadArgs, type EnhanceResult } from '../src/enhance-worker.js';
import { sceneFrames } from '../src/source.js';
import { modelDir } from '../src/weights.js';

const runners: DistributedRunner<EnhanceInput, EnhanceResult, EnhanceLoadArgs>[] = [];
afterEach(async () => {
  await Promise.all(runners.splice(0).map((r) => r.shutdown()));
});

async function start(worldSize: number): Promise<DistributedRunner<EnhanceInput, EnhanceResult, EnhanceLoadArgs>> {
  const r = new DistributedRunner(EnhanceWorker, {
    worldSize,
    devices: 'cpu',
    logger: silentLogger,
    callTimeoutMs: 120_000,
    loadArgs: { model: 'slim', scale: 2, backend: 'wasm' },
  });
  runners.push(r);
  await r.start();
  return r;
}

const W = 36;
const H = 22;
const n = 3;
const frames = sceneFrames(40, n, W, H);
const step = (split: 'tiles' | 'frames', sideBySide = false): EnhanceInput => ({ frames, n, width: W, height: H, model: 'slim', scale: 2, split, sideBySide });
const hash = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

describe('EnhanceWorker on a DistributedRunner (wasm, CPU ranks)', () => {
  it('2 ranks give bit-identical frames to 1 rank, split by tiles and by frames', async () => {
    const one = await start(1);
    const ref = await one.generate(step('tiles'));
    expect([ref.n, ref.width, ref.height, ref.frames.length]).toEqual([n, W * 2, H * 2, n * W * 2 * H * 2 * 3]);
    expect(ref.ranks).toEqual([{ rank: 0, backend: 'wasm', adapter: null, pci: null }]);
    expect(ref.weightsSha256).toMatch(/^[0-9a-f]{64}$/);
    await one.shutdown();

    const two = await start(2);
    const tiles = await two.generate(step('tiles'));
    const byFrames = await two.generate(step('frames'));
    expect(tiles.ranks.map((r) => r.backend)).toEqual(['wasm', 'wasm']);
    expect(hash(tiles.frames)).toBe(hash(ref.frames));
    expect(hash(byFrames.frames)).toBe(hash(ref.frames));
    expect([tiles.n, tiles.width, tiles.height]).toEqual([ref.n, ref.width, ref.height]);
  }, 180_000);

  it('side by side: the enlarged input on the left, the upscaled frames on the right', async () => {
    const two = await start(2);
    const plain = await two.generate(step('tiles'));
    const side = await two.generate(step('frames', true));
    const oW = W * 2;
    expect([side.width, side.height]).toEqual([oW * 2, H * 2]);
    for (const [f, y] of [
      [0, 0],
      [1, 17],
      [2, H * 2 - 1],
    ] as const) {
      const row = side.frames.subarray((f * H * 2 + y) * oW * 2 * 3, (f * H * 2 + y + 1) * oW * 2 * 3);
      expect(Buffer.compare(row.subarray(oW * 3), plain.frames.subarray((f * H * 2 + y) * oW * 3, (f * H * 2 + y + 1) * oW * 3))).toBe(0);
      // left half: input pixel (x >> 1, y >> 1)
      const src = (f * H + (y >> 1)) * W * 3;
      for (const x of [0, 7, oW - 1])
        expect(Array.from(row.subarray(x * 3, x * 3 + 3))).toEqual(Array.from(frames.subarray(src + (x >> 1) * 3, src + (x >> 1) * 3 + 3)));
    }
  }, 180_000);

  it("pipelined: each call returns the previous call's frames, the same bytes as unpipelined; the first returns none; a reset drops the queued step", async () => {
    const two = await start(2);
    const other = sceneFrames(90, n, W, H);
    const ref = await two.generate(step('frames'));
    const refOther = await two.generate({ ...step('frames'), frames: other });
    const refSide = await two.generate(step('frames', true));

    const first = await two.generate({ ...step('frames'), pipeline: true });
    expect([first.n, first.frames.length]).toEqual([0, 0]);
    const second = await two.generate({ ...step('frames'), frames: other, pipeline: true });
    expect(hash(second.frames)).toBe(hash(ref.frames));
    // The side-by-side step keeps its own copy of the input for the left half.
    const third = await two.generate({ ...step('frames', true), pipeline: true });
    expect(hash(third.frames)).toBe(hash(refOther.frames));
    const fourth = await two.generate({ ...step('tiles'), pipeline: true });
    expect(hash(fourth.frames)).toBe(hash(refSide.frames));
    expect([fourth.width, fourth.height]).toEqual([refSide.width, refSide.height]);

    await two.reset();
    expect((await two.generate({ ...step('frames'), pipeline: true })).n).toBe(0);
    // Turning the pipeline off drops what was queued and answers the call itself.
    expect(hash((await two.generate({ ...step('frames'), frames: other })).frames)).toBe(hash(refOther.frames));
  }, 180_000);

  it('a step whose frames do not match their declared size fails on every rank with enhance_input_invalid; the runner stays usable', async () => {
    const two = await start(2);
    await expect(two.generate({ ...step('tiles'), n: 4 })).rejects.toMatchObject({ name: 'InputInvalidError', code: 'enhance_input_invalid' });
    expect(two.healthy).toBe(true);
    expect((await two.generate(step('tiles'))).n).toBe(n);
  }, 180_000);

  it('a corrupt weight file fails start() on the ranks with enhance_weights_corrupt naming the file, and leaves no rank running', async () => {
    const root = mkdtempSync(join(tmpdir(), 'enhance-corrupt-'));
    try {
      cpSync(modelDir('slim', 2), join(root, 'models', 'x2'), { recursive: true });
      const shard = join(root, 'models/x2/group1-shard1of1.bin');
      const b = readFileSync(shard);
      b[100] = b[100]! ^ 1;
      writeFileSync(shard, b);
      const r = new DistributedRunner(EnhanceWorker, {
        worldSize: 2,
        devices: 'cpu',
        logger: silentLogger,
        loadArgs: { model: 'slim', scale: 2, backend: 'wasm', modelRoots: { slim: root } },
      });
      runners.push(r);
      const err = (await r.start().then(
        () => null,
        (e: unknown) => e,
      )) as Error & { code?: string };
      expect(err).not.toBeNull();
      expect(err).toBeInstanceOf(WeightsCorruptError);
      expect(err.code).toBe('enhance_weights_corrupt');
      expect(err.message).toContain(`${shard} (ESRGAN slim x2) is corrupt: its SHA-256 is`);
      expect(
        r.pids.filter((p) => {
          try {
            process.kill(p, 0);
            return true;
          } catch {
            return false;
          }
        }),
      ).toEqual([]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  }, 120_000);
});
