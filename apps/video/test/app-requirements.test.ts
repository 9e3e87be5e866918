// VideoApp's side of the typed host/app contract: `static requirements(context)` plans from the
// GPU count it is given (the runner's), not its own, and carries the video model's advice.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AppStatics } from '@reactor/runtime';
import { afterAll, describe, expect, it } from 'vitest';
import { requestGpuAdapter } from '../src/model/index.js';
import { VideoApp, VideoConfig, planRanks } from '../src/app.js';
import { VIDEO_MODEL_DEFAULTS } from '../src/model/index.js';

const scratch = mkdtempSync(join(tmpdir(), 'video-requirements-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function config(text: string): string {
  const file = join(scratch, `config-${Math.random().toString(36).slice(2)}.yaml`);
  writeFileSync(file, text);
  return file;
}

// Compile-time: the class satisfies the contract's statics.
const statics: AppStatics = VideoApp;

describe('VideoApp.requirements', () => {
  it('plans 2 CPU ranks when the host says no GPU is visible, whatever the manifest declares', async () => {
    const r = await statics.requirements!({ configPath: undefined, manifestGpuCount: 2, gpuCount: 0 });
    expect(r).toEqual({ shmBytes: 256 * 256 * 3 * 4 * 2 * 3, worldSize: 2, usesGpu: false, checks: [] });
  });

  it('takes the manifest count, capped by the GPUs the host counted, and needs no WebGPU probe for backend: wasm', async () => {
    const cfg = config('backend: wasm\nwidth: 64\nheight: 64\nframesPerChunk: 2\n');
    expect(await VideoApp.requirements({ configPath: cfg, manifestGpuCount: 2, gpuCount: 4 })).toEqual({
      shmBytes: 64 * 64 * 3 * 2 * 2 * 3,
      worldSize: 2,
      usesGpu: true,
      checks: [],
    });
    expect((await VideoApp.requirements({ configPath: cfg, manifestGpuCount: 8, gpuCount: 3 })).worldSize).toBe(3);
    expect((await VideoApp.requirements({ configPath: cfg, manifestGpuCount: undefined, gpuCount: 3 })).worldSize).toBe(3);
  });

  it('checks for a real WebGPU adapter where GPU ranks would try webgpu, with the Vulkan fix (advice that used to live in reactor doctor)', async () => {
    const r = await VideoApp.requirements({ configPath: undefined, manifestGpuCount: 1, gpuCount: 1 });
    expect(r.checks).toHaveLength(1);
    const check = r.checks![0]!;
    expect(check.name).toBe('webgpu');
    const hasGpu = (await requestGpuAdapter(null)).adapter !== null;
    if (!hasGpu) {
      expect(check.status).toBe('fail');
      expect(check.fix).toMatch(/Vulkan loader \(libvulkan1\).*VK_DRIVER_FILES.*backend: wasm/);
    } else {
      expect(['ok', 'fail']).toContain(check.status);
    }
  });
});

describe('VideoConfig', () => {
  it("takes its defaults from the model's one table", () => {
    const c = new VideoConfig();
    expect([c.width, c.height, c.framesPerChunk, c.rolloutChunks, c.seed]).toEqual([
      VIDEO_MODEL_DEFAULTS.width,
      VIDEO_MODEL_DEFAULTS.height,
      VIDEO_MODEL_DEFAULTS.framesPerChunk,
      VIDEO_MODEL_DEFAULTS.rolloutChunks,
      VIDEO_MODEL_DEFAULTS.seed,
    ]);
  });

  it('planRanks names the declared count in its note', () => {
    expect(planRanks(new VideoConfig(), 4, 2)).toEqual({
      worldSize: 2,
      devices: 'auto',
      note: '2 rank(s), one GPU each (4 present, 2 declared in reactor.yaml)',
    });
  });
});
