/**
 * `@reactor/tfjs-backend`: the tfjs backend selection the apps share. Which backend a rank runs
 * (`webgpu` on a real GPU adapter, `wasm`, `cpu`, in the order the configuration allows), the
 * GPU adapter probe and its binding to the rank's GPU, each backend's initialisation, and why a
 * backend was not used. Each app words the reasons and supplies its own errors (class, code,
 * message) through {@link planBackends}' and {@link selectBackend}'s options.
 */
export {
  type BackendName,
  type BackendPlan,
  type BackendPreference,
  type PlanBackendsOptions,
  BACKEND_NAMES,
  BACKEND_ENV,
  planBackends,
  readBackendPreference,
} from './plan.js';
export { type GpuAdapterInfo, type GpuAdapterProbe, GPU_INDEX_ENV, adapterInfo, gpuIndexFromEnv, isSoftwareAdapter, requestGpuAdapter } from './gpu.js';
export { WASM_FILES, defaultWasmPath } from './init.js';
export { type BackendAttempt, type BackendFailure, type BackendSelection, type SelectBackendOptions, selectBackend } from './select.js';
