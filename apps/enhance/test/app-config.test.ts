// The app's config, its plan for the machine found, and what `reactor doctor` is told to expect.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { AppStatics } from '@reactor/runtime';
import { afterAll, describe, expect, it } from 'vitest';
import { EnhanceApp, EnhanceConfig, EnhanceConfigError, H200_TORCH_FPS_720P, chooseSplit, loadEnhanceConfig, planEnhance } from '../src/app.js';
import { backendFramework } from '../src/backend.js';

const scratch = mkdtempSync(join(tmpdir(), 'enhance-config-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
function config(text: string): string {
  const file = join(scratch, `c-${Math.random().toString(36).slice(2)}.yaml`);
  writeFileSync(file, text);
  return file;
}

const statics: AppStatics = EnhanceApp;

describe('planEnhance', () => {
  it('picks medium at 1280x720, 4 frames a step (8 for thick), one rank per declared GPU on a GPU machine', () => {
    expect(planEnhance(new EnhanceConfig(), 2, 2)).toMatchObject({
      worldSize: 2,
      devices: 'auto',
      model: 'medium',
      outputWidth: 1280,
      outputHeight: 720,
      framesPerStep: { slim: 4, medium: 4, thick: 8 },
    });
    const fixed = Object.assign(new EnhanceConfig(), { framesPerStep: 3 });
    expect(planEnhance(fixed, 2, 2).framesPerStep).toEqual({ slim: 3, medium: 3, thick: 3 });
    expect(planEnhance(new EnhanceConfig(), 4, 2).worldSize).toBe(2);
    expect(planEnhance(new EnhanceConfig(), 1, 2).worldSize).toBe(1);
  });

  it('picks slim at 256x144 on 2 CPU ranks without a GPU', () => {
    expect(planEnhance(new EnhanceConfig(), 0, 2)).toMatchObject({
      worldSize: 2,
      devices: 'cpu',
      model: 'slim',
      outputWidth: 256,
      outputHeight: 144,
      framesPerStep: { slim: 2, medium: 2, thick: 2 },
    });
  });
});

describe('chooseSplit', () => {
  it('tiles when the overlap is cheap (slim, medium at 180 rows on 2 ranks), frames for thick (154 rows of context)', () => {
    expect(chooseSplit('auto', 180, 10, 2, 4)).toBe('tiles');
    expect(chooseSplit('auto', 180, 18, 2, 4)).toBe('frames');
    expect(chooseSplit('auto', 180, 154, 2, 4)).toBe('frames');
    expect(chooseSplit('auto', 180, 154, 2, 1)).toBe('tiles');
    expect(chooseSplit('frames', 180, 10, 2, 4)).toBe('frames');
  });
});

describe('loadEnhanceConfig', () => {
  it('names every wrong or unknown key', () => {
    const file = config('model: huge\nsplit: rows\ncolour: red\n');
    expect(() => loadEnhanceConfig(file)).toThrow(EnhanceConfigError);
    try {
      loadEnhanceConfig(file);
    } catch (e) {
      expect((e as EnhanceConfigError).code).toBe('enhance_config_invalid');
      expect((e as Error).message).toMatch(/model: .*\n.*split: .*\n.*colour: unknown key/s);
    }
  });
});

describe('EnhanceApp.requirements', () => {
  it('on CPU: 2 ranks, no GPU, and the advice to keep slim at the default size', async () => {
    const r = await statics.requirements!({ configPath: undefined, manifestGpuCount: 2, gpuCount: 0 });
    expect(r).toMatchObject({ worldSize: 2, usesGpu: false });
    expect(r.checks).toEqual([
      expect.objectContaining({ name: 'enhance', status: 'ok', detail: expect.stringMatching(/ESRGAN slim at 256x144 on 2 CPU rank/) }),
    ]);
  });

  it('on GPUs: probes WebGPU, says which models run in real time, and warns for thick on one GPU', async () => {
    const medium = await EnhanceApp.requirements({ configPath: undefined, manifestGpuCount: 2, gpuCount: 2 });
    expect(medium).toMatchObject({ worldSize: 2, usesGpu: true });
    expect(medium.checks!.map((c) => c.name)).toEqual(['webgpu', 'enhance']);
    expect(medium.checks![1]).toEqual({
      name: 'enhance',
      status: 'ok',
      detail: expect.stringMatching(
        /^ESRGAN medium \(28 convolutions\) at 1280x720 on 2 GPU\(s\): expect ~80 fps on H200s \(measured at 1280x720 on 1 and 2 H200s\); real time \(30 fps\) here: slim, medium, thick$/,
      ),
    });
    const thick = await EnhanceApp.requirements({ configPath: config('model: thick\n'), manifestGpuCount: 1, gpuCount: 1 });
    expect(thick.checks![1]).toMatchObject({ name: 'enhance', status: 'warn', fix: expect.stringMatching(/thick needs ~2 H200s for 30 fps/) });
  });

  it('with backend: wasm on a GPU machine: no WebGPU probe and the CPU advice', async () => {
    const r = await EnhanceApp.requirements({ configPath: config('backend: wasm\n'), manifestGpuCount: 2, gpuCount: 2 });
    expect(r.checks!.map((c) => c.name)).toEqual(['enhance']);
  });

  it('with backend: torch: probes the interpreter (NumPy, torch, CUDA), no WebGPU probe; a missing interpreter fails with the fix', async () => {
    const ok = await EnhanceApp.requirements({ configPath: config('backend: torch\npython: /usr/bin/python3\n'), manifestGpuCount: 2, gpuCount: 0 });
    expect(ok.checks!.map((c) => c.name)).toEqual(['torch', 'enhance']);
    expect(ok.checks![0]).toMatchObject({
      status: 'ok',
      detail: expect.stringMatching(/^\/usr\/bin\/python3: Python 3\.\d+\.\d+, NumPy .*, torch .*; CUDA devices: none$/),
    });
    const bad = await EnhanceApp.requirements({ configPath: config('backend: torch\npython: /nonexistent/python3\n'), manifestGpuCount: 2, gpuCount: 0 });
    expect(bad.checks![0]).toMatchObject({ name: 'torch', status: 'fail', fix: expect.stringContaining('install NumPy and PyTorch for /nonexistent/python3') });
    const noTorch = await EnhanceApp.requirements({ configPath: config('backend: torch\npython: /usr/bin/false\n'), manifestGpuCount: 2, gpuCount: 0 });
    expect(noTorch.checks![0]).toMatchObject({ name: 'torch', status: 'fail' });
  }, 60_000);

  it('with backend: torch on a GPU: states no figure that was not measured with this code (issue 42), and only ranges docs/benchmarks.md states', async () => {
    const r = await EnhanceApp.requirements({
      configPath: config('backend: torch\npython: /usr/bin/python3\nmodel: medium\n'),
      manifestGpuCount: 1,
      gpuCount: 1,
    });
    const enhance = r.checks!.find((c) => c.name === 'enhance')!;
    expect(enhance).toMatchObject({ status: 'ok' });
    expect(enhance.detail).toBe(
      'ESRGAN medium on 1 GPU(s) with torch: no figure measured with this code yet (scripts/gpu/serve.sh measures it; docs/benchmarks.md)',
    );
    expect(enhance.detail).not.toMatch(/fps/);
    // The ranges are the ones docs/benchmarks.md states, model by model.
    const bench = readFileSync(resolve(import.meta.dirname, '../../../docs/benchmarks.md'), 'utf8');
    for (const [model, range] of Object.entries(H200_TORCH_FPS_720P)) expect(bench).toContain(`| ${model} | ${range![0]}-${range![1]} fps |`);
  }, 60_000);

  it('REACTOR_BACKEND=torch overrides the config; torch inside an order is refused', () => {
    expect(backendFramework('webgpu', { REACTOR_BACKEND: 'torch' })).toBe('torch');
    expect(backendFramework('torch', {})).toBe('torch');
    expect(backendFramework('auto', {})).toBe('tfjs');
    expect(() => backendFramework('torch,wasm', {})).toThrow(/"torch" runs the model in Python ranks and cannot be part of a tfjs order/);
  });
});
