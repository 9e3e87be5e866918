// set_image and the soundtrack, in the model: a picture pulls the frames' colours and layout
// towards it over the transition and lets go when cleared; the soundtrack has one frame's
// worth of samples per frame, continuous in phase across chunks, and follows the prompt.
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  ParallelVideoModel,
  STEER_GRID,
  channelStats,
  soundtrackPartials,
  steerTarget,
  type ParallelVideoModelOptions,
  type VideoResult,
} from '../src/model/index.js';

const weightsRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../weights');
const W = 32;
const H = 32;

function model(opts: Partial<ParallelVideoModelOptions> = {}): ParallelVideoModel {
  return new ParallelVideoModel({ weightsRoot, backend: 'wasm', width: W, height: H, framesPerChunk: 4, imageTransitionFrames: 8, env: {}, ...opts });
}

/** Mean colour of each frame of a chunk. */
function frameMeans(r: VideoResult): [number, number, number][] {
  const bytes = H * W * 3;
  return Array.from({ length: r.n }, (_, f) => channelStats(r.frames.subarray(f * bytes, (f + 1) * bytes)).mean);
}

const dist = (a: readonly number[], b: readonly number[]): number => Math.hypot(...a.map((v, i) => v - b[i]!));

/** A picture: left half orange, right half deep blue. */
function picture(width: number, height: number): Uint8Array {
  const out = new Uint8Array(width * height * 3);
  for (let y = 0; y < height; y++) for (let x = 0; x < width; x++) out.set(x < width / 2 ? [240, 140, 20] : [10, 30, 160], (y * width + x) * 3);
  return out;
}

describe('steerTarget', () => {
  it('keeps the layout and colours of the picture at the frame size (crop to aspect, coarse grid)', () => {
    const t = steerTarget({ data: picture(90, 40), width: 90, height: 40 }, W, H);
    expect(t).toHaveLength(W * H * 3);
    // Far left orange, far right blue; the middle blends over about one grid cell.
    expect(Array.from(t.subarray(0, 3))).toEqual([240, 140, 20]);
    expect(Array.from(t.subarray((W - 1) * 3, W * 3))).toEqual([10, 30, 160]);
    const mid = t[(W / 2) * 3]!;
    expect(mid).toBeGreaterThan(10);
    expect(mid).toBeLessThan(240);
    expect(STEER_GRID).toBeGreaterThan(4);
  });

  it('refuses a picture whose bytes do not match its size', () => {
    expect(() => steerTarget({ data: new Uint8Array(10), width: 4, height: 4 }, W, H)).toThrow(/a 4x4 RGB24 picture has 48 bytes, got 10/);
  });
});

describe('ParallelVideoModel with a picture', () => {
  it("moves the frames' mean colour towards the picture over the transition, and back once it is cleared", async () => {
    const plain = model();
    const steered = model();
    await plain.load();
    await steered.load();
    const target = steerTarget({ data: picture(64, 64), width: 64, height: 64 }, W, H);
    const goal = channelStats(target).mean;
    const prompt = 'ocean waves at sunset';

    const a0 = await plain.generate({ prompt });
    const b0 = await steered.generate({ prompt, image: null });
    expect(Buffer.from(b0.frames).equals(Buffer.from(a0.frames)), 'no picture: the same frames as before').toBe(true);

    // 8 transition frames = 2 chunks; distances to the picture's mean colour shrink frame by frame.
    const distances: number[] = [];
    const plainDistances: number[] = [];
    let last: [VideoResult, VideoResult] | undefined;
    for (let i = 0; i < 3; i++) {
      const a = await plain.generate({ prompt });
      const b = await steered.generate({ prompt, image: { id: 1, target } });
      distances.push(...frameMeans(b).map((m) => dist(m, goal)));
      plainDistances.push(...frameMeans(a).map((m) => dist(m, goal)));
      last = [a, b];
    }
    for (let i = 1; i < 8; i++) expect(distances[i]!, `frame ${i}`).toBeLessThan(distances[i - 1]!);
    expect(distances[11]!).toBeLessThan(plainDistances[11]! * 0.3);
    // The layout too: the picture's orange left half and blue right half show in the last frame.
    const redLeftMinusRight = (r: VideoResult): number => {
      const f = r.frames.subarray(3 * H * W * 3);
      let d = 0;
      for (let y = 0; y < H; y++) for (let x = 0; x < W; x++) d += (x < W / 2 ? 1 : -1) * f[(y * W + x) * 3]!;
      return d / ((H * W) / 2);
    };
    expect(redLeftMinusRight(last![1])).toBeGreaterThan(redLeftMinusRight(last![0]) + 50);

    // Cleared: it ramps back out, and after the transition the frames are the plain model's again.
    for (let i = 0; i < 2; i++) {
      await plain.generate({ prompt });
      await steered.generate({ prompt });
    }
    const a = await plain.generate({ prompt });
    const b = await steered.generate({ prompt });
    expect(Buffer.from(b.frames).equals(Buffer.from(a.frames))).toBe(true);
  });

  it('refuses a target of the wrong size, naming the size it needs', async () => {
    const m = model();
    await m.load();
    await expect(m.generate({ prompt: 'x', image: { id: 1, target: new Uint8Array(5) } })).rejects.toThrow(/Uint8Array of 32x32x3 = 3072 bytes }, got 5 bytes/);
  });
});

describe('ParallelVideoModel soundtrack', () => {
  it('returns one frame of samples per frame, continuous in phase across chunks, following the prompt', async () => {
    const m = model({ audioSampleRate: 48_000 });
    await m.load();
    const a = await m.generate({ prompt: 'forest' });
    const b = await m.generate({ prompt: 'forest' });
    expect(a.sampleRate).toBe(48_000);
    expect(a.audio).toHaveLength(4 * 2000); // 48 kHz / 24 frames per second
    // No click at the chunk boundary: the step there is no larger than the largest inside a chunk.
    const joined = new Int16Array([...a.audio, ...b.audio]);
    let inside = 0;
    for (let i = 1; i < a.audio.length; i++) inside = Math.max(inside, Math.abs(joined[i]! - joined[i - 1]!));
    expect(inside).toBeGreaterThan(0);
    expect(Math.abs(joined[a.audio.length]! - joined[a.audio.length - 1]!)).toBeLessThanOrEqual(inside);
    // A different prompt plays a different chord.
    const p1 = soundtrackPartials(new Float64Array(24).fill(0.9)).map((p) => p.freq);
    const p2 = soundtrackPartials(new Float64Array(24).fill(-0.9)).map((p) => p.freq);
    expect(p1).not.toEqual(p2);
    const c = model({ audioSampleRate: 48_000, promptTransitionFrames: 0 });
    await c.load();
    const forest = await c.generate({ prompt: 'forest' });
    const neon = await c.generate({ prompt: 'neon city at night' });
    expect(Buffer.from(forest.audio.buffer).equals(Buffer.from(neon.audio.buffer))).toBe(false);
  });

  it('has no soundtrack by default, and refuses a rate that is not a whole number of samples per frame', () => {
    expect(() => model({ audioSampleRate: 44_100 })).toThrow(/must be a whole number of samples per frame, got 44100 × 0.041666666666666664 = 1837.5/);
    expect(model().audioSampleRate).toBe(0);
  });
});
