import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as tf from '@tensorflow/tfjs-core';
import { describe, expect, it } from 'vitest';
import { ParallelVideoModel, quantizeRgb, unpackRgb, type ModelCollectives, type ParallelVideoModelOptions } from '../src/model/index.js';

const here = dirname(fileURLToPath(import.meta.url));
const weightsRoot = resolve(here, '../weights');

/** The float64 reference: what the JavaScript conversion writes. */
function refByte(v: number): number {
  const q = Math.floor(v * 255 + 0.5);
  return q < 0 ? 0 : q > 255 ? 255 : q;
}

/** float32 values on and around every rounding threshold (k − 0.5)/255, plus 0, 1, 0.5 and random values. */
function hardValues(): Float32Array {
  const f = new Float32Array(1);
  const bits = new Int32Array(f.buffer);
  const out: number[] = [0, 1, 0.5, Math.fround(1 / 255), Math.fround(254.5 / 255)];
  for (let k = 0; k <= 256; k++) {
    f[0] = (k - 0.5) / 255;
    const b0 = bits[0] as number;
    for (let d = -4; d <= 4; d++) {
      bits[0] = b0 + d;
      const v = f[0] as number;
      if (v >= 0 && v <= 1) out.push(v);
    }
  }
  // Values whose float32 product with 255 rounds onto a half-integer (the case a plain
  // float32 floor(v·255 + 0.5) gets wrong).
  for (let k = 0; k < 255; k++) {
    for (let m = 1; m <= 40; m++) {
      const v = Math.fround((k + 0.5) / 255 + (m - 20) * 2 ** -30);
      if (v >= 0 && v <= 1) out.push(v);
    }
  }
  let s = 12345;
  for (let i = 0; i < 60_000; i++) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    out.push(Math.fround(s / 4294967296));
  }
  while (out.length % 3 !== 0) out.push(0.25);
  return Float32Array.from(out);
}

async function loadOn(backend: string, opts: Partial<ParallelVideoModelOptions> = {}): Promise<ParallelVideoModel> {
  const m = new ParallelVideoModel({ weightsRoot, backend, width: 40, height: 24, framesPerChunk: 3, env: {}, ...opts });
  await m.load();
  return m;
}

/** In-process collectives for `worldSize` models in one process (gather only). */
function localComms(worldSize: number): ModelCollectives[] {
  let parts: Uint8Array[] = [];
  let waiting: ((v: Uint8Array[] | null) => void)[] = [];
  return Array.from({ length: worldSize }, (_, rank) => {
    const comm = {
      rank,
      worldSize,
      gather(array: Uint8Array, root = 0): Promise<Uint8Array[] | null> {
        return new Promise((res) => {
          parts[rank] = array.slice();
          waiting[rank] = res;
          if (waiting.filter(Boolean).length === worldSize) {
            const all = parts;
            const ws = waiting;
            parts = [];
            waiting = [];
            ws.forEach((w, r) => w(r === root ? all : null));
          }
        });
      },
    };
    return comm as unknown as ModelCollectives;
  });
}

async function chunks(backend: string, worldSize: number, quantizeOnDevice: boolean, prompts: string[]): Promise<Uint8Array[]> {
  const comms = localComms(worldSize);
  const models = await Promise.all(
    comms.map((comm, rank) =>
      loadOn(backend, {
        rank,
        worldSize,
        comm: worldSize > 1 ? comm : undefined,
        quantizeOnDevice,
        width: 37,
        height: 23,
        framesPerChunk: 3,
        promptTransitionFrames: 4,
      }),
    ),
  );
  const out: Uint8Array[] = [];
  for (const prompt of prompts) {
    const rs = await Promise.all(models.map((m) => m.generate({ prompt })));
    out.push((rs[0] as { frames: Uint8Array }).frames);
  }
  for (const m of models) m.dispose();
  return out;
}

