/**
 * The codec seam: a {@link VideoEncoderFactory} makes one {@link CodedVideoEncoder} per outbound
 * video track and tier. The default factory wraps `@napi-rs/webcodecs` (the WebCodecs API for
 * Node, FFmpeg inside), which is loaded lazily: a server that streams JPEG never loads it, and a
 * missing or broken native binary is reported once, as a `ReactorError` with code `encoder_failed`.
 */
import { endianness } from 'node:os';
import { h264CodecString, type VideoCodecName } from '@reactor/protocol';
import { ReactorError } from '@reactor/runtime';
import { ServerErrorCode } from '../base/errors.js';

/** A codec the server encodes itself (`jpeg` has its own path, {@link FrameEncoder}). */
export type CodedVideoCodec = Exclude<VideoCodecName, 'jpeg'>;

/** What an encoder is created for: one track at one tier of the ladder. */
export interface CodedEncoderConfig {
  codec: CodedVideoCodec;
  /** Coded size (even numbers). */
  width: number;
  height: number;
  /** Target bits per second. */
  bitrate: number;
  /** Frames per second the rate control assumes. */
  framerate: number;
}

/** One encoded frame. */
export interface CodedChunk {
  /** H.264: one Annex B access unit (SPS/PPS in every key frame). VP8: one frame. */
  data: Uint8Array;
  /** Decodes without any earlier frame. */
  key: boolean;
}

/**
 * A video encoder for one track and tier, fed RGB24 frames of its configured size in order. It
 * must produce one chunk per frame, in order, with no frame reordering (no B-frames): the
 * server streams each chunk as soon as it is out.
 */
export interface CodedVideoEncoder {
  /**
   * Encodes one frame; resolves with its chunk (`null` when the encoder skipped the frame).
   * Rejects when the encoder failed: the server then closes it and moves its clients to JPEG.
   * @param rgb `width * height * 3` bytes, read-only, valid until the promise settles.
   * @param timestampUs presentation time, microseconds, strictly increasing.
   * @param keyFrame force a key frame.
   */
  encode(rgb: Uint8Array, timestampUs: number, keyFrame: boolean): Promise<CodedChunk | null>;
  /** The WebCodecs codec string of what it produced so far (`avc1.64001f`, `vp8`), for `video_config`. */
  readonly codecString: string;
  /** Frees the native encoder; pending frames reject. Idempotent. */
  close(): void;
}

/** Makes encoders. May be async (the default one loads its native module on first use). */
export type VideoEncoderFactory = (config: CodedEncoderConfig) => CodedVideoEncoder | Promise<CodedVideoEncoder>;

// The subset of @napi-rs/webcodecs this file uses (the module is loaded lazily and never typed into the public API).
interface NativeChunk {
  readonly type: 'key' | 'delta';
  readonly timestamp: number;
  readonly byteLength: number;
  copyTo(dest: Uint8Array): void;
}
interface NativeFrame {
  close(): void;
}
interface NativeEncoder {
  configure(config: Record<string, unknown>): void;
  encode(frame: NativeFrame, options?: { keyFrame?: boolean }): void;
  close(): void;
  readonly state: string;
}
interface WebCodecsModule {
  VideoEncoder: new (init: { output: (chunk: NativeChunk) => void; error: (err: Error) => void }) => NativeEncoder;
  VideoFrame: new (data: Uint8Array, init: { format: string; codedWidth: number; codedHeight: number; timestamp: number }) => NativeFrame;
}

let loading: Promise<WebCodecsModule> | undefined;

/**
 * Loads `@napi-rs/webcodecs` once (later calls share the result).
 * @throws ReactorError `encoder_failed` when it cannot be loaded (the module or its native binary is missing or does not load here).
 */
export function loadWebCodecs(): Promise<WebCodecsModule> {
  loading ??= import('@napi-rs/webcodecs').then(
    (m) => m as unknown as WebCodecsModule,
    (err: unknown) => {
      throw new ReactorError(
        ServerErrorCode.EncoderFailed,
        `the video encoder (@napi-rs/webcodecs) could not be loaded on this machine: ${(err as Error)?.message?.split('\n')[0] ?? String(err)}. ` +
          'It ships a native binary per platform (linux-x64-gnu here); reinstall with `pnpm install` on this platform, or set video.codec to "jpeg"',
        { cause: err },
      );
    },
  );
  return loading;
}

/** The WebCodecs codec string the encoder is configured with (its real profile is read back from the stream). */
const CONFIG_CODEC: Record<CodedVideoCodec, string> = { h264: 'avc1.42E01F', vp8: 'vp8' };

