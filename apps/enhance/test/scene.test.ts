// The built-in scene: frames cut from a strip rendered once (sizes with a whole, power-of-two
// number of pixels per world unit) are the bytes of rendering each frame pixel by pixel.
import { describe, expect, it } from 'vitest';
import { renderScene, sceneFrames } from '../src/source.js';

function direct(first: number, n: number, width: number, height: number): Uint8Array {
  const out = new Uint8Array(n * width * height * 3);
  for (let f = 0; f < n; f++) renderScene(first + f, width, height, out.subarray(f * width * height * 3, (f + 1) * width * height * 3));
  return out;
}

describe('sceneFrames', () => {
  it('gives the bytes of the pixel-by-pixel rendering at strip sizes (320x180, 640x360) and others (64x36, 426x240)', () => {
    for (const [w, h] of [
      [320, 180],
      [640, 360],
      [64, 36],
      [426, 240],
    ] as const) {
      for (const first of [0, 1, 699, 1022, 1024, 2047, 5000]) {
        const got = sceneFrames(first, 3, w, h);
        expect(Buffer.compare(got, direct(first, 3, w, h)), `${w}x${h} from frame ${first}`).toBe(0);
      }
    }
  });

  it('pans: consecutive frames differ, and frame k + 1024 is frame k', () => {
    const [a, b] = [sceneFrames(10, 1, 320, 180), sceneFrames(11, 1, 320, 180)];
    expect(Buffer.compare(a, b)).not.toBe(0);
    expect(Buffer.compare(a, sceneFrames(10 + 1024, 1, 320, 180))).toBe(0);
  });
});
