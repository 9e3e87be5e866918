/** What an inbound frame carries: video as RGB24 bytes, audio as mono signed 16-bit PCM. */
export type InputData = Uint8Array | Int16Array;

/** The fields of an {@link InputFrame}, as `new InputFrame(init)` takes them. */
export interface InputFrameInit<D extends InputData = InputData> {
  /** Video: RGB24, `height * width * 3` bytes, row after row. Audio: mono PCM samples. */
  readonly data: D;
  /** Video only: frame size in pixels. */
  readonly width?: number;
  readonly height?: number;
  /** Audio only: samples per second. */
  readonly sampleRate?: number;
  /** The client's capture time, ms, on the client's clock (default 0). */
  readonly ptsMs?: number;
  /** `performance.now()` when the frame reached the server (default: now). */
  readonly receivedAtMs?: number;
  /** What the client sent with the frame, if anything. */
  readonly metadata?: unknown;
}

/**
 * One frame of an inbound track, as `InputBuffer.read()` returns it: a camera frame (`data`
 * RGB24, `width`, `height`) or a chunk of microphone audio (`data` mono PCM, `sampleRate`).
 *
 * The host builds one per frame a client publishes; an app's tests may build their own to fill
 * a buffer (`buffer.push(new InputFrame({ data, width, height }))`).
 *
 * @typeParam D `Uint8Array` for video tracks, `Int16Array` for audio tracks.
 * @example
 * const [frame] = await this.input.webcam.read();
 * const rgb = frame.data; // frame.height * frame.width * 3 bytes
 */
export class InputFrame<D extends InputData = InputData> {
  readonly data: D;
  /** Video: width in pixels; `undefined` for audio. */
  readonly width: number | undefined;
  /** Video: height in pixels; `undefined` for audio. */
  readonly height: number | undefined;
  /** Audio: samples per second; `undefined` for video. */
  readonly sampleRate: number | undefined;
  /** The client's capture time, ms, on the client's clock. */
  readonly ptsMs: number;
  /** `performance.now()` on the server when the frame arrived (compare it with `performance.now()` for the frame's age). */
  readonly receivedAtMs: number;
  /** The client's metadata for this frame, if any. */
  readonly metadata: unknown;

  constructor(init: InputFrameInit<D>) {
    this.data = init.data;
    this.width = init.width;
    this.height = init.height;
    this.sampleRate = init.sampleRate;
    this.ptsMs = init.ptsMs ?? 0;
    this.receivedAtMs = init.receivedAtMs ?? performance.now();
    this.metadata = init.metadata;
  }
}
