/**
 * The probes the launch plan is fed with (`launch-plan.ts` is pure; this is its I/O): the
 * shared-memory binding, the Vulkan binding, the rank entry point and a free port.
 * @internal
 */
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { DistributedError, DistributedErrorCode } from '../errors.js';
import { loadNativeShm, nativeShmLoadError } from '../shm/segments.js';
import { compiledSibling } from '../worker/locate.js';
import type { DeviceAssignment } from './devices.js';
import type { LaunchOptions, MachineFacts } from './launch-plan.js';
import { findDeviceSelectLayer, nvidiaPciAddresses } from './vulkan-device-select.js';

/**
 * The facts of this machine for ranks with these devices. The native binding is loaded only
 * when it may be used (`shm` is not `'file'`); the Vulkan binding is probed only for GPU ranks.
 */
export function probeMachine(opts: Pick<LaunchOptions, 'shm' | 'env'>, gpuCount: number, assignments: readonly DeviceAssignment[]): MachineFacts {
  const env = process.env;
  const nativeShmError = opts.shm === 'file' || loadNativeShm() ? null : (nativeShmLoadError() ?? '');
  const gpuRanks = assignments.some((a) => a.gpuIndex !== null);
  const vulkan = gpuRanks ? { pciAddresses: nvidiaPciAddresses(), layer: findDeviceSelectLayer({ ...env, ...opts.env }) } : undefined;
  return { gpuCount, nativeShmError, vulkan, env };
}

/** The compiled rank entry point (tests run this module from src/, ranks always run dist/). */
export function childMainPath(): string {
  const here = import.meta.url;
  const url = compiledSibling(new URL(here.endsWith('.ts') ? '../process/child-main.ts' : '../process/child-main.js', here).href);
  const path = url ? fileURLToPath(url) : '';
  if (!url || !existsSync(path)) {
    throw new DistributedError(
      DistributedErrorCode.NotBuilt,
      `The rank entry point ${path || 'dist/process/child-main.js'} does not exist: build @reactor/distributed (pnpm --filter @reactor/distributed build).`,
    );
  }
  return path;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}
