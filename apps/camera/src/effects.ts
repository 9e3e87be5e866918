/**
 * The camera app's per-frame effects, in plain TypeScript on RGB24 frames. Each function
 * computes only the output rows `[y0, y1)` of a frame, reading whatever input rows it needs
 * around them (a blur's radius, the edge filter's one row), so ranks of a runner can split a
 * frame by rows and their outputs, put together, equal the whole frame computed at once.
 *
 * Integer arithmetic throughout, with borders clamped (the edge pixel repeats): the result is
 * the same bytes whatever the split, and a test can recompute it with a plain 2-D loop.
 */

/** The effects the app offers (the `effect` state field). */
export const EFFECTS = ['cartoon', 'blur', 'edges', 'none'] as const;
export type EffectName = (typeof EFFECTS)[number];

/** What `strength` (0..1) means for each effect: the integer parameters the kernels use. */
export interface EffectParams {
  effect: EffectName;
  /** Box blur radius, pixels (blur: 1..8; cartoon: 1..4). */
  radius: number;
  /** Edge gain numerator: output = min(255, |gx| + |gy|) · gain / 8 (edges: 1..16). */
  gain: number;
  /** Cartoon: colour levels per channel (6 at strength 0 .. 3 at 1). */
  levels: number;
  /** Cartoon: Sobel magnitude at or above which a pixel is drawn as an outline (64 .. 24). */
  threshold: number;
}

/** The kernels' parameters for an effect at `strength` (clamped to 0..1). */
export function effectParams(effect: EffectName, strength: number): EffectParams {
  const s = Math.min(1, Math.max(0, Number.isFinite(strength) ? strength : 0));
  switch (effect) {
    case 'blur':
      return { effect, radius: 1 + Math.round(s * 7), gain: 0, levels: 0, threshold: 0 };
    case 'edges':
      return { effect, radius: 0, gain: 1 + Math.round(s * 15), levels: 0, threshold: 0 };
    case 'cartoon':
      return { effect, radius: 1 + Math.round(s * 3), gain: 0, levels: 6 - Math.round(s * 3), threshold: 64 - Math.round(s * 40) };
    case 'none':
      return { effect, radius: 0, gain: 0, levels: 0, threshold: 0 };
  }
}

const clamp = (v: number, lo: number, hi: number): number => (v < lo ? lo : v > hi ? hi : v);

function checkFrame(src: Uint8Array, width: number, height: number, y0: number, y1: number, out: Uint8Array): void {
  if (!Number.isInteger(width) || !Number.isInteger(height) || width < 1 || height < 1) {
    throw new RangeError(`frame size must be positive integers, got ${width}x${height}`);
  }
  if (src.length !== width * height * 3) throw new RangeError(`a ${width}x${height} RGB24 frame has ${width * height * 3} bytes, got ${src.length}`);
  if (!Number.isInteger(y0) || !Number.isInteger(y1) || y0 < 0 || y1 > height || y0 > y1) {
    throw new RangeError(`rows [${y0}, ${y1}) are not inside a frame of ${height} rows`);
  }
  if (out.length < (y1 - y0) * width * 3) throw new RangeError(`rows [${y0}, ${y1}) need ${(y1 - y0) * width * 3} output bytes, got ${out.length}`);
}

/**
 * Box blur of radius `r` (a `(2r+1)²` window, borders clamped), rows `[y0, y1)` into `out`
 * (`(y1 − y0) · width · 3` bytes). Separable: a horizontal pass over the input rows the window
 * touches, then a vertical pass; each output is `round(sum / (2r+1)²)` of the exact integer sum.
 */
export function boxBlurRows(src: Uint8Array, width: number, height: number, r: number, y0: number, y1: number, out: Uint8Array): void {
  checkFrame(src, width, height, y0, y1, out);
  if (y0 === y1) return;
  const rowLen = width * 3;
  const a = Math.max(0, y0 - r);
  const b = Math.min(height, y1 + r);
  // Horizontal sums of rows [a, b): at most (2r+1)·255 per channel.
  const hs = new Uint32Array((b - a) * rowLen);
  for (let y = a; y < b; y++) {
    const row = y * rowLen;
    const o = (y - a) * rowLen;
    for (let c = 0; c < 3; c++) {
      // A running sum along the row, the clamped border pixel repeating.
      let sum = 0;
      for (let dx = -r; dx <= r; dx++) sum += src[row + clamp(dx, 0, width - 1) * 3 + c]!;
      for (let x = 0; x < width; x++) {
        hs[o + x * 3 + c] = sum;
        sum += src[row + clamp(x + r + 1, 0, width - 1) * 3 + c]! - src[row + clamp(x - r, 0, width - 1) * 3 + c]!;
      }
    }
  }
  const n = (2 * r + 1) * (2 * r + 1);
  const half = n >> 1;
  const col = new Uint32Array(rowLen);
  for (let y = y0; y < y1; y++) {
    col.fill(0);
    for (let dy = -r; dy <= r; dy++) {
      const o = (clamp(y + dy, 0, height - 1) - a) * rowLen;
      for (let i = 0; i < rowLen; i++) col[i]! += hs[o + i]!;
    }
    const o = (y - y0) * rowLen;
    for (let i = 0; i < rowLen; i++) out[o + i] = Math.floor((col[i]! + half) / n);
  }
}

