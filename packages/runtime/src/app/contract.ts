/**
 * The typed contract between whoever hosts an app (the `reactor` CLI, a test, an embedding
 * program) and the app class: what `load()` is told, and what an app may declare about the
 * machine it needs (`static requirements()`, read by `reactor doctor` before any weights load).
 */
import type { Logger } from '@reactor/log';

/** What `load()` receives. */
export interface LoadContext {
  /** The app's own config file (the manifest's `runtime.config`, or `--config`), when one is given. */
  readonly configPath: string | undefined;
  /**
   * GPUs the manifest declares (`model.resources.gpu.count`), when the app was started from a
   * manifest; `undefined` otherwise. Apps use it as the default world size.
   */
  readonly manifestGpuCount: number | undefined;
  /** The host's logger (the same one as `this.logger`). */
  readonly logger: Logger;
  /**
   * Reports how far `load()` is (0..1) and what it is doing now (`downloading weights`,
   * `compiling`): the session status carries it as `progress` while loading, `/health/ready`
   * names it, `/metrics` has it as `reactor_load_progress_ratio`, and `reactor run` draws it as a
   * progress bar. A runner the app starts reports its ranks' `reportProgress()` by itself; the
   * latest report of either wins.
   * @throws RangeError when `ratio` is not a number in 0..1; TypeError when `stage` is not a non-empty string
   */
  readonly reportProgress: (ratio: number, stage: string) => void;
}

/** What a host tells `static requirements()`. */
export interface RequirementsContext {
  /** As in {@link LoadContext}. */
  readonly configPath: string | undefined;
  /** As in {@link LoadContext}. */
  readonly manifestGpuCount: number | undefined;
  /** GPUs visible to this process (the runner's count: `REACTOR_GPU_COUNT`, `CUDA_VISIBLE_DEVICES`, the driver). */
  readonly gpuCount: number;
}

/** One finding of a machine check, as `reactor doctor` prints it. */
export interface RequirementCheck {
  name: string;
  status: 'ok' | 'warn' | 'fail';
  detail: string;
  /** How to fix it, for `warn` and `fail`. */
  fix?: string;
}

/** What an app declares about the machine it needs. Every field is optional. */
export interface AppRequirements {
  /** Shared memory the app's runner needs at peak, in bytes. */
  shmBytes?: number;
  /** Ranks the app will start. */
  worldSize?: number;
  /** Whether the ranks will use GPUs on this machine. */
  usesGpu?: boolean;
  /** App-specific checks (e.g. "thick at 1280x720 needs 2 GPUs for real time"), printed as they are. */
  checks?: RequirementCheck[];
}

/** The static side of an app class that a host may call. */
export interface AppStatics {
  /** What the app needs from the machine; called before `load()`, without building the app. */
  requirements?(context: RequirementsContext): AppRequirements | Promise<AppRequirements>;
}
