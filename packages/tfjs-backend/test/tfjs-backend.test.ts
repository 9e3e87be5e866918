// The shared selection with an app's own words and errors: the apps' tests (apps/video/test/
// model-backend.test.ts, apps/enhance/test/*) pin each app's messages; these pin what the
// package promises every app: the order, the source, the app's error, and one attempt per
// backend not used, worded by the app.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import { afterAll, describe, expect, it } from 'vitest';
import { type BackendFailure, gpuIndexFromEnv, isSoftwareAdapter, planBackends, readBackendPreference, selectBackend } from '../src/index.js';

class AppConfigError extends Error {
  constructor(
    readonly source: string,
    readonly value: string,
  ) {
    super(`bad ${source}: ${value}`);
  }
}

const opts = { optionSource: 'the option', configError: (source: string, value: string) => new AppConfigError(source, value) };
const emptyDir = mkdtempSync(join(tmpdir(), 'tfjs-backend-test-'));
afterAll(() => rmSync(emptyDir, { recursive: true, force: true }));

describe('planBackends', () => {
  it("names the app's option as the source, and REACTOR_BACKEND over it", () => {
    expect(planBackends('wasm,cpu', {}, opts)).toEqual({ order: ['wasm', 'cpu'], requested: 'wasm,cpu', source: 'the option' });
    expect(planBackends('wasm', { REACTOR_BACKEND: ' CPU ' }, opts)).toEqual({ order: ['cpu'], requested: 'cpu', source: 'REACTOR_BACKEND' });
    expect(planBackends(undefined, { REACTOR_BACKEND: ' ' }, { ...opts, device: 'cpu' })).toEqual({
      order: ['wasm', 'cpu'],
      requested: 'auto',
      source: 'default',
    });
    expect(readBackendPreference('Torch', {}, 'the option')).toEqual({ requested: 'Torch', source: 'the option' });
  });

  it("throws the app's error, with the source and the value as written", () => {
    const err = (() => {
      try {
        planBackends('wasm, WASM', {}, opts);
      } catch (e) {
        return e;
      }
      return null;
    })();
    expect(err).toBeInstanceOf(AppConfigError);
    expect(err).toMatchObject({ source: 'the option', value: 'wasm, WASM' });
    expect(() => planBackends(undefined, { REACTOR_BACKEND: 'cuda' }, opts)).toThrow('bad REACTOR_BACKEND: cuda');
  });
});

describe('selectBackend', () => {
  it('falls back in the configured order, one attempt per backend not used, worded by the app', async () => {
    const seen: BackendFailure[] = [];
    const sel = await selectBackend(
      { order: ['wasm', 'cpu'], requested: 'wasm,cpu', source: 'the option' },
      {
        wasmPath: emptyDir,
        describe: (f) => {
          seen.push(f);
          return `app words for ${f.kind}`;
        },
        unavailable: () => new Error('not expected'),
      },
    );
    expect(sel).toMatchObject({ backend: 'cpu', adapter: null, adapterInfo: null, simd: null, requested: 'wasm,cpu', source: 'the option' });
    expect(sel.attempts).toEqual([{ backend: 'wasm', reason: 'app words for wasm-files-missing' }]);
    expect(seen).toEqual([{ kind: 'wasm-files-missing', backend: 'wasm', dir: emptyDir, missing: ['tfjs-backend-wasm.wasm', 'tfjs-backend-wasm-simd.wasm'] }]);
    expect(tf.getBackend()).toBe('cpu');
  });

  it("throws the app's error with every attempt when no allowed backend works (no fallback it did not list)", async () => {
    const err = await selectBackend(
      { order: ['wasm'], requested: 'wasm', source: 'the option' },
      {
        wasmPath: emptyDir,
        wasmFiles: ['tfjs-backend-wasm-simd.wasm'],
        describe: (f) => (f.kind === 'wasm-files-missing' ? `missing ${f.missing.join(',')}` : f.kind),
        unavailable: (attempts) => new AppConfigError('attempts', JSON.stringify(attempts)),
      },
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppConfigError);
    expect(JSON.parse((err as AppConfigError).value)).toEqual([{ backend: 'wasm', reason: 'missing tfjs-backend-wasm-simd.wasm' }]);
  });

  it('runs wasm from the installed files, with SIMD', async () => {
    const sel = await selectBackend(
      { order: ['wasm'], requested: 'wasm', source: 'default' },
      { describe: (f) => f.kind, unavailable: () => new Error('no wasm') },
    );
    expect(sel).toMatchObject({ backend: 'wasm', simd: true, attempts: [] });
    expect(tf.getBackend()).toBe('wasm');
  });
});

describe('the GPU of a rank', () => {
  it('refuses software adapters', () => {
    const gpu = { vendor: 'nvidia', architecture: '', device: 'nvidia-h200', description: 'NVIDIA: 580.159.04', isFallbackAdapter: false };
    expect(isSoftwareAdapter(gpu)).toBe(false);
    expect(isSoftwareAdapter({ ...gpu, isFallbackAdapter: true })).toBe(true);
    expect(isSoftwareAdapter({ ...gpu, device: 'llvmpipe (LLVM 15.0.6, 256 bits)' })).toBe(true);
    expect(isSoftwareAdapter({ ...gpu, description: 'SwiftShader Device (Subzero)' })).toBe(true);
  });

  it('reads REACTOR_GPU_INDEX, refusing anything but a non-negative integer', () => {
    expect(gpuIndexFromEnv({})).toBeNull();
    expect(gpuIndexFromEnv({ REACTOR_GPU_INDEX: '3' })).toBe(3);
    expect(() => gpuIndexFromEnv({ REACTOR_GPU_INDEX: '-1' })).toThrow('REACTOR_GPU_INDEX must be a non-negative integer, got "-1"');
  });
});
