// The PyTorch ESRGAN module (apps/enhance/python/reactor_enhance) against the tfjs backend on
// the same input: Debian's /usr/bin/python3 with torch (CPU, float32) runs
// `python3 -m reactor_enhance` as a user would, tfjs runs the same files on wasm in this
// process; at least 99.9 % of the output bytes are within one level, for slim, medium and thick
// (thick is the one with the custom layers: MultiplyBeta and PixelShuffle4x's depth-to-space
// channel order). The module reads and hashes the files as the tfjs side does, and refuses a
// changed shard naming it; a frame upscaled alone has the bytes it has in a batch.
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as tf from '@tensorflow/tfjs-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { planBackends, selectBackend } from '../src/backend.js';
import { PUBLISHED_SHA256 } from '../src/checksums.js';
import { sceneFrames } from '../src/source.js';
import { writeFloat16Copy } from '../src/quantize.js';
import { Upscaler } from '../src/upscaler.js';
import { type ModelName, loadModel, modelDir, modelPackageDir, readModelFiles } from '../src/weights.js';

const PYTHON = process.env['REACTOR_TEST_PYTHON'] ?? '/usr/bin/python3';
const pyRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../python');
const scratch = mkdtempSync(join(tmpdir(), 'enhance-torch-'));
const checksums = join(scratch, 'checksums.json');
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
beforeAll(async () => {
  writeFileSync(checksums, JSON.stringify(PUBLISHED_SHA256));
  expect((await selectBackend(planBackends('wasm', {}), 0)).backend).toBe('wasm');
  expect(tf.getBackend()).toBe('wasm');
}, 60_000);

const W = 32;
const H = 20;
const N = 2;

type TorchRun = { status: number | null; out: Uint8Array; report: Record<string, string>; stderr: string };
// Runs of the default package on the whole input, kept: a later case reuses the one it shares.
const runs = new Map<string, TorchRun>();

/** `python3 -m reactor_enhance` on `frames`: the upscaled bytes and its JSON report, or its failure. */
function torchUpscale(model: ModelName, frames: Uint8Array, n: number, opts: { packageDir?: string; band?: number[] } = {}): TorchRun {
  const key = `${model} ${n}`;
  const reuse = frames === input && !opts.packageDir && !opts.band;
  const kept = reuse ? runs.get(key) : undefined;
  if (kept) return kept;
  const args = ['-m', 'reactor_enhance', '--model', model, '--scale', '4', '--package-dir', opts.packageDir ?? modelPackageDir(model)];
  args.push('--checksums', checksums, '--n', String(n), '--width', String(W), '--height', String(H));
  if (opts.band) args.push('--band', opts.band.join(','));
  const r = spawnSync(PYTHON, args, { cwd: pyRoot, input: frames, maxBuffer: 64 << 20, timeout: 60_000 });
  const lines = r.stderr.toString().trim().split('\n');
  const run = {
    status: r.status,
    out: new Uint8Array(r.stdout),
    report: JSON.parse(lines[lines.length - 1] ?? '{}') as Record<string, string>,
    stderr: r.stderr.toString(),
  };
  if (reuse && r.status === 0) runs.set(key, run);
  return run;
}

/** Fraction of bytes of `a` and `b` that differ by more than one level, and the largest difference. */
function compare(a: Uint8Array, b: Uint8Array): { off: number; max: number; exact: number } {
  let off = 0;
  let max = 0;
  let exact = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs((a[i] as number) - (b[i] as number));
    if (d > 1) off++;
    if (d === 0) exact++;
    if (d > max) max = d;
  }
  return { off: off / a.length, max, exact: exact / a.length };
}

// Scene frames (smooth sky, hard edges, fine stripes) and one frame of noise (every value, every edge).
const input = new Uint8Array(N * W * H * 3);
input.set(sceneFrames(3, 1, W, H));
for (let i = W * H * 3, s = 12345; i < input.length; i++) input[i] = (s = (s * 1103515245 + 12345) >>> 0) >>> 24;

