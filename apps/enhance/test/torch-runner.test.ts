// The Python worker of `backend: torch` (reactor_enhance.worker:EnhanceTorchWorker) on a
// DistributedRunner, as the app builds it (Debian's /usr/bin/python3, torch on CPU, gloo between
// ranks): 2 ranks give the bytes of 1 split by frames, and within one level by tiles; side by side
// puts the enlarged input left; a model whose files are corrupt is a WeightsCorruptError (the
// app's own class, so it can tell the client `model_unavailable`) and the runner stays healthy.
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DistributedRunner, pythonWorker } from '@reactor/distributed';
import { silentLogger } from '@reactor/log';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { type EnhanceTorchLoadArgs, TORCH_PYTHON_DIR, TORCH_WORKER } from '../src/app.js';
import { PUBLISHED_SHA256 } from '../src/checksums.js';
import type { EnhanceInput, EnhanceResult } from '../src/enhance-worker.js';
import { InputInvalidError, WeightsCorruptError, WeightsMissingError } from '../src/errors.js';
import { sceneFrames } from '../src/source.js';
import { modelDir, modelPackageDir } from '../src/weights.js';

const PYTHON = process.env['REACTOR_TEST_PYTHON'] ?? '/usr/bin/python3';
const scratch = mkdtempSync(join(tmpdir(), 'enhance-torch-runner-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const runners: DistributedRunner<EnhanceInput, EnhanceResult, EnhanceTorchLoadArgs>[] = [];
afterEach(async () => {
  await Promise.all(runners.splice(0).map((r) => r.shutdown()));
});

async function start(worldSize: number, packageDirs: Record<string, string> = { slim: modelPackageDir('slim') }) {
  const r = new DistributedRunner(
    pythonWorker<EnhanceInput, EnhanceResult, EnhanceTorchLoadArgs>(TORCH_WORKER, {
      path: [TORCH_PYTHON_DIR],
      interpreter: PYTHON,
      errors: { WeightsMissingError, WeightsCorruptError, InputInvalidError },
    }),
    {
      worldSize,
      devices: 'cpu',
      logger: silentLogger,
      callTimeoutMs: 120_000,
      loadArgs: { model: 'slim', scale: 4, package_dirs: packageDirs, published_sha256: PUBLISHED_SHA256, compile: 'auto' },
    },
  );
  runners.push(r);
  await r.start();
  return r;
}

const W = 24;
const H = 14;
const n = 3;
const frames = sceneFrames(40, n, W, H);
const step = (split: 'tiles' | 'frames', sideBySide = false, model: 'slim' | 'medium' = 'slim'): EnhanceInput => ({
  frames,
  n,
  width: W,
  height: H,
  model,
  scale: 4,
  split,
  sideBySide,
});
const offByMoreThanOne = (a: Uint8Array, b: Uint8Array): number => a.reduce((k, v, i) => k + (Math.abs(v - (b[i] as number)) > 1 ? 1 : 0), 0) / a.length;

describe('EnhanceTorchWorker on a DistributedRunner (Python ranks, torch on CPU)', () => {
  it('2 ranks give the frames of 1 rank: identical split by frames, within one level by tiles; side by side adds the enlarged input', async () => {
    const one = await start(1);
    const ref = await one.generate(step('tiles'));
    expect([ref.n, ref.width, ref.height, ref.frames.length]).toEqual([n, W * 4, H * 4, n * W * 4 * H * 4 * 3]);
    expect(ref.frames).toBeInstanceOf(Uint8Array);
    expect(ref.ranks).toEqual([{ rank: 0, backend: 'torch-cpu', adapter: 'CPU (1 threads)', pci: null, compile: 'eager (compile: auto)' }]);
    expect(ref.weightsSha256).toMatch(/^[0-9a-f]{64}$/);
    await one.shutdown();

    const two = await start(2);
    const byFrames = await two.generate(step('frames'));
    const tiles = await two.generate(step('tiles'));
    expect(byFrames.ranks.map((r) => r.backend)).toEqual(['torch-cpu', 'torch-cpu']);
    expect(Buffer.compare(byFrames.frames, ref.frames)).toBe(0);
    expect(tiles.frames.length).toBe(ref.frames.length);
    expect(offByMoreThanOne(tiles.frames, ref.frames)).toBe(0);

    const side = await two.generate(step('frames', true));
    expect([side.width, side.height]).toEqual([W * 8, H * 4]);
    const row = W * 8 * 3;
    for (const y of [0, 17, H * 4 - 1]) {
      // Right half: the upscaled row; left half: the input pixel repeated 4 times.
      expect(Buffer.compare(side.frames.subarray(y * row + W * 12, (y + 1) * row), ref.frames.subarray(y * W * 12, (y + 1) * W * 12))).toBe(0);
      const src = frames.subarray((Math.floor(y / 4) * W + 5) * 3, (Math.floor(y / 4) * W + 5) * 3 + 3);
      expect([...side.frames.subarray(y * row + 20 * 3, y * row + 20 * 3 + 3)]).toEqual([...src]);
    }
  }, 180_000);

  it('a model whose shard changed is a WeightsCorruptError naming the file; the runner stays healthy and the loaded model keeps working', async () => {
    const root = mkdtempSync(join(scratch, 'medium-'));
    cpSync(modelDir('medium', 4), join(root, 'models', 'x4'), { recursive: true });
    const shard = join(root, 'models/x4/group1-shard1of1.bin');
    const bytes = new Uint8Array(readFileSync(shard));
    bytes[7] = (bytes[7] as number) ^ 1;
    writeFileSync(shard, bytes);
    const r = await start(2, { slim: modelPackageDir('slim'), medium: root });
    const err = await r.generate(step('frames', false, 'medium')).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WeightsCorruptError);
    expect((err as WeightsCorruptError).code).toBe('enhance_weights_corrupt');
    expect((err as Error).message).toContain(`${shard} (ESRGAN medium x4) is corrupt: its SHA-256 is`);
    expect(r.healthy).toBe(true);
    const ok = await r.generate(step('frames'));
    expect(ok.n).toBe(n);
  }, 180_000);
});
