/**
 * `GpuSlotLease`: the session slots of one GPU, held with `flock` by the instances that share it.
 * Real `flock` processes on a fresh folder; a holder in another process is SIGKILLed.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DistributedErrorCode, GpuSlotError, GpuSlotLease, gpuSlotKey } from '../src/index.js';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function folder(): string {
  const dir = mkdtempSync(join(tmpdir(), 'reactor-gpu-slots-test-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function open(dir: string, sessionsPerGpu = 1, gpu = 'g0'): GpuSlotLease {
  const lease = GpuSlotLease.open({ sessionsPerGpu, dir, gpu });
  cleanups.push(() => lease.close());
  return lease;
}

/** Resolves with the lease's slot once it holds one. */
function held(lease: GpuSlotLease): Promise<number> {
  if (lease.slot !== undefined) return Promise.resolve(lease.slot);
  return new Promise((res) => {
    const off = lease.onChange((slot) => {
      if (slot === undefined) return;
      off();
      res(slot);
    });
  });
}

describe('GpuSlotLease', () => {
  it('gives each of N leases its own slot; the N+1th is refused gpu_full until one closes', async () => {
    const dir = folder();
    const a = open(dir, 2);
    const b = open(dir, 2);
    expect(new Set([await held(a), await held(b)])).toEqual(new Set([0, 1]));
    const c = open(dir, 2);
    expect(c.slot).toBeUndefined();
    expect(c.refusal()).toEqual({
      code: 'gpu_full',
      message: `all 2 session slots of GPU g0 are held by other instances (gpu.sessions_per_gpu: 2, slots in ${dir}); this instance takes one as soon as one frees`,
    });
    const freed = a.slot!;
    a.close();
    expect(await held(c)).toBe(freed);
    expect(c.refusal()).toBeUndefined();
    expect(a.refusal()?.message).toContain('this instance gave up its GPU session slot (closing)');
  });

  it('keys the slots by GPU: a lease of another GPU is not refused by this one', async () => {
    const dir = folder();
    await held(open(dir, 1, 'g0'));
    expect(await held(open(dir, 1, 'GPU-2f6c:1'))).toBe(0);
  });

  it("hands a SIGKILLed holder's slot to a waiting lease", async () => {
    const dir = folder();
    // The holder is another node process with its own lease (as another instance would be).
    const entry = new URL('../dist/index.js', import.meta.url).pathname;
    const script = `import { GpuSlotLease } from ${JSON.stringify(entry)};
const l = GpuSlotLease.open({ sessionsPerGpu: 1, dir: ${JSON.stringify(dir)}, gpu: 'g0' });
l.onChange((s) => { if (s !== undefined) process.stdout.write('held\\n'); });
setInterval(() => {}, 1000);`;
    const holder = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    cleanups.push(() => holder.kill('SIGKILL'));
    await new Promise<void>((res) => holder.stdout!.on('data', (d: Buffer) => d.toString().includes('held') && res()));
    const waiter = open(dir, 1);
    expect(waiter.refusal()?.code).toBe('gpu_full');
    holder.kill('SIGKILL');
    expect(await held(waiter)).toBe(0);
  });

  it('refuses bad options and an unusable folder before it starts anything', () => {
    const dir = folder();
    expect(() => GpuSlotLease.open({ sessionsPerGpu: 0, dir, gpu: 'g0' })).toThrow(/gpu.sessions_per_gpu must be a whole number from 1 to 64, got 0/);
    expect(() => GpuSlotLease.open({ sessionsPerGpu: 1, dir, gpu: ' ' })).toThrow(/gpu.device must name the GPU/);
    const file = join(dir, 'file');
    writeFileSync(file, '');
    const err = (() => {
      try {
        GpuSlotLease.open({ sessionsPerGpu: 1, dir: file, gpu: 'g0' });
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(err).toBeInstanceOf(GpuSlotError);
    expect((err as GpuSlotError).code).toBe(DistributedErrorCode.GpuSlotDir);
    expect(() => GpuSlotLease.open({ sessionsPerGpu: 1, dir, gpu: 'g0', flock: join(dir, 'no-flock') })).toThrow(
      expect.objectContaining({ code: 'gpu_slot_unavailable' }),
    );
  });

  it('takes the GPU id from NVIDIA_VISIBLE_DEVICES, then CUDA_VISIBLE_DEVICES, then 0', () => {
    expect(gpuSlotKey({ NVIDIA_VISIBLE_DEVICES: 'GPU-abc', CUDA_VISIBLE_DEVICES: '3' })).toBe('GPU-abc');
    expect(gpuSlotKey({ NVIDIA_VISIBLE_DEVICES: 'all', CUDA_VISIBLE_DEVICES: '3' })).toBe('3');
    expect(gpuSlotKey({ NVIDIA_VISIBLE_DEVICES: '/var/run/nvidia-container-devices' })).toBe('0');
    expect(gpuSlotKey({})).toBe('0');
  });
});
