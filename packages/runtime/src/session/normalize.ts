import type { AppDefinition } from '../app/registry.js';
import { FrameShapeError, InvalidOutputError, UnknownTrackError } from '../errors/errors.js';
import { Frames, Output, TrackPayload } from '../output/output.js';

/** One frame waiting for playout. */
export interface QueuedFrame {
  readonly rgb: Uint8Array;
  readonly width: number;
  readonly height: number;
  readonly metadata: unknown;
  /** Time this frame stays on screen, ms (1000 / fps, or generate time / frames in the batch). */
  readonly intervalMs: number;
}

/** One step's media, per track index (undefined: the track got nothing this step). */
export type Chunk = Array<QueuedFrame[] | undefined>;

/**
 * Checks an `Output` against the app's declared tracks and splits each payload into frames
 * (views into the payload's buffer: no copy).
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
  const chunk: Chunk = new Array<QueuedFrame[] | undefined>(def.tracks.length);
  for (const key of Object.keys(output)) {
    const value = (output as unknown as Record<string, unknown>)[key];
    if (value === undefined || value === null) continue;
    const track = def.trackByProperty.get(key);
    if (!track) {
      throw new UnknownTrackError(`${output.constructor.name} has no track "${key}"; declared tracks: ${def.tracks.map((t) => t.property).join(', ')}`);
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
      throw new FrameShapeError(`track ${track.name}: payload is ${describe(value)}; use Frames, TrackPayload or a Uint8Array of RGB bytes`);
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
    // A chunk has one slot per outbound track, in def.tracks order (track.index is the place in schema.tracks, after the inbound tracks).
    chunk[def.tracks.indexOf(track)] = list;
  }
  return chunk;
}

function describe(x: unknown): string {
  if (x === null) return 'null';
  if (typeof x === 'object') return `a ${(x as object).constructor?.name ?? 'object'}`;
  return typeof x;
}
