/**
 * Errors of the sample video model. Every error has a stable `code` (listed in
 * `docs/video-model.md`) and a message that says what failed, where, and how to fix it.
 */
import { CodedError } from '@reactor/protocol';

/** Stable codes of the sample app's errors (the model's and the app config's). */
export const VideoErrorCode = {
  /** The app config (`runtime.config`) is unreadable or a key is wrong or unknown. */
  ConfigInvalid: 'video_config_invalid',
  RolloutExhausted: 'rollout_exhausted',
  WeightsNotFound: 'weights_not_found',
  WeightsInvalid: 'weights_invalid',
  BackendConfig: 'backend_config',
  BackendUnavailable: 'backend_unavailable',
  ModelNotLoaded: 'model_not_loaded',
} as const;
export type VideoErrorCode = (typeof VideoErrorCode)[keyof typeof VideoErrorCode];

/** Base class of every error the video model throws (option `TypeError`/`RangeError`s aside). */
export class VideoModelError extends CodedError {
  /** Stable machine-readable code, e.g. `rollout_exhausted`. */
  declare readonly code: VideoErrorCode;

  constructor(code: VideoErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

/**
 * The current rollout has produced its configured number of chunks (`rolloutChunks`). Every
 * rank throws it on the same call, so a `DistributedRunner` re-raises it and stays healthy;
 * call `reset()` to start a new rollout (the weights stay loaded).
 *
 * The constructor takes an optional message so that a runner can rebuild an instance of this
 * class in the parent process from the error's name and message.
 * @remarks code `rollout_exhausted`
 */
export class RolloutExhausted extends VideoModelError {
  constructor(message?: string, options?: { cause?: unknown }) {
    super(VideoErrorCode.RolloutExhausted, message ?? 'The rollout is exhausted: call reset() to start a new rollout (the weights stay loaded).', options);
  }

  /** The message every rank uses, naming the rollout length. */
  static afterChunks(chunks: number, rank: number): RolloutExhausted {
    return new RolloutExhausted(
      `Rank ${rank}: the rollout is exhausted after ${chunks} chunk${chunks === 1 ? '' : 's'} (rolloutChunks). ` +
        'Call reset() to start a new rollout; the weights stay loaded.',
    );
  }
}

/**
 * The weights folder, its `manifest.json` or its weights file is missing or unreadable.
 * @remarks code `weights_not_found`
 */
export class WeightsNotFoundError extends VideoModelError {
  /** The path that could not be read. */
  readonly path: string;

  constructor(path: string, what: string, options?: { cause?: unknown }) {
    super(
      VideoErrorCode.WeightsNotFound,
      `Video model weights not found: ${what} ${path}. Point weightsRoot (reactor.yaml runtime.weights_path) at ` +
        'the folder holding manifest.json and its .bin file (the repository ships them in apps/video/weights; ' +
        'rebuild them with `node apps/video/scripts/generate-weights.mjs`).',
      options,
    );
    this.path = path;
  }
}

/**
 * The weights folder exists but its contents are wrong: bad JSON, another format or version,
 * a truncated or modified weights file, or a tensor with an unexpected shape.
 * @remarks code `weights_invalid`
 */
export class WeightsInvalidError extends VideoModelError {
  /** The file at fault. */
  readonly path: string;

  constructor(path: string, problem: string, options?: { cause?: unknown }) {
    super(
      VideoErrorCode.WeightsInvalid,
      `Video model weights in ${path} are invalid: ${problem}. Restore the committed files ` +
        '(git checkout apps/video/weights) or rebuild them with `node apps/video/scripts/generate-weights.mjs`.',
      options,
    );
    this.path = path;
  }
}

/**
 * `options.backend` or `REACTOR_BACKEND` is not a backend preference this model understands.
 * @remarks code `backend_config`
 */
export class BackendConfigError extends VideoModelError {
  constructor(source: string, value: string) {
    super(
      VideoErrorCode.BackendConfig,
      `${source} is ${JSON.stringify(value)}, which is not a backend preference. Use "auto" (webgpu, then wasm, ` +
        'then cpu), one of "webgpu", "wasm", "cpu", or a comma-separated fallback order such as "webgpu,wasm".',
    );
  }
}

/** One backend that was tried and why it was not used. */
export interface BackendAttempt {
  backend: string;
  reason: string;
}

/**
 * None of the backends the configuration allows could be initialised (for example `webgpu` was
 * asked for explicitly and no GPU adapter is usable). The model never falls back to a backend
 * the configuration did not list.
 * @remarks code `backend_unavailable`
 */
export class BackendUnavailableError extends VideoModelError {
  /** Every backend tried, in order, with the reason it failed. */
  readonly attempts: readonly BackendAttempt[];

  constructor(rank: number, requested: string, source: string, attempts: readonly BackendAttempt[]) {
    const lines = attempts.map((a) => `  - ${a.backend}: ${a.reason}`).join('\n');
    const wantsGpu = attempts.some((a) => a.backend === 'webgpu');
    const fix = wantsGpu
      ? "On a GPU machine, install the Vulkan loader (Debian: libvulkan1) and the GPU vendor's Vulkan driver " +
        '(set VK_DRIVER_FILES to its ICD json if it is not found); on a machine without a GPU, set ' +
        'REACTOR_BACKEND=wasm (or "auto"), or allow a fallback such as "webgpu,wasm".'
      : 'Allow another backend (REACTOR_BACKEND=auto tries webgpu, wasm, then cpu).';
    super(VideoErrorCode.BackendUnavailable, `Rank ${rank}: no usable tfjs backend for ${source}=${JSON.stringify(requested)}; tried:\n${lines}\n${fix}`);
    this.attempts = attempts;
  }
}

/**
 * A rank was asked to generate before `load()` finished, or after `dispose()`.
 * @remarks code `model_not_loaded`
 */
export class ModelNotLoadedError extends VideoModelError {
  constructor(rank: number, op: string) {
    super(VideoErrorCode.ModelNotLoaded, `Rank ${rank}: ${op}() was called before load() finished (or after dispose()). Await load() first.`);
  }
}
