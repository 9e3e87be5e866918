/**
 * Chooses and initialises this process's tfjs backend: `webgpu` (Dawn via the `webgpu`
 * package) when a GPU adapter is found, else `wasm`, else `cpu` — or exactly what the
 * configuration allows (`options.backend`, overridden by the `REACTOR_BACKEND` environment
 * variable). A backend the configuration did not list is never used: asking for `webgpu` on a
 * machine without a usable GPU is a {@link BackendUnavailableError}, not a silent CPU run.
 *
 * tfjs keeps one engine per process, so this is per rank (each rank is its own process).
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import { type BackendAttempt, BackendConfigError, BackendUnavailableError } from './errors.js';

/** A tfjs backend this model can run on. */
export type BackendName = 'webgpu' | 'wasm' | 'cpu';

/** Every backend, in the order `auto` tries them. */
export const BACKEND_NAMES: readonly BackendName[] = ['webgpu', 'wasm', 'cpu'];

/** Environment variable that overrides `options.backend`. */
export const BACKEND_ENV = 'REACTOR_BACKEND';
/** Environment variable through which a runner assigns this rank's GPU. */
export const GPU_INDEX_ENV = 'REACTOR_GPU_INDEX';

/** What the configuration allows, in order. */
export interface BackendPlan {
  /** Backends to try, in order; the first that initialises is used. */
  order: BackendName[];
  /** The preference as written (`auto`, `webgpu`, `webgpu,wasm`, ...). */
  requested: string;
  /** Where it came from: `REACTOR_BACKEND`, `options.backend`, or `default`. */
  source: string;
}

/** The GPU adapter a `webgpu` backend runs on, as WebGPU reports it. */
export interface GpuAdapterInfo {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  /** True for a software (CPU) adapter such as SwiftShader or lavapipe. */
  isFallbackAdapter: boolean;
}

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

function isBackendName(s: string): s is BackendName {
  return (BACKEND_NAMES as readonly string[]).includes(s);
}

/**
 * Reads the backend preference: `env.REACTOR_BACKEND` when set and non-empty, else `option`,
 * else `auto`. `auto` means webgpu, wasm, cpu — without webgpu when the runner made this a CPU
 * rank (`device === 'cpu'`).
 * @throws BackendConfigError (`backend_config`) for an unknown name or a repeated one
 */
export function planBackends(option: string | undefined, env: Readonly<Record<string, string | undefined>>, device?: string): BackendPlan {
  const fromEnv = env[BACKEND_ENV];
  let requested: string;
  let source: string;
  if (fromEnv !== undefined && fromEnv.trim() !== '') {
    requested = fromEnv;
    source = BACKEND_ENV;
  } else if (option !== undefined) {
    requested = option;
    source = 'options.backend';
  } else {
    requested = 'auto';
    source = 'default';
  }
  if (typeof requested !== 'string') throw new BackendConfigError(source, String(requested));
  const value = requested.trim().toLowerCase();
  if (value === 'auto') {
    const order = device === 'cpu' ? BACKEND_NAMES.filter((b) => b !== 'webgpu') : [...BACKEND_NAMES];
    return { order, requested: 'auto', source };
  }
  const parts = value.split(',').map((p) => p.trim());
  const order: BackendName[] = [];
  for (const p of parts) {
    if (!isBackendName(p) || order.includes(p)) throw new BackendConfigError(source, requested);
    order.push(p);
  }
  return { order, requested: order.join(','), source };
}

/** A GPU adapter and the WebGPU entry point it came from. */
export interface GpuAdapterRequest {
  gpu: GPU;
  adapter: GPUAdapter | null;
  /** Why no adapter was found, when `adapter` is null. */
  reason?: string;
}

let webgpuModule: Promise<{ create: (flags: string[]) => GPU; globals: object }> | null = null;
/** One Dawn instance per process: each `create()` probes the drivers (and logs) again. */
let gpuInstance: GPU | null = null;

/**
 * Finds the GPU adapter this rank should use. This is the one place that decides which GPU a
 * rank runs on. `webgpu` 0.6.2 (Dawn) cannot pick an adapter by index — `requestAdapter()`
 * returns Dawn's preferred high-performance adapter — so `gpuIndex` is recorded but every rank
 * gets that adapter; binding rank `n` to GPU `n` on a multi-GPU host belongs here.
 * @param gpuIndex - the GPU the runner assigned to this rank (`REACTOR_GPU_INDEX`), or null
 */
export async function requestGpuAdapter(gpuIndex: number | null): Promise<GpuAdapterRequest> {
  void gpuIndex;
  webgpuModule ??= import('webgpu') as unknown as Promise<{ create: (flags: string[]) => GPU; globals: object }>;
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
  if (!adapter) {
    return {
      gpu,
      adapter: null,
      reason: 'Dawn found no WebGPU adapter (no Vulkan loader/driver or no GPU; Dawn prints the details on stderr)',
    };
  }
  return { gpu, adapter };
}

