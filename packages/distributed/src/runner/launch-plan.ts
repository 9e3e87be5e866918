/**
 * The launch plan: a pure function from the runner's options and the machine's facts (GPU
 * count, whether the native shared-memory binding loads, the Vulkan binding, a TypeScript or a
 * Python worker) to what every rank is started with: its device, its environment (rendezvous
 * variables, GPU binding), its command and its `init` message, and the shared-memory backend.
 * No I/O: the machine is probed by `machine-facts.ts`, the processes are started by
 * `rank-group.ts`. A new kind of rank (another language, a remote host) is planned here.
 * @internal
 */
import { DistributedError, DistributedErrorCode } from '../errors.js';
import { type InitMessage, PROTOCOL_VERSION, type ShmBackendKind } from '../protocol.js';
import { type ResolvedPythonWorker, pythonRankCommand, pythonRankEnv } from '../python/python-worker.js';
import { type DeviceAssignment, type VulkanBinding, assignDevices, rankEnvironment } from './devices.js';
import type { ResolvedOptions } from './options.js';

/** What the runner knows of the machine it starts ranks on. */
export interface MachineFacts {
  /** GPUs visible on this machine (`detectGpuCount()`). */
  gpuCount: number;
  /** Null when the native shared-memory binding (shm-typed-array) loads; otherwise why it does not. */
  nativeShmError: string | null;
  /** PCI addresses and Mesa's device-select layer; probed only when some rank has a GPU (undefined otherwise). */
  vulkan: VulkanBinding | undefined;
  /** The parent's environment (`process.env`). */
  env: NodeJS.ProcessEnv;
}

/** What the ranks load. */
export type LaunchWorker =
  | { kind: 'typescript'; /** The compiled rank entry point. */ childMain: string; moduleUrl: string; exportName: string }
  | { kind: 'python'; python: ResolvedPythonWorker };

/** The options the plan reads. */
export type LaunchOptions = Pick<
  ResolvedOptions,
  'worldSize' | 'devices' | 'shm' | 'env' | 'faults' | 'verifyInputs' | 'maxShmBytes' | 'maxInFlight' | 'outputRank'
>;

/** Everything the plan is made from, besides the machine. */
export interface LaunchRequest {
  opts: LaunchOptions;
  worker: LaunchWorker;
  /** The runner's segment prefix. */
  prefix: string;
  /** torchrun's `MASTER_PORT` (a free loopback port). */
  masterPort: number;
}

/** How one rank is started. */
export interface RankLaunch extends DeviceAssignment {
  env: NodeJS.ProcessEnv;
  /** The compiled rank entry point (`''` for a Python rank, which runs `command`). */
  childMain: string;
  /** Another program than `node <childMain>` (a Python rank). */
  command?: { file: string; args: string[] };
  /** Pipe this rank's stdout to the log (a Python rank's prints); otherwise rank 0's only. */
  pipeAllStdout: boolean;
  /** The `init` message, but its `args` (written into shared memory when the ranks start). */
  init: Omit<InitMessage, 'args'>;
}

/** A notice the runner logs once per process (`key` names which). */
export interface LaunchNotice {
  key: 'shm' | 'cpu' | 'vulkan';
  level: 'info' | 'warn';
  message: string;
}

export interface LaunchPlan {
  backend: ShmBackendKind;
  ranks: RankLaunch[];
  /** In the order the runner logs them. */
  notices: LaunchNotice[];
}

/**
 * Which shared-memory implementation the ranks use.
 * @throws {@link DistributedError} (`shm_native_unavailable`) when `shm: 'native'` was asked for and the binding cannot load
 */
