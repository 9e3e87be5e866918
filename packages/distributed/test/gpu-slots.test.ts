/**
 * `GpuSlotLease`: the session slots of one GPU, held with `flock` by the instances that share it.
 * Real `flock` processes on a fresh folder; a holder in another process is SIGKILLed.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DistributedErrorCode, GpuSlotError, GpuSlotLease, type GpuSlotOptions, gpuSlotKey } from '../src/index.js';
import { GPU_HEALTH_STALE_MS } from '../src/runner/gpu-slots.js';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function folder(): string {
  const dir = mkdtempSync(join(tmpdir(), 'reactor-gpu-slots-test-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function open(dir: string, sessionsPerGpu = 1, gpu = 'g0', more: Partial<GpuSlotOptions> = {}): GpuSlotLease {
  const lease = GpuSlotLease.open({ sessionsPerGpu, dir, gpu, ...more });
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

describe('GpuSlotLease, admit: deadline', () => {
  const deadline = { admit: 'deadline' } as const;
  /** A session at 25 fps (40 ms a frame) whose frame-time p99 is `p99Ms`. */
  const session = (id: string, p99Ms: number | undefined) => ({ session: id, fps: 25, intervals: 120, p99Ms, windowMs: 5000 });

  it("publishes each holder's frame times; an idle holder is gpu_busy while another's p99 is past deadline less margin", async () => {
    const dir = folder();
    const a = open(dir, 2, 'g0', deadline);
    const b = open(dir, 2, 'g0', deadline);
    const [ka, kb] = [await held(a), await held(b)];
    // Both idle: both files say so, nothing is refused.
    expect(JSON.parse(readFileSync(a.healthFile(ka), 'utf8'))).toMatchObject({ v: 1, gpu: 'g0', slot: ka, session: null, p99Ms: null });
    expect(b.refusal()).toBeUndefined();
    // 1.25 intervals (the default bound: 1.5 less 0.25) is still admitted; past it is not.
    a.report(session('s-a', 50));
    expect(b.refusal()).toBeUndefined();
    a.report(session('s-a', 52));
    expect(JSON.parse(readFileSync(a.healthFile(ka), 'utf8'))).toMatchObject({ session: 's-a', fps: 25, intervalMs: 40, p99Ms: 52, p99Intervals: 1.3 });
    expect(b.refusal()).toEqual({
      code: 'gpu_busy',
      message:
        `session s-a on GPU g0 (slot ${ka + 1}) has frame-time p99 52 ms = 1.3 frame intervals of 40 ms (25 fps) over the last 5 s, past the admission bound of 1.25 ` +
        '(gpu.deadline_p99_intervals: 1.5 less gpu.deadline_margin_intervals: 0.25); a new session would slow it further: this instance takes one once it is back under',
    });
    // Its own file never holds a holder off; a session not measured yet, or without fps, holds none off.
    expect(a.refusal()).toBeUndefined();
    a.report(session('s-a', undefined));
    expect(b.refusal()).toBeUndefined();
    a.report({ ...session('s-a', 500), fps: undefined });
    expect(b.refusal()).toBeUndefined();
    // The session ended: idle again.
    a.report(session('s-a', 500));
    expect(b.refusal()?.code).toBe('gpu_busy');
    a.report(undefined);
    expect(b.refusal()).toBeUndefined();
    // Closing removes the holder's file; the other's stays.
    a.close();
    expect(existsSync(a.healthFile(ka))).toBe(false);
    expect(existsSync(b.healthFile(kb))).toBe(true);
  });

  it("ignores a stale file (a SIGKILLed holder's) and one that is not a health file; takes its own deadline and margin", async () => {
    const dir = folder();
    const a = open(dir, 2, 'g0', { ...deadline, deadlineP99Intervals: 3, marginIntervals: 1 });
    const other = 1 - (await held(a));
    const file = a.healthFile(other);
    const body = { v: 1, gpu: 'g0', slot: other, session: 's-dead', fps: 25, intervalMs: 40, p99Ms: 400, p99Intervals: 10, intervals: 120, windowMs: 5000 };
    writeFileSync(file, JSON.stringify({ ...body, at: Date.now() - GPU_HEALTH_STALE_MS - 1000 }));
    expect(a.refusal()).toBeUndefined();
    writeFileSync(file, '{"v":1,');
    expect(a.refusal()).toBeUndefined();
    writeFileSync(file, JSON.stringify({ ...body, at: Date.now() }));
    expect(a.refusal()?.message).toContain('session s-dead on GPU g0');
    expect(a.refusal()?.message).toContain('past the admission bound of 2 (gpu.deadline_p99_intervals: 3 less gpu.deadline_margin_intervals: 1)');
    writeFileSync(file, JSON.stringify({ ...body, p99Ms: 80, p99Intervals: 2, at: Date.now() }));
    expect(a.refusal()).toBeUndefined();
  });

  it('admit: count (the default) writes no health file; bad deadline options are refused, naming the key', async () => {
    const dir = folder();
    const a = open(dir, 1);
    await held(a);
    a.report(session('s', 900));
    expect(readdirSync(dir)).toEqual(['gpu-g0.slot-0.lock']);
    expect(() => open(dir, 1, 'g0', { admit: 'fast' as never })).toThrow('gpu.admit must be one of count, deadline, got "fast"');
    expect(() => open(dir, 1, 'g0', { ...deadline, deadlineP99Intervals: 1 })).toThrow(
      'gpu.deadline_p99_intervals must be a number of frame intervals above 1',
    );
    expect(() => open(dir, 1, 'g0', { ...deadline, marginIntervals: 0.75 })).toThrow('gpu.deadline_margin_intervals must be a number from 0 to 0.5');
  });
});
