/**
 * `reactor doctor`: checks the machine against what the app needs, before any weights load.
 * Each check says what it found and, when it fails, how to fix it.
 */
import { statfsSync, readdirSync, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import type { Manifest } from './manifest.js';

/** What an app may declare (a static `requirements(configPath)` on its class) for doctor. */
export interface AppRequirements {
  /** Shared memory the app's runner needs at peak, bytes. */
  shmBytes?: number;
  /** Ranks the app will start. */
  worldSize?: number;
  /** Whether the ranks use GPUs on this machine (`true` when GPUs will be used). */
  usesGpu?: boolean;
}

export interface DoctorCheck {
  name: string;
  status: 'ok' | 'warn' | 'fail';
  detail: string;
  fix?: string;
}

/** Minimum Node version the framework supports. */
export const MIN_NODE: readonly [number, number] = [20, 19];

export function checkNode(version = process.versions.node): DoctorCheck {
  const [maj = 0, min = 0] = version.split('.').map(Number);
  const ok = maj > MIN_NODE[0] || (maj === MIN_NODE[0] && min >= MIN_NODE[1]);
  return ok
    ? { name: 'node', status: 'ok', detail: `Node ${version}` }
    : { name: 'node', status: 'fail', detail: `Node ${version} is older than ${MIN_NODE.join('.')}`, fix: `install Node ${MIN_NODE.join('.')} or newer` };
}

export function checkShm(needBytes: number | undefined, dir = '/dev/shm'): DoctorCheck {
  if (!existsSync(dir)) return { name: 'shared memory', status: 'fail', detail: `${dir} does not exist`, fix: 'mount a tmpfs at /dev/shm (containers: --shm-size=1g)' };
  const s = statfsSync(dir);
  const free = s.bavail * s.bsize;
  const total = s.blocks * s.bsize;
  const mb = (n: number) => `${(n / 2 ** 20).toFixed(1)} MiB`;
  if (needBytes === undefined) return { name: 'shared memory', status: 'ok', detail: `${dir}: ${mb(free)} free of ${mb(total)}` };
  if (free < needBytes) {
    return {
      name: 'shared memory', status: 'fail',
      detail: `${dir} has ${mb(free)} free of ${mb(total)}; the configured frames need ${mb(needBytes)}`,
      fix: `give the container more shared memory (docker run --shm-size=${Math.ceil((needBytes * 2) / 2 ** 30)}g) or lower width/height/framesPerChunk`,
    };
  }
  return { name: 'shared memory', status: 'ok', detail: `${dir}: ${mb(free)} free of ${mb(total)}, need ${mb(needBytes)}` };
}

/** NVIDIA GPUs the driver exposes (PCI addresses in index order). */
export function listNvidiaGpus(dir = '/proc/driver/nvidia/gpus'): string[] {
  try {
    return readdirSync(dir).sort();
  } catch {
    return [];
  }
}

/** Looks for a WebGPU adapter through the `webgpu` package, resolved from the app's module. */
export async function probeWebGpu(fromModule: string): Promise<{ found: boolean; detail: string }> {
  let entry: string;
  try {
    entry = createRequire(fromModule).resolve('webgpu');
  } catch {
    return { found: false, detail: 'the app does not depend on the `webgpu` package' };
  }
  try {
    const mod = (await import(pathToFileURL(entry).href)) as { create(flags: string[]): { requestAdapter(): Promise<{ info?: Record<string, unknown> } | null> }; globals: object };
    Object.assign(globalThis, mod.globals);
    const adapter = await mod.create([]).requestAdapter();
    if (!adapter) return { found: false, detail: 'no WebGPU adapter (no Vulkan driver for a GPU was found)' };
    const i = adapter.info ?? {};
    return { found: !i['isFallbackAdapter'], detail: `WebGPU adapter: vendor ${String(i['vendor'])}, device ${String(i['device'])}${i['isFallbackAdapter'] ? ' (software fallback)' : ''}` };
  } catch (err) {
    return { found: false, detail: `WebGPU failed to initialise: ${(err as Error).message}` };
  }
}

export async function checkPort(host: string, port: number): Promise<DoctorCheck> {
  if (port === 0) return { name: 'port', status: 'ok', detail: 'port 0: a free port is picked at start' };
  return new Promise((resolveCheck) => {
    const srv = createServer();
    srv.once('error', (err: NodeJS.ErrnoException) => {
      resolveCheck({ name: 'port', status: 'fail', detail: `${host}:${port} is not available (${err.code ?? err.message})`, fix: `stop what is listening there, or pass --port <other>` });
    });
    srv.listen(port, host, () => srv.close(() => resolveCheck({ name: 'port', status: 'ok', detail: `${host}:${port} is free` })));
  });
}

/** Runs every check for a manifest and the app's declared requirements. */
export async function runDoctor(manifest: Manifest, requirements: AppRequirements, host: string, port: number): Promise<DoctorCheck[]> {
  const checks: DoctorCheck[] = [checkNode(), checkShm(requirements.shmBytes)];
  const gpus = listNvidiaGpus();
  const declared = manifest.model.gpu.count;
  if (gpus.length === 0) {
    checks.push({ name: 'gpus', status: declared > 0 ? 'warn' : 'ok', detail: `no NVIDIA GPU found${declared > 0 ? ` (reactor.yaml declares ${declared}); ranks will run on CPU` : ''}` });
  } else {
    checks.push({ name: 'gpus', status: 'ok', detail: `${gpus.length} NVIDIA GPU(s): ${gpus.join(', ')}` });
    // Only where there are GPUs: without one, Dawn only prints that it found no Vulkan.
    const webgpu = await probeWebGpu(manifest.runtime.module);
    checks.push(webgpu.found
      ? { name: 'webgpu', status: 'ok', detail: webgpu.detail }
      : { name: 'webgpu', status: 'fail', detail: webgpu.detail, fix: 'install the Vulkan loader (libvulkan1) and set VK_DRIVER_FILES to the NVIDIA ICD json; see docs/deploy.md' });
  }
  const ws = requirements.worldSize;
  if (ws !== undefined && requirements.usesGpu && gpus.length > 0 && ws > gpus.length) {
    checks.push({ name: 'world size', status: 'fail', detail: `the app starts ${ws} ranks but ${gpus.length} GPU(s) are visible`, fix: `set worldSize to at most ${gpus.length} in the app config, or run ranks on CPU` });
  } else if (ws !== undefined) {
    checks.push({ name: 'world size', status: 'ok', detail: `${ws} rank(s)${requirements.usesGpu ? ' on GPUs' : ' on CPU'}` });
  }
  checks.push(await checkPort(host, port));
  return checks;
}
