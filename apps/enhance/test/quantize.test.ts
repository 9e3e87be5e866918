// Float16 weights for the GPU bundle: the conversion rounds like IEEE half precision, the copy
// loads through the same checked path (its own shard hash), and thick's output stays within one
// level (of 255) of the float32 model's.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { planBackends, selectBackend } from '../src/backend.js';
import { WeightsCorruptError } from '../src/errors.js';
import { float16Bits, writeFloat16Copy } from '../src/quantize.js';
import { sceneFrames } from '../src/source.js';
import { Upscaler } from '../src/upscaler.js';
import { loadModel, modelDir, readModelFiles } from '../src/weights.js';

const scratch = mkdtempSync(join(tmpdir(), 'enhance-f16-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
beforeAll(async () => {
  await selectBackend(planBackends('wasm', {}), 0);
});

describe('float16Bits', () => {
  it('rounds to nearest (ties to even), keeps signs, subnormals, infinities and NaN', () => {
    expect(float16Bits(1)).toBe(0x3c00);
    expect(float16Bits(-2)).toBe(0xc000);
    expect(float16Bits(0.1)).toBe(0x2e66);
    expect(float16Bits(65504)).toBe(0x7bff);
    expect(float16Bits(70000)).toBe(0x7c00);
    expect(float16Bits(2 ** -24)).toBe(0x0001);
    expect(float16Bits(2 ** -26)).toBe(0);
    expect(float16Bits(1 + 2 ** -11)).toBe(0x3c00); // tie: to even
    expect(float16Bits(1 + 3 * 2 ** -11)).toBe(0x3c02); // tie: to even (up)
    expect(float16Bits(-0)).toBe(0x8000);
    expect(float16Bits(NaN) & 0x7c00).toBe(0x7c00);
    expect(float16Bits(NaN) & 0x3ff).not.toBe(0);
  });
});

describe('a float16 copy of ESRGAN thick x4', () => {
  it('is half the size, loads through the checked path, and upscales within one level of float32', async () => {
    const root = join(scratch, 'thick');
    const { bytes } = writeFloat16Copy(modelDir('thick', 4), join(root, 'models', 'x4'));
    const f32 = readModelFiles('thick', 4);
    const f16 = readModelFiles('thick', 4, root);
    expect(f16.weightDtype).toBe('float16');
    expect(bytes * 2).toBe(f32.files.slice(1).reduce((a, f) => a + f.bytes, 0));
    const frames = sceneFrames(3, 1, 24, 16);
    const run = async (files: typeof f32): Promise<Uint8Array> => {
      const up = new Upscaler(files, await loadModel(files));
      const out = new Uint8Array(96 * 64 * 3);
      await up.run({ data: frames, n: 1, width: 24, height: 16 }, 0, 1, { y0: 0, y1: 16, in0: 0, in1: 16 }, out);
      up.dispose();
      return out;
    };
    const a = await run(f32);
    const b = await run(f16);
    let max = 0;
    let differ = 0;
    for (let i = 0; i < a.length; i++) {
      const d = Math.abs(a[i]! - b[i]!);
      max = Math.max(max, d);
      if (d) differ++;
    }
    expect(max).toBeLessThanOrEqual(1);
    expect(differ / a.length).toBeLessThan(0.05);
    expect(tf.getBackend()).toBe('wasm');
  }, 120_000);

  it('a damaged float16 shard is enhance_weights_corrupt naming it', () => {
    const root = join(scratch, 'damaged');
    writeFloat16Copy(modelDir('slim', 2), join(root, 'models', 'x2'));
    const shard = join(root, 'models/x2/group1-shard1of1.bin');
    const b = readFileSync(shard);
    b[7] = b[7]! ^ 4;
    writeFileSync(shard, b);
    expect(() => readModelFiles('slim', 2, root)).toThrow(WeightsCorruptError);
    expect(() => readModelFiles('slim', 2, root)).toThrow(`${shard} (ESRGAN slim x2) is corrupt: its SHA-256 is`);
  });
});
