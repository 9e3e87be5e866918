// The row-split, separable kernels against plain 2-D reference loops (test/reference.ts):
// every effect at several strengths, whole frames and frames cut into bands at every split.
import { describe, expect, it } from 'vitest';
import { EFFECTS, applyEffectRows, effectParams, rowShare } from '../src/effects.js';
import { reference, testPicture } from './reference.js';

const W = 37;
const H = 23;
const src = testPicture(W, H);

function bands(p: ReturnType<typeof effectParams>, worldSize: number): Uint8Array {
  const out = new Uint8Array(W * H * 3);
  for (let r = 0; r < worldSize; r++) {
    const s = rowShare(H, worldSize, r);
    applyEffectRows(src, W, H, p, s.start, s.end, out.subarray(s.start * W * 3, s.end * W * 3));
  }
  return out;
}

describe('camera effects', () => {
  for (const effect of EFFECTS) {
    for (const strength of [0, 0.5, 1]) {
      it(`${effect} at strength ${strength} equals the 2-D reference, whole and split into 2, 3 and 7 bands`, () => {
        const p = effectParams(effect, strength);
        const want = reference(src, W, H, p);
        for (const worldSize of [1, 2, 3, 7]) expect(Buffer.from(bands(p, worldSize)).equals(Buffer.from(want)), `${worldSize} bands`).toBe(true);
      });
    }
  }

  it('changes the picture (every effect but none), more with more strength', () => {
    const diff = (a: Uint8Array): number => a.reduce((s, v, i) => s + Math.abs(v - src[i]!), 0) / a.length;
    expect(diff(bands(effectParams('none', 1), 1))).toBe(0);
    for (const effect of ['blur', 'edges', 'cartoon'] as const) expect(diff(bands(effectParams(effect, 0.5), 2)), effect).toBeGreaterThan(5);
    expect(diff(bands(effectParams('blur', 1), 1))).toBeGreaterThan(diff(bands(effectParams('blur', 0), 1)));
  });

  it('maps strength to the kernel parameters, clamping it to 0..1', () => {
    expect(effectParams('blur', 0).radius).toBe(1);
    expect(effectParams('blur', 1).radius).toBe(8);
    expect(effectParams('blur', 7).radius).toBe(8);
    expect(effectParams('edges', -1).gain).toBe(1);
    expect(effectParams('cartoon', 1)).toMatchObject({ radius: 4, levels: 3, threshold: 24 });
  });

  it('refuses a frame whose size does not match its bytes, and rows outside the frame', () => {
    const p = effectParams('blur', 0.5);
    expect(() => applyEffectRows(src.subarray(1), W, H, p, 0, H, new Uint8Array(W * H * 3))).toThrow(/a 37x23 RGB24 frame has 2553 bytes, got 2552/);
    expect(() => applyEffectRows(src, W, H, p, 0, H + 1, new Uint8Array(W * (H + 1) * 3))).toThrow(/rows \[0, 24\) are not inside a frame of 23 rows/);
  });
});
