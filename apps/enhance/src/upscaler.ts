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

/** A band of output rows `[y0, y1)` and the input rows `[in0, in1)` it reads. */
export interface Band {
  y0: number;
  y1: number;
  in0: number;
  in1: number;
}

/** Work queued by {@link Upscaler.dispatch}: its bytes, once the backend has them. */
export interface UpscaleJob {
  /** Bytes {@link finish} writes. */
  readonly bytes: number;
  /** Waits for the backend and writes the upscaled bytes into `out` (from offset 0); frees the job. */
  finish(out: Uint8Array): Promise<void>;
  /** Frees the job without reading it. */
  drop(): void;
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
  async run(src: RgbFrames, f0: number, f1: number, band: Band, out: Uint8Array): Promise<void> {
    const job = this.dispatch(src, f0, f1, band);
    if (job) await job.finish(out);
  }

  /**
   * Queues the upscaling of {@link run} on the backend and starts its readback, without waiting:
   * on a GPU the work runs while the caller goes on (the pipelined step of `EnhanceWorker`). `src`
   * is read before this returns. Undefined when there is nothing to do.
   */
  dispatch(src: RgbFrames, f0: number, f1: number, band: Band): UpscaleJob | undefined {
    const n = f1 - f0;
    const { width: W, height: H } = src;
    const s = this.scale;
    const rows = band.in1 - band.in0;
    if (n <= 0 || band.y1 <= band.y0) return undefined;
    const need = n * (band.y1 - band.y0) * s * W * s * 3;
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
    const data = packed.data() as Promise<Int32Array>;
    // Settled on every path, so a job that is dropped (reset) leaves no unhandled rejection.
    data.catch(() => {});
    let done = false;
    const release = (): void => {
      if (done) return;
      done = true;
      packed.dispose();
    };
    return {
      bytes: need,
      async finish(out: Uint8Array): Promise<void> {
        if (out.length < need) throw new RangeError(`Upscaler: out holds ${out.length} bytes, ${need} needed`);
        try {
          const v = await data;
          for (let i = 0, o = 0; i < v.length; i++, o += 3) {
            const p = v[i] as number;
            out[o] = p & 255;
            out[o + 1] = (p >> 8) & 255;
            out[o + 2] = (p >> 16) & 255;
          }
        } finally {
          release();
        }
      },
      drop: release,
    };
  }

  dispose(): void {
    this.model.dispose();
  }
}
