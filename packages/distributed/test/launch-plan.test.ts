// The launch plan is a pure function: options and machine facts in, every rank's device,
// environment, command and init message (and the shared-memory backend) out. No process here.
import { describe, expect, it } from 'vitest';
import { type LaunchOptions, type LaunchWorker, type MachineFacts, chooseShmBackend, planLaunch } from '../src/internal.js';
import { DistributedError } from '../src/index.js';

const opts = (o: Partial<LaunchOptions> = {}): LaunchOptions => ({
  worldSize: 2,
  devices: 'auto',
  shm: 'auto',
  env: {},
  faults: [],
  verifyInputs: false,
  maxShmBytes: null,
  maxInFlight: 1,
  outputRank: 0,
  ...o,
});
const facts = (f: Partial<MachineFacts> = {}): MachineFacts => ({ gpuCount: 0, nativeShmError: null, vulkan: undefined, env: { PATH: '/bin' }, ...f });
const ts: LaunchWorker = { kind: 'typescript', childMain: '/x/dist/process/child-main.js', moduleUrl: 'file:///app/dist/worker.js', exportName: 'W' };
const python: LaunchWorker = {
  kind: 'python',
  python: {
    module: 'video_worker',
    className: 'VideoWorker',
    interpreter: 'python3',
    interpreterPath: '/usr/bin/python3',
    pythonPath: '/py',
    errors: new Map(),
  },
};
const plan = (o: Partial<LaunchOptions>, f: Partial<MachineFacts>, worker: LaunchWorker = ts) =>
  planLaunch({ opts: opts(o), worker, prefix: 'rx-1', masterPort: 29500 }, facts(f));
const layer = { implicit: true } as const;