/**
 * The default factory: `@napi-rs/webcodecs`' `VideoEncoder`. H.264 in Annex B (SPS/PPS in each
 * key frame), VP8; constant bitrate target of the tier.
 * @throws ReactorError `encoder_failed` when the module does not load.
 */
export const webCodecsEncoderFactory: VideoEncoderFactory = async (config) => {
  const wc = await loadWebCodecs();
  return new WebCodecsEncoder(wc, config);
};

interface Pending {
  timestamp: number;
  resolve(chunk: CodedChunk | null): void;
  reject(err: Error): void;
}

/** A frame waiting for the native encoder to finish the one before it. */
interface Waiting extends Pending {
  rgb: Uint8Array;
  keyFrame: boolean;
}

/**
 * How long a frame in the native encoder may go without its chunk before the next frame is
 * handed over anyway (an encoder that skipped it, e.g. VP8 dropping a frame in realtime mode),
 * in frame intervals, and at least MIN_IN_FLIGHT_MS.
 */
const IN_FLIGHT_INTERVALS = 4;
const MIN_IN_FLIGHT_MS = 150;

class WebCodecsEncoder implements CodedVideoEncoder {
  readonly #wc: WebCodecsModule;
  readonly #config: CodedEncoderConfig;
  readonly #native: NativeEncoder;
  /** Frames handed to the native encoder whose chunk has not come out. */
  readonly #pending: Pending[] = [];
  /**
   * Frames not handed over yet. The binding's `encode` call blocks the calling thread (the event
   * loop) while its encoder thread is still encoding the previous frame (measured: 10 ms a call
   * on average at 30 fps when 720p takes longer than a frame interval, up to 160 ms), so a frame
   * goes to it only when the one before it came out (or after IN_FLIGHT_INTERVALS). x264 with
   * `zerolatency` (no look-ahead, no B-frames) and VP8 realtime work on one frame at a time
   * anyway: nothing is lost by not queueing inside the binding.
   */
  readonly #waiting: Waiting[] = [];
  #inFlight: NodeJS.Timeout | undefined;
  /** RGBX staging buffer (the native frame takes 4 bytes a pixel). */
  readonly #rgbx: Uint8Array;
  #failed: Error | undefined;
  #closed = false;
  codecString: string;

