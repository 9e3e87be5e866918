/**
 * `reactor doctor`: checks the machine against what the app needs, before any weights load.
 * Each check says what it found and, when it fails, how to fix it.
 */
import { statfsSync, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import type { AppRequirements, RequirementCheck } from '@reactor/runtime';
import { MANIFEST_FILE, type Manifest } from './manifest.js';

/** One line of `reactor doctor`'s report (the same shape as an app's own checks). */
export type DoctorCheck = RequirementCheck;

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
  if (!existsSync(dir))
    return { name: 'shared memory', status: 'fail', detail: `${dir} does not exist`, fix: 'mount a tmpfs at /dev/shm (containers: --shm-size=1g)' };
  const s = statfsSync(dir);
  const free = s.bavail * s.bsize;
  const total = s.blocks * s.bsize;
  const mb = (n: number) => `${(n / 2 ** 20).toFixed(1)} MiB`;
  if (needBytes === undefined) return { name: 'shared memory', status: 'ok', detail: `${dir}: ${mb(free)} free of ${mb(total)}` };
  if (free < needBytes) {
    return {
      name: 'shared memory',
      status: 'fail',
      detail: `${dir} has ${mb(free)} free of ${mb(total)}; the configured frames need ${mb(needBytes)}`,
      fix: `give the container more shared memory (docker run --shm-size=${Math.ceil((needBytes * 2) / 2 ** 30)}g) or lower what the app needs (its config: frame size, frames per chunk)`,
    };
  }
  return { name: 'shared memory', status: 'ok', detail: `${dir}: ${mb(free)} free of ${mb(total)}, need ${mb(needBytes)}` };
}

export async function checkPort(host: string, port: number): Promise<DoctorCheck> {
  if (port === 0) return { name: 'port', status: 'ok', detail: 'port 0: a free port is picked at start' };
  return new Promise((resolveCheck) => {
    const srv = createServer();
    srv.once('error', (err: NodeJS.ErrnoException) => {
      resolveCheck({
        name: 'port',
        status: 'fail',
        detail: `${host}:${port} is not available (${err.code ?? err.message})`,
        fix: `stop what is listening there, or pass --port <other>`,
      });
    });
    srv.listen(port, host, () => srv.close(() => resolveCheck({ name: 'port', status: 'ok', detail: `${host}:${port} is free` })));
  });
}

/**
 * Runs every check for a manifest and the app's declared requirements, then the app's own
 * checks (`requirements.checks`), then the port.
 * @param gpuCount GPUs visible to this process: the runner's count (`detectGpuCount()` of
 *   `@reactor/distributed`, which honours `REACTOR_GPU_COUNT` and `CUDA_VISIBLE_DEVICES`)
 */
export async function runDoctor(manifest: Manifest, requirements: AppRequirements, host: string, port: number, gpuCount: number): Promise<DoctorCheck[]> {
  const checks: DoctorCheck[] = [checkNode(), checkShm(requirements.shmBytes)];
  const declared = manifest.model.gpu.count;
  if (gpuCount === 0) {
    checks.push({
      name: 'gpus',
      status: declared > 0 ? 'warn' : 'ok',
      detail: `no GPU visible${declared > 0 ? ` (${MANIFEST_FILE} declares ${declared}); ranks will run on CPU` : ''}`,
    });
  } else {
    checks.push({ name: 'gpus', status: 'ok', detail: `${gpuCount} GPU(s) visible${declared > 0 ? `, ${declared} declared in ${MANIFEST_FILE}` : ''}` });
  }
  const ws = requirements.worldSize;
  if (ws !== undefined && requirements.usesGpu && gpuCount > 0 && ws > gpuCount) {
    checks.push({
      name: 'world size',
      status: 'fail',
      detail: `the app starts ${ws} ranks but ${gpuCount} GPU(s) are visible`,
      fix: `set worldSize to at most ${gpuCount} in the app config, or run ranks on CPU`,
    });
  } else if (ws !== undefined) {
    checks.push({ name: 'world size', status: 'ok', detail: `${ws} rank(s)${requirements.usesGpu ? ' on GPUs' : ' on CPU'}` });
  }
  checks.push(...(requirements.checks ?? []));
  checks.push(await checkPort(host, port));
  return checks;
}
