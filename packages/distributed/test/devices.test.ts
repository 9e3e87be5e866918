import { describe, expect, it } from 'vitest';
import { detectGpuCount } from '../src/index.js';
import { assignDevices, gpuCountFromEnv, rankEnvironment } from '../src/internal.js';

describe('assignDevices', () => {
  it('gives each rank its own GPU', () => {
    const a = assignDevices(4, 'auto', 8);
    expect(a.map((x) => x.device)).toEqual(['gpu:0', 'gpu:1', 'gpu:2', 'gpu:3']);
    expect(new Set(a.map((x) => x.gpuIndex)).size).toBe(4);
  });

  it('runs on CPU on a machine without GPUs, or when asked', () => {
    expect(assignDevices(2, 'auto', 0)).toEqual([
      { rank: 0, device: 'cpu', gpuIndex: null },
      { rank: 1, device: 'cpu', gpuIndex: null },
    ]);
    expect(assignDevices(3, 'cpu', 8).every((x) => x.device === 'cpu')).toBe(true);
  });

  it('refuses more ranks than GPUs, naming the fix', () => {
    expect(() => assignDevices(3, 'auto', 2)).toThrowErrorMatchingInlineSnapshot(
      `[RangeError: options.worldSize is 3 but this machine has 2 GPUs: each rank needs its own GPU. Lower worldSize to at most 2, or pass devices: 'cpu' to run the ranks on CPU.]`,
    );
  });

  it('takes an explicit list and checks it', () => {
    expect(assignDevices(2, [3, 1], 4).map((x) => x.device)).toEqual(['gpu:3', 'gpu:1']);
    expect(() => assignDevices(2, [1, 1], 4)).toThrowErrorMatchingInlineSnapshot(
      `[RangeError: options.devices gives GPU 1 to two ranks; every rank needs its own GPU.]`,
    );
    expect(() => assignDevices(2, [0], 4)).toThrowErrorMatchingInlineSnapshot(
      `[RangeError: options.devices lists 1 GPU for 2 ranks; list exactly one GPU index per rank.]`,
    );
    expect(() => assignDevices(2, [0, 4], 4)).toThrowErrorMatchingInlineSnapshot(
      `[RangeError: options.devices[1] is 4, but this machine has 4 GPUs (valid indices: 0..3). Use devices: 'cpu' to run on CPU.]`,
    );
  });
});

describe('detectGpuCount', () => {
  it('honours REACTOR_GPU_COUNT and CUDA_VISIBLE_DEVICES', () => {
    expect(detectGpuCount({ REACTOR_GPU_COUNT: '4' })).toBe(4);
    expect(() => detectGpuCount({ REACTOR_GPU_COUNT: 'x' })).toThrow(RangeError);
    // This machine has no GPU: /dev/nvidia* is absent and nvidia-smi missing.
    expect(detectGpuCount({ CUDA_VISIBLE_DEVICES: '0,1' })).toBe(0);
  });
});

describe('gpuCountFromEnv', () => {
  const machine = (n: number) => {
    const probe = () => {
      probe.calls++;
      return n;
    };
    probe.calls = 0;
    return probe;
  };

  it('takes REACTOR_GPU_COUNT as the count without probing the machine', () => {
    const probe = machine(8);
    expect(gpuCountFromEnv({ REACTOR_GPU_COUNT: '2', CUDA_VISIBLE_DEVICES: '0' }, probe)).toBe(2);
    expect(probe.calls).toBe(0);
  });

  it('caps the machine count at the CUDA_VISIBLE_DEVICES index list, and reads an empty value as none', () => {
    expect(gpuCountFromEnv({ CUDA_VISIBLE_DEVICES: '1,3' }, machine(8))).toBe(2);
    expect(gpuCountFromEnv({ CUDA_VISIBLE_DEVICES: '0,1,2' }, machine(2))).toBe(2);
    const probe = machine(8);
    expect(gpuCountFromEnv({ CUDA_VISIBLE_DEVICES: ' ' }, probe)).toBe(0);
    expect(probe.calls).toBe(0);
    expect(gpuCountFromEnv({ CUDA_VISIBLE_DEVICES: 'GPU-8f2c' }, machine(4))).toBe(4);
    expect(gpuCountFromEnv({}, machine(3))).toBe(3);
  });

  it('is what detectGpuCount and the runner use', () => {
    expect(detectGpuCount({ REACTOR_GPU_COUNT: '5' })).toBe(gpuCountFromEnv({ REACTOR_GPU_COUNT: '5' }, machine(0)));
    expect(() => gpuCountFromEnv({ REACTOR_GPU_COUNT: '-1' }, machine(0))).toThrowErrorMatchingInlineSnapshot(
      `[RangeError: REACTOR_GPU_COUNT must be a non-negative integer, got "-1".]`,
    );
  });
});

describe('rankEnvironment', () => {
  it("sets torchrun's rendezvous variables and the rank's GPU", () => {
    const env = rankEnvironment({ PATH: '/bin' }, { rank: 1, device: 'gpu:3', gpuIndex: 3 }, 2, 29500);
    expect(env).toEqual({
      PATH: '/bin',
      RANK: '1',
      LOCAL_RANK: '1',
      WORLD_SIZE: '2',
      LOCAL_WORLD_SIZE: '2',
      MASTER_ADDR: '127.0.0.1',
      MASTER_PORT: '29500',
      REACTOR_DEVICE: 'gpu:3',
      CUDA_VISIBLE_DEVICES: '3',
      REACTOR_GPU_INDEX: '3',
    });
  });

  it('maps through a CUDA_VISIBLE_DEVICES the parent already has, and hides GPUs from CPU ranks', () => {
    expect(rankEnvironment({ CUDA_VISIBLE_DEVICES: '4,6' }, { rank: 1, device: 'gpu:1', gpuIndex: 1 }, 2, 1).CUDA_VISIBLE_DEVICES).toBe('6');
    const cpu = rankEnvironment({ REACTOR_GPU_INDEX: '2' }, { rank: 0, device: 'cpu', gpuIndex: null }, 1, 1);
    expect(cpu.CUDA_VISIBLE_DEVICES).toBe('');
    expect(cpu.REACTOR_GPU_INDEX).toBeUndefined();
  });
});
