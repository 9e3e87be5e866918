/**
 * `ServerOptions.recording`: the clip ring and session recordings (reactor.yaml `recording:`).
 * Absent: the server keeps no ring and records nothing (`clip` answers `clips_disabled`).
 */
import { resolve } from 'node:path';

/** Longest clip ring, seconds (5 minutes). */
export const MAX_CLIP_SECONDS = 300;

/** How clips and recordings are kept. Every field is optional; see each default. */
export interface RecordingOptions {
  /** Folder for recordings and clip files (created if missing). Default: `./recordings` of the working directory. */
  dir?: string;
  /** Keep the clip ring (H.264 of each outbound video track, AAC of its audio). Default `true`. */
  clips?: boolean;
  /** Ring length, seconds: the longest clip (1 to 300). Default 30. */
  clipSeconds?: number;
  /** Most bytes one track's ring holds (video and audio together), whatever `clipSeconds` says. Default 64 MiB. */
  clipMaxBytes?: number;
  /** How long a clip's URL (and its file) lives, ms. Default 24 h. */
  clipExpiryMs?: number;
  /** Record every session from its first frame to its end. Default `false` (a `recording` message starts one). */
  record?: boolean;
  /** Largest recording file, bytes: recording stops there (`max_bytes`). Default 4 GiB. */
  maxBytes?: number;
  /** Longest recording, ms: recording stops there (`max_duration`). Default 4 h. */
  maxDurationMs?: number;
  /** Recordings older than this are deleted, ms. Default 7 days. */
  retentionMs?: number;
  /** Free space the folder's disk must keep, bytes: checked before a recording or clip starts and while it is written. Default 256 MiB. */
  minFreeBytes?: number;
  /**
   * Write `<name>.frames.jsonl` beside each recording: one line per frame of the file, in its
   * order (`{"t": seconds into the file, "seq": frame number, "metadata": the frame's metadata}`),
   * so a recording can be paired with what the app said of each frame (e.g. the tiny world's held
   * keys: its training data). Default `false`.
   */
  frameMetadata?: boolean;
}

export type ResolvedRecordingOptions = Required<RecordingOptions>;

const MIB = 1024 * 1024;

/**
 * Applies the defaults and validates.
 * @throws {TypeError | RangeError} naming the option, e.g. `options.recording.clipSeconds must be a number from 1 to 300, got 600`.
 */
export function resolveRecordingOptions(r: RecordingOptions): ResolvedRecordingOptions {
  if (typeof r !== 'object' || r === null || Array.isArray(r)) {
    throw new TypeError(`options.recording must be an object such as { clipSeconds: 30 }, got ${JSON.stringify(r)}`);
  }
  const known = [
    'dir',
    'clips',
    'clipSeconds',
    'clipMaxBytes',
    'clipExpiryMs',
    'record',
    'maxBytes',
    'maxDurationMs',
    'retentionMs',
    'minFreeBytes',
    'frameMetadata',
  ];
  for (const k of Object.keys(r)) if (!known.includes(k)) throw new TypeError(`options.recording.${k} is not an option; it takes ${known.join(', ')}`);
  if (r.dir !== undefined && (typeof r.dir !== 'string' || r.dir === ''))
    throw new TypeError(`options.recording.dir must be a folder path, got ${JSON.stringify(r.dir)}`);
  for (const k of ['clips', 'record', 'frameMetadata'] as const) {
    if (r[k] !== undefined && typeof r[k] !== 'boolean') throw new TypeError(`options.recording.${k} must be true or false, got ${JSON.stringify(r[k])}`);
  }
  const num = (k: keyof RecordingOptions, v: number | undefined, def: number, min: number, max: number): number => {
    const x = v ?? def;
    if (typeof x !== 'number' || !Number.isFinite(x) || x < min || x > max) {
      throw new RangeError(`options.recording.${k} must be a number from ${min} to ${max}, got ${JSON.stringify(v)}`);
    }
    return x;
  };
  return {
    dir: resolve(r.dir ?? 'recordings'),
    clips: r.clips ?? true,
    clipSeconds: num('clipSeconds', r.clipSeconds, 30, 1, MAX_CLIP_SECONDS),
    clipMaxBytes: num('clipMaxBytes', r.clipMaxBytes, 64 * MIB, 64 * 1024, 4096 * MIB),
    clipExpiryMs: num('clipExpiryMs', r.clipExpiryMs, 24 * 3600_000, 1000, 30 * 24 * 3600_000),
    record: r.record ?? false,
    maxBytes: num('maxBytes', r.maxBytes, 4096 * MIB, 64 * 1024, Number.MAX_SAFE_INTEGER),
    maxDurationMs: num('maxDurationMs', r.maxDurationMs, 4 * 3600_000, 1000, 7 * 24 * 3600_000),
    retentionMs: num('retentionMs', r.retentionMs, 7 * 24 * 3600_000, 1000, 3650 * 24 * 3600_000),
    minFreeBytes: num('minFreeBytes', r.minFreeBytes, 256 * MIB, 0, Number.MAX_SAFE_INTEGER),
    frameMetadata: r.frameMetadata ?? false,
  };
}
