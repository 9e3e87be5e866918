/**
 * Initialising one tfjs backend: `webgpu` bound to the adapter `requestGpuAdapter()` found,
 * `wasm` from its `.wasm` files on disk, or `cpu`. tfjs keeps one engine per process, so this is
 * per rank (each rank is its own process).
 */
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import * as tf from '@tensorflow/tfjs-core';

/**
 * Registers a tfjs `webgpu` backend bound to `adapter` (instead of tfjs's own adapter choice).
 * @param timestampQuery - request the adapter's `timestamp-query` feature when it has it
 */
export async function initWebgpu(adapter: GPUAdapter, timestampQuery: boolean): Promise<boolean> {
  const mod = await import('@tensorflow/tfjs-backend-webgpu');
  // Importing the package registered a factory that requests its own adapter; replace it so
  // the adapter chosen by requestGpuAdapter() is the one used.
  if (tf.findBackendFactory('webgpu')) tf.removeBackend('webgpu');
  tf.registerBackend(
    'webgpu',
    async () => {
      const limits = adapter.limits;
      const requiredFeatures: GPUFeatureName[] = [];
      if (timestampQuery && adapter.features.has('timestamp-query')) requiredFeatures.push('timestamp-query');
      const device = await adapter.requestDevice({
        ...(timestampQuery ? { requiredFeatures } : {}),
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

/** The `.wasm` files tfjs-backend-wasm loads (plain and SIMD). */
export const WASM_FILES: readonly string[] = ['tfjs-backend-wasm.wasm', 'tfjs-backend-wasm-simd.wasm'];

/** Makes `wasm` tfjs's backend, its `.wasm` files read from `wasmPath`. */
export async function initWasm(wasmPath: string): Promise<boolean> {
  const wasm = await import('@tensorflow/tfjs-backend-wasm');
  wasm.setWasmPaths(wasmPath.endsWith('/') ? wasmPath : `${wasmPath}/`);
  return tf.setBackend('wasm');
}

/** Makes `cpu` tfjs's backend. */
export async function initCpu(): Promise<boolean> {
  await import('@tensorflow/tfjs-backend-cpu');
  return tf.setBackend('cpu');
}
