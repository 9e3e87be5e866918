import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import {
  ModelNotLoadedError,
  ParallelVideoModel,
  RolloutExhausted,
  WeightsInvalidError,
  WeightsNotFoundError,
  frameSegments,
  loadWeights,
  normalizePrompt,
  rowShare,
  type ParallelVideoModelOptions,
} from '../src/model/index.js';

const here = dirname(fileURLToPath(import.meta.url));
const weightsRoot = resolve(here, '../weights');
const generator = resolve(here, '../scripts/generate-weights.mjs');

const tmpDirs: string[] = [];
function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), 'video-model-test-'));
  tmpDirs.push(d);
  return d;
}
afterAll(() => {
  for (const d of tmpDirs) rmSync(d, { recursive: true, force: true });
});

/** Mean absolute difference of two byte arrays, in 0..255 units. */
function meanAbsDiff(a: Uint8Array, b: Uint8Array): number {
  expect(a.length).toBe(b.length);
  let s = 0;
  for (let i = 0; i < a.length; i++) s += Math.abs((a[i] as number) - (b[i] as number));
  return s / a.length;
}

function model(opts: Partial<ParallelVideoModelOptions> = {}): ParallelVideoModel {
  return new ParallelVideoModel({ weightsRoot, backend: 'wasm', width: 64, height: 64, framesPerChunk: 4, env: {}, ...opts });
}

/** A copy of the committed weights folder that a test may damage. */
function weightsCopy(): string {
  const d = join(tmp(), 'weights');
  cpSync(weightsRoot, d, { recursive: true });
  return d;
}

const FOREST = 'A walk through a forest.';
const NEON = 'neon city at night';

