/** The upload limits of a host: their defaults and their checks. */
import { UPLOAD_PATH } from '@reactor/protocol';
import { HostOptionError } from '../errors/errors.js';
import type { ImageDecoder } from './uploaded-file.js';

/** Default largest upload, bytes (50 MiB). */
export const DEFAULT_MAX_UPLOAD_BYTES = 50 * 1024 * 1024;
/** Default bytes one session's uploads may hold together (200 MiB). */
export const DEFAULT_UPLOAD_QUOTA_BYTES = 200 * 1024 * 1024;
/** Default wait of a command for an upload still arriving (10 s). */
export const DEFAULT_UPLOAD_WAIT_MS = 10_000;
/** Default time an announced upload may stay unwritten before it is forgotten (60 s). */
export const DEFAULT_UPLOAD_EXPIRY_MS = 60_000;
/** Longest file name an announcement may carry (code points). */
export const MAX_UPLOAD_NAME_LENGTH = 255;
/** Path prefix of an upload's `PUT` URL (a wire constant: `@reactor/protocol` holds it). */
export { UPLOAD_PATH };

/** How uploads are limited and where they go; every field has a default. */
export interface UploadOptions {
  /** Largest file, bytes (default 50 MiB). Checked on the announced size and while the bytes stream in. */
  maxFileBytes?: number;
  /** Bytes one session's uploads may hold together, announced ones included (default 200 MiB). */
  quotaBytes?: number;
  /** How long a command waits for an upload it names whose bytes are still arriving, ms (default 10 000). */
  resolveWaitMs?: number;
  /** How long an announced upload may stay unwritten before it is forgotten, ms (default 60 000). */
  expiryMs?: number;
  /** Folder under which each session gets its own temporary folder (default `os.tmpdir()`). */
  dir?: string;
  /** Decodes images for `UploadedFile.image()` (the server passes a sharp-based one). */
  decodeImage?: ImageDecoder;
}

/** {@link UploadOptions} with defaults applied. */
export interface ResolvedUploadOptions {
  readonly maxFileBytes: number;
  readonly quotaBytes: number;
  readonly resolveWaitMs: number;
  readonly expiryMs: number;
  readonly dir: string | undefined;
  readonly decodeImage: ImageDecoder | undefined;
}

/**
 * Applies `next` over `base`, checking each value.
 * @throws HostOptionError (`invalid_host_option`) naming the option.
 */
export function resolveUploadOptions(next: UploadOptions, base?: ResolvedUploadOptions): ResolvedUploadOptions {
  const r: ResolvedUploadOptions = {
    maxFileBytes: next.maxFileBytes ?? base?.maxFileBytes ?? DEFAULT_MAX_UPLOAD_BYTES,
    quotaBytes: next.quotaBytes ?? base?.quotaBytes ?? DEFAULT_UPLOAD_QUOTA_BYTES,
    resolveWaitMs: next.resolveWaitMs ?? base?.resolveWaitMs ?? DEFAULT_UPLOAD_WAIT_MS,
    expiryMs: next.expiryMs ?? base?.expiryMs ?? DEFAULT_UPLOAD_EXPIRY_MS,
    dir: next.dir ?? base?.dir,
    decodeImage: next.decodeImage ?? base?.decodeImage,
  };
  for (const key of ['maxFileBytes', 'quotaBytes', 'resolveWaitMs', 'expiryMs'] as const) {
    const v = r[key];
    if (!(Number.isSafeInteger(v) && v > 0)) throw new HostOptionError(`uploads.${key} must be a positive integer, got ${JSON.stringify(v)}`);
  }
  if (r.quotaBytes < r.maxFileBytes) {
    throw new HostOptionError(
      `uploads.quotaBytes (${r.quotaBytes}) is below uploads.maxFileBytes (${r.maxFileBytes}): a file of the largest size could never be stored; raise the quota or lower the limit`,
    );
  }
  if (r.dir !== undefined && (typeof r.dir !== 'string' || r.dir === ''))
    throw new HostOptionError(`uploads.dir must be a folder path, got ${JSON.stringify(r.dir)}`);
  if (r.decodeImage !== undefined && typeof r.decodeImage !== 'function') throw new HostOptionError('uploads.decodeImage must be a function');
  return r;
}
