import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BackendConfigError,
  BackendUnavailableError,
  ParallelVideoModel,
  planBackends,
  requestGpuAdapter,
  type ParallelVideoModelOptions,
} from '../src/model/index.js';

const here = dirname(fileURLToPath(import.meta.url));
const weightsRoot = resolve(here, '../weights');
const emptyDir = mkdtempSync(join(tmpdir(), 'video-backend-test-'));
afterAll(() => rmSync(emptyDir, { recursive: true, force: true }));

function model(opts: Partial<ParallelVideoModelOptions> = {}): ParallelVideoModel {
  return new ParallelVideoModel({ weightsRoot, width: 32, height: 32, framesPerChunk: 1, env: {}, ...opts });
}

// Whether this machine has a WebGPU adapter decides what `webgpu` must do: run on it, or fail
// with a clear error. The dev/CI machine has none; a GPU machine has one.
let hasGpu = false;
beforeAll(async () => {
  hasGpu = (await requestGpuAdapter(null)).adapter !== null;
});

describe('ParallelVideoModel backend selection', () => {
  describe('planBackends', () => {
    it('defaults to auto: webgpu, then wasm, then cpu', () => {
      expect(planBackends(undefined, {})).toEqual({ order: ['webgpu', 'wasm', 'cpu'], requested: 'auto', source: 'default' });
    });

    it('lets REACTOR_BACKEND override options.backend', () => {
      expect(planBackends('webgpu', { REACTOR_BACKEND: 'cpu' })).toEqual({ order: ['cpu'], requested: 'cpu', source: 'REACTOR_BACKEND' });
      expect(planBackends('webgpu', { REACTOR_BACKEND: '' })).toEqual({ order: ['webgpu'], requested: 'webgpu', source: 'options.backend' });
    });

    it('accepts a comma-separated fallback order', () => {
      expect(planBackends(' WebGPU , wasm ', {}).order).toEqual(['webgpu', 'wasm']);
    });

    it('skips webgpu under auto when the runner made this a CPU rank', () => {
      expect(planBackends('auto', {}, 'cpu').order).toEqual(['wasm', 'cpu']);
      expect(planBackends('auto', {}, 'gpu:0').order).toEqual(['webgpu', 'wasm', 'cpu']);
    });

    it('rejects an unknown or repeated backend, naming where the value came from', () => {
      expect(() => planBackends(undefined, { REACTOR_BACKEND: 'cuda' })).toThrow(BackendConfigError);
      expect(() => planBackends(undefined, { REACTOR_BACKEND: 'cuda' })).toThrowErrorMatchingInlineSnapshot(
        `[BackendConfigError: REACTOR_BACKEND is "cuda", which is not a backend preference. Use "auto" (webgpu, then wasm, then cpu), one of "webgpu", "wasm", "cpu", or a comma-separated fallback order such as "webgpu,wasm".]`,
      );
      expect(() => planBackends('wasm,wasm', {})).toThrow(/options\.backend is "wasm,wasm"/);
    });

    it('is checked when the model is constructed, before anything loads', () => {
      const err = (() => {
        try {
          model({ env: { REACTOR_BACKEND: 'gpu' } });
        } catch (e) {
          return e;
        }
        return null;
      })();
      expect(err).toBeInstanceOf(BackendConfigError);
      expect((err as BackendConfigError).code).toBe('backend_config');
    });
  });

  describe('load', () => {
    it('webgpu asked for explicitly: runs on the adapter, or fails with backend_unavailable and no CPU fallback', async () => {
      const m = model({ backend: 'webgpu' });
      if (hasGpu) {
        await m.load();
        expect(m.info().backend).toBe('webgpu');
        expect(m.info().adapter?.vendor).toBeTruthy();
        return;
      }
      const err = await m.load().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BackendUnavailableError);
      const e = err as BackendUnavailableError;
      expect(e.code).toBe('backend_unavailable');
      expect(e.attempts.map((a) => a.backend)).toEqual(['webgpu']);
      expect(e.message).toContain('Rank 0: no usable tfjs backend for options.backend="webgpu"');
      expect(e.message).toContain('no WebGPU adapter');
      expect(e.message).toContain('REACTOR_BACKEND=wasm');
      expect(m.loaded).toBe(false);
    });

    it('REACTOR_BACKEND=webgpu overrides a wasm config and is just as strict', async () => {
      const m = model({ backend: 'wasm', env: { REACTOR_BACKEND: 'webgpu' } });
      if (hasGpu) {
        await m.load();
        expect(m.info().backendSource).toBe('REACTOR_BACKEND');
        return;
      }
      await expect(m.load()).rejects.toThrow(/no usable tfjs backend for REACTOR_BACKEND="webgpu"/);
    });

    it('falls back only where configured: "webgpu,wasm" records why webgpu was not used', async () => {
      const m = model({ backend: 'webgpu,wasm' });
      await m.load();
      const info = m.info();
      if (hasGpu) {
        expect(info.backend).toBe('webgpu');
        return;
      }
      expect(info.backend).toBe('wasm');
      expect(info.backendAttempts).toEqual([{ backend: 'webgpu', reason: expect.stringContaining('no WebGPU adapter') }]);
      expect(info.adapter).toBeNull();
    });

    it('auto on a CPU rank goes straight to wasm', async () => {
      const m = model({ backend: 'auto', device: 'cpu' });
      await m.load();
      expect(m.info()).toMatchObject({ backend: 'wasm', requestedBackend: 'auto', backendSource: 'options.backend', backendAttempts: [], simd: true });
    });

    it('wasm whose .wasm files are missing is an error naming the folder, or falls back to cpu when allowed', async () => {
      const strict = model({ backend: 'wasm', wasmPath: emptyDir });
      const err = await strict.load().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BackendUnavailableError);
      expect((err as Error).message).toContain(`the .wasm files are missing from ${emptyDir}`);

      const lenient = model({ backend: 'wasm,cpu', wasmPath: emptyDir });
      await lenient.load();
      expect(lenient.info().backend).toBe('cpu');
      expect(lenient.info().backendAttempts.map((a) => a.backend)).toEqual(['wasm']);
    });

    it('cpu and wasm render the same frames to within rounding (max 2 levels per channel)', async () => {
      const onWasm = model({ backend: 'wasm' });
      await onWasm.load();
      const a = (await onWasm.generate({ prompt: 'ocean waves at sunset' })).frames;
      const onCpu = model({ backend: 'cpu' });
      await onCpu.load();
      expect(onCpu.info().backend).toBe('cpu');
      const b = (await onCpu.generate({ prompt: 'ocean waves at sunset' })).frames;
      let max = 0;
      for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs((a[i] as number) - (b[i] as number)));
      expect(a.length).toBe(32 * 32 * 3);
      expect(max).toBeLessThanOrEqual(2);
    });
  });
});

describe('adapterProblem', () => {
  it('accepts a GPU adapter and refuses software fallback adapters, saying which', async () => {
    const { adapterProblem } = await import('../src/model/index.js');
    const h200 = { vendor: 'nvidia', architecture: '', device: 'nvidia-h200', description: 'NVIDIA: 580.159.04', isFallbackAdapter: false };
    expect(adapterProblem(h200)).toBeNull();
    expect(adapterProblem({ ...h200, isFallbackAdapter: true })).toBe(
      'Dawn offered only a software adapter (vendor "nvidia", device "nvidia-h200", isFallbackAdapter), not a GPU',
    );
    expect(adapterProblem({ vendor: 'mesa', architecture: '', device: 'llvmpipe (LLVM 15.0.6, 256 bits)', description: '', isFallbackAdapter: false })).toMatch(
      /software adapter \(vendor "mesa", device "llvmpipe/,
    );
    expect(adapterProblem({ vendor: 'google', architecture: '', device: 'swiftshader device', description: '', isFallbackAdapter: false })).not.toBeNull();
  });
});