describe('ParallelVideoModel', () => {
  it("renders rank 0's chunk into the memory allocFrames gives (the runner's result block), with the same bytes", async () => {
    const plain = model();
    await plain.load();
    const expected = (await plain.generate({ prompt: FOREST })).frames;
    const asked: number[] = [];
    const block = new Uint8Array(64 * 64 * 3 * 4 + 16);
    const m = model({ allocFrames: (bytes) => (asked.push(bytes), block.subarray(8, 8 + bytes)) });
    await m.load();
    const r = await m.generate({ prompt: FOREST });
    expect(asked).toEqual([64 * 64 * 3 * 4]);
    expect(r.frames.buffer).toBe(block.buffer);
    expect(r.frames.byteOffset).toBe(8);
    expect(Buffer.from(r.frames).equals(Buffer.from(expected))).toBe(true);
    plain.dispose();
    m.dispose();
  });

  describe('weights', () => {
    it('loads the committed weights and reports them in info()', async () => {
      const m = model();
      await m.load();
      const manifest = JSON.parse(readFileSync(join(weightsRoot, 'manifest.json'), 'utf8')) as { sha256: string };
      const info = m.info();
      expect(info.weights.sha256).toBe(manifest.sha256);
      expect(info.weights.parameters).toBeGreaterThan(10_000);
      expect(info.backend).toBe('wasm');
      expect(info.simd).toBe(true);
    });

    it('are exactly what the seeded generator script writes (reproducible, under 2 MB)', () => {
      const out = tmp();
      const r = spawnSync(process.execPath, [generator, out], { encoding: 'utf8' });
      expect(r.status, r.stderr).toBe(0);
      for (const f of ['manifest.json', 'cppn-v1.bin']) {
        expect(readFileSync(join(out, f)).equals(readFileSync(join(weightsRoot, f))), f).toBe(true);
      }
      expect(readFileSync(join(weightsRoot, 'cppn-v1.bin')).byteLength).toBeLessThan(2 * 1024 * 1024);
    });

    it('rejects a missing weights folder with weights_not_found naming the path', async () => {
      const missing = join(tmp(), 'no-such-weights');
      const err = await model({ weightsRoot: missing })
        .load()
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WeightsNotFoundError);
      expect((err as WeightsNotFoundError).code).toBe('weights_not_found');
      expect((err as Error).message).toContain(missing);
      expect((err as Error).message).toContain('generate-weights.mjs');
    });

    it('rejects a folder without manifest.json, naming the manifest path', async () => {
      const d = weightsCopy();
      rmSync(join(d, 'manifest.json'));
      const err = await loadWeights(d).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WeightsNotFoundError);
      expect((err as Error).message).toContain(join(d, 'manifest.json'));
    });

    it('rejects a truncated weights file with weights_invalid naming the file and both sizes', async () => {
      const d = weightsCopy();
      const bin = join(d, 'cppn-v1.bin');
      const bytes = readFileSync(bin);
      writeFileSync(bin, bytes.subarray(0, bytes.byteLength - 100));
      const err = await model({ weightsRoot: d })
        .load()
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WeightsInvalidError);
      expect((err as WeightsInvalidError).code).toBe('weights_invalid');
      expect((err as Error).message).toContain(bin);
      expect((err as Error).message).toContain(`${bytes.byteLength - 100} bytes`);
      expect((err as Error).message).toContain(`says ${bytes.byteLength}`);
    });

    it('rejects a modified weights file (checksum) and a manifest that is not JSON', async () => {
      const d = weightsCopy();
      const bin = join(d, 'cppn-v1.bin');
      const bytes = readFileSync(bin);
      bytes[1234] = (bytes[1234] as number) ^ 0xff;
      writeFileSync(bin, bytes);
      await expect(loadWeights(d)).rejects.toThrow(/SHA-256 .* \(the file was modified\)/);

      const d2 = weightsCopy();
      writeFileSync(join(d2, 'manifest.json'), '{ "format": ');
      const err = await loadWeights(d2).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WeightsInvalidError);
      expect((err as Error).message).toContain(join(d2, 'manifest.json'));
      expect((err as Error).message).toContain('not valid JSON');
    });

    it('rejects a manifest whose config does not match its tensors, naming the tensor', async () => {
      const d = weightsCopy();
      const p = join(d, 'manifest.json');
      const manifest = JSON.parse(readFileSync(p, 'utf8')) as { config: { mixUnits: number } };
      manifest.config.mixUnits = 40;
      writeFileSync(p, JSON.stringify(manifest));
      await expect(loadWeights(d)).rejects.toThrow(/tensor mix\.w has shape \[16,32\], expected \[16, 40\]/);
    });
  });

  describe('options', () => {
    it('checks options eagerly, naming the option', () => {
      expect(() => model({ width: 0 })).toThrow(new RangeError('options.width must be between 1 and 4096, got 0'));
      expect(() => model({ framesPerChunk: 1.5 })).toThrow(new TypeError('options.framesPerChunk must be an integer, got 1.5'));
      expect(() => model({ worldSize: 2, rank: 1 })).toThrow(/options\.comm is required when options\.worldSize is 2/);
      expect(() => model({ rank: 1 })).toThrow(RangeError);
    });

    it('refuses generate() before load() with model_not_loaded', async () => {
      const err = await model()
        .generate({ prompt: FOREST })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ModelNotLoadedError);
      expect((err as ModelNotLoadedError).code).toBe('model_not_loaded');
    });
  });

  describe('generate', () => {
    it('returns framesPerChunk contiguous RGB frames of width x height on rank 0', async () => {
      const m = new ParallelVideoModel({ weightsRoot, backend: 'wasm', width: 256, height: 256, framesPerChunk: 3, env: {} });
      await m.load();
      const r = await m.generate({ prompt: FOREST });
      expect(r.n).toBe(3);
      expect([r.width, r.height, r.chunk]).toEqual([256, 256, 0]);
      expect(r.frames).toBeInstanceOf(Uint8Array);
      expect(r.frames.length).toBe(3 * 256 * 256 * 3);
      expect(r.backends).toEqual([{ rank: 0, backend: 'wasm', adapter: null, pci: null }]);
      // A real picture: many distinct colours, not a flat fill.
      const colours = new Set<number>();
      for (let i = 0; i < 256 * 256 * 3; i += 3)
        colours.add(((r.frames[i] as number) << 16) | ((r.frames[i + 1] as number) << 8) | (r.frames[i + 2] as number));
      expect(colours.size).toBeGreaterThan(5000);
      expect((await m.generate({ prompt: FOREST })).chunk).toBe(1);
    });

    it('is deterministic: same prompt and seed give the same bytes, another seed other bytes', async () => {
      const a = model({ seed: 7 });
      const b = model({ seed: 7 });
      const c = model({ seed: 8 });
      await Promise.all([a.load(), b.load(), c.load()]);
      for (let i = 0; i < 2; i++) {
        const [ra, rb, rc] = [await a.generate({ prompt: FOREST }), await b.generate({ prompt: FOREST }), await c.generate({ prompt: FOREST })];
        expect(Buffer.from(ra.frames).equals(Buffer.from(rb.frames))).toBe(true);
        expect(meanAbsDiff(ra.frames, rc.frames)).toBeGreaterThan(20);
      }
    });

    it('makes visibly different frames for different prompts, and the same for prompts that differ only in case/punctuation', async () => {
      const m = model();
      await m.load();
      const first = async (prompt: string): Promise<Uint8Array> => {
        m.reset();
        return (await m.generate({ prompt })).frames;
      };
      const forest = await first(FOREST);
      const prompts = [NEON, 'ocean waves at sunset', 'a red fox in the snow', ''];
      for (const p of prompts) expect(meanAbsDiff(forest, await first(p)), p).toBeGreaterThan(20);
      expect(normalizePrompt('  A WALK, through a forest!! ')).toBe('a walk through a forest');
      expect(Buffer.from(await first('a walk through a FOREST')).equals(Buffer.from(forest))).toBe(true);
    });

    it('moves smoothly over time: consecutive frames differ a little, never by a jump', async () => {
      const m = model();
      await m.load();
      const frameBytes = 64 * 64 * 3;
      const diffs: number[] = [];
      let prev: Uint8Array | null = null;
      for (let c = 0; c < 6; c++) {
        const r = await m.generate({ prompt: FOREST });
        for (let f = 0; f < r.n; f++) {
          const frame = r.frames.subarray(f * frameBytes, (f + 1) * frameBytes);
          if (prev) diffs.push(meanAbsDiff(prev, frame));
          prev = frame;
        }
      }
      expect(Math.min(...diffs)).toBeGreaterThan(0.3);
      expect(Math.max(...diffs)).toBeLessThan(10);
    });

    it('blends a new prompt in over promptTransitionFrames instead of cutting', async () => {
      const frameBytes = 64 * 64 * 3;
      const maxStep = async (transition: number): Promise<number> => {
        const m = model({ promptTransitionFrames: transition });
        await m.load();
        let prev = (await m.generate({ prompt: FOREST })).frames.subarray(3 * frameBytes);
        let max = 0;
        for (let c = 0; c < 8; c++) {
          const r = await m.generate({ prompt: NEON });
          for (let f = 0; f < r.n; f++) {
            const frame = r.frames.subarray(f * frameBytes, (f + 1) * frameBytes);
            max = Math.max(max, meanAbsDiff(prev, frame));
            prev = frame;
          }
        }
        return max;
      };
      const cut = await maxStep(0);
      const blended = await maxStep(24);
      expect(cut).toBeGreaterThan(40);
      expect(blended).toBeLessThan(cut / 3);
    });

    it('throws RolloutExhausted after rolloutChunks chunks until reset(), which restarts the rollout with the weights loaded', async () => {
      const m = model({ rolloutChunks: 2 });
      await m.load();
      const first = await m.generate({ prompt: FOREST });
      await m.generate({ prompt: FOREST });
      for (let i = 0; i < 2; i++) {
        const err = await m.generate({ prompt: FOREST }).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(RolloutExhausted);
        expect((err as RolloutExhausted).code).toBe('rollout_exhausted');
        expect((err as Error).message).toContain('after 2 chunks');
      }
      expect(m.chunkIndex).toBe(2);
      m.reset();
      expect(m.loaded).toBe(true);
      const again = await m.generate({ prompt: FOREST });
      expect(again.chunk).toBe(0);
      expect(Buffer.from(again.frames).equals(Buffer.from(first.frames))).toBe(true);
    });
  });

  describe('row partition', () => {
    it('gives every row to exactly one rank, shares differing by at most one row, in rank order', () => {
      for (const total of [1, 7, 64, 256, 4 * 256, 3 * 97]) {
        for (const world of [1, 2, 3, 4, 8]) {
          let next = 0;
          const sizes: number[] = [];
          for (let r = 0; r < world; r++) {
            const s = rowShare(total, world, r);
            expect(s.start).toBe(next);
            next = s.end;
            sizes.push(s.end - s.start);
          }
          expect(next).toBe(total);
          expect(Math.max(...sizes) - Math.min(...sizes)).toBeLessThanOrEqual(1);
        }
      }
    });

    it('splits a share into per-frame row ranges', () => {
      // 3 frames of 64 rows over 2 ranks: rank 0 gets frame 0 and half of frame 1.
      expect(frameSegments(rowShare(192, 2, 0), 64)).toEqual([
        { frame: 0, y0: 0, y1: 64 },
        { frame: 1, y0: 0, y1: 32 },
      ]);
      expect(frameSegments(rowShare(192, 2, 1), 64)).toEqual([
        { frame: 1, y0: 32, y1: 64 },
        { frame: 2, y0: 0, y1: 64 },
      ]);
    });
  });
});
