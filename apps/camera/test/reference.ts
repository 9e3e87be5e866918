// Plain 2-D reference versions of the camera effects, written the slow, obvious way (every
// output pixel sums its whole window), to check the separable, row-split kernels against.
import type { EffectParams } from '../src/effects.js';

const clamp = (v: number, lo: number, hi: number): number => Math.min(hi, Math.max(lo, v));

/** A deterministic test picture: gradients, a disc and hard stripes (edges in every direction). */
export function testPicture(width: number, height: number, seed = 1): Uint8Array {
  const out = new Uint8Array(width * height * 3);
  let s = seed >>> 0;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
      const inDisc = (x - width / 2) ** 2 + (y - height / 2) ** 2 < (Math.min(width, height) / 3) ** 2;
      const stripe = Math.floor(x / 7) % 2 === 0;
      const o = (y * width + x) * 3;
      out[o] = inDisc ? 230 : Math.floor((255 * x) / width);
      out[o + 1] = stripe ? 200 : 40 + (s & 31);
      out[o + 2] = Math.floor((255 * y) / height) ^ (inDisc ? 0x80 : 0);
    }
  }
  return out;
}

const px = (src: Uint8Array, w: number, h: number, x: number, y: number, c: number): number => src[(clamp(y, 0, h - 1) * w + clamp(x, 0, w - 1)) * 3 + c]!;

export function refBlur(src: Uint8Array, w: number, h: number, r: number): Uint8Array {
  const out = new Uint8Array(src.length);
  const n = (2 * r + 1) ** 2;
  for (let y = 0; y < h; y++)
    for (let x = 0; x < w; x++)
      for (let c = 0; c < 3; c++) {
        let sum = 0;
        for (let dy = -r; dy <= r; dy++) for (let dx = -r; dx <= r; dx++) sum += px(src, w, h, x + dx, y + dy, c);
        out[(y * w + x) * 3 + c] = Math.round(sum / n); // n is odd: never a tie
      }
  return out;
}

function refSobel(src: Uint8Array, w: number, h: number): number[] {
  const lum = (x: number, y: number): number =>
    Math.floor((77 * px(src, w, h, x, y, 0) + 150 * px(src, w, h, x, y, 1) + 29 * px(src, w, h, x, y, 2) + 128) / 256);
  const mag: number[] = [];
  for (let y = 0; y < h; y++)
    for (let x = 0; x < w; x++) {
      let gx = 0;
      let gy = 0;
      const kx = [
        [-1, 0, 1],
        [-2, 0, 2],
        [-1, 0, 1],
      ];
      for (let j = -1; j <= 1; j++)
        for (let i = -1; i <= 1; i++) {
          gx += kx[j + 1]![i + 1]! * lum(x + i, y + j);
          gy += kx[i + 1]![j + 1]! * lum(x + i, y + j);
        }
      mag.push(Math.abs(gx) + Math.abs(gy));
    }
  return mag;
}

export function refEdges(src: Uint8Array, w: number, h: number, gain: number): Uint8Array {
  const out = new Uint8Array(src.length);
  refSobel(src, w, h).forEach((m, i) => out.fill(Math.min(255, Math.floor((m * gain) / 8)), i * 3, i * 3 + 3));
  return out;
}

export function refCartoon(src: Uint8Array, w: number, h: number, p: EffectParams): Uint8Array {
  const blurred = refBlur(src, w, h, p.radius);
  const mag = refSobel(blurred, w, h);
  const out = new Uint8Array(src.length);
  const step = 255 / (p.levels - 1);
  for (let i = 0; i < w * h; i++)
    for (let c = 0; c < 3; c++) {
      const level = Math.floor((blurred[i * 3 + c]! * p.levels) / 256);
      out[i * 3 + c] = mag[i]! >= p.threshold ? 0 : Math.round(level * step);
    }
  return out;
}

export function reference(src: Uint8Array, w: number, h: number, p: EffectParams): Uint8Array {
  switch (p.effect) {
    case 'blur':
      return refBlur(src, w, h, p.radius);
    case 'edges':
      return refEdges(src, w, h, p.gain);
    case 'cartoon':
      return refCartoon(src, w, h, p);
    case 'none':
      return src.slice();
  }
}