  constructor(wc: WebCodecsModule, config: CodedEncoderConfig) {
    this.#wc = wc;
    this.#config = config;
    this.codecString = config.codec === 'h264' ? CONFIG_CODEC.h264 : 'vp8';
    this.#rgbx = new Uint8Array(config.width * config.height * 4).fill(255);
    this.#native = new wc.VideoEncoder({ output: (c) => this.#output(c), error: (e) => this.#fail(e) });
    // latencyMode 'realtime' of this binding makes (nearly) every H.264 frame an IDR frame; its
    // default mode emits no B-frames either (one chunk out per frame in, in order), so H.264
    // keeps it. VP8 takes 'realtime' (no look-ahead).
    this.#native.configure({
      codec: CONFIG_CODEC[config.codec],
      width: config.width,
      height: config.height,
      bitrate: config.bitrate,
      framerate: config.framerate,
      bitrateMode: 'variable',
      ...(config.codec === 'h264' ? { avc: { format: 'annexb' } } : { latencyMode: 'realtime' }),
    });
  }

  encode(rgb: Uint8Array, timestampUs: number, keyFrame: boolean): Promise<CodedChunk | null> {
    if (this.#failed) return Promise.reject(this.#failed);
    if (this.#closed) return Promise.reject(new Error('the encoder is closed'));
    const { width, height } = this.#config;
    if (rgb.byteLength !== width * height * 3) {
      return Promise.reject(new RangeError(`frame of ${rgb.byteLength} bytes; ${width}x${height} RGB needs ${width * height * 3}`));
    }
    return new Promise<CodedChunk | null>((resolve, reject) => {
      this.#waiting.push({ rgb, timestamp: timestampUs, keyFrame, resolve, reject });
      this.#next();
    });
  }

  /** Hands the next waiting frame to the native encoder when none is in it. */
  #next(): void {
    if (this.#inFlight !== undefined || this.#closed) return;
    const w = this.#waiting.shift();
    if (!w) return;
    const { width, height, framerate } = this.#config;
    const rgbx = this.#rgbx;
    rgbToRgbx(w.rgb, rgbx);
    this.#pending.push(w);
    this.#inFlight = setTimeout(() => this.#released(), Math.max(MIN_IN_FLIGHT_MS, (IN_FLIGHT_INTERVALS * 1000) / Math.max(1, framerate)));
    let frame: NativeFrame | undefined;
    try {
      frame = new this.#wc.VideoFrame(rgbx, { format: 'RGBX', codedWidth: width, codedHeight: height, timestamp: w.timestamp });
      this.#native.encode(frame, { keyFrame: w.keyFrame });
    } catch (err) {
      this.#fail(err as Error);
    } finally {
      frame?.close();
    }
  }

  /** The frame in the native encoder is out (or overdue): the next one may go. */
  #released(): void {
    clearTimeout(this.#inFlight);
    this.#inFlight = undefined;
    this.#next();
  }

  #output(chunk: NativeChunk): void {
    const data = new Uint8Array(chunk.byteLength);
    chunk.copyTo(data);
    const key = chunk.type === 'key';
    if (key && this.#config.codec === 'h264') this.codecString = avcCodecString(data) ?? this.codecString;
    // Frames the encoder skipped (none expected: no frame dropping is configured) resolve as null.
    while (this.#pending.length > 0 && this.#pending[0]!.timestamp < chunk.timestamp) this.#pending.shift()!.resolve(null);
    const p = this.#pending.shift();
    p?.resolve({ data, key });
    this.#released();
  }

  #fail(err: Error): void {
    this.#failed ??= err instanceof Error ? err : new Error(String(err));
    for (const p of [...this.#pending.splice(0), ...this.#waiting.splice(0)]) p.reject(this.#failed);
    this.close();
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#inFlight);
    this.#inFlight = undefined;
    for (const p of [...this.#pending.splice(0), ...this.#waiting.splice(0)]) p.reject(this.#failed ?? new Error('the encoder was closed'));
    try {
      if (this.#native.state !== 'closed') this.#native.close();
    } catch {
      // Already closed by an error.
    }
  }
}

const LITTLE_ENDIAN = endianness() === 'LE';

/**
 * Copies RGB24 pixels into an RGBX buffer (4 bytes a pixel, X = 255). A 720p frame is 0.9 M
 * pixels on the event loop for every encoded frame, so the aligned little-endian case goes four
 * pixels at a time as 32-bit words (3 words in, 4 out: about 3x faster than byte by byte); a
 * frame whose bytes do not start on a 4-byte boundary, and the last pixels of one whose pixel
 * count is not a multiple of 4, go byte by byte.
 * @param rgb `n * 3` bytes.
 * @param rgbx `n * 4` bytes.
 */
export function rgbToRgbx(rgb: Uint8Array, rgbx: Uint8Array): void {
  let i = 0;
  let o = 0;
  if (LITTLE_ENDIAN && rgb.byteOffset % 4 === 0 && rgbx.byteOffset % 4 === 0) {
    const words = Math.floor(rgb.length / 12) * 3;
    const src = new Uint32Array(rgb.buffer, rgb.byteOffset, words);
    const dst = new Uint32Array(rgbx.buffer, rgbx.byteOffset, (words / 3) * 4);
    // Little-endian words, lowest byte first: a = R0 G0 B0 R1, b = G1 B1 R2 G2, c = B2 R3 G3 B3; X (0xff) is each out word's top byte.
    for (let w = 0, d = 0; w < words; w += 3, d += 4) {
      const a = src[w]!;
      const b = src[w + 1]!;
      const c = src[w + 2]!;
      dst[d] = a | 0xff000000;
      dst[d + 1] = (a >>> 24) | (b << 8) | 0xff000000;
      dst[d + 2] = (b >>> 16) | (c << 16) | 0xff000000;
      dst[d + 3] = (c >>> 8) | 0xff000000;
    }
    i = words * 4;
    o = (words / 3) * 16;
  }
  for (; i < rgb.length; i += 3, o += 4) {
    rgbx[o] = rgb[i]!;
    rgbx[o + 1] = rgb[i + 1]!;
    rgbx[o + 2] = rgb[i + 2]!;
    rgbx[o + 3] = 255;
  }
}

/**
 * `avc1.PPCCLL` from the SPS of an Annex B access unit (profile, constraint flags, level), or
 * undefined when it carries none. A level browsers do not parse (1b as 9) is named as the next
 * one they do ({@link h264CodecString}).
 */
export function avcCodecString(au: Uint8Array): string | undefined {
  for (let i = 0; i + 6 < au.length; i++) {
    if (au[i] === 0 && au[i + 1] === 0 && au[i + 2] === 1 && (au[i + 3]! & 0x1f) === 7) {
      const hex = (b: number): string => b.toString(16).padStart(2, '0');
      return h264CodecString(`avc1.${hex(au[i + 4]!)}${hex(au[i + 5]!)}${hex(au[i + 6]!)}`);
    }
  }
  return undefined;
}
