/** The tracks of an app: inbound ones (its `Input` class) and outbound ones (its `Output` class), compiled, with their defaults and schemas. */
import type { TrackSchema } from '@reactor/protocol';
import { AppDefinitionError, RuntimeErrorCode } from '../errors/errors.js';
import { DEFAULT_INPUT_CAPACITY } from '../input/input-buffer.js';
import type { TrackRecord } from '../metadata/keys.js';
import { toSnakeCase } from '../metadata/naming.js';

/** Default sample rate of audio tracks, both directions (Hz). */
export const DEFAULT_SAMPLE_RATE = 48_000;
export { DEFAULT_INPUT_CAPACITY };
/** Defaults of an inbound video track: the capture size and rate asked of clients, and the limits. */
export const DEFAULT_INPUT_VIDEO = { width: 640, height: 480, fps: 30, maxWidth: 1920, maxHeight: 1080 } as const;
/** Default rate limit of an inbound audio track (chunks per second; a browser sends about 50). */
export const DEFAULT_INPUT_AUDIO_MAX_FPS = 100;

/** A declared output track, compiled. */
export interface TrackSpec {
  readonly name: string;
  readonly property: string;
  /** Index in `schema.tracks` (inbound tracks come first), as carried in binary frame headers. */
  readonly index: number;
  readonly kind: 'video' | 'audio';
  readonly fps: number | undefined;
  readonly width: number | undefined;
  readonly height: number | undefined;
  /** Audio tracks: samples per second. */
  readonly sampleRate: number | undefined;
}

/** A declared inbound track (on the app's `Input` class), compiled, with every default applied. */
export interface InputTrackSpec {
  readonly name: string;
  readonly property: string;
  /** Index in `schema.tracks` (inbound tracks come first). */
  readonly index: number;
  readonly kind: 'video' | 'audio';
  /** Buffer capacity (frames or chunks). */
  readonly capacity: number;
  /** Publisher rate limit, frames (audio: chunks) per second. */
  readonly maxFps: number;
  /** Video: capture size and rate asked of clients, and the largest accepted frame. */
  readonly width: number | undefined;
  readonly height: number | undefined;
  readonly fps: number | undefined;
  readonly maxWidth: number | undefined;
  readonly maxHeight: number | undefined;
  /** Audio: samples per second. */
  readonly sampleRate: number | undefined;
}

export function checkSampleRate(owner: string, property: string, rate: number | undefined): number {
  if (rate === undefined) return DEFAULT_SAMPLE_RATE;
  if (!(Number.isInteger(rate) && rate >= 8_000 && rate <= 192_000)) {
    throw new AppDefinitionError(RuntimeErrorCode.InvalidTrack, owner, property, `sampleRate must be an integer from 8000 to 192000 (Hz), got ${String(rate)}`);
  }
  return rate;
}

function positiveInteger(owner: string, property: string, key: string, v: number | undefined, fallback: number): number {
  if (v === undefined) return fallback;
  if (!(Number.isInteger(v) && v > 0))
    throw new AppDefinitionError(RuntimeErrorCode.InvalidTrack, owner, property, `${key} must be a positive integer, got ${String(v)}`);
  return v;
}

function positiveNumber(owner: string, property: string, key: string, v: number | undefined, fallback: number): number {
  if (v === undefined) return fallback;
  if (!(Number.isFinite(v) && v > 0))
    throw new AppDefinitionError(RuntimeErrorCode.InvalidTrack, owner, property, `${key} must be a positive number, got ${String(v)}`);
  return v;
}

export function compileInputTrack(owner: string, r: TrackRecord, index: number): InputTrackSpec {
  const name = toSnakeCase(r.property);
  const capacity = positiveInteger(owner, r.property, 'capacity', r.options.capacity, DEFAULT_INPUT_CAPACITY);
  if (r.kind === 'audio') {
    const sampleRate = checkSampleRate(owner, r.property, r.options.sampleRate);
    const maxFps = positiveNumber(owner, r.property, 'maxFps', r.options.maxFps, DEFAULT_INPUT_AUDIO_MAX_FPS);
    return {
      name,
      property: r.property,
      index,
      kind: 'audio',
      capacity,
      maxFps,
      sampleRate,
      width: undefined,
      height: undefined,
      fps: undefined,
      maxWidth: undefined,
      maxHeight: undefined,
    };
  }
  const o = r.options;
  const d = DEFAULT_INPUT_VIDEO;
  const maxWidth = positiveInteger(owner, r.property, 'maxWidth', o.maxWidth, Math.max(d.maxWidth, o.width ?? 0));
  const maxHeight = positiveInteger(owner, r.property, 'maxHeight', o.maxHeight, Math.max(d.maxHeight, o.height ?? 0));
  const width = positiveInteger(owner, r.property, 'width', o.width, Math.min(d.width, maxWidth));
  const height = positiveInteger(owner, r.property, 'height', o.height, Math.min(d.height, maxHeight));
  if (width > maxWidth || height > maxHeight) {
    throw new AppDefinitionError(
      RuntimeErrorCode.InvalidTrack,
      owner,
      r.property,
      `the capture size ${width}x${height} exceeds the limit ${maxWidth}x${maxHeight}`,
    );
  }
  const fps = positiveNumber(owner, r.property, 'fps', o.fps, d.fps);
  const maxFps = positiveNumber(owner, r.property, 'maxFps', o.maxFps, fps * 2);
  return { name, property: r.property, index, kind: 'video', capacity, maxFps, width, height, fps, maxWidth, maxHeight, sampleRate: undefined };
}

export function inputTrackSchema(t: InputTrackSpec): TrackSchema {
  const base = { name: t.name, kind: t.kind, direction: 'in' as const, maxFps: t.maxFps };
  if (t.kind === 'audio') return { ...base, sampleRate: t.sampleRate! };
  return { ...base, width: t.width!, height: t.height!, fps: t.fps!, maxWidth: t.maxWidth!, maxHeight: t.maxHeight! };
}

export function outputTrackSchema(t: TrackSpec): TrackSchema {
  if (t.kind === 'audio') return { name: t.name, kind: 'audio', direction: 'out', sampleRate: t.sampleRate! };
  return { name: t.name, kind: 'video', direction: 'out', ...(t.fps !== undefined ? { fps: t.fps } : {}) };
}
