/**
 * Errors of the enhance app. Each has a stable `code` from {@link EnhanceErrorCode} (listed in
 * `docs/errors.md`) and a message that says what failed, where, and how to fix it. Errors a
 * rank throws are exported from the worker module so the runner rebuilds them in the parent as
 * instances of these classes.
 */
import { CodedError } from '@reactor/protocol';

/** Stable codes of the enhance app's errors. */
export const EnhanceErrorCode = {
  /** The app config (`runtime.config`) is unreadable, or a key is wrong or unknown. */
  ConfigInvalid: 'enhance_config_invalid',
  /** A model file (`model.json` or a weight shard) is missing or unreadable. */
  WeightsMissing: 'enhance_weights_missing',
  /** A model file is there but wrong: bad JSON, wrong size, or tfjs refused it. */
  WeightsCorrupt: 'enhance_weights_corrupt',
  /** `backend` / `REACTOR_BACKEND` is not a backend preference. */
  BackendConfig: 'enhance_backend_config',
  /** None of the allowed tfjs backends could be initialised on a rank. */
  BackendUnavailable: 'enhance_backend_unavailable',
  /** A step's input frames do not match the size and count they declare. */
  InputInvalid: 'enhance_input_invalid',
} as const;
export type EnhanceErrorCode = (typeof EnhanceErrorCode)[keyof typeof EnhanceErrorCode];

/** Base class of the enhance app's errors. */
export class EnhanceError extends CodedError {
  /** Stable machine-readable code, e.g. `enhance_weights_missing`. */
  declare readonly code: EnhanceErrorCode;

  constructor(code: EnhanceErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

/**
 * A model file is missing or unreadable. The message names the file.
 * The constructor takes the message alone so a runner can rebuild it in the parent.
 * @remarks code `enhance_weights_missing`
 */
export class WeightsMissingError extends EnhanceError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(EnhanceErrorCode.WeightsMissing, message, options);
  }

  /** The error for `file` of `model` x`scale`, with the fix. */
  static forFile(file: string, model: string, scale: number, why: string): WeightsMissingError {
    return new WeightsMissingError(
      `cannot read ${file} (ESRGAN ${model} x${scale}): ${why}. Install the model package ` +
        `(pnpm install puts @upscalerjs/esrgan-${model} under apps/enhance/node_modules), or pick a model and scale ` +
        'that this installation carries (the GPU bundle carries x4 only).',
    );
  }
}

/**
 * A model file is there but wrong (bad JSON, a weight shard of the wrong size, tfjs refused the
 * topology or the weights). The message names the file.
 * @remarks code `enhance_weights_corrupt`
 */
export class WeightsCorruptError extends EnhanceError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(EnhanceErrorCode.WeightsCorrupt, message, options);
  }

  /** The error for `file` of `model` x`scale`, with the fix. */
  static forFile(file: string, model: string, scale: number, problem: string, cause?: unknown): WeightsCorruptError {
    return new WeightsCorruptError(
      `${file} (ESRGAN ${model} x${scale}) is corrupt: ${problem}. Reinstall the package ` +
        `(rm -rf apps/enhance/node_modules && pnpm install --frozen-lockfile) or rebuild the bundle.`,
      cause === undefined ? undefined : { cause },
    );
  }
}

/**
 * `backend` (app config) or `REACTOR_BACKEND` is not a backend preference.
 * @remarks code `enhance_backend_config`
 */
export class BackendConfigError extends EnhanceError {
  constructor(message: string) {
    super(EnhanceErrorCode.BackendConfig, message);
  }

  static forValue(source: string, value: string): BackendConfigError {
    return new BackendConfigError(
      `${source} is ${JSON.stringify(value)}, which is not a backend preference. Use "auto" (webgpu, then wasm, then cpu), ` +
        'one of "webgpu", "wasm", "cpu", a comma-separated order such as "webgpu,wasm", ' +
        'or "torch" (PyTorch in Python ranks).',
    );
  }
}

/**
 * No allowed backend could be initialised on a rank (e.g. `webgpu` alone on a machine without a GPU).
 * @remarks code `enhance_backend_unavailable`
 */
export class BackendUnavailableError extends EnhanceError {
  constructor(message: string) {
    super(EnhanceErrorCode.BackendUnavailable, message);
  }
}

/**
 * A step's frames do not match what they declare (a bug in the caller of the worker).
 * @remarks code `enhance_input_invalid`
 */
export class InputInvalidError extends EnhanceError {
  constructor(message: string) {
    super(EnhanceErrorCode.InputInvalid, message);
  }
}