/** Rec. 601 luma in integers: `(77 R + 150 G + 29 B + 128) >> 8`. */
export function luma(r: number, g: number, b: number): number {
  return (77 * r + 150 * g + 29 * b + 128) >> 8;
}

/**
 * Sobel gradient magnitude `|gx| + |gy|` (0..2040) of the luma of `band`, which holds the
 * frame's rows `[bandStart, bandStart + band.length / (width·3))`, for rows `[y0, y1)`; every
 * neighbour row (clamped to the frame) must be inside the band.
 */
function sobelRows(band: Uint8Array, bandStart: number, width: number, height: number, y0: number, y1: number): Uint16Array {
  const rows = band.length / (width * 3);
  const lum = new Uint8Array(rows * width);
  for (let i = 0, p = 0; i < lum.length; i++, p += 3) lum[i] = luma(band[p]!, band[p + 1]!, band[p + 2]!);
  const out = new Uint16Array((y1 - y0) * width);
  for (let y = y0; y < y1; y++) {
    const up = (clamp(y - 1, 0, height - 1) - bandStart) * width;
    const mid = (y - bandStart) * width;
    const down = (clamp(y + 1, 0, height - 1) - bandStart) * width;
    for (let x = 0; x < width; x++) {
      const l = clamp(x - 1, 0, width - 1);
      const r = clamp(x + 1, 0, width - 1);
      const gx = lum[up + r]! + 2 * lum[mid + r]! + lum[down + r]! - (lum[up + l]! + 2 * lum[mid + l]! + lum[down + l]!);
      const gy = lum[down + l]! + 2 * lum[down + x]! + lum[down + r]! - (lum[up + l]! + 2 * lum[up + x]! + lum[up + r]!);
      out[(y - y0) * width + x] = Math.abs(gx) + Math.abs(gy);
    }
  }
  return out;
}

/** Edge image: grey `min(255, (|gx| + |gy|) · gain >> 3)` of the luma's Sobel gradient, rows `[y0, y1)`. */
export function edgeRows(src: Uint8Array, width: number, height: number, gain: number, y0: number, y1: number, out: Uint8Array): void {
  checkFrame(src, width, height, y0, y1, out);
  if (y0 === y1) return;
  const a = Math.max(0, y0 - 1);
  const b = Math.min(height, y1 + 1);
  const mag = sobelRows(src.subarray(a * width * 3, b * width * 3), a, width, height, y0, y1);
  for (let i = 0; i < mag.length; i++) {
    const v = Math.min(255, (mag[i]! * gain) >> 3);
    out[i * 3] = v;
    out[i * 3 + 1] = v;
    out[i * 3 + 2] = v;
  }
}

/**
 * Cartoon: the box-blurred frame with each channel posterised to `levels` levels
 * (`round(floor(v · levels / 256) · 255 / (levels − 1))`), and black outlines where the blurred
 * luma's Sobel magnitude is at least `threshold`; rows `[y0, y1)`.
 */
export function cartoonRows(src: Uint8Array, width: number, height: number, p: EffectParams, y0: number, y1: number, out: Uint8Array): void {
  checkFrame(src, width, height, y0, y1, out);
  if (y0 === y1) return;
  // The blurred rows the outline filter reads: one beyond each end (clamped).
  const a = Math.max(0, y0 - 1);
  const b = Math.min(height, y1 + 1);
  const blurred = new Uint8Array((b - a) * width * 3);
  boxBlurRows(src, width, height, p.radius, a, b, blurred);
  const mag = sobelRows(blurred, a, width, height, y0, y1);
  const lut = new Uint8Array(256);
  for (let v = 0; v < 256; v++) lut[v] = Math.round((Math.floor((v * p.levels) / 256) * 255) / (p.levels - 1));
  const off = (y0 - a) * width * 3;
  for (let i = 0; i < mag.length; i++) {
    const edge = mag[i]! >= p.threshold;
    for (let c = 0; c < 3; c++) out[i * 3 + c] = edge ? 0 : lut[blurred[off + i * 3 + c]!]!;
  }
}

/** Applies an effect to rows `[y0, y1)` of a frame, into `out` (`(y1 − y0) · width · 3` bytes). */
export function applyEffectRows(src: Uint8Array, width: number, height: number, p: EffectParams, y0: number, y1: number, out: Uint8Array): void {
  switch (p.effect) {
    case 'blur':
      return boxBlurRows(src, width, height, p.radius, y0, y1, out);
    case 'edges':
      return edgeRows(src, width, height, p.gain, y0, y1, out);
    case 'cartoon':
      return cartoonRows(src, width, height, p, y0, y1, out);
    case 'none':
      checkFrame(src, width, height, y0, y1, out);
      out.set(src.subarray(y0 * width * 3, y1 * width * 3));
      return;
  }
}

/** The rows `[start, end)` rank `rank` of `worldSize` computes in a frame of `height` rows (shares differ by at most one row). */
export function rowShare(height: number, worldSize: number, rank: number): { start: number; end: number } {
  return { start: Math.floor((rank * height) / worldSize), end: Math.floor(((rank + 1) * height) / worldSize) };
}