describe('quantisation on the backend', () => {
  for (const backend of ['cpu', 'wasm']) {
    it(`quantizeRgb equals the float64 floor(v·255 + 0.5) exactly on ${backend}, thresholds included`, async () => {
      const m = await loadOn(backend);
      const v = hardValues();
      const q = tf.tidy(() => quantizeRgb(tf.tensor2d(v, [v.length / 3, 3])));
      const got = (await q.data()) as Float32Array;
      q.dispose();
      let bad = 0;
      for (let i = 0; i < v.length; i++) if (got[i] !== refByte(v[i] as number)) bad++;
      expect(bad).toBe(0);
      // A plain float32 floor(v·255 + 0.5) is wrong on some of these values: the test set does
      // exercise the correction.
      const naive = tf.tidy(() => tf.floor(tf.add(tf.mul(tf.tensor1d(v), 255), 0.5)));
      const nv = (await naive.data()) as Float32Array;
      naive.dispose();
      let naiveBad = 0;
      for (let i = 0; i < v.length; i++) if (nv[i] !== refByte(v[i] as number)) naiveBad++;
      expect(naiveBad).toBeGreaterThan(0);
      m.dispose();
    });
  }

  it('unpackRgb turns one int32 per pixel into RGB bytes for any pixel count and offset', () => {
    for (const n of [0, 1, 2, 3, 4, 5, 7, 8, 9, 31, 1001]) {
      const px = new Int32Array(n);
      const want = new Uint8Array(3 * n);
      for (let i = 0; i < n; i++) {
        const [r, g, b] = [(i * 37) & 255, (i * 101 + 7) & 255, 255 - (i & 255)];
        px[i] = r + 256 * g + 65536 * b;
        want.set([r, g, b], 3 * i);
      }
      for (const offset of [0, 1, 4]) {
        const buf = new Uint8Array(3 * n + offset + 3).fill(0xee);
        const out = buf.subarray(offset, offset + 3 * n);
        unpackRgb(px, out);
        expect(Buffer.from(out).equals(Buffer.from(want))).toBe(true);
        expect(buf[offset + 3 * n]).toBe(0xee); // nothing written past the end
      }
    }
    expect(() => unpackRgb(new Int32Array(2), new Uint8Array(5))).toThrow(RangeError);
  });

  // On cpu the whole frames of a share also go through one batched pass (as on webgpu); on
  // wasm each frame segment is its own pass.
  for (const backend of ['wasm', 'cpu']) {
    it(`gives the same bytes as the per-segment JavaScript conversion on ${backend}, for 1, 2, 3 and 7 ranks (shares split frames)`, async () => {
      const prompts = ['a neon reef', 'a neon reef', 'A walk through a forest.', 'A walk through a forest.'];
      const ref = await chunks(backend, 1, false, prompts);
      expect(ref[0]?.length).toBe(3 * 37 * 23 * 3);
      for (const [ws, dev] of [
        [1, true],
        [2, true],
        [3, true],
        [7, true],
        [7, false],
      ] as const) {
        const got = await chunks(backend, ws, dev, prompts);
        for (let i = 0; i < prompts.length; i++) expect(Buffer.from(got[i] as Uint8Array).equals(Buffer.from(ref[i] as Uint8Array))).toBe(true);
      }
    });
  }

  it('reads REACTOR_VIDEO_DEVICE_QUANTIZE / REACTOR_VIDEO_BATCH_FRAMES, checked in the constructor', async () => {
    expect(() => new ParallelVideoModel({ weightsRoot, backend: 'wasm', env: { REACTOR_VIDEO_DEVICE_QUANTIZE: 'yes' } })).toThrow(
      /REACTOR_VIDEO_DEVICE_QUANTIZE must be 1 or 0/,
    );
    expect(() => new ParallelVideoModel({ weightsRoot, backend: 'wasm', env: { REACTOR_VIDEO_BATCH_FRAMES: '2' } })).toThrow(RangeError);
    const prompts = ['a neon reef'];
    const ref = await chunks('cpu', 1, false, prompts);
    for (const env of [{ REACTOR_VIDEO_DEVICE_QUANTIZE: '1' }, { REACTOR_VIDEO_DEVICE_QUANTIZE: '1', REACTOR_VIDEO_BATCH_FRAMES: '0' }]) {
      const m = await loadOn('cpu', { width: 37, height: 23, framesPerChunk: 3, promptTransitionFrames: 4, env });
      expect(Buffer.from((await m.generate({ prompt: 'a neon reef' })).frames).equals(Buffer.from(ref[0] as Uint8Array))).toBe(true);
      m.dispose();
    }
  });

  it('leaks no tensors across many chunks, on either path', async () => {
    for (const [backend, quantizeOnDevice, worldSize] of [
      ['wasm', true, 1],
      ['wasm', false, 1],
      ['cpu', true, 1],
      ['cpu', true, 2],
    ] as const) {
      // 5 frames of 10 rows on 2 ranks: each rank has two whole frames (a batched run) and half of frame 2.
      const comms = localComms(worldSize);
      const models = await Promise.all(
        comms.map((comm, rank) =>
          loadOn(backend, {
            rank,
            worldSize,
            comm: worldSize > 1 ? comm : undefined,
            quantizeOnDevice,
            promptTransitionFrames: 2,
            width: 16,
            height: 10,
            framesPerChunk: 5,
          }),
        ),
      );
      const all = (prompt: string): Promise<unknown> => Promise.all(models.map((m) => m.generate({ prompt })));
      await all('warm');
      const before = tf.memory().numTensors;
      for (let i = 0; i < 25; i++) await all(i % 7 < 3 ? 'one prompt' : 'another prompt');
      expect(tf.memory().numTensors).toBe(before);
      for (const m of models) m.dispose();
    }
  });
});
