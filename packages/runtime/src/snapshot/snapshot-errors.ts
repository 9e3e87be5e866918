/** The errors of session snapshots (docs/snapshots.md; each code in docs/errors.md). */
import { ReactorError, RuntimeErrorCode } from '../errors/errors.js';

/** The codes of {@link SnapshotError} (a part of `RuntimeErrorCode`). */
export const SnapshotErrorCode = {
  Corrupt: RuntimeErrorCode.SnapshotCorrupt,
  Truncated: RuntimeErrorCode.SnapshotTruncated,
  AppMismatch: RuntimeErrorCode.SnapshotAppMismatch,
  VersionMismatch: RuntimeErrorCode.SnapshotVersionMismatch,
  TooBig: RuntimeErrorCode.SnapshotTooBig,
  Value: RuntimeErrorCode.SnapshotValue,
  WorldSize: RuntimeErrorCode.SnapshotWorldSize,
} as const;
export type SnapshotErrorCode = (typeof SnapshotErrorCode)[keyof typeof SnapshotErrorCode];

/**
 * A snapshot that cannot be taken, read or restored; `code` says why (`snapshot_corrupt`,
 * `snapshot_truncated`, `snapshot_app_mismatch`, `snapshot_version_mismatch`,
 * `snapshot_too_big`, `snapshot_value`, `snapshot_world_size`).
 */
export class SnapshotError extends ReactorError {
  declare readonly code: SnapshotErrorCode;
  constructor(code: SnapshotErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}
