/**
 * Chooses and initialises this process's tfjs backend: the first of a {@link BackendPlan}'s
 * order that works. Each backend that is not used is one {@link BackendFailure}, which the app
 * words (`describe`); when none works the app's own error is thrown (`unavailable`), so each app
 * keeps its error class, code and messages while the selection itself is one.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import { adapterInfo, type GpuAdapterInfo, isSoftwareAdapter, requestGpuAdapter } from './gpu.js';
import { defaultWasmPath, initCpu, initWasm, initWebgpu, WASM_FILES } from './init.js';
import type { BackendName, BackendPlan } from './plan.js';

/** Why one backend of the plan was not used, for the app to put in words. */
export type BackendFailure =
  /** Dawn offered no WebGPU adapter (no Vulkan loader or driver, or no GPU). */
  | { kind: 'no-adapter'; backend: 'webgpu' }
  /** Dawn offered only a software adapter (SwiftShader, lavapipe, ...). */
  | { kind: 'software-adapter'; backend: 'webgpu'; adapter: GPUAdapter; info: GpuAdapterInfo }
  /** Some of the `.wasm` files are not in `dir`. */
  | { kind: 'wasm-files-missing'; backend: 'wasm'; dir: string; missing: string[] }
  /** tfjs's `setBackend()` answered false. */
  | { kind: 'init-failed'; backend: BackendName }
  /** Initialising the backend threw `error`. */
  | { kind: 'threw'; backend: BackendName; error: unknown };

/** One backend that was tried and why it was not used. */
export interface BackendAttempt {
  backend: BackendName;
  reason: string;
}

/** Options of {@link selectBackend}. */
export interface SelectBackendOptions {
  /** The GPU the runner assigned to this rank (`REACTOR_GPU_INDEX`), or null. */
  gpuIndex?: number | null;
  /** Folder of tfjs-backend-wasm's `.wasm` files; defaults to the installed package's `dist/`. */
  wasmPath?: string;
  /** The `.wasm` files that must be in `wasmPath` for `wasm` to be tried (default: both, {@link WASM_FILES}). */
  wasmFiles?: readonly string[];
  /** Request the adapter's `timestamp-query` feature (when it has it) for `webgpu` (default false). */
  timestampQuery?: boolean;
  /** The app's words for why a backend was not used (the `reason` of its attempt). */
  describe: (failure: BackendFailure) => string;
  /** The app's error when no backend of the plan works. */
  unavailable: (attempts: BackendAttempt[]) => Error;
}

/** The backend in use and how it was chosen. */
export interface BackendSelection extends BackendPlan {
  /** The backend in use. */
  backend: BackendName;
  /** The GPU adapter, for `webgpu`; null otherwise. */
  adapter: GPUAdapter | null;
  /** What WebGPU reports about `adapter`; null without one. */
  adapterInfo: GpuAdapterInfo | null;
  /** For `wasm`: whether SIMD is on; null otherwise. */
  simd: boolean | null;
  /** Backends tried before this one and why each was not used. */
  attempts: BackendAttempt[];
}

/**
 * Initialises the first backend of `plan.order` that works and makes it tfjs's backend.
 * @throws the app's `unavailable(attempts)` when none of them works
 */
export async function selectBackend(plan: BackendPlan, opts: SelectBackendOptions): Promise<BackendSelection> {
  // PROD mode silences tfjs's console advice (e.g. "install tfjs-node"), which would be noise
  // in every rank's log; it does not change any result.
  tf.env().set('PROD', true);
  const attempts: BackendAttempt[] = [];
  const fail = (failure: BackendFailure): void => {
    attempts.push({ backend: failure.backend, reason: opts.describe(failure) });
  };
  for (const name of plan.order) {
    try {
      if (name === 'webgpu') {
        const { adapter } = await requestGpuAdapter(opts.gpuIndex ?? null);
        if (!adapter) {
          fail({ kind: 'no-adapter', backend: name });
          continue;
        }
        const info = adapterInfo(adapter);
        if (isSoftwareAdapter(info)) {
          fail({ kind: 'software-adapter', backend: name, adapter, info });
          continue;
        }
        if (!(await initWebgpu(adapter, opts.timestampQuery ?? false))) {
          fail({ kind: 'init-failed', backend: name });
          continue;
        }
        await tf.ready();
        return { ...plan, backend: name, adapter, adapterInfo: info, simd: null, attempts };
      }
      if (name === 'wasm') {
        const dir = opts.wasmPath ?? defaultWasmPath();
        const missing = (opts.wasmFiles ?? WASM_FILES).filter((f) => !existsSync(join(dir, f)));
        if (missing.length > 0) {
          fail({ kind: 'wasm-files-missing', backend: name, dir, missing });
          continue;
        }
        if (!(await initWasm(dir))) {
          fail({ kind: 'init-failed', backend: name });
          continue;
        }
        await tf.ready();
        const simd = Boolean(await tf.env().getAsync('WASM_HAS_SIMD_SUPPORT'));
        return { ...plan, backend: name, adapter: null, adapterInfo: null, simd, attempts };
      }
      if (!(await initCpu())) {
        fail({ kind: 'init-failed', backend: name });
        continue;
      }
      await tf.ready();
      return { ...plan, backend: name, adapter: null, adapterInfo: null, simd: null, attempts };
    } catch (e) {
      fail({ kind: 'threw', backend: name, error: e });
    }
  }
  throw opts.unavailable(attempts);
}
