/**
 * Chooses and initialises this process's tfjs backend: `webgpu` (Dawn via the `webgpu`
 * package) when a GPU adapter is found, else `wasm`, else `cpu` — or exactly what the
 * configuration allows (`options.backend`, overridden by the `REACTOR_BACKEND` environment
 * variable). A backend the configuration did not list is never used: asking for `webgpu` on a
 * machine without a usable GPU is a {@link BackendUnavailableError}, not a silent CPU run.
 *
 * The selection itself is `@reactor/tfjs-backend`'s (shared with the enhance app); this module
 * gives it the video model's option name, error classes (`backend_config`,
 * `backend_unavailable`) and words, and keeps the model's result shape.
 *
 * tfjs keeps one engine per process, so this is per rank (each rank is its own process).
 */
import {
  type BackendFailure,
  type BackendName,
  type BackendPlan,
  type GpuAdapterInfo,
  isSoftwareAdapter,
  planBackends as planTfjsBackends,
  requestGpuAdapter as requestTfjsGpuAdapter,
  selectBackend as selectTfjsBackend,
} from '@reactor/tfjs-backend';
import { type BackendAttempt, BackendConfigError, BackendUnavailableError } from './errors.js';

export type { BackendName, GpuAdapterInfo };
export { gpuIndexFromEnv } from '@reactor/tfjs-backend';

/** The backend in use and how it was chosen. */
export interface BackendSelection extends BackendPlan {
  /** The backend in use. */
  backend: BackendName;
  /** The GPU adapter, for `webgpu`; null otherwise. */
  adapter: GpuAdapterInfo | null;
  /** The GPU index the runner assigned (`REACTOR_GPU_INDEX`), if any. */
  gpuIndex: number | null;
  /** For `wasm`: whether SIMD is on. */
  simd: boolean | null;
  /** Backends tried before this one and why each was not used. */
  attempts: BackendAttempt[];
}

/**
 * Reads the backend preference: `env.REACTOR_BACKEND` when set and non-empty, else `option`,
 * else `auto`. `auto` means webgpu, wasm, cpu — without webgpu when the runner made this a CPU
 * rank (`device === 'cpu'`).
 * @throws BackendConfigError (`backend_config`) for an unknown name or a repeated one
 */
export function planBackends(option: string | undefined, env: Readonly<Record<string, string | undefined>>, device?: string): BackendPlan {
  return planTfjsBackends(option, env, {
    device,
    optionSource: 'options.backend',
    configError: (source, value) => new BackendConfigError(source, value),
  });
}

/** A GPU adapter and the WebGPU entry point it came from. */
export interface GpuAdapterRequest {
  gpu: GPU;
  adapter: GPUAdapter | null;
  /** Why no adapter was found, when `adapter` is null. */
  reason?: string;
}

const NO_ADAPTER = 'Dawn found no WebGPU adapter (no Vulkan loader/driver or no GPU; Dawn prints the details on stderr)';

/**
 * Finds the GPU adapter this rank should use (`@reactor/tfjs-backend`'s `requestGpuAdapter`,
 * the one place that decides which GPU a rank runs on), with the reason when there is none.
 * @param gpuIndex - the GPU the runner assigned to this rank (`REACTOR_GPU_INDEX`), or null
 */
export async function requestGpuAdapter(gpuIndex: number | null): Promise<GpuAdapterRequest> {
  const { gpu, adapter } = await requestTfjsGpuAdapter(gpuIndex);
  if (!adapter) return { gpu, adapter: null, reason: NO_ADAPTER };
  return { gpu, adapter };
}

/** The video model's words for why a backend was not used. */
function describeFailure(f: BackendFailure): string {
  switch (f.kind) {
    case 'no-adapter':
      return NO_ADAPTER;
    case 'software-adapter':
      return softwareAdapter(f.info);
    case 'wasm-files-missing':
      return `the .wasm files are missing from ${f.dir} (${f.missing.join(', ')}); reinstall @tensorflow/tfjs-backend-wasm`;
    case 'init-failed':
      if (f.backend === 'webgpu') return 'tfjs could not initialise the webgpu backend on the adapter found';
      if (f.backend === 'wasm') return 'tfjs could not initialise the wasm backend (its warning on stderr gives the cause)';
      return 'tfjs could not initialise the cpu backend';
    case 'threw':
      return f.error instanceof Error ? f.error.message : String(f.error);
  }
}

/** Options of {@link selectBackend}. */
export interface SelectBackendOptions {
  rank: number;
  gpuIndex: number | null;
  /** Folder of tfjs-backend-wasm's `.wasm` files; defaults to the installed package's `dist/`. */
  wasmPath?: string;
}

/**
 * Initialises the first backend of `plan.order` that works and makes it tfjs's backend.
 * @throws BackendUnavailableError (`backend_unavailable`) when none of them works
 */
export async function selectBackend(plan: BackendPlan, opts: SelectBackendOptions): Promise<BackendSelection> {
  const sel = await selectTfjsBackend(plan, {
    gpuIndex: opts.gpuIndex,
    ...(opts.wasmPath !== undefined ? { wasmPath: opts.wasmPath } : {}),
    timestampQuery: true,
    describe: describeFailure,
    unavailable: (attempts) => new BackendUnavailableError(opts.rank, plan.requested, plan.source, attempts),
  });
  return { ...plan, backend: sel.backend, adapter: sel.adapterInfo, gpuIndex: opts.gpuIndex, simd: sel.simd, attempts: sel.attempts };
}

function softwareAdapter(info: GpuAdapterInfo): string {
  return `Dawn offered only a software adapter (vendor "${info.vendor}", device "${info.device}"${info.isFallbackAdapter ? ', isFallbackAdapter' : ''}), not a GPU`;
}

/**
 * Why an adapter Dawn offered is not a GPU to run on, or null when it is: a software fallback
 * adapter (SwiftShader, lavapipe: `isFallbackAdapter`, or a CPU device type) is refused, so
 * `webgpu` always means a real GPU and the configured fallback (wasm) runs instead.
 */
export function adapterProblem(info: GpuAdapterInfo): string | null {
  return isSoftwareAdapter(info) ? softwareAdapter(info) : null;
}
