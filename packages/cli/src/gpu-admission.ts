/**
 * `gpu.sessions_per_gpu` (issue 42): the instance's GPU session slot, opened from the manifest
 * and the environment before the app loads; the host's admission (`AppHostOptions.admission`),
 * which with `gpu.admit: deadline` also publishes the session's frame times and reads the others'.
 */
import { DEFAULT_GPU_SLOT_DIR, GpuSlotLease, gpuSlotKey } from '@reactor/distributed';
import type { Logger } from '@reactor/log';
import type { Manifest } from './manifest.js';

/** `REACTOR_GPU_SLOT_DIR`: the slot folder, over `gpu.slot_dir` (the chart sets it to its hostPath mount). */
export const GPU_SLOT_DIR_ENV = 'REACTOR_GPU_SLOT_DIR';
/** `REACTOR_GPU_DEVICE`: the GPU's identity, over `gpu.device`. */
export const GPU_DEVICE_ENV = 'REACTOR_GPU_DEVICE';

/**
 * The lease of the manifest's `gpu:` section, waiting for a slot; undefined without the section.
 * @throws GpuSlotError `gpu_slot_dir` / `gpu_slot_unavailable` (nothing is left running then)
 */
export function openGpuSlots(m: Manifest, logger: Logger, env: NodeJS.ProcessEnv = process.env): GpuSlotLease | undefined {
  if (!m.gpu) return undefined;
  const dir = nonEmpty(env[GPU_SLOT_DIR_ENV]) ?? m.gpu.slotDir ?? DEFAULT_GPU_SLOT_DIR;
  const gpu = nonEmpty(env[GPU_DEVICE_ENV]) ?? m.gpu.device ?? gpuSlotKey(env);
  const { sessionsPerGpu, admit, deadlineP99Intervals, marginIntervals } = m.gpu;
  const lease = GpuSlotLease.open({
    sessionsPerGpu,
    dir,
    gpu,
    logger,
    admit,
    ...(deadlineP99Intervals !== undefined && { deadlineP99Intervals }),
    ...(marginIntervals !== undefined && { marginIntervals }),
  });
  const deadline =
    admit === 'deadline'
      ? `; a new session only while every session on it has frame-time p99 <= ${lease.admitBoundIntervals} frame intervals (deadline ${lease.deadlineP99Intervals})`
      : '';
  logger.info(`gpu: at most ${sessionsPerGpu} session${sessionsPerGpu === 1 ? '' : 's'} on GPU ${lease.gpu} across its instances (slots in ${dir})${deadline}`);
  return lease;
}

function nonEmpty(v: string | undefined): string | undefined {
  return v !== undefined && v.trim() !== '' ? v.trim() : undefined;
}
