/**
 * `reactor doctor` for an app with a Python worker (`runtime.python` in reactor.yaml): the
 * interpreter, NumPy, torch and the collective backend, each with its fix when it fails.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const app = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(app, '../../packages/cli/dist/main.js');
const PY = process.env.REACTOR_PYTHON ?? '/usr/bin/python3';
const scratch = mkdtempSync(join(tmpdir(), 'seed-video-doctor-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function doctor(python: string) {
  // No GPU, whatever the machine: the CPU checks (gloo) are what this test pins down.
  const env: NodeJS.ProcessEnv = { ...process.env, REACTOR_PYTHON: python, CUDA_VISIBLE_DEVICES: '' };
  delete env.REACTOR_GPU_COUNT;
  return spawnSync(process.execPath, [cli, 'doctor', '--manifest', join(app, 'reactor.yaml'), '--port', '0'], { encoding: 'utf8', timeout: 120_000, env });
}

describe('reactor doctor with runtime.python', () => {
  it('passes with a Python that has NumPy and torch (gloo for CPU ranks)', () => {
    const r = doctor(PY);
    expect(r.stdout).toMatch(/ok {4}python: Python 3\.\d+\.\d+ \(/);
    expect(r.stdout).toMatch(/ok {4}numpy: NumPy \d/);
    expect(r.stdout).toMatch(/ok {4}torch: torch \d/);
    expect(r.stdout).toContain('ok    gloo: no GPU: CPU ranks use torch.distributed with gloo');
    expect(r.status).toBe(0);
  });

  it('fails, with the fix, for a Python without NumPy and for one that does not exist', () => {
    const bare = join(scratch, 'python3');
    writeFileSync(bare, `#!/bin/sh\nexec ${PY} -S "$@"\n`);
    chmodSync(bare, 0o755);
    const noNumpy = doctor(bare);
    expect(noNumpy.stdout).toMatch(/FAIL {2}numpy: NumPy is not installed for .*; Python ranks need it/);
    expect(noNumpy.stdout).toMatch(/fix: apt-get install python3-numpy \(Debian\) or pip install numpy, or set REACTOR_PYTHON=/);
    expect(noNumpy.stdout).toMatch(/FAIL {2}torch: torch is not installed/);
    expect(noNumpy.status).toBe(1);
    const missing = doctor('/nonexistent/python3');
    expect(missing.stdout).toContain('FAIL  python: the Python interpreter "/nonexistent/python3" was not found');
    expect(missing.status).toBe(1);
  });
});
