/**
 * Picks and initialises this rank's tfjs backend: `webgpu` (Dawn, through the `webgpu`
 * package) when a real GPU adapter is found, else `wasm`, else `cpu` — or exactly the order the
 * configuration allows (`backend` in the app config, overridden by `REACTOR_BACKEND`). The same
 * rules as the sample video app (`apps/video/src/model/backend.ts`); apps do not import each
 * other, so the enhance app keeps its own copy of this small policy.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import { BackendConfigError, BackendUnavailableError } from './errors.js';

/** A tfjs backend the model can run on. */
export type BackendName = 'webgpu' | 'wasm' | 'cpu';
const BACKEND_NAMES: readonly BackendName[] = ['webgpu', 'wasm', 'cpu'];
/** Environment variable that overrides the configured backend order. */
export const BACKEND_ENV = 'REACTOR_BACKEND';

/** What runs the model: tfjs in TypeScript ranks (webgpu, wasm, cpu), or PyTorch in Python ranks. */
export type Framework = 'tfjs' | 'torch';

/**
 * Which framework the preference names: `torch` (alone) runs Python ranks with the PyTorch
 * backend (`apps/enhance/python/reactor_enhance`); anything else is a tfjs order
 * ({@link planBackends}). `REACTOR_BACKEND` overrides the option, as for tfjs.
 * @throws BackendConfigError (`enhance_backend_config`) for `torch` inside an order (`torch,wasm`)
 */
