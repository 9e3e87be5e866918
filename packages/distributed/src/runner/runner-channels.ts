/**
 * What a runner tells whoever listens, through Node's `diagnostics_channel` (no cost when nobody
 * subscribes: each publish is behind `hasSubscribers`): per call, where its time went; while it
 * starts, its ranks' load progress; while it runs, its ranks' GPU busy ratio where a rank knows it.
 * The app host (`@reactor/runtime`) subscribes by these names, so an app on a runner gets the
 * runner stages of `reactor_step_stage_seconds`, `progress` in its session status and
 * `reactor_rank_gpu_busy_ratio` without wiring anything.
 */
import { channel } from 'node:diagnostics_channel';
import type { CallOp } from '../protocol.js';

/** Channel of {@link RunnerCallTiming}: published when a call is sent (in the caller's async context), filled as it completes. */
export const RUNNER_CALL_CHANNEL = 'reactor:runner:call';
/** Channel of {@link RunnerLoadProgress}: published in the async context that called `start()`. */
export const RUNNER_PROGRESS_CHANNEL = 'reactor:runner:progress';
/** Channel of {@link RankGpuBusy}: published in the async context that called `start()`. */
export const RUNNER_GPU_CHANNEL = 'reactor:runner:gpu';

/**
 * One runner call's time, parent side. The object is published when the call is sent (so a
 * subscriber sees it in the caller's async context) and filled as the call proceeds; `done`
 * turns true once the result is decoded (a failed call stays `done: false`).
 */
export interface RunnerCallTiming {
  op: CallOp;
  /** performance.now() when the call began. */
  startMs: number;
  /** The input encoded into shared memory and the call sent to every rank, ms. */
  dispatchMs: number;
  /** From the call sent to the last rank's answer (the ranks' work, their collectives and the IPC), ms. */
  ranksMs: number;
  /** From the last answer to the result decoded for the caller (rank 0's result out of shared memory), ms. */
  handbackMs: number;
  done: boolean;
}

/** A runner's load progress while it starts: the mean over its ranks (a loaded rank counts 1). */
export interface RunnerLoadProgress {
  /** 0..1 */
  ratio: number;
  /** What the least advanced rank reported last (`reading weights`, `compiling`, ...), or the runner's own (`starting ranks`, `loaded`). */
  stage: string;
  /** The rank whose report this is, or undefined for the runner's own. */
  rank: number | undefined;
}

/** A rank's GPU busy ratio (0..1), as the rank sampled it (at most once a second). */
export interface RankGpuBusy {
  rank: number;
  ratio: number;
}

export const callChannel = channel(RUNNER_CALL_CHANNEL);
export const progressChannel = channel(RUNNER_PROGRESS_CHANNEL);
export const gpuChannel = channel(RUNNER_GPU_CHANNEL);
