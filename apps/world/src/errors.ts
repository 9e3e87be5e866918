/**
 * Errors of the world app. The model's errors are raised by the Python ranks
 * (`python/reactor_world`) and rebuilt here as instances of these classes (same names, same
 * codes); each code is in `docs/errors.md`.
 */
import { CodedError } from '@reactor/protocol';

/** Stable codes of the world app's errors. */
export const WorldErrorCode = {
  /** The app config (`runtime.config`) is unreadable, or a key is wrong or unknown. */
  AppConfigInvalid: 'world_app_config_invalid',
  /** A model config that cannot run (a resolution off the patch grid, a window too small). */
  ConfigInvalid: 'world_config_invalid',
  /** A checkpoint that is not this model's: a missing, unknown or misshapen key, a truncated file. */
  CheckpointInvalid: 'world_checkpoint_invalid',
  /** The configured text encoder cannot be imported, or returns the wrong shape. */
  TextEncoder: 'world_text_encoder',
  /** A `generate()` input the model cannot take. */
  InputInvalid: 'world_input_invalid',
  /** CUDA ran out of memory: the session ends and the runner is rebuilt. */
  OutOfMemory: 'world_out_of_memory',
  /** A tiny-world training file `apps/world/train/train.py` cannot read (Python `TrainingDataError`; the script's, not the server's). */
  TrainingDataInvalid: 'world_training_data_invalid',
} as const;
export type WorldErrorCode = (typeof WorldErrorCode)[keyof typeof WorldErrorCode];

/**
 * Base of the world app's errors: each subclass names its code once (`static code`), and takes
 * the message alone, so the runner can rebuild a rank's error in the parent.
 */
abstract class WorldError extends CodedError {
  static readonly code: WorldErrorCode;

  constructor(message: string) {
    super((new.target as unknown as { code: WorldErrorCode }).code, message);
  }
}

/** A model config that cannot run (Python `ConfigError`). @remarks code `world_config_invalid` */
export class ConfigError extends WorldError {
  static override readonly code = WorldErrorCode.ConfigInvalid;
}

/** A checkpoint refused key by key (Python `CheckpointError`). @remarks code `world_checkpoint_invalid` */
export class CheckpointError extends WorldError {
  static override readonly code = WorldErrorCode.CheckpointInvalid;
}

/** The text encoder plug-in failed (Python `TextEncoderError`). @remarks code `world_text_encoder` */
export class TextEncoderError extends WorldError {
  static override readonly code = WorldErrorCode.TextEncoder;
}

/** A bad `generate()` input (Python `WorldInputInvalid`). @remarks code `world_input_invalid` */
export class WorldInputInvalid extends WorldError {
  static override readonly code = WorldErrorCode.InputInvalid;
}

/** CUDA out of memory (Python `WorldOutOfMemory`). @remarks code `world_out_of_memory` */
export class WorldOutOfMemory extends WorldError {
  static override readonly code = WorldErrorCode.OutOfMemory;
}

/** The app config is unreadable or invalid. @remarks code `world_app_config_invalid` */
export class WorldConfigError extends WorldError {
  static override readonly code = WorldErrorCode.AppConfigInvalid;
}
