/// <reference types="webgpu" preserve="true" />
/**
 * The GPU a rank runs on: its GPU index (`REACTOR_GPU_INDEX`, set by the runner), the one Dawn
 * instance of the process, the WebGPU adapter it offers, and whether that adapter is a real GPU.
 */

/** Environment variable through which a runner assigns this rank's GPU. */
export const GPU_INDEX_ENV = 'REACTOR_GPU_INDEX';

/** The GPU adapter a `webgpu` backend runs on, as WebGPU reports it. */
export interface GpuAdapterInfo {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  /** True for a software (CPU) adapter such as SwiftShader or lavapipe. */
  isFallbackAdapter: boolean;
}

/** A GPU adapter (null when Dawn found none) and the WebGPU entry point it came from. */
export interface GpuAdapterProbe {
  gpu: GPU;
  adapter: GPUAdapter | null;
}

type WebgpuModule = { create: (flags: string[]) => GPU; globals: object };
let webgpuModule: Promise<WebgpuModule> | null = null;
/** One Dawn instance per process: each `create()` probes the drivers (and logs) again. */
let gpuInstance: GPU | null = null;

/**
 * Finds the GPU adapter this rank should use. This is the one place that decides which GPU a
 * rank runs on. `webgpu` 0.6.2 (Dawn) cannot pick an adapter by index — `requestAdapter()`
 * returns Dawn's preferred high-performance adapter — so `gpuIndex` is recorded but every rank
 * gets that adapter; the runner binds each rank to its own GPU through the Vulkan device-select
 * layer (`@reactor/distributed`, `vulkan-device-select.ts`), so the one adapter a rank sees is
 * its GPU. Binding rank `n` to GPU `n` by index on a multi-GPU host belongs here.
 * @param gpuIndex - the GPU the runner assigned to this rank (`REACTOR_GPU_INDEX`), or null
 */
export async function requestGpuAdapter(gpuIndex: number | null = null): Promise<GpuAdapterProbe> {
  void gpuIndex;
  webgpuModule ??= import('webgpu') as unknown as Promise<WebgpuModule>;
  const { create, globals } = await webgpuModule;
  // tfjs-backend-webgpu looks for navigator.gpu and the WebGPU constants (GPUBufferUsage, ...)
  // on globalThis when it is imported, so they are installed first.
  Object.assign(globalThis, globals);
  gpuInstance ??= create([]);
  const gpu = gpuInstance;
  const nav = (globalThis as { navigator?: { gpu?: GPU } }).navigator;
  if (nav && typeof nav === 'object') {
    Object.defineProperty(nav, 'gpu', { value: gpu, configurable: true, writable: true });
  } else {
    Object.defineProperty(globalThis, 'navigator', { value: { gpu }, configurable: true, writable: true });
  }
  const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  return { gpu, adapter };
}

/** What WebGPU reports about `adapter` (empty strings where it reports nothing). */
export function adapterInfo(adapter: GPUAdapter): GpuAdapterInfo {
  const info = (adapter as GPUAdapter & { info?: GPUAdapterInfo }).info;
  const fallback =
    (info as { isFallbackAdapter?: boolean } | undefined)?.isFallbackAdapter ?? (adapter as { isFallbackAdapter?: boolean }).isFallbackAdapter ?? false;
  return {
    vendor: info?.vendor ?? '',
    architecture: info?.architecture ?? '',
    device: info?.device ?? '',
    description: info?.description ?? '',
    isFallbackAdapter: Boolean(fallback),
  };
}

/**
 * Whether an adapter Dawn offered is not a GPU to run on: a software fallback adapter
 * (SwiftShader, lavapipe: `isFallbackAdapter`, or a CPU device type) is refused, so `webgpu`
 * always means a real GPU and the configured fallback (wasm) runs instead.
 */
export function isSoftwareAdapter(info: GpuAdapterInfo): boolean {
  const cpuLike = /swiftshader|llvmpipe|lavapipe|software|cpu/i;
  return info.isFallbackAdapter || cpuLike.test(info.device) || cpuLike.test(info.description);
}

/** Reads `REACTOR_GPU_INDEX` (a non-negative integer) from `env`, or null when unset. */
export function gpuIndexFromEnv(env: Readonly<Record<string, string | undefined>>): number | null {
  const v = env[GPU_INDEX_ENV];
  if (v === undefined || v.trim() === '') return null;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new RangeError(`${GPU_INDEX_ENV} must be a non-negative integer, got ${JSON.stringify(v)}`);
  return n;
}
