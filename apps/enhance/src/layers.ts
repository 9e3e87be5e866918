/**
 * The two custom layers the ESRGAN "thick" (RRDN) model files name: `MultiplyBeta` (the
 * residual scaling, x0.2) and `PixelShuffle<N>x` (depth-to-space by N, NHWC). tfjs needs a
 * class registered under each name before `loadLayersModel` can build the model.
 */
import * as tf from '@tensorflow/tfjs-core';
import * as tfl from '@tensorflow/tfjs-layers';

/** The residual scaling factor of the RRDN blocks. */
export const MULTIPLY_BETA = 0.2;

function single(inputs: tf.Tensor | tf.Tensor[]): tf.Tensor {
  return Array.isArray(inputs) ? (inputs[0] as tf.Tensor) : inputs;
}

/** `MultiplyBeta`: multiplies its input by {@link MULTIPLY_BETA}. */
export class MultiplyBeta extends tfl.layers.Layer {
  static className = 'MultiplyBeta';

  override call(inputs: tf.Tensor | tf.Tensor[]): tf.Tensor {
    return tf.mul(single(inputs), MULTIPLY_BETA);
  }
}

/** Arguments of {@link PixelShuffle}: a layer's usual arguments plus the factor. */
export type PixelShuffleArgs = ConstructorParameters<typeof tfl.layers.Layer>[0] & { factor?: number };

/**
 * Depth-to-space by `factor`: `[b, h, w, c·N²]` → `[b, h·N, w·N, c]` (NHWC). The model files
 * name one class per factor (`PixelShuffle4x`); {@link pixelShuffleClass} makes them.
 */
export class PixelShuffle extends tfl.layers.Layer {
  static className = 'PixelShuffle';
  readonly factor: number;

  constructor(args: PixelShuffleArgs = {}) {
    const { factor, ...rest } = args ?? {};
    super(rest);
    this.factor = factor ?? 2;
  }

  override computeOutputShape(inputShape: tfl.Shape | tfl.Shape[]): tfl.Shape {
    const s = (Array.isArray(inputShape[0]) ? inputShape[0] : inputShape) as tfl.Shape;
    const n = this.factor;
    const [b, h, w, c] = s;
    return [b ?? null, h == null ? null : h * n, w == null ? null : w * n, c == null ? null : c / (n * n)];
  }

  override call(inputs: tf.Tensor | tf.Tensor[]): tf.Tensor {
    return tf.depthToSpace(single(inputs) as tf.Tensor4D, this.factor, 'NHWC');
  }
}

/** The scales the ESRGAN packages ship. */
export const SCALES = [2, 3, 4, 8] as const;
export type Scale = (typeof SCALES)[number];

const shuffles = new Map<number, typeof PixelShuffle>();

/** The `PixelShuffle<N>x` class for `factor` (one class per factor, made once). */
export function pixelShuffleClass(factor: number): typeof PixelShuffle {
  let cls = shuffles.get(factor);
  if (!cls) {
    cls = class extends PixelShuffle {
      static override className = `PixelShuffle${factor}x`;
      constructor(args: PixelShuffleArgs = {}) {
        super({ ...args, factor });
      }
    };
    shuffles.set(factor, cls);
  }
  return cls;
}

let registered = false;

/** Registers `MultiplyBeta` and `PixelShuffle{2,3,4,8}x` with tfjs's serialization (once per process). */
export function registerEsrganLayers(): void {
  if (registered) return;
  tf.serialization.registerClass(MultiplyBeta);
  for (const s of SCALES) tf.serialization.registerClass(pixelShuffleClass(s));
  registered = true;
}
