/**
 * The sequence-parallel video model behind the seed's worker (`worker/video_model.py`), through
 * the page's `video_worker.py` on real Python ranks: the same frames at world sizes 1 and 2,
 * prompt-conditioned, moving, and rollouts that end with RolloutExhausted on every rank.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DistributedRunner, pythonWorker } from '@reactor/distributed';
// Types only from the app (no @reactor/runtime import: this test is the model half alone).
import type { VideoInput, VideoResult } from '../src/index.js';

const WORKER_DIR = fileURLToPath(new URL('../worker/', import.meta.url));
class RolloutExhausted extends Error {
  declare readonly chunks: number;
}

const PY = process.env.REACTOR_PYTHON ?? '/usr/bin/python3';
const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const weights = mkdtempSync(join(tmpdir(), 'seed-video-model-'));
// Three chunks per rollout keeps the test short; the rest is the model's defaults.
writeFileSync(join(weights, 'config.json'), JSON.stringify({ rollout_chunks: 3 }));

function runner(worldSize: number): DistributedRunner<VideoInput, VideoResult> {
  return new DistributedRunner(
    pythonWorker<VideoInput, VideoResult>('video_worker:VideoWorker', { path: [WORKER_DIR], interpreter: PY, errors: { RolloutExhausted } }),
    {
      worldSize,
      loadArgs: { weights_root: weights },
      logger: quiet,
    },
  );
}

const diff = (a: Uint8Array, b: Uint8Array) => {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += Math.abs(a[i]! - b[i]!);
  return s / a.length;
};

describe('video_model.ParallelVideoModel behind video_worker.py', () => {
  const one = runner(1);
  const two = runner(2);
  beforeAll(async () => {
    await Promise.all([one.start(), two.start()]);
  }, 60_000);
  afterAll(async () => {
    await Promise.all([one.shutdown(), two.shutdown()]);
    rmSync(weights, { recursive: true, force: true });
  });

  it('makes the same frames at world size 1 and 2 (tokens split across ranks, all_gather per layer, gathered on rank 0)', async () => {
    for (let chunk = 1; chunk <= 3; chunk++) {
      const [a, b] = await Promise.all([one.generate({ prompt: 'A walk through a forest.' }), two.generate({ prompt: 'A walk through a forest.' })]);
      expect(a).toMatchObject({ width: 64, height: 48, count: 4, chunk });
      expect(a.frames).toBeInstanceOf(Uint8Array);
      expect(a.frames.byteLength).toBe(4 * 48 * 64 * 3);
      // float64 on CPU: byte-identical (docs/decisions.md, issue 23, gives the tolerance elsewhere).
      expect(Buffer.from(b.frames).equals(Buffer.from(a.frames))).toBe(true);
      // It moves: the chunk's first and last frames differ.
      const f = 48 * 64 * 3;
      expect(diff(a.frames.subarray(0, f), a.frames.subarray(3 * f))).toBeGreaterThan(0.5);
    }
  });

  it('ends a rollout with RolloutExhausted on every rank (the runner stays healthy); reset() starts it over, the same frames again', async () => {
    const err = await two.generate({ prompt: 'A walk through a forest.' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RolloutExhausted);
    expect((err as RolloutExhausted).chunks).toBe(3);
    expect(two.healthy).toBe(true);
    await Promise.all([one.reset(), two.reset()]);
    const [a, b] = await Promise.all([one.generate({ prompt: 'A walk through a forest.' }), two.generate({ prompt: 'A walk through a forest.' })]);
    expect(b.chunk).toBe(1);
    expect(Buffer.from(b.frames).equals(Buffer.from(a.frames))).toBe(true);
  });

  it('follows the prompt', async () => {
    await Promise.all([one.reset(), two.reset()]);
    const forest = await two.generate({ prompt: 'A walk through a forest.' });
    await two.reset();
    const neon = await two.generate({ prompt: 'Neon jellyfish in a midnight ocean.' });
    expect(diff(forest.frames, neon.frames)).toBeGreaterThan(8);
  });
});
