/**
 * The one GPU count of Reactor: the runner sizes `devices: 'auto'` with it and `reactor doctor`
 * reports it, so the two cannot disagree.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';

/**
 * The GPU count the environment allows, given what the machine has (pure: `machineCount` is
 * called only when the environment does not decide alone).
 * - `REACTOR_GPU_COUNT` set (for containers that hide `/dev`): that number, nothing else read.
 * - else the machine's count, restricted by `CUDA_VISIBLE_DEVICES`: a list of indices caps it
 *   at the list's length, an empty value means none; other forms (UUIDs) leave it as is.
 * @throws RangeError when `REACTOR_GPU_COUNT` is not a non-negative integer
 * @internal
 */
export function gpuCountFromEnv(env: NodeJS.ProcessEnv, machineCount: () => number): number {
  const override = env.REACTOR_GPU_COUNT;
  if (override !== undefined && override !== '') {
    const n = Number(override);
    if (!Number.isInteger(n) || n < 0) throw new RangeError(`REACTOR_GPU_COUNT must be a non-negative integer, got ${JSON.stringify(override)}.`);
    return n;
  }
  const visible = env.CUDA_VISIBLE_DEVICES;
  if (visible !== undefined && visible.trim() === '') return 0;
  const count = machineCount();
  if (visible !== undefined && /^\s*\d+(\s*,\s*\d+)*\s*$/.test(visible)) return Math.min(count, visible.split(',').length);
  return count;
}

/**
 * NVIDIA GPUs on this machine, without CUDA libraries: the `/dev/nvidia<N>` device files, else
 * the lines of `nvidia-smi -L` (which it runs). Not pure: it reads `/dev` and may start a process.
 * @internal
 */
export function machineGpuCount(): number {
  let count = 0;
  try {
    count = readdirSync('/dev').filter((f) => /^nvidia\d+$/.test(f)).length;
  } catch {
    count = 0;
  }
  if (count > 0) return count;
  try {
    const out = execFileSync('nvidia-smi', ['-L'], { encoding: 'utf8', timeout: 5_000, stdio: ['ignore', 'pipe', 'ignore'] });
    return out.split('\n').filter((l) => l.startsWith('GPU ')).length;
  } catch {
    return 0;
  }
}

/**
 * GPUs visible to this process, counted as the runner counts them: `REACTOR_GPU_COUNT` if set,
 * else this machine's NVIDIA GPUs (`/dev/nvidia<N>`, else `nvidia-smi -L`) restricted by
 * `CUDA_VISIBLE_DEVICES`. Probes the machine (see {@link machineGpuCount}).
 * @param env the environment to read (default `process.env`, what the runner reads)
 * @throws RangeError when `REACTOR_GPU_COUNT` is not a non-negative integer
 * @example
 * ```ts
 * const gpus = detectGpuCount(); // 0 on a machine without NVIDIA GPUs
 * ```
 */
export function detectGpuCount(env: NodeJS.ProcessEnv = process.env): number {
  return gpuCountFromEnv(env, machineGpuCount);
}
