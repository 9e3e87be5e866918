/**
 * `Upscaler`: one loaded ESRGAN model on this process's tfjs backend, turning RGB bytes into
 * upscaled RGB bytes for a band of rows of some frames. The float → byte conversion (scale,
 * round, clamp, pack three bytes into one integer) runs on the backend so a readback moves one
 * 32-bit value per pixel.
 */
import * as tf from '@tensorflow/tfjs-core';
import type * as tfl from '@tensorflow/tfjs-layers';
import { MODEL_FACTS, type ModelArtifactsOnDisk } from './weights.js';

/** RGB frames, `n · height · width · 3` bytes. */
export interface RgbFrames {
  data: Uint8Array;
  n: number;
  width: number;
  height: number;
}

export class Upscaler {
  readonly scale: number;
  /** Input rows of context a band needs on each side. */
  readonly radius: number;
  private readonly range: number;

  constructor(
    readonly files: ModelArtifactsOnDisk,
    private readonly model: tfl.LayersModel,
  ) {
    this.scale = files.scale;
    this.radius = files.radius;
    this.range = MODEL_FACTS[files.model].range;
  }

  /**
   * Upscales rows `[y0, y1)` of frames `[f0, f1)`, reading input rows `[in0, in1)` for context,
   * and writes `(f1-f0) · (y1-y0)·scale · width·scale · 3` bytes into `out` (from offset 0).
   */
  async run(src: RgbFrames, f0: number, f1: number, band: { y0: number; y1: number; in0: number; in1: number }, out: Uint8Array): Promise<void> {
    const n = f1 - f0;
    const { width: W, height: H } = src;
    const s = this.scale;
    const rows = band.in1 - band.in0;
    if (n <= 0 || band.y1 <= band.y0) return;
    const need = n * (band.y1 - band.y0) * s * W * s * 3;
    if (out.length < need) throw new RangeError(`Upscaler.run: out holds ${out.length} bytes, ${need} needed`);
    const input = new Float32Array(n * rows * W * 3);
    const k = this.range === 255 ? 1 : 1 / 255;
    for (let f = 0; f < n; f++) {
      const from = ((f0 + f) * H + band.in0) * W * 3;
      const chunk = src.data.subarray(from, from + rows * W * 3);
      const base = f * rows * W * 3;
      if (k === 1) input.set(chunk, base);
      else for (let i = 0; i < chunk.length; i++) input[base + i] = (chunk[i] as number) * k;
    }
    const packed = tf.tidy(() => {
      const x = tf.tensor4d(input, [n, rows, W, 3]);
      const y = this.model.predict(x) as tf.Tensor4D;
      const crop = tf.slice(y, [0, (band.y0 - band.in0) * s, 0, 0], [n, (band.y1 - band.y0) * s, W * s, 3]);
      // To bytes exactly as a JavaScript Math.round + clamp would, then r + 256 g + 65536 b
      // (integers below 2^24: exact in float32).
      const q = tf.clipByValue(tf.round(this.range === 255 ? crop : tf.mul(crop, 255)), 0, 255);
      const flat = tf.reshape(q, [-1, 3]);
      const [r, g, b] = tf.split(flat, 3, 1) as [tf.Tensor, tf.Tensor, tf.Tensor];
      return tf.cast(tf.reshape(tf.add(tf.add(r, tf.mul(g, 256)), tf.mul(b, 65536)), [-1]), 'int32');
    });
    try {
      const v = (await packed.data()) as Int32Array;
      for (let i = 0, o = 0; i < v.length; i++, o += 3) {
        const p = v[i] as number;
        out[o] = p & 255;
        out[o + 1] = (p >> 8) & 255;
        out[o + 2] = (p >> 16) & 255;
      }
    } finally {
      packed.dispose();
    }
  }

  dispose(): void {
    this.model.dispose();
  }
}
