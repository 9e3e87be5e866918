import { ReactorError } from '@reactor/runtime';

/** The camera app's error codes (`docs/errors.md`). */
export const CameraErrorCode = {
  /** The app config (`runtime.config`) is unreadable, or a key is wrong or unknown. */
  ConfigInvalid: 'camera_config_invalid',
} as const;
export type CameraErrorCode = (typeof CameraErrorCode)[keyof typeof CameraErrorCode];

/** Thrown by `loadCameraConfig` for an unreadable or invalid config file. */
export class CameraConfigError extends ReactorError {
  constructor(message: string) {
    super(CameraErrorCode.ConfigInvalid, message);
  }
}