describe('the PyTorch ESRGAN module (CPU, float32) against tfjs (wasm) on the same files and input', () => {
  for (const model of ['slim', 'medium', 'thick'] as const) {
    it(`${model} x4: >= 99.9 % of the bytes within one level, the same model fingerprint`, async () => {
      const files = readModelFiles(model, 4);
      const up = new Upscaler(files, await loadModel(files));
      const want = new Uint8Array(N * W * 4 * H * 4 * 3);
      await up.run({ data: input, n: N, width: W, height: H }, 0, N, { y0: 0, y1: H, in0: 0, in1: H }, want);
      up.dispose();
      const got = torchUpscale(model, input, N);
      expect(got.status, got.stderr).toBe(0);
      expect(got.out.length).toBe(want.length);
      const c = compare(got.out, want);
      expect(c.off, `${model}: ${(c.off * 100).toFixed(3)} % off by more than 1, max ${c.max}`).toBeLessThanOrEqual(0.001);
      // Most bytes are identical, not merely close: the graphs are the same, only float rounding differs.
      expect(c.exact).toBeGreaterThan(0.9);
      expect(got.report['sha256']).toBe(files.sha256);
      expect(got.report['radius']).toBe(files.radius);
      expect(got.report['dtype']).toBe('torch.float32');
    }, 60_000);
  }

  it('a band of rows with the receptive radius as overlap gives the rows of the whole frame', () => {
    const whole = torchUpscale('medium', input.subarray(0, W * H * 3), 1);
    expect(whole.status, whole.stderr).toBe(0);
    const rowBytes = W * 4 * 3;
    const band = [8, 20, 0, 20];
    const part = torchUpscale('medium', input.subarray(0, W * H * 3), 1, { band });
    expect(part.status, part.stderr).toBe(0);
    expect(compare(part.out, whole.out.subarray(8 * 4 * rowBytes)).off).toBe(0);
    expect(part.out.length).toBe(12 * 4 * rowBytes);
  }, 60_000);

  it('a frame upscaled alone gives the bytes it gets in a batch (a rank of a split by frames may get one frame)', () => {
    // PyTorch 1.13 runs a small batch-1 convolution on another kernel than a batch's unless the
    // module pins oneDNN (reactor_enhance/esrgan.py): on AVX-512 Xeons the noise frame's bytes
    // moved by a level.
    const both = torchUpscale('slim', input, N);
    expect(both.status, both.stderr).toBe(0);
    const alone = torchUpscale('slim', input.subarray(W * H * 3), 1);
    expect(alone.status, alone.stderr).toBe(0);
    expect(alone.out.length).toBe(W * 4 * H * 4 * 3);
    expect(Buffer.compare(alone.out, both.out.subarray(alone.out.length))).toBe(0);
  }, 60_000);

  it("reads the GPU bundle's float16 copy (its own shard hashes) to within one level of float32", () => {
    const root = mkdtempSync(join(scratch, 'f16-'));
    writeFloat16Copy(modelDir('medium', 4), join(root, 'models', 'x4'));
    const f16 = torchUpscale('medium', input, N, { packageDir: root });
    expect(f16.status, f16.stderr).toBe(0);
    expect(f16.report['weights']).toBe('float16');
    const f32 = torchUpscale('medium', input, N);
    expect(compare(f16.out, f32.out).off).toBeLessThanOrEqual(0.001);
  }, 60_000);

  it('a shard whose bytes changed is refused with enhance_weights_corrupt naming it', () => {
    const root = mkdtempSync(join(scratch, 'pkg-'));
    cpSync(modelDir('slim', 4), join(root, 'models', 'x4'), { recursive: true });
    const shard = join(root, 'models/x4/group1-shard1of1.bin');
    const bytes = new Uint8Array(readFileSync(shard));
    bytes[100] = (bytes[100] as number) ^ 0xff;
    writeFileSync(shard, bytes);
    const r = torchUpscale('slim', input, N, { packageDir: root });
    expect(r.status).toBe(3);
    expect(r.report['error']).toBe('WeightsCorruptError');
    expect(r.report['code']).toBe('enhance_weights_corrupt');
    expect(r.report['message']).toContain(`${shard} (ESRGAN slim x4) is corrupt: its SHA-256 is`);
    expect(r.out.length).toBe(0);
  }, 60_000);
});
