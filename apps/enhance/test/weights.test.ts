// Weights come from the installed @upscalerjs/esrgan-* packages, read from disk and hashed at
// load; a missing or corrupt file fails the load with an error that names it.
import { cpSync, mkdtempSync, readFileSync, rmSync, truncateSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EnhanceErrorCode, WeightsCorruptError, WeightsMissingError } from '../src/errors.js';
import { loadModel, modelDir, modelPackageDir, readModelFiles, receptiveRadius } from '../src/weights.js';

const scratch = mkdtempSync(join(tmpdir(), 'enhance-weights-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
beforeAll(async () => {
  tf.env().set('PROD', true);
  await tf.setBackend('cpu');
});

/** A copy of the slim package's x2 model under a fresh root, to break. */
function slimCopy(): string {
  const root = mkdtempSync(join(scratch, 'pkg-'));
  cpSync(modelDir('slim', 2), join(root, 'models', 'x2'), { recursive: true });
  return root;
}

describe('readModelFiles', () => {
  it('reads every model and scale of the three packages from disk, hashing each file (SHA-256)', () => {
    for (const model of ['slim', 'medium', 'thick'] as const) {
      const files = readModelFiles(model, 4);
      expect(files.dir).toBe(join(modelPackageDir(model), 'models', 'x4'));
      expect(files.files[0]!.path).toBe(join(files.dir, 'model.json'));
      for (const f of files.files) expect(f.sha256).toMatch(/^[0-9a-f]{64}$/);
      expect(files.weightDtype).toBe('float32');
      expect(files.sha256).toMatch(/^[0-9a-f]{64}$/);
    }
    expect(readModelFiles('thick', 4).files.length).toBe(8); // model.json + 7 shards
  });

  it('finds the receptive radius of each graph (tile overlap): 10, 18 and 154 input rows', () => {
    expect([readModelFiles('slim', 4).radius, readModelFiles('medium', 4).radius, readModelFiles('thick', 2).radius]).toEqual([10, 18, 154]);
    expect(() => receptiveRadius({ config: { layers: [{ name: 'p', class_name: 'MaxPooling2D', config: {} }] } })).toThrow(
      /p \(MaxPooling2D\) has no known receptive field/,
    );
  });

  it('a missing shard is enhance_weights_missing naming the file', () => {
    const root = slimCopy();
    const shard = join(root, 'models/x2/group1-shard1of1.bin');
    unlinkSync(shard);
    const err = catchIt(() => readModelFiles('slim', 2, root));
    expect(err).toBeInstanceOf(WeightsMissingError);
    expect(err.code).toBe(EnhanceErrorCode.WeightsMissing);
    expect(err.message).toContain(`cannot read ${shard} (ESRGAN slim x2): no such file`);
  });

  it('a truncated shard is enhance_weights_corrupt naming the shard', () => {
    const root = slimCopy();
    const shard = join(root, 'models/x2/group1-shard1of1.bin');
    truncateSync(shard, 1000);
    const err = catchIt(() => readModelFiles('slim', 2, root));
    expect(err).toBeInstanceOf(WeightsCorruptError);
    expect(err.code).toBe('enhance_weights_corrupt');
    expect(err.message).toMatch(
      new RegExp(`^${escape(shard)} \\(ESRGAN slim x2\\) is corrupt: the weights need \\d+ bytes but the shards of .*model.json hold 1000`),
    );
  });

  it('a shard of the right size with changed bytes is enhance_weights_corrupt naming the shard and both hashes', () => {
    const root = slimCopy();
    const shard = join(root, 'models/x2/group1-shard1of1.bin');
    const b = readFileSync(shard);
    b[12345] = b[12345]! ^ 0xff;
    writeFileSync(shard, b);
    const err = catchIt(() => readModelFiles('slim', 2, root));
    expect(err).toBeInstanceOf(WeightsCorruptError);
    expect(err.message).toMatch(new RegExp(`^${escape(shard)} \\(ESRGAN slim x2\\) is corrupt: its SHA-256 is [0-9a-f]{64}, expected [0-9a-f]{64}`));
  });

  it('a model.json that is not JSON is enhance_weights_corrupt naming it', () => {
    const root = slimCopy();
    const json = join(root, 'models/x2/model.json');
    writeFileSync(json, '{"modelTopology": ');
    const err = catchIt(() => readModelFiles('slim', 2, root));
    expect(err).toBeInstanceOf(WeightsCorruptError);
    expect(err.message).toContain(`${json} (ESRGAN slim x2) is corrupt: not valid JSON`);
  });

  it('a model folder that is not there is enhance_weights_missing naming model.json', () => {
    const err = catchIt(() => readModelFiles('slim', 2, join(scratch, 'nowhere')));
    expect(err).toBeInstanceOf(WeightsMissingError);
    expect(err.message).toContain(`cannot read ${join(scratch, 'nowhere/models/x2/model.json')}`);
  });
});

describe('loadModel', () => {
  it('builds the slim x2 model with tfjs 4.22 loadLayersModel from the files (no network)', async () => {
    const model = await loadModel(readModelFiles('slim', 2));
    const y = model.predict(tf.zeros([1, 8, 8, 3])) as tf.Tensor;
    expect(y.shape).toEqual([1, 16, 16, 3]);
    model.dispose();
  });

  it('builds thick x4 with the custom layers registered', async () => {
    const model = await loadModel(readModelFiles('thick', 4));
    expect(model.layers.map((l) => l.getClassName())).toEqual(expect.arrayContaining(['MultiplyBeta', 'PixelShuffle4x']));
    model.dispose();
  });
});

function catchIt(f: () => unknown): Error & { code?: string } {
  try {
    f();
  } catch (e) {
    return e as Error & { code?: string };
  }
  throw new Error('expected a throw');
}

function escape(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
