/**
 * How an uploaded picture steers the video (`set_image`): the app turns the picture into a
 * **target** at the model's frame size, a soft copy of it (cropped to the frame's aspect,
 * averaged down to a {@link STEER_GRID}-cell grid, bilinearly enlarged: its layout and colours,
 * not its detail). Every rank then moves each pixel of its rows towards the target:
 *
 * ```
 * palette  = mean_c(target) + (v − mean_c(frame)) · std_c(target) / std_c(frame)
 *                                  (colour transfer: the pattern recoloured with the target's
 *                                   per-channel mean and spread)
 * steered  = (1 − k) · palette + k · target      (k = {@link STEER_COMPOSITION}: its layout)
 * out      = (1 − w) · v + w · steered            (w: 0 → {@link STEER_MAX} over the transition)
 * ```
 *
 * `w` ramps in with a smoothstep over the model's image transition (default 72 frames, 3 s),
 * from 0 when a new picture arrives, and back out to 0 when the picture is cleared. The frame's
 * statistics are sums over the whole frame: each rank sums its rows ({@link frameSums}) and the
 * ranks exchange the sums (integers, exact in float64), so any split of rows across ranks gives
 * the same bytes.
 */
import { smoothstep } from './cppn.js';

/** Cells per side of the grid the picture is averaged down to. */
export const STEER_GRID = 12;
/** How much of the target's layout (vs. the recoloured pattern) the steered picture takes. */
export const STEER_COMPOSITION = 0.45;
/** The largest weight of the steered picture in the output: the pattern still shows through. */
export const STEER_MAX = 0.85;
/** The smallest spread of the frame the colour transfer divides by (a flat frame stays flat). */
const MIN_STD = 8;
/** Numbers {@link frameSums} writes per frame: sum and sum of squares of each channel, then the pixel count. */
export const FRAME_SUM_FIELDS = 7;

/** An RGB24 picture. */
export interface RgbImage {
  data: Uint8Array;
  width: number;
  height: number;
}

/**
 * The target of a picture at `width` x `height`: centre-cropped to that aspect, averaged over a
 * `STEER_GRID`-cell grid, then bilinearly enlarged.
 */
export function steerTarget(image: RgbImage, width: number, height: number): Uint8Array {
  const { data, width: iw, height: ih } = image;
  if (data.length !== iw * ih * 3 || iw < 1 || ih < 1) throw new RangeError(`a ${iw}x${ih} RGB24 picture has ${iw * ih * 3} bytes, got ${data.length}`);
  // Centre crop to the frame's aspect ratio.
  let cw = iw;
  let ch = Math.round((iw * height) / width);
  if (ch > ih) {
    ch = ih;
    cw = Math.max(1, Math.round((ih * width) / height));
  }
  const cx = Math.floor((iw - cw) / 2);
  const cy = Math.floor((ih - ch) / 2);
  const G = STEER_GRID;
  const sum = new Float64Array(G * G * 3);
  const count = new Float64Array(G * G);
  for (let y = 0; y < ch; y++) {
    const gy = Math.min(G - 1, Math.floor((y * G) / ch));
    for (let x = 0; x < cw; x++) {
      const gx = Math.min(G - 1, Math.floor((x * G) / cw));
      const s = ((cy + y) * iw + cx + x) * 3;
      const g = gy * G + gx;
      sum[g * 3] = (sum[g * 3] as number) + (data[s] as number);
      sum[g * 3 + 1] = (sum[g * 3 + 1] as number) + (data[s + 1] as number);
      sum[g * 3 + 2] = (sum[g * 3 + 2] as number) + (data[s + 2] as number);
      count[g] = (count[g] as number) + 1;
    }
  }
  // A cell the crop did not reach (a picture smaller than the grid) takes its neighbour's colour.
  const grid = new Float64Array(G * G * 3);
  for (let g = 0; g < G * G; g++) {
    let src = g;
    while (count[src] === 0 && src > 0) src--;
    const n = Math.max(1, count[src] as number);
    for (let c = 0; c < 3; c++) grid[g * 3 + c] = (sum[src * 3 + c] as number) / n;
  }
  const out = new Uint8Array(width * height * 3);
  for (let y = 0; y < height; y++) {
    // Cell centres sit at (i + 0.5) / G of the frame.
    const fy = Math.min(G - 1, Math.max(0, ((y + 0.5) * G) / height - 0.5));
    const y0 = Math.floor(fy);
    const y1 = Math.min(G - 1, y0 + 1);
    const ty = fy - y0;
    for (let x = 0; x < width; x++) {
      const fx = Math.min(G - 1, Math.max(0, ((x + 0.5) * G) / width - 0.5));
      const x0 = Math.floor(fx);
      const x1 = Math.min(G - 1, x0 + 1);
      const tx = fx - x0;
      for (let c = 0; c < 3; c++) {
        const a = (grid[(y0 * G + x0) * 3 + c] as number) * (1 - tx) + (grid[(y0 * G + x1) * 3 + c] as number) * tx;
        const b = (grid[(y1 * G + x0) * 3 + c] as number) * (1 - tx) + (grid[(y1 * G + x1) * 3 + c] as number) * tx;
        out[(y * width + x) * 3 + c] = Math.round(a * (1 - ty) + b * ty);
      }
    }
  }
  return out;
}

