import type { AppDefinition } from '../app/registry.js';
import type { TrackSpec } from '../app/track-specs.js';
import { FrameShapeError, InvalidOutputError, UnknownTrackError } from '../errors/errors.js';
import { Frames, Output, TrackPayload } from '../output/output.js';
import type { PendingApplied } from './applied.js';

/** One piece of an audio track's PCM, played out with the slot that carries it. */
export interface QueuedAudio {
  readonly track: TrackSpec;
  /** Mono s16 PCM at `track.sampleRate`: a view into the step's payload (no copy). */
  readonly pcm: Int16Array;
}

/** One frame waiting for playout. */
export interface QueuedFrame {
  readonly rgb: Uint8Array;
  readonly width: number;
  readonly height: number;
  readonly metadata: unknown;
  /** Time this frame stays on screen, ms (1000 / fps, or generate time / frames in the batch). */
  readonly intervalMs: number;
  /** The share of the step's audio that plays with this frame (one piece per audio track), if any. */
  readonly audio?: readonly QueuedAudio[];
  /** The commands this frame is the first to reflect (the first slot of a step on the ack track; see `applied.ts`). */
  readonly acks?: ReadonlyArray<PendingApplied<unknown>>;
  /** Told the seq and the time (`performance.now()`) this slot played at (a snapshot learns its first frame: `snapshots.ts`). */
  played?: (seq: number, at: number) => void;
}

/** Audio of a step that has no frame on the clock track: it lasts the audio's own duration. */
export interface QueuedAudioSlot {
  readonly rgb?: undefined;
  /** The audio's duration, ms (the longest track's, when several). */
  readonly intervalMs: number;
  readonly audio: readonly QueuedAudio[];
  /** As {@link QueuedFrame.acks} (an app without video: the ack track is its first audio track). */
  readonly acks?: ReadonlyArray<PendingApplied<unknown>>;
  /** As {@link QueuedFrame.played}. */
  played?: (seq: number, at: number) => void;
}

/** One entry of a track's playout queue: a frame (with its audio), or audio alone. */
export type QueuedSlot = QueuedFrame | QueuedAudioSlot;

/**
 * One step's media, per outbound track (index: the track's place in `def.tracks`; undefined:
 * the track got nothing this step). Audio rides on the clock track's slots (see
 * {@link clockTrack}); audio tracks' own entries stay empty.
 */
export type Chunk = Array<QueuedSlot[] | undefined>;

/**
 * The track whose slots carry the audio (its place in `tracks`): the first video track, or the
 * first track when the app declares no video (audio only). `-1` when there is no track.
 */
export function clockTrack(tracks: readonly TrackSpec[]): number {
  const video = tracks.findIndex((t) => t.kind === 'video');
  return video >= 0 ? video : tracks.length > 0 ? 0 : -1;
}

/**
 * Checks an `Output` against the app's declared tracks and splits each payload into frames
 * (views into the payload's buffer: no copy). A step's audio is split across the step's frames
 * of the clock track in proportion (each frame plays its share, at its due time); without
 * frames there, it becomes one slot lasting the audio's own duration.
 *
 * @throws InvalidOutputError, UnknownTrackError, FrameShapeError with the track named.
 */