export function backendFramework(option: string | undefined, env: Readonly<Record<string, string | undefined>>): Framework {
  const fromEnv = env[BACKEND_ENV];
  const [requested, source] =
    fromEnv !== undefined && fromEnv.trim() !== '' ? [fromEnv, BACKEND_ENV] : [option ?? 'auto', option === undefined ? 'default' : 'backend (app config)'];
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

/** The backends to try, in order, and where the preference came from. */
export interface BackendPlan {
  order: BackendName[];
  requested: string;
  source: string;
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
  const fromEnv = env[BACKEND_ENV];
  const [requested, source] =
    fromEnv !== undefined && fromEnv.trim() !== '' ? [fromEnv, BACKEND_ENV] : [option ?? 'auto', option === undefined ? 'default' : 'backend (app config)'];
  const value = requested.trim().toLowerCase();
  if (value === 'auto') return { order: BACKEND_NAMES.filter((b) => b !== 'webgpu' || device !== 'cpu'), requested: 'auto', source };
  const order: BackendName[] = [];
  for (const p of value.split(',').map((x) => x.trim())) {
    if (!(BACKEND_NAMES as readonly string[]).includes(p) || order.includes(p as BackendName)) throw BackendConfigError.forValue(source, requested);
    order.push(p as BackendName);
  }
  return { order, requested: order.join(','), source };
}

type WebgpuModule = { create: (flags: string[]) => GPU; globals: object };
let gpuInstance: GPU | null = null;

/**
 * The WebGPU adapter of this process, or why there is none. The runner binds each rank to its
 * own GPU through the Vulkan device-select layer, so the one adapter a rank sees is its GPU.
 */
export async function requestGpuAdapter(): Promise<{ adapter: GPUAdapter | null; reason?: string }> {
  const { create, globals } = (await import('webgpu')) as unknown as WebgpuModule;
  // tfjs-backend-webgpu looks for navigator.gpu and the WebGPU constants on globalThis.
  Object.assign(globalThis, globals);
  gpuInstance ??= create([]);
  const nav = (globalThis as { navigator?: { gpu?: GPU } }).navigator;
  if (nav && typeof nav === 'object') Object.defineProperty(nav, 'gpu', { value: gpuInstance, configurable: true, writable: true });
  else Object.defineProperty(globalThis, 'navigator', { value: { gpu: gpuInstance }, configurable: true, writable: true });
  const adapter = await gpuInstance.requestAdapter({ powerPreference: 'high-performance' });
  if (!adapter) return { adapter: null, reason: 'Dawn found no WebGPU adapter (no Vulkan loader/driver or no GPU)' };
  const info = (adapter as GPUAdapter & { info?: { vendor?: string; device?: string; description?: string; isFallbackAdapter?: boolean } }).info ?? {};
  if (info.isFallbackAdapter || /swiftshader|llvmpipe|lavapipe|software|cpu/i.test(`${info.device ?? ''} ${info.description ?? ''}`)) {
    return { adapter: null, reason: `Dawn offered only a software adapter (${info.vendor ?? '?'} ${info.device ?? '?'}), not a GPU` };
  }
  return { adapter };
}

function adapterName(adapter: GPUAdapter): string {
  const info = (adapter as GPUAdapter & { info?: { vendor?: string; device?: string } }).info ?? {};
  return `${info.vendor ?? '?'} ${info.device ?? '?'}`;
}

async function initWebgpu(adapter: GPUAdapter): Promise<boolean> {
  const mod = await import('@tensorflow/tfjs-backend-webgpu');
  // Replace the factory tfjs registered on import (it would pick its own adapter).
  if (tf.findBackendFactory('webgpu')) tf.removeBackend('webgpu');
  tf.registerBackend(
    'webgpu',
    async () => {
      const l = adapter.limits;
      const device = await adapter.requestDevice({
        requiredLimits: {
          maxComputeWorkgroupStorageSize: l.maxComputeWorkgroupStorageSize,
          maxComputeWorkgroupsPerDimension: l.maxComputeWorkgroupsPerDimension,
          maxStorageBufferBindingSize: l.maxStorageBufferBindingSize,
          maxBufferSize: l.maxBufferSize,
          maxComputeWorkgroupSizeX: l.maxComputeWorkgroupSizeX,
          maxComputeInvocationsPerWorkgroup: l.maxComputeInvocationsPerWorkgroup,
        },
      });
      return new mod.WebGPUBackend(device, (adapter as GPUAdapter & { info?: GPUAdapterInfo }).info);
    },
    3,
  );
  return tf.setBackend('webgpu');
}

/** The folder of tfjs-backend-wasm's `.wasm` files. */
function wasmDir(): string {
  return join(dirname(createRequire(import.meta.url).resolve('@tensorflow/tfjs-backend-wasm/package.json')), 'dist') + '/';
}

/**
 * Initialises the first backend of `plan.order` that works.
 * @throws BackendUnavailableError (`enhance_backend_unavailable`) when none does
 */
export async function selectBackend(plan: BackendPlan, rank: number): Promise<BackendChoice> {
  tf.env().set('PROD', true);
  const skipped: string[] = [];
  for (const name of plan.order) {
    try {
      if (name === 'webgpu') {
        const { adapter, reason } = await requestGpuAdapter();
        if (!adapter) {
          skipped.push(`webgpu (${reason ?? 'no adapter'})`);
          continue;
        }
        if (!(await initWebgpu(adapter))) {
          skipped.push('webgpu (tfjs could not initialise it on the adapter found)');
          continue;
        }
        await tf.ready();
        return { backend: name, adapter: adapterName(adapter), skipped };
      }
      if (name === 'wasm') {
        const dir = wasmDir();
        if (!existsSync(join(dir, 'tfjs-backend-wasm-simd.wasm'))) {
          skipped.push(`wasm (its .wasm files are missing from ${dir})`);
          continue;
        }
        const wasm = await import('@tensorflow/tfjs-backend-wasm');
        wasm.setWasmPaths(dir);
      } else {
        await import('@tensorflow/tfjs-backend-cpu');
      }
      if (!(await tf.setBackend(name))) {
        skipped.push(`${name} (tfjs could not initialise it)`);
        continue;
      }
      await tf.ready();
      return { backend: name, adapter: null, skipped };
    } catch (err) {
      skipped.push(`${name} (${(err as Error).message})`);
    }
  }
  throw new BackendUnavailableError(
    `Rank ${rank}: no usable tfjs backend for ${plan.source}=${JSON.stringify(plan.requested)}; tried: ${skipped.join('; ')}. ` +
      'On a GPU machine install the Vulkan loader (libvulkan1) and set VK_DRIVER_FILES to the NVIDIA ICD json (docs/deploy.md); ' +
      'without a GPU set backend: auto or wasm.',
  );
}
