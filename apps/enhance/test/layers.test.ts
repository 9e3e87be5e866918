// The thick model's custom layers against plain references: MultiplyBeta is x0.2, and
// PixelShuffle<N>x is depth-to-space in NHWC, checked against an index-by-index JavaScript
// rearrangement (and tfjs's own depthToSpace), alone and inside a saved-and-reloaded model.
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import * as tfl from '@tensorflow/tfjs-layers';
import { beforeAll, describe, expect, it } from 'vitest';
import { MULTIPLY_BETA, MultiplyBeta, pixelShuffleClass, registerEsrganLayers } from '../src/layers.js';

beforeAll(async () => {
  tf.env().set('PROD', true);
  await tf.setBackend('cpu');
  registerEsrganLayers();
});

/** NHWC depth-to-space by index arithmetic: out[b, h*n+i, w*n+j, c] = in[b, h, w, (i*n+j)*C + c]. */
function depthToSpaceReference(x: Float32Array, [B, H, W, D]: [number, number, number, number], n: number): Float32Array {
  const C = D / (n * n);
  const out = new Float32Array(x.length);
  for (let b = 0; b < B; b++)
    for (let h = 0; h < H; h++)
      for (let w = 0; w < W; w++)
        for (let i = 0; i < n; i++)
          for (let j = 0; j < n; j++)
            for (let c = 0; c < C; c++) {
              const src = ((b * H + h) * W + w) * D + (i * n + j) * C + c;
              const dst = ((b * H * n + h * n + i) * W * n + w * n + j) * C + c;
              out[dst] = x[src]!;
            }
  return out;
}

describe('MultiplyBeta', () => {
  it('multiplies by 0.2 exactly as tf.mul does, and keeps the shape', () => {
    const x = tf.randomNormal([2, 5, 7, 4], 0, 3, 'float32', 1);
    const y = new MultiplyBeta({}).apply(x) as tf.Tensor;
    expect(MULTIPLY_BETA).toBe(0.2);
    expect(y.shape).toEqual([2, 5, 7, 4]);
    expect(Array.from(y.dataSync())).toEqual(Array.from(tf.mul(x, 0.2).dataSync()));
    const xs = x.dataSync();
    expect(y.dataSync()[3]).toBeCloseTo(xs[3]! * 0.2, 6);
  });
});

describe('PixelShuffle<N>x', () => {
  for (const n of [2, 3, 4, 8]) {
    it(`x${n}: matches an index-by-index depth-to-space and tf.depthToSpace, with the declared output shape`, () => {
      const shape: [number, number, number, number] = [2, 3, 5, 3 * n * n];
      const x = tf.randomUniform(shape, -1, 1, 'float32', n);
      const layer = new (pixelShuffleClass(n))({});
      const y = layer.apply(x) as tf.Tensor;
      expect(y.shape).toEqual([2, 3 * n, 5 * n, 3]);
      expect(layer.computeOutputShape([null, 3, 5, 3 * n * n])).toEqual([null, 3 * n, 5 * n, 3]);
      const ref = depthToSpaceReference(x.dataSync() as Float32Array, shape, n);
      expect(Array.from(y.dataSync())).toEqual(Array.from(ref));
      expect(Array.from(y.dataSync())).toEqual(Array.from(tf.depthToSpace(x as tf.Tensor4D, n, 'NHWC').dataSync()));
    });
  }

  it('is registered under the names the model files use, so a saved model reloads with them', async () => {
    const input = tfl.input({ shape: [null, null, 16] });
    const scaled = new MultiplyBeta({}).apply(input) as tfl.SymbolicTensor;
    const out = new (pixelShuffleClass(4))({}).apply(scaled) as tfl.SymbolicTensor;
    const model = tfl.model({ inputs: input, outputs: out });
    let saved: tf.io.ModelArtifacts | undefined;
    await model.save(
      tf.io.withSaveHandler((a) => Promise.resolve(((saved = a), { modelArtifactsInfo: { dateSaved: new Date(), modelTopologyType: 'JSON' } }))),
    );
    expect(JSON.stringify(saved!.modelTopology)).toMatch(/"class_name":"MultiplyBeta".*"class_name":"PixelShuffle4x"/);
    const again = await tfl.loadLayersModel(tf.io.fromMemory(saved!));
    const x = tf.randomUniform([1, 2, 3, 16], 0, 1, 'float32', 7);
    const y = again.predict(x) as tf.Tensor;
    expect(y.shape).toEqual([1, 8, 12, 1]);
    const ref = depthToSpaceReference(tf.mul(x, 0.2).dataSync() as Float32Array, [1, 2, 3, 16], 4);
    expect(Array.from(y.dataSync())).toEqual(Array.from(ref));
  });
});