export function normalizeOutput(def: AppDefinition, output: Output, elapsedMs: number): Chunk {
  if (!(output instanceof Output))
    throw new InvalidOutputError(`processOutput() returned ${describe(output)}; return an Output subclass instance, or null for no media`);
  if (def.outputClass === undefined) {
    throw new InvalidOutputError(
      `processOutput() returned a ${output.constructor.name} but the app declares no output class; add output: ${output.constructor.name} to @reactorApp({...})`,
    );
  }
  if (!(output instanceof def.outputClass)) {
    throw new InvalidOutputError(`processOutput() returned a ${(output as Output).constructor.name}; the app declares output ${def.outputClass.name}`);
  }
  const chunk: Chunk = new Array<QueuedSlot[] | undefined>(def.tracks.length);
  const audio: QueuedAudio[] = [];
  // Tracks are indexed in schema.tracks after the inbound ones; the chunk holds outbound tracks only.
  const first = def.tracks[0]?.index ?? 0;
  for (const key of Object.keys(output)) {
    const value = (output as unknown as Record<string, unknown>)[key];
    if (value === undefined || value === null) continue;
    const track = def.trackByProperty.get(key);
    if (!track) {
      throw new UnknownTrackError(`${output.constructor.name} has no track "${key}"; declared tracks: ${def.tracks.map((t) => t.property).join(', ')}`);
    }
    if (track.kind === 'audio') {
      audio.push({ track, pcm: checkAudio(track, value) });
      continue;
    }
    let frames: Frames | Uint8Array;
    let width: number | undefined;
    let height: number | undefined;
    let metadata: unknown;
    let frameMetadata: readonly unknown[] | undefined;
    if (value instanceof TrackPayload) {
      frames = value.frames;
      width = value.options.width;
      height = value.options.height;
      metadata = value.options.metadata;
      frameMetadata = value.options.frameMetadata;
    } else if (value instanceof Frames || value instanceof Uint8Array) {
      frames = value;
    } else {
      const audioHint = value instanceof Int16Array ? ' (an Int16Array is audio: declare an @Audio() track for it)' : '';
      throw new FrameShapeError(`track ${track.name}: payload is ${describe(value)}${audioHint}; use Frames, TrackPayload or a Uint8Array of RGB bytes`);
    }
    let data: Uint8Array;
    let n: number;
    if (frames instanceof Frames) {
      data = frames.data;
      n = frames.n;
      if ((width !== undefined && width !== frames.width) || (height !== undefined && height !== frames.height)) {
        throw new FrameShapeError(`track ${track.name}: TrackPayload says ${width}x${height} but the frames are ${frames.width}x${frames.height}`);
      }
      width = frames.width;
      height = frames.height;
    } else if (frames instanceof Uint8Array) {
      data = frames;
      width ??= track.width;
      height ??= track.height;
      if (width === undefined || height === undefined) {
        throw new FrameShapeError(
          `track ${track.name}: bare RGB bytes need a frame size; wrap them as new Frames(bytes, [n, height, width, 3]) or declare @Video({ width, height })`,
        );
      }
      if (!Number.isInteger(width) || !Number.isInteger(height) || width <= 0 || height <= 0) {
        throw new FrameShapeError(`track ${track.name}: width and height must be positive integers, got ${width}x${height}`);
      }
      const size = width * height * 3;
      if (data.length === 0 || data.length % size !== 0) {
        throw new FrameShapeError(`track ${track.name}: ${data.length} bytes is not a whole number of ${width}x${height} RGB frames (${size} bytes each)`);
      }
      n = data.length / size;
    } else {
      throw new FrameShapeError(`track ${track.name}: frames are ${describe(frames)}; use Frames or a Uint8Array`);
    }
    if (track.width !== undefined && (track.width !== width || track.height !== height)) {
      throw new FrameShapeError(`track ${track.name} is declared ${track.width}x${track.height} but got ${width}x${height} frames`);
    }
    if (frameMetadata !== undefined && (!Array.isArray(frameMetadata) || frameMetadata.length !== n)) {
      throw new FrameShapeError(
        `track ${track.name}: frameMetadata has ${Array.isArray(frameMetadata) ? frameMetadata.length : 'no'} entries for ${n} frames; give one per frame`,
      );
    }
    const intervalMs = track.fps !== undefined ? 1000 / track.fps : Math.max(0, elapsedMs) / n;
    const size = width * height * 3;
    const list: QueuedFrame[] = new Array<QueuedFrame>(n);
    for (let i = 0; i < n; i++) {
      list[i] = {
        rgb: data.subarray(i * size, (i + 1) * size),
        width,
        height,
        metadata: frameMetadata !== undefined ? frameMetadata[i] : metadata,
        intervalMs,
      };
    }
    chunk[track.index - first] = list;
  }
  if (audio.length > 0) attachAudio(chunk, clockTrack(def.tracks), audio);
  return chunk;
}

/** @throws FrameShapeError, InvalidOutputError when an audio track's payload is not a non-empty Int16Array. */
function checkAudio(track: TrackSpec, value: unknown): Int16Array {
  if (value instanceof TrackPayload) {
    throw new InvalidOutputError(`track ${track.name} is an audio track: it takes no metadata or TrackPayload; pass the Int16Array of samples itself`);
  }
  if (!(value instanceof Int16Array)) {
    throw new FrameShapeError(
      `track ${track.name}: payload is ${describe(value)}; an audio track takes an Int16Array of mono PCM samples at ${track.sampleRate} Hz (floats in [-1, 1]: Math.round(x * 32767))`,
    );
  }
  if (value.length === 0) {
    throw new FrameShapeError(`track ${track.name}: the Int16Array is empty; leave the track out of the Output for a step without audio`);
  }
  return value;
}

/**
 * Puts each audio payload on the clock track's slots: split across its frames in proportion
 * (piece boundaries rounded, so every sample plays exactly once), or one slot of its own.
 */
function attachAudio(chunk: Chunk, clock: number, audio: readonly QueuedAudio[]): void {
  const frames = chunk[clock] as QueuedFrame[] | undefined;
  if (frames === undefined || frames.length === 0) {
    const intervalMs = Math.max(...audio.map((a) => (a.pcm.length / a.track.sampleRate!) * 1000));
    chunk[clock] = [{ intervalMs, audio }];
    return;
  }
  const n = frames.length;
  chunk[clock] = frames.map((frame, i): QueuedFrame => {
    const pieces: QueuedAudio[] = [];
    for (const a of audio) {
      const m = a.pcm.length;
      const start = Math.round((m * i) / n);
      const end = Math.round((m * (i + 1)) / n);
      if (end > start) pieces.push({ track: a.track, pcm: a.pcm.subarray(start, end) });
    }
    return pieces.length > 0 ? { ...frame, audio: pieces } : frame;
  });
}

function describe(x: unknown): string {
  if (x === null) return 'null';
  if (typeof x === 'object') return `a ${(x as object).constructor?.name ?? 'object'}`;
  return typeof x;
}