function adapterInfo(adapter: GPUAdapter): GpuAdapterInfo {
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

/** Registers a tfjs `webgpu` backend bound to `adapter` (instead of tfjs's own adapter choice). */
async function initWebgpu(adapter: GPUAdapter): Promise<boolean> {
  const mod = await import('@tensorflow/tfjs-backend-webgpu');
  // Importing the package registered a factory that requests its own adapter; replace it so
  // the adapter chosen by requestGpuAdapter() is the one used.
  if (tf.findBackendFactory('webgpu')) tf.removeBackend('webgpu');
  tf.registerBackend(
    'webgpu',
    async () => {
      const limits = adapter.limits;
      const requiredFeatures: GPUFeatureName[] = [];
      if (adapter.features.has('timestamp-query')) requiredFeatures.push('timestamp-query');
      const device = await adapter.requestDevice({
        requiredFeatures,
        requiredLimits: {
          maxComputeWorkgroupStorageSize: limits.maxComputeWorkgroupStorageSize,
          maxComputeWorkgroupsPerDimension: limits.maxComputeWorkgroupsPerDimension,
          maxStorageBufferBindingSize: limits.maxStorageBufferBindingSize,
          maxBufferSize: limits.maxBufferSize,
          maxComputeWorkgroupSizeX: limits.maxComputeWorkgroupSizeX,
          maxComputeInvocationsPerWorkgroup: limits.maxComputeInvocationsPerWorkgroup,
        },
      });
      const info = (adapter as GPUAdapter & { info?: GPUAdapterInfo }).info;
      return new mod.WebGPUBackend(device, info);
    },
    3,
  );
  return tf.setBackend('webgpu');
}

/** The folder holding tfjs-backend-wasm's `.wasm` files (its `dist/`), found on disk. */
export function defaultWasmPath(): string {
  const require = createRequire(import.meta.url);
  return join(dirname(require.resolve('@tensorflow/tfjs-backend-wasm/package.json')), 'dist') + '/';
}

const WASM_FILES = ['tfjs-backend-wasm.wasm', 'tfjs-backend-wasm-simd.wasm'];

async function initWasm(wasmPath: string): Promise<{ ok: boolean; reason?: string }> {
  const missing = WASM_FILES.filter((f) => !existsSync(join(wasmPath, f)));
  if (missing.length > 0) {
    return { ok: false, reason: `the .wasm files are missing from ${wasmPath} (${missing.join(', ')}); reinstall @tensorflow/tfjs-backend-wasm` };
  }
  const wasm = await import('@tensorflow/tfjs-backend-wasm');
  wasm.setWasmPaths(wasmPath.endsWith('/') ? wasmPath : `${wasmPath}/`);
  const ok = await tf.setBackend('wasm');
  return ok ? { ok } : { ok, reason: 'tfjs could not initialise the wasm backend (its warning on stderr gives the cause)' };
}

async function initCpu(): Promise<boolean> {
  await import('@tensorflow/tfjs-backend-cpu');
  return tf.setBackend('cpu');
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
  // PROD mode silences tfjs's console advice (e.g. "install tfjs-node"), which would be noise
  // in every rank's log; it does not change any result.
  tf.env().set('PROD', true);
  const attempts: BackendAttempt[] = [];
  for (const name of plan.order) {
    try {
      if (name === 'webgpu') {
        const req = await requestGpuAdapter(opts.gpuIndex);
        if (!req.adapter) {
          attempts.push({ backend: name, reason: req.reason ?? 'no adapter' });
          continue;
        }
        const problem = adapterProblem(adapterInfo(req.adapter));
        if (problem) {
          attempts.push({ backend: name, reason: problem });
          continue;
        }
        if (!(await initWebgpu(req.adapter))) {
          attempts.push({ backend: name, reason: 'tfjs could not initialise the webgpu backend on the adapter found' });
          continue;
        }
        await tf.ready();
        return { ...plan, backend: name, adapter: adapterInfo(req.adapter), gpuIndex: opts.gpuIndex, simd: null, attempts };
      }
      if (name === 'wasm') {
        const r = await initWasm(opts.wasmPath ?? defaultWasmPath());
        if (!r.ok) {
          attempts.push({ backend: name, reason: r.reason ?? 'initialisation failed' });
          continue;
        }
        await tf.ready();
        const simd = Boolean(await tf.env().getAsync('WASM_HAS_SIMD_SUPPORT'));
        return { ...plan, backend: name, adapter: null, gpuIndex: opts.gpuIndex, simd, attempts };
      }
      if (!(await initCpu())) {
        attempts.push({ backend: name, reason: 'tfjs could not initialise the cpu backend' });
        continue;
      }
      await tf.ready();
      return { ...plan, backend: name, adapter: null, gpuIndex: opts.gpuIndex, simd: null, attempts };
    } catch (e) {
      attempts.push({ backend: name, reason: e instanceof Error ? e.message : String(e) });
    }
  }
  throw new BackendUnavailableError(opts.rank, plan.requested, plan.source, attempts);
}

/**
 * Why an adapter Dawn offered is not a GPU to run on, or null when it is: a software fallback
 * adapter (SwiftShader, lavapipe: `isFallbackAdapter`, or a CPU device type) is refused, so
 * `webgpu` always means a real GPU and the configured fallback (wasm) runs instead.
 */
export function adapterProblem(info: GpuAdapterInfo): string | null {
  const cpuLike = /swiftshader|llvmpipe|lavapipe|software|cpu/i;
  if (info.isFallbackAdapter || cpuLike.test(info.device) || cpuLike.test(info.description)) {
    return `Dawn offered only a software adapter (vendor "${info.vendor}", device "${info.device}"${info.isFallbackAdapter ? ', isFallbackAdapter' : ''}), not a GPU`;
  }
  return null;
}

/** Reads `REACTOR_GPU_INDEX` (a non-negative integer) from `env`, or null when unset. */
export function gpuIndexFromEnv(env: Readonly<Record<string, string | undefined>>): number | null {
  const v = env[GPU_INDEX_ENV];
  if (v === undefined || v.trim() === '') return null;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new RangeError(`${GPU_INDEX_ENV} must be a non-negative integer, got ${JSON.stringify(v)}`);
  return n;
}