export function chooseShmBackend(shm: LaunchOptions['shm'], nativeShmError: string | null): { backend: ShmBackendKind; notice?: LaunchNotice } {
  if (shm === 'file') return { backend: 'file' };
  if (nativeShmError === null) return { backend: 'native' };
  const why = nativeShmError || 'unknown reason';
  if (shm === 'native') {
    throw new DistributedError(
      DistributedErrorCode.ShmNativeUnavailable,
      `options.shm is 'native' but the shm-typed-array binding cannot load (${why}). Rebuild it (pnpm rebuild shm-typed-array) or use shm: 'auto'.`,
    );
  }
  return {
    backend: 'file',
    notice: {
      key: 'shm',
      level: 'warn',
      message:
        `The native shared-memory binding (shm-typed-array) cannot load (${why}); ` +
        `using files in /dev/shm instead (each large payload costs an extra copy). Rebuild it with pnpm rebuild shm-typed-array.`,
    },
  };
}

/**
 * The plan of every rank.
 * @throws RangeError (from {@link assignDevices}) when the ranks do not fit the GPUs
 * @throws {@link DistributedError} (`shm_native_unavailable`) as {@link chooseShmBackend}
 * @example planLaunch({ opts, worker, prefix, masterPort: 29500 }, { gpuCount: 0, nativeShmError: null, vulkan: undefined, env: {} })
 */
export function planLaunch(req: LaunchRequest, facts: MachineFacts): LaunchPlan {
  const { opts, worker } = req;
  const worldSize = opts.worldSize;
  const assignments = assignDevices(worldSize, opts.devices, facts.gpuCount);
  const { backend, notice } = chooseShmBackend(opts.shm, facts.nativeShmError);
  const notices: LaunchNotice[] = notice ? [notice] : [];
  if (opts.devices === 'auto' && assignments.every((a) => a.gpuIndex === null)) {
    notices.push({ key: 'cpu', level: 'info', message: `No GPU found on this machine: ${worldSize} rank${worldSize > 1 ? 's run' : ' runs'} on CPU.` });
  }
  const gpuRanks = assignments.filter((a) => a.gpuIndex !== null).length;
  // The Vulkan binding of GPU ranks: without the layer, CUDA users are still bound
  // (`CUDA_VISIBLE_DEVICES`) but every WebGPU rank would take the first GPU, so that is said once.
  const vulkan = gpuRanks === 0 ? undefined : (facts.vulkan ?? { pciAddresses: [], layer: undefined });
  if (gpuRanks > 1 && !vulkan?.layer) {
    notices.push({
      key: 'vulkan',
      level: 'warn',
      message:
        `Mesa's Vulkan device-select layer was not found: ranks using Vulkan/WebGPU will all take the first GPU ` +
        `(CUDA_VISIBLE_DEVICES still binds CUDA users). Install mesa-vulkan-drivers or set REACTOR_VK_LAYER_PATH (the GPU bundle does; see docs/deploy.md).`,
    });
  }
  const baseEnv = { ...facts.env, ...opts.env };
  const python = worker.kind === 'python' ? worker.python : null;
  const moduleUrl = worker.kind === 'python' ? worker.python.module : worker.moduleUrl;
  const exportName = worker.kind === 'python' ? worker.python.className : worker.exportName;
  const ranks = assignments.map((a): RankLaunch => {
    const rankEnv = rankEnvironment(baseEnv, a, worldSize, req.masterPort, vulkan);
    return {
      ...a,
      env: python ? { ...rankEnv, ...pythonRankEnv(python) } : rankEnv,
      childMain: worker.kind === 'typescript' ? worker.childMain : '',
      ...(python && { command: pythonRankCommand(python, req.prefix, a.rank) }),
      pipeAllStdout: python !== null,
      init: {
        t: 'init',
        version: PROTOCOL_VERSION,
        rank: a.rank,
        worldSize,
        device: a.device,
        moduleUrl,
        exportName,
        prefix: req.prefix,
        backend,
        maxShmBytes: opts.maxShmBytes,
        faults: opts.faults.filter((f) => f.rank === a.rank),
        verifyInputs: opts.verifyInputs,
        slots: opts.maxInFlight,
        outputRank: opts.outputRank,
      },
    };
  });
  return { backend, ranks, notices };
}
