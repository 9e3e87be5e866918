// The model on wasm at a small size, in this process: the upscaled picture has the right size,
// looks like the input (close to an enlarged copy, not noise), and a band of rows cut with the
// receptive radius as overlap gives the same bytes as the whole frame.
import * as tf from '@tensorflow/tfjs-core';
import { beforeAll, describe, expect, it } from 'vitest';
import { planBackends, selectBackend } from '../src/backend.js';
import { rowTile } from '../src/partition.js';
import { resizeRgb, sceneFrames } from '../src/source.js';
import { Upscaler } from '../src/upscaler.js';
import { loadModel, readModelFiles } from '../src/weights.js';

let slim: Upscaler;
beforeAll(async () => {
  expect((await selectBackend(planBackends('wasm', {}), 0)).backend).toBe('wasm');
  expect(tf.getBackend()).toBe('wasm');
  const files = readModelFiles('slim', 4);
  slim = new Upscaler(files, await loadModel(files));
}, 60_000);

const W = 32;
const H = 20;

describe('Upscaler (slim x4 on wasm)', () => {
  it('turns 2 frames of 32x20 into 2 frames of 128x80 that resemble the enlarged input', async () => {
    const frames = sceneFrames(0, 2, W, H);
    const out = new Uint8Array(2 * 128 * 80 * 3);
    await slim.run({ data: frames, n: 2, width: W, height: H }, 0, 2, { y0: 0, y1: H, in0: 0, in1: H }, out);
    const big = sceneFrames(0, 1, 128, 80);
    const enlarged = resizeRgb(frames.subarray(0, W * H * 3), W, H, 128, 80);
    const mad = (a: Uint8Array, b: Uint8Array): number => a.reduce((s, v, i) => s + Math.abs(v - b[i]!), 0) / a.length;
    const first = out.subarray(0, 128 * 80 * 3);
    // Close to the scene (rendered at the output size) and to the enlarged input; far from a blank frame.
    expect(mad(first, big)).toBeLessThan(20);
    expect(mad(first, enlarged)).toBeLessThan(12);
    expect(mad(first, new Uint8Array(first.length))).toBeGreaterThan(60);
    // Not the same picture twice: the scene pans.
    expect(mad(first, out.subarray(128 * 80 * 3))).toBeGreaterThan(0);
  });

  it('a band of rows with the receptive radius as overlap gives the bytes of the whole frame (bit for bit)', async () => {
    const frames = sceneFrames(5, 1, W, H);
    const whole = new Uint8Array(128 * 80 * 3);
    await slim.run({ data: frames, n: 1, width: W, height: H }, 0, 1, { y0: 0, y1: H, in0: 0, in1: H }, whole);
    const rowBytes = 128 * 3;
    for (const parts of [2, 3]) {
      for (let r = 0; r < parts; r++) {
        const band = rowTile(H, parts, r, slim.radius);
        const out = new Uint8Array((band.y1 - band.y0) * 4 * rowBytes);
        await slim.run({ data: frames, n: 1, width: W, height: H }, 0, 1, band, out);
        expect(Buffer.compare(out, whole.subarray(band.y0 * 4 * rowBytes, band.y1 * 4 * rowBytes)), `band ${r} of ${parts}`).toBe(0);
      }
    }
    // And a band with too little overlap does differ: the overlap is what makes it exact.
    const band = { ...rowTile(H, 2, 0, 1) };
    const out = new Uint8Array((band.y1 - band.y0) * 4 * rowBytes);
    await slim.run({ data: frames, n: 1, width: W, height: H }, 0, 1, band, out);
    expect(Buffer.compare(out, whole.subarray(0, out.length))).not.toBe(0);
  });
});