describe('planLaunch', () => {
  it.each([
    { name: 'auto on a machine without GPUs: CPU ranks', o: {}, f: { gpuCount: 0 }, devices: ['cpu', 'cpu'], cuda: ['', ''] },
    { name: 'auto on 4 GPUs: one GPU per rank', o: {}, f: { gpuCount: 4 }, devices: ['gpu:0', 'gpu:1'], cuda: ['0', '1'] },
    { name: "'cpu' on a GPU machine", o: { devices: 'cpu' as const }, f: { gpuCount: 4 }, devices: ['cpu', 'cpu'], cuda: ['', ''] },
    { name: 'an explicit list', o: { devices: [3, 1] }, f: { gpuCount: 4 }, devices: ['gpu:3', 'gpu:1'], cuda: ['3', '1'] },
    {
      name: 'a parent CUDA_VISIBLE_DEVICES remaps to physical indices',
      o: {},
      f: { gpuCount: 2, env: { CUDA_VISIBLE_DEVICES: '6,7' } },
      devices: ['gpu:0', 'gpu:1'],
      cuda: ['6', '7'],
    },
  ])('$name', ({ o, f, devices, cuda }) => {
    const p = plan(o, f);
    expect(p.ranks.map((r) => r.device)).toEqual(devices);
    expect(p.ranks.map((r) => r.env.CUDA_VISIBLE_DEVICES)).toEqual(cuda);
    expect(p.ranks.map((r) => r.init.device)).toEqual(devices);
    for (const r of p.ranks) {
      expect(r.env).toMatchObject({ RANK: String(r.rank), WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', MASTER_PORT: '29500', REACTOR_DEVICE: r.device });
    }
  });

  it('rejects more ranks than GPUs, naming the fix', () => {
    expect(() => plan({ worldSize: 3 }, { gpuCount: 2 })).toThrow(/worldSize is 3 but this machine has 2 GPUs/);
  });

  it.each([
    { name: 'native loads', shm: 'auto' as const, err: null, backend: 'native', notice: [] as string[] },
    { name: 'native fails under auto: files, with a notice', shm: 'auto' as const, err: 'no binding', backend: 'file', notice: ['shm'] },
    { name: "'file' never needs the binding", shm: 'file' as const, err: 'no binding', backend: 'file', notice: [] },
  ])('shm backend: $name', ({ shm, err, backend, notice }) => {
    const p = plan({ shm, devices: 'cpu' }, { nativeShmError: err });
    expect(p.backend).toBe(backend);
    expect(p.ranks.every((r) => r.init.backend === backend)).toBe(true);
    expect(p.notices.map((n) => n.key)).toEqual(notice);
  });

  it("throws shm_native_unavailable for shm: 'native' without the binding", () => {
    expect(() => chooseShmBackend('native', 'dlopen failed')).toThrow(DistributedError);
    expect(() => chooseShmBackend('native', 'dlopen failed')).toThrow(/cannot load \(dlopen failed\)/);
  });

  it('says once that CPU ranks run when auto found no GPU, and not when CPU was asked for', () => {
    expect(plan({}, { gpuCount: 0 }).notices.map((n) => [n.key, n.message])).toEqual([['cpu', 'No GPU found on this machine: 2 ranks run on CPU.']]);
    expect(plan({ devices: 'cpu' }, { gpuCount: 0 }).notices).toEqual([]);
  });

  it('binds Vulkan by PCI address when the device-select layer is there, and warns for several GPU ranks when it is not', () => {
    const bound = plan({}, { gpuCount: 2, vulkan: { pciAddresses: ['0000:01:00.0', '0000:02:00.0'], layer } });
    expect(bound.notices).toEqual([]);
    expect(bound.ranks[1]!.env.REACTOR_GPU_PCI).toBe('0000:02:00.0');
    const unbound = plan({}, { gpuCount: 2, vulkan: { pciAddresses: ['0000:01:00.0', '0000:02:00.0'], layer: undefined } });
    expect(unbound.notices.map((n) => n.key)).toEqual(['vulkan']);
    expect(unbound.ranks[1]!.env.REACTOR_GPU_PCI).toBeUndefined();
    expect(plan({ worldSize: 1 }, { gpuCount: 2 }).notices).toEqual([]);
  });

  it('plans a TypeScript rank as node on the child entry point', () => {
    const [r0] = plan({ devices: 'cpu' }, {}).ranks;
    expect(r0).toMatchObject({ childMain: ts.kind === 'typescript' ? ts.childMain : '', pipeAllStdout: false });
    expect(r0!.command).toBeUndefined();
    expect(r0!.init).toMatchObject({ t: 'init', moduleUrl: 'file:///app/dist/worker.js', exportName: 'W', prefix: 'rx-1', worldSize: 2 });
  });

  it('plans a Python rank as the interpreter running reactor_worker._rank, with PYTHONPATH and every stdout line', () => {
    const p = plan({ devices: 'cpu', env: { EXTRA: '1' } }, {}, python);
    expect(p.ranks[1]).toMatchObject({
      childMain: '',
      pipeAllStdout: true,
      command: { file: '/usr/bin/python3', args: ['-m', 'reactor_worker._rank', '--reactor-runner=rx-1', '--rank=1'] },
    });
    expect(p.ranks[1]!.env).toMatchObject({ PYTHONPATH: '/py', PYTHONUNBUFFERED: '1', EXTRA: '1', PATH: '/bin' });
    expect(p.ranks[1]!.init).toMatchObject({ moduleUrl: 'video_worker', exportName: 'VideoWorker' });
  });

  it("gives each rank only its own faults and the runner's checks", () => {
    const faults: LaunchOptions['faults'] = [
      { rank: 1, call: 2, kind: 'crash' },
      { rank: 0, call: 1, kind: 'hang' },
    ];
    const p = plan({ devices: 'cpu', faults, verifyInputs: true, maxShmBytes: 1 << 20 }, {});
    expect(p.ranks.map((r) => r.init.faults)).toEqual([[faults[1]], [faults[0]]]);
    expect(p.ranks.every((r) => r.init.verifyInputs && r.init.maxShmBytes === 1 << 20)).toBe(true);
  });
});
