/**
 * Which device each rank gets, and the environment that binds it. Pure functions (no I/O):
 * the machine is probed elsewhere (`gpu-count.ts`, `vulkan-device-select.ts`) and passed in.
 * @internal
 */
import { type DeviceSelectLayer, vulkanDeviceSelectEnv } from './vulkan-device-select.js';

/** `'auto'`: one GPU per rank when the machine has GPUs, CPU ranks otherwise. `'cpu'`: CPU ranks. An array: the GPU index of each rank. */
export type DeviceRequest = 'auto' | 'cpu' | readonly number[];

/** One rank's device. */
export interface DeviceAssignment {
  rank: number;
  /** `gpu:<index>` or `cpu`. */
  device: string;
  /** Physical GPU index (as `nvidia-smi` counts), or null for a CPU rank. */
  gpuIndex: number | null;
}

/**
 * Assigns a device to every rank. Two ranks never share a GPU.
 * @param worldSize number of ranks
 * @param request what the user asked for (`options.devices`)
 * @param gpuCount GPUs visible on this machine
 * @throws RangeError when there are more ranks than GPUs (and CPU ranks were not asked for), or
 *   when an explicit list is the wrong length, repeats a GPU or names one that does not exist
 * @example assignDevices(2, 'auto', 8) // [{ rank: 0, device: 'gpu:0', gpuIndex: 0 }, { rank: 1, device: 'gpu:1', gpuIndex: 1 }]
 */
export function assignDevices(worldSize: number, request: DeviceRequest, gpuCount: number): DeviceAssignment[] {
  const ranks = Array.from({ length: worldSize }, (_, r) => r);
  if (request === 'cpu' || (request === 'auto' && gpuCount === 0)) {
    return ranks.map((rank) => ({ rank, device: 'cpu', gpuIndex: null }));
  }
  if (request === 'auto') {
    if (worldSize > gpuCount) {
      throw new RangeError(
        `options.worldSize is ${worldSize} but this machine has ${gpuCount} GPU${gpuCount === 1 ? '' : 's'}: each rank needs its own GPU. ` +
          `Lower worldSize to at most ${gpuCount}, or pass devices: 'cpu' to run the ranks on CPU.`,
      );
    }
    return ranks.map((rank) => ({ rank, device: `gpu:${rank}`, gpuIndex: rank }));
  }
  if (!Array.isArray(request)) {
    throw new TypeError(`options.devices must be 'auto', 'cpu' or an array of GPU indices, got ${JSON.stringify(request)}.`);
  }
  if (request.length !== worldSize) {
    throw new RangeError(
      `options.devices lists ${request.length} GPU${request.length === 1 ? '' : 's'} for ${worldSize} ranks; list exactly one GPU index per rank.`,
    );
  }
  const seen = new Set<number>();
  for (const [rank, g] of request.entries()) {
    if (!Number.isInteger(g) || g < 0 || g >= gpuCount) {
      throw new RangeError(
        `options.devices[${rank}] is ${JSON.stringify(g)}, but this machine has ${gpuCount} GPU${gpuCount === 1 ? '' : 's'} ` +
          `(valid indices: ${gpuCount ? `0..${gpuCount - 1}` : 'none'}). Use devices: 'cpu' to run on CPU.`,
      );
    }
    if (seen.has(g)) {
      throw new RangeError(`options.devices gives GPU ${g} to two ranks; every rank needs its own GPU.`);
    }
    seen.add(g);
  }
  return request.map((g, rank) => ({ rank, device: `gpu:${g}`, gpuIndex: g }));
}

/** How ranks' Vulkan instances are bound to their GPU (see `vulkan-device-select.ts`). */
export interface VulkanBinding {
  /** PCI addresses of the GPUs in index order. */
  pciAddresses: readonly string[];
  /** Mesa's device-select layer, when found; without it every Vulkan process sees every GPU. */
  layer: DeviceSelectLayer | undefined;
}

/**
 * Environment of one rank: torchrun's rendezvous variables plus its GPU binding
 * (`CUDA_VISIBLE_DEVICES` for CUDA, `REACTOR_GPU_INDEX` — the physical GPU index — for the WebGPU layer).
 */
export function rankEnvironment(
  base: NodeJS.ProcessEnv,
  a: DeviceAssignment,
  worldSize: number,
  masterPort: number,
  vulkan?: VulkanBinding,
): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...base,
    RANK: String(a.rank),
    LOCAL_RANK: String(a.rank),
    WORLD_SIZE: String(worldSize),
    LOCAL_WORLD_SIZE: String(worldSize),
    MASTER_ADDR: '127.0.0.1',
    MASTER_PORT: String(masterPort),
    REACTOR_DEVICE: a.device,
  };
  if (a.gpuIndex === null) {
    env.CUDA_VISIBLE_DEVICES = '';
    delete env.REACTOR_GPU_INDEX;
  } else {
    // CUDA_VISIBLE_DEVICES of the parent may already remap indices; pass the physical one.
    const parentList = base.CUDA_VISIBLE_DEVICES?.split(',').map((s) => s.trim());
    const physical = parentList && parentList.length > a.gpuIndex && parentList[a.gpuIndex] !== '' ? parentList[a.gpuIndex]! : String(a.gpuIndex);
    env.CUDA_VISIBLE_DEVICES = physical;
    env.REACTOR_GPU_INDEX = physical;
    // Vulkan (WebGPU) ignores CUDA_VISIBLE_DEVICES: bind the same physical GPU by PCI address.
    if (vulkan?.layer && vulkan.pciAddresses.length > 0) {
      Object.assign(env, vulkanDeviceSelectEnv(Number(physical), vulkan.pciAddresses, vulkan.layer, base));
    }
  }
  return env;
}