/** Per-channel mean and standard deviation of an RGB24 picture. */
export function channelStats(rgb: Uint8Array): { mean: [number, number, number]; std: [number, number, number] } {
  const n = Math.max(1, rgb.length / 3);
  const sum = [0, 0, 0];
  const sq = [0, 0, 0];
  for (let i = 0; i < rgb.length; i += 3) {
    for (let c = 0; c < 3; c++) {
      const v = rgb[i + c] as number;
      sum[c] = (sum[c] as number) + v;
      sq[c] = (sq[c] as number) + v * v;
    }
  }
  const mean = sum.map((s) => s / n) as [number, number, number];
  const std = sq.map((q, c) => Math.sqrt(Math.max(0, q / n - mean[c]! ** 2))) as [number, number, number];
  return { mean, std };
}

/** Adds the sums of RGB24 `rows` (one frame's rows) to `sums` at `at` (see {@link FRAME_SUM_FIELDS}). */
export function frameSums(rows: Uint8Array, sums: Float64Array, at: number): void {
  let r = 0;
  let g = 0;
  let b = 0;
  let rr = 0;
  let gg = 0;
  let bb = 0;
  for (let i = 0; i < rows.length; i += 3) {
    const x = rows[i] as number;
    const y = rows[i + 1] as number;
    const z = rows[i + 2] as number;
    r += x;
    g += y;
    b += z;
    rr += x * x;
    gg += y * y;
    bb += z * z;
  }
  const add = [r, g, b, rr, gg, bb, rows.length / 3];
  for (let k = 0; k < FRAME_SUM_FIELDS; k++) sums[at + k] = (sums[at + k] as number) + (add[k] as number);
}

/** Mean and standard deviation per channel from {@link frameSums}' numbers at `at`. */
export function statsFromSums(sums: Float64Array, at: number): { mean: [number, number, number]; std: [number, number, number] } {
  const n = Math.max(1, sums[at + 6] as number);
  const mean = [0, 1, 2].map((c) => (sums[at + c] as number) / n) as [number, number, number];
  const std = [0, 1, 2].map((c) => Math.sqrt(Math.max(0, (sums[at + 3 + c] as number) / n - mean[c]! ** 2))) as [number, number, number];
  return { mean, std };
}

/** The steering weight `w` at transition progress `frames / transitionFrames`, ramping from `from` to `to`. */
export function steerWeight(from: number, to: number, frames: number, transitionFrames: number): number {
  const s = transitionFrames <= 0 ? 1 : smoothstep(frames / transitionFrames);
  return from + (to - from) * s;
}

type Stats = ReturnType<typeof channelStats>;

/**
 * Moves rows of a rendered frame towards the target, in place.
 * @param rows        the rendered rows (`(y1 − y0) · width · 3` bytes)
 * @param target      the whole target frame (`height · width · 3` bytes)
 * @param targetStats the target's {@link channelStats}
 * @param frameStats  the whole rendered frame's statistics (before steering)
 * @param y0          the first row of `rows` in the frame
 * @param w           the steering weight (0 leaves the rows as they are)
 */
export function steerRows(rows: Uint8Array, target: Uint8Array, targetStats: Stats, frameStats: Stats, width: number, y0: number, w: number): void {
  if (w <= 0) return;
  const base = y0 * width * 3;
  const k = STEER_COMPOSITION;
  const scale = [0, 1, 2].map((c) => targetStats.std[c]! / Math.max(MIN_STD, frameStats.std[c]!));
  for (let i = 0; i < rows.length; i += 3) {
    for (let c = 0; c < 3; c++) {
      const v = rows[i + c] as number;
      const palette = targetStats.mean[c]! + (v - frameStats.mean[c]!) * scale[c]!;
      const steered = (1 - k) * palette + k * (target[base + i + c] as number);
      const o = (1 - w) * v + w * steered;
      rows[i + c] = o < 0 ? 0 : o > 255 ? 255 : Math.round(o);
    }
  }
}
