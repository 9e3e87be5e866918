import { DecoratorMisuseError, FrameShapeError } from '../errors/errors.js';
import { Input } from '../input/input.js';
import { type AudioTrackOptions, type VideoTrackOptions, recordTrack } from '../metadata/keys.js';

/**
 * A batch of RGB frames with its shape `(n, height, width, 3)`: `data.length` must equal
 * `n * height * width * 3`.
 *
 * Ownership of `data` passes to the runtime when the batch is returned from a step: frames are
 * handed to clients as views into it, without a copy, and may be encoded later. Do not write to
 * it afterwards; a model that reuses one buffer per step should return `data.slice()`.
 */
export class Frames {
  readonly n: number;
  readonly height: number;
  readonly width: number;
  /**
   * @param data RGB24 bytes, frame after frame, row after row.
   * @param shape `[n, height, width, 3]`.
   * @throws FrameShapeError (`frame_shape`) when the shape is not positive integers ending in 3, or `data.length` does not match it.
   */
  constructor(
    readonly data: Uint8Array,
    shape: readonly [number, number, number, number],
  ) {
    if (!(data instanceof Uint8Array)) throw new FrameShapeError(`frames must be a Uint8Array of RGB bytes, got ${describe(data)}`);
    if (!Array.isArray(shape) || shape.length !== 4) throw new FrameShapeError(`frame shape must be [n, height, width, 3], got ${JSON.stringify(shape)}`);
    const [n, height, width, channels] = shape;
    if (![n, height, width].every((x) => Number.isInteger(x) && x > 0) || channels !== 3) {
      throw new FrameShapeError(`frame shape must be [n, height, width, 3] with positive integers, got ${JSON.stringify(shape)}`);
    }
    if (data.length !== n * height * width * 3) {
      throw new FrameShapeError(`frame shape [${n}, ${height}, ${width}, 3] needs ${n * height * width * 3} bytes, but the array has ${data.length}`);
    }
    this.n = n;
    this.height = height;
    this.width = width;
  }
}

/** Options of {@link TrackPayload}. */
export interface TrackPayloadOptions {
  /** Frame size, when `frames` is a bare `Uint8Array` and the track does not declare one. */
  width?: number;
  height?: number;
  /** One metadata value for the whole batch (attached to each of its frames). */
  metadata?: unknown;
  /** One metadata value per frame (length must equal the frame count). */
  frameMetadata?: readonly unknown[];
}

/**
 * A frame batch with metadata (and, for bare bytes, the frame size).
 *
 * @example
 * new TrackPayload(new Frames(rgb, [4, 256, 256, 3]), { metadata: { chunk: 7 } })
 * new TrackPayload(rgb, { width: 256, height: 256 })
 */
export class TrackPayload {
  constructor(
    readonly frames: Frames | Uint8Array,
    readonly options: TrackPayloadOptions = {},
  ) {}
}

/** What a video track accepts: a shaped batch, a payload with options, or bare RGB bytes (the track must then declare its size). */
export type Video = Frames | TrackPayload | Uint8Array;

/**
 * Declares a video track: on an {@link Output} subclass, a track the app streams; on an
 * {@link Input} subclass, a track clients publish to the app (wire name: the field in
 * snake_case).
 *
 * @example
 * class VideoOutput extends Output {
 *   @Video() mainVideo?: Video;
 * }
 */
export function Video(options: VideoTrackOptions = {}): PropertyDecorator {
  return (target, key) => {
    checkTrackTarget('@Video', target, key);
    recordTrack(target, { property: key as string, kind: 'video', options: { ...options } });
  };
}

/** What an audio track accepts: mono signed 16-bit PCM samples at the track's `sampleRate`. */
export type Audio = Int16Array;

/**
 * Declares an audio track (mono s16 PCM, default 48 kHz): on an {@link Output} subclass, audio
 * the app streams, paced with the video; on an {@link Input} subclass, a microphone clients
 * publish.
 *
 * @example
 * class AvOutput extends Output {
 *   @Video() mainVideo?: Video;
 *   @Audio({ sampleRate: 48000 }) soundtrack?: Audio;
 * }
 */
export function Audio(options: AudioTrackOptions = {}): PropertyDecorator {
  return (target, key) => {
    checkTrackTarget('@Audio', target, key);
    recordTrack(target, { property: key as string, kind: 'audio', options: { ...options } });
  };
}

function checkTrackTarget(name: string, target: object, key: string | symbol): void {
  if (typeof target === 'function') throw new DecoratorMisuseError(`${name} cannot decorate static member ${target.name}.${String(key)}`);
  if (typeof key !== 'string') throw new DecoratorMisuseError(`${name} needs a string property name`);
  if (!(target instanceof Output) && !(target instanceof Input)) {
    throw new DecoratorMisuseError(`${name} declares tracks on Output or Input subclasses; ${target.constructor.name} extends neither`);
  }
}

type TrackKeys<T> = { [K in keyof T]-?: NonNullable<T[K]> extends Video | Audio ? K : never }[keyof T];
/** The payload object an Output subclass is built from. */
export type OutputInit<T> = { [K in TrackKeys<T>]?: T[K] };

/**
 * One step's media: extend it, declare tracks with `@Video()`, and return an instance from
 * `processOutput()` (or from `generate()` when the default `processOutput` is used).
 *
 * @example
 * return new VideoOutput({ mainVideo: new Frames(rgb, [n, 256, 256, 3]) });
 * return VideoOutput.of({ mainVideo: frames }); // typed track names
 */
export class Output {
  #inputStep: number | undefined;

  constructor(payloads?: Record<string, Video | Audio | undefined>) {
    if (payloads !== undefined) Object.assign(this, payloads);
  }

  /**
   * The step whose input these frames show (its `StepOutcome.step`), for a model whose output
   * lags its input: a pipelined worker that returns the previous call's frames sets
   * `outcome.step - 1`. The `applied` acknowledgements then name the first frame that really
   * shows a command. Default (undefined): this step.
   * @throws RangeError for a value that is not a non-negative integer.
   */
  get inputStep(): number | undefined {
    return this.#inputStep;
  }

  set inputStep(step: number | undefined) {
    if (step !== undefined && !(Number.isInteger(step) && step >= 0))
      throw new RangeError(`Output.inputStep must be a non-negative integer step number, got ${String(step)}`);
    this.#inputStep = step;
  }

  /** Typed construction: only declared track fields are accepted. */
  static of<T extends Output>(this: new (payloads?: Record<string, Video | Audio | undefined>) => T, payloads: OutputInit<T>): T {
    return new this(payloads as Record<string, Video | Audio | undefined>);
  }
}

function describe(x: unknown): string {
  if (x === null) return 'null';
  if (typeof x === 'object') return (x as object).constructor?.name ?? 'object';
  return typeof x;
}
