// VideoWorker through a real DistributedRunner: real rank processes running the compiled
// dist/ (build first: `pnpm --filter @reactor/distributed build && pnpm --filter
// @reactor/app-video build`, which `pnpm test` does).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DistributedRunner } from '@reactor/distributed';
import { useRunners } from '@reactor/runtime/testing';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { RolloutExhausted, VideoWorker, WeightsNotFoundError, type VideoLoadArgs } from '../src/video-worker.js';

const here = dirname(fileURLToPath(import.meta.url));
const weightsRoot = resolve(here, '../weights');
const scratch = mkdtempSync(join(tmpdir(), 'video-worker-test-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const track = useRunners(afterEach);

const noop = () => {};
const quiet = { debug: noop, info: noop, warn: noop, error: noop, child: () => quiet };

function runner(worldSize: number, args: Partial<VideoLoadArgs> = {}, env: Record<string, string> = {}) {
  return track(
    new DistributedRunner(VideoWorker, {
      worldSize,
      devices: 'cpu',
      loadArgs: { weightsRoot, backend: 'wasm', width: 64, height: 64, framesPerChunk: 3, rolloutChunks: 3, ...args },
      env,
      logger: quiet,
    }),
  );
}

describe('VideoWorker', () => {
  it('renders byte-identical chunks with 1 and 2 ranks (rows split mid-frame), prompt changes included', async () => {
    // 3 frames of 64 rows over 2 ranks: rank 0 renders frame 0 and the top half of frame 1,
    // rank 1 the bottom half of frame 1 and frame 2.
    const one = runner(1);
    const two = runner(2);
    await Promise.all([one.start(), two.start()]);
    const prompts = ['A walk through a forest.', 'A walk through a forest.', 'neon city at night'];
    for (const [i, prompt] of prompts.entries()) {
      const a = await one.generate({ prompt });
      const b = await two.generate({ prompt });
      expect(a.n).toBe(3);
      expect(b.n).toBe(3);
      expect(b.chunk).toBe(i);
      expect(b.frames.length).toBe(3 * 64 * 64 * 3);
      expect(Buffer.from(b.frames).equals(Buffer.from(a.frames)), `chunk ${i}`).toBe(true);
    }
    const last = await two.generate({ prompt: 'x' }).catch((e: unknown) => e);
    expect(last).toBeInstanceOf(RolloutExhausted);
    await two.reset();
    const again = await two.generate({ prompt: 'neon city at night' });
    expect(again.backends).toEqual([
      { rank: 0, backend: 'wasm', adapter: null, pci: null },
      { rank: 1, backend: 'wasm', adapter: null, pci: null },
    ]);
  });

  it('renders byte-identical frames with 3 ranks of unequal shares (21, 21, 22 rows of one frame)', async () => {
    const one = runner(1, { framesPerChunk: 1 });
    const three = runner(3, { framesPerChunk: 1 });
    await Promise.all([one.start(), three.start()]);
    for (let i = 0; i < 2; i++) {
      const a = await one.generate({ prompt: 'a red fox in the snow' });
      const b = await three.generate({ prompt: 'a red fox in the snow' });
      expect(b.n).toBe(1);
      expect(Buffer.from(b.frames).equals(Buffer.from(a.frames)), `chunk ${i}`).toBe(true);
    }
  });

  it('steers with a picture and renders the soundtrack byte-identically with 1 and 2 ranks (rows split mid-frame)', async () => {
    const one = runner(1, { audioSampleRate: 48_000, imageTransitionFrames: 4, rolloutChunks: 10 });
    const two = runner(2, { audioSampleRate: 48_000, imageTransitionFrames: 4, rolloutChunks: 10 });
    await Promise.all([one.start(), two.start()]);
    const target = new Uint8Array(64 * 64 * 3).map((_, i) => (i % 3 === 0 ? 230 : (i * 7) % 50));
    for (const image of [null, { id: 1, target }, { id: 1, target }, null]) {
      const a = await one.generate({ prompt: 'harbour at dawn', image });
      const b = await two.generate({ prompt: 'harbour at dawn', image });
      expect(Buffer.from(b.frames).equals(Buffer.from(a.frames))).toBe(true);
      expect(b.audio).toHaveLength(3 * 2000);
      expect(
        Buffer.from(b.audio.buffer, b.audio.byteOffset, b.audio.byteLength).equals(Buffer.from(a.audio.buffer, a.audio.byteOffset, a.audio.byteLength)),
      ).toBe(true);
    }
  });

  it('throws RolloutExhausted in the parent as an instance, stays healthy, and reset() restarts the rollout', async () => {
    const r = runner(2, { rolloutChunks: 1, framesPerChunk: 2 });
    await r.start();
    const first = await r.generate({ prompt: 'ocean waves at sunset' });
    const err = await r.generate({ prompt: 'ocean waves at sunset' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RolloutExhausted);
    expect((err as RolloutExhausted).code).toBe('rollout_exhausted');
    expect(r.healthy).toBe(true);
    await r.reset();
    const again = await r.generate({ prompt: 'ocean waves at sunset' });
    expect(again.chunk).toBe(0);
    expect(Buffer.from(again.frames).equals(Buffer.from(first.frames))).toBe(true);
  });

  it("fails start() with the rank's WeightsNotFoundError naming the missing folder", async () => {
    const missing = join(scratch, 'nothing-here');
    const r = runner(2, { weightsRoot: missing });
    const err = await r.start().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WeightsNotFoundError);
    expect((err as WeightsNotFoundError).code).toBe('weights_not_found');
    expect((err as Error).message).toContain(missing);
  });

  it("REACTOR_BACKEND in the ranks' environment overrides loadArgs.backend", async () => {
    const r = runner(1, { backend: 'wasm' }, { REACTOR_BACKEND: 'cpu' });
    await r.start();
    const res = await r.generate({ prompt: 'a red fox in the snow' });
    expect(res.backends).toEqual([{ rank: 0, backend: 'cpu', adapter: null, pci: null }]);
  });
});
