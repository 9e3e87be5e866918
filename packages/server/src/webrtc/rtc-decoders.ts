/**
 * The decoders of media that arrives over WebRTC: `@napi-rs/webcodecs`' `VideoDecoder` (VP8,
 * H.264) and `AudioDecoder` (Opus), loaded lazily like the encoder (`video-encoder.ts`), and a
 * streaming resampler (libsamplerate, WebAssembly) for microphones whose track declares another
 * rate than Opus' 48 kHz. Only the subset of each module this server uses is typed here.
 */
import { ReactorError } from '@reactor/runtime';
import { ServerErrorCode } from '../base/errors.js';

/** A codec of an inbound WebRTC track the server decodes. */
export type RtcInboundCodec = 'vp8' | 'h264' | 'opus';

/** The codec of an SDP `mimeType` (`video/VP8`, `video/H264`, `audio/opus`, any case), or `undefined`. */
export function rtcInboundCodec(mimeType: string): RtcInboundCodec | undefined {
  switch (mimeType.toLowerCase()) {
    case 'video/vp8':
      return 'vp8';
    case 'video/h264':
      return 'h264';
    case 'audio/opus':
      return 'opus';
    default:
      return undefined;
  }
}

/** Opus always runs at 48 kHz on the wire (RFC 7587). */
export const OPUS_RATE = 48_000;

// ---- @napi-rs/webcodecs, decoding side --------------------------------------------------------

export interface NativeVideoFrame {
  readonly codedWidth: number;
  readonly codedHeight: number;
  readonly displayWidth: number;
  readonly displayHeight: number;
  readonly timestamp: number;
  allocationSize(options: { format: 'RGBA' }): number;
  copyTo(dest: Uint8Array, options: { format: 'RGBA' }): Promise<unknown>;
  close(): void;
}

export interface NativeAudioData {
  readonly numberOfFrames: number;
  readonly numberOfChannels: number;
  readonly sampleRate: number;
  readonly timestamp: number;
  readonly format: string | null;
  copyTo(dest: Float32Array, options: { planeIndex: number; format?: 'f32-planar' }): void;
  close(): void;
}

interface NativeDecoder<Config> {
  configure(config: Config): void;
  decode(chunk: unknown): void;
  close(): void;
  readonly state: string;
  readonly decodeQueueSize: number;
}

export type NativeVideoDecoder = NativeDecoder<{ codec: string; optimizeForLatency?: boolean }>;
export type NativeAudioDecoder = NativeDecoder<{ codec: string; sampleRate: number; numberOfChannels: number }>;

export interface WebCodecsDecoding {
  VideoDecoder: new (init: { output: (frame: NativeVideoFrame) => void; error: (err: Error) => void }) => NativeVideoDecoder;
  AudioDecoder: new (init: { output: (data: NativeAudioData) => void; error: (err: Error) => void }) => NativeAudioDecoder;
  EncodedVideoChunk: new (init: { type: 'key' | 'delta'; timestamp: number; data: Uint8Array }) => unknown;
  EncodedAudioChunk: new (init: { type: 'key'; timestamp: number; data: Uint8Array }) => unknown;
}

let decoding: Promise<WebCodecsDecoding> | undefined;

/**
 * Loads `@napi-rs/webcodecs` for decoding, once.
 * @throws ReactorError `undecodable_frame` when it cannot be loaded here (its native binary is missing).
 */
export function loadDecoders(): Promise<WebCodecsDecoding> {
  decoding ??= import('@napi-rs/webcodecs').then(
    (m) => m as unknown as WebCodecsDecoding,
    (err: unknown) => {
      throw new ReactorError(
        ServerErrorCode.UndecodableFrame,
        `the WebRTC media decoder (@napi-rs/webcodecs) could not be loaded on this machine: ${(err as Error)?.message?.split('\n')[0] ?? String(err)}; ` +
          'reinstall with `pnpm install` on this platform, or publish over the WebSocket (`publish` without `"transport":"webrtc"`)',
        { cause: err },
      );
    },
  );
  return decoding;
}

// ---- resampling -------------------------------------------------------------------------------

/** A streaming mono resampler: keeps its filter state between chunks. */
export interface Resampler {
  /** Resamples one chunk (float samples in [-1, 1]); the output may be a few samples shorter at first (filter delay). */
  push(samples: Float32Array): Float32Array;
  destroy(): void;
}

interface SrcModule {
  create(
    channels: number,
    inRate: number,
    outRate: number,
    options: { converterType: number },
  ): Promise<{ full(data: Float32Array): Float32Array; destroy(): void }>;
  ConverterType: { SRC_SINC_MEDIUM_QUALITY: number };
}

/** A libsamplerate converter from `inRate` to `outRate` (sinc, medium quality: ~0.4 ms per 20 ms chunk). */
export async function createResampler(inRate: number, outRate: number): Promise<Resampler> {
  // A CommonJS module: its functions are on the default export.
  const mod = (await import('@alexanderolsen/libsamplerate-js')) as unknown as Partial<SrcModule> & { default?: SrcModule };
  const src = (mod.create ? mod : mod.default!) as SrcModule;
  const s = await src.create(1, inRate, outRate, { converterType: src.ConverterType.SRC_SINC_MEDIUM_QUALITY });
  return { push: (samples) => s.full(samples), destroy: () => s.destroy() };
}

/** Float samples in [-1, 1] to s16 (clamped). */
export function floatToS16(f: Float32Array): Int16Array {
  const out = new Int16Array(f.length);
  for (let i = 0; i < f.length; i++) {
    const v = Math.max(-1, Math.min(1, f[i]!));
    out[i] = v < 0 ? Math.round(v * 0x8000) : Math.round(v * 0x7fff);
  }
  return out;
}
