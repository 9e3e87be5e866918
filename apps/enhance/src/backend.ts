/**
 * Picks and initialises this rank's tfjs backend: `webgpu` (Dawn, through the `webgpu`
 * package) when a real GPU adapter is found, else `wasm`, else `cpu` — or exactly the order the
 * configuration allows (`backend` in the app config, overridden by `REACTOR_BACKEND`). The
 * selection is `@reactor/tfjs-backend`'s, the same as the sample video app's; this module gives
 * it the enhance app's option name, error classes (`enhance_backend_config`,
 * `enhance_backend_unavailable`) and words, and adds `torch` (PyTorch in Python ranks).
 */
import {
  type BackendFailure,
  type BackendName,
  type BackendPlan,
  planBackends as planTfjsBackends,
  readBackendPreference,
  requestGpuAdapter as requestTfjsGpuAdapter,
  adapterInfo,
  isSoftwareAdapter,
  selectBackend as selectTfjsBackend,
} from '@reactor/tfjs-backend';
import { BackendConfigError, BackendUnavailableError } from './errors.js';

export type { BackendName };

/** How the app config's option is named in messages. */
const OPTION_SOURCE = 'backend (app config)';

/** What runs the model: tfjs in TypeScript ranks (webgpu, wasm, cpu), or PyTorch in Python ranks. */
export type Framework = 'tfjs' | 'torch';

/**
 * Which framework the preference names: `torch` (alone) runs Python ranks with the PyTorch
 * backend (`apps/enhance/python/reactor_enhance`); anything else is a tfjs order
 * ({@link planBackends}). `REACTOR_BACKEND` overrides the option, as for tfjs.
 * @throws BackendConfigError (`enhance_backend_config`) for `torch` inside an order (`torch,wasm`)
 */
export function backendFramework(option: string | undefined, env: Readonly<Record<string, string | undefined>>): Framework {
  const { requested, source } = readBackendPreference(option, env, OPTION_SOURCE);
  const parts = requested
    .trim()
    .toLowerCase()
    .split(',')
    .map((x) => x.trim());
  if (!parts.includes('torch')) return 'tfjs';
  if (parts.length > 1) {
    throw new BackendConfigError(
      `${source} is ${JSON.stringify(requested)}: "torch" runs the model in Python ranks and cannot be part of a tfjs order. ` +
        'Use "torch" alone, or a tfjs order such as "webgpu,wasm".',
    );
  }
  return 'torch';
}

/** The backend a rank runs on. */
export interface BackendChoice {
  backend: BackendName;
  /** `vendor device` of the WebGPU adapter, for `webgpu`. */
  adapter: string | null;
  /** Backends tried first and why each was not used. */
  skipped: string[];
}

/**
 * Reads the preference: `REACTOR_BACKEND` when set, else `option`, else `auto` (webgpu, wasm,
 * cpu; without webgpu on a CPU rank).
 * @throws BackendConfigError (`enhance_backend_config`) for an unknown or repeated name
 */
export function planBackends(option: string | undefined, env: Readonly<Record<string, string | undefined>>, device?: string): BackendPlan {
  return planTfjsBackends(option, env, { device, optionSource: OPTION_SOURCE, configError: (source, value) => BackendConfigError.forValue(source, value) });
}

const NO_ADAPTER = 'Dawn found no WebGPU adapter (no Vulkan loader/driver or no GPU)';

function softwareAdapter(adapter: GPUAdapter): string {
  return `Dawn offered only a software adapter (${adapterName(adapter)}), not a GPU`;
}

/**
 * The WebGPU adapter of this process, or why there is none. The runner binds each rank to its
 * own GPU through the Vulkan device-select layer, so the one adapter a rank sees is its GPU.
 */
export async function requestGpuAdapter(): Promise<{ adapter: GPUAdapter | null; reason?: string }> {
  const { adapter } = await requestTfjsGpuAdapter();
  if (!adapter) return { adapter: null, reason: NO_ADAPTER };
  if (isSoftwareAdapter(adapterInfo(adapter))) return { adapter: null, reason: softwareAdapter(adapter) };
  return { adapter };
}

function adapterName(adapter: GPUAdapter): string {
  const info = (adapter as GPUAdapter & { info?: { vendor?: string; device?: string } }).info ?? {};
  return `${info.vendor ?? '?'} ${info.device ?? '?'}`;
}

/** The enhance app's words for why a backend was not used (after its name, in parentheses). */
function describeFailure(f: BackendFailure): string {
  switch (f.kind) {
    case 'no-adapter':
      return NO_ADAPTER;
    case 'software-adapter':
      return softwareAdapter(f.adapter);
    case 'wasm-files-missing':
      return `its .wasm files are missing from ${f.dir}`;
    case 'init-failed':
      return f.backend === 'webgpu' ? 'tfjs could not initialise it on the adapter found' : 'tfjs could not initialise it';
    case 'threw':
      return (f.error as Error).message;
  }
}

/**
 * Initialises the first backend of `plan.order` that works.
 * @throws BackendUnavailableError (`enhance_backend_unavailable`) when none does
 */
export async function selectBackend(plan: BackendPlan, rank: number): Promise<BackendChoice> {
  const skippedOf = (attempts: readonly { backend: string; reason: string }[]): string[] => attempts.map((a) => `${a.backend} (${a.reason})`);
  const sel = await selectTfjsBackend(plan, {
    // The enhance app checks for the SIMD build's file only (as it always has).
    wasmFiles: ['tfjs-backend-wasm-simd.wasm'],
    describe: describeFailure,
    unavailable: (attempts) =>
      new BackendUnavailableError(
        `Rank ${rank}: no usable tfjs backend for ${plan.source}=${JSON.stringify(plan.requested)}; tried: ${skippedOf(attempts).join('; ')}. ` +
          'On a GPU machine install the Vulkan loader (libvulkan1) and set VK_DRIVER_FILES to the NVIDIA ICD json (docs/deploy.md); ' +
          'without a GPU set backend: auto or wasm.',
      ),
  });
  return { backend: sel.backend, adapter: sel.adapter ? adapterName(sel.adapter) : null, skipped: skippedOf(sel.attempts) };
}
