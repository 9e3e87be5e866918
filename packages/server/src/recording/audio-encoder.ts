/**
 * AAC-LC for the clip ring and recordings: one encoder per outbound audio track, fed the mono
 * s16 PCM chunks as they are played out, through `@napi-rs/webcodecs`' `AudioEncoder` (FFmpeg's
 * AAC encoder inside). AAC, not Opus: AAC in MP4 plays in every browser's `<video>` (Safari
 * included) and in every desktop player; Opus in MP4 does not everywhere (docs/decisions.md).
 */
import type { AudioStreamConfig } from './mp4.js';
import type { AudioUnit } from './media-ring.js';

// The subset of @napi-rs/webcodecs used here (loaded lazily, as video-encoder.ts does).
interface NativeAudioChunk {
  readonly timestamp: number;
  readonly duration: number | null;
  readonly byteLength: number;
  copyTo(dest: Uint8Array): void;
}
interface NativeAudioEncoder {
  configure(config: Record<string, unknown>): void;
  encode(data: { close(): void }): void;
  flush(): Promise<void>;
  close(): void;
  readonly state: string;
}
interface AudioModule {
  AudioEncoder: new (init: {
    output: (chunk: NativeAudioChunk, meta?: { decoderConfig?: { description?: ArrayBufferView | ArrayBuffer; sampleRate?: number } }) => void;
    error: (err: Error) => void;
  }) => NativeAudioEncoder;
  AudioData: new (init: { format: string; sampleRate: number; numberOfFrames: number; numberOfChannels: number; timestamp: number; data: Int16Array }) => {
    close(): void;
  };
}

/** Bits per second of the AAC stream (mono). */
export const AAC_BITRATE = 96_000;

/** Encodes one audio track; units come out in order through `onUnit`. */
export class AacEncoder {
  readonly sampleRate: number;
  readonly #native: NativeAudioEncoder;
  readonly #wc: AudioModule;
  #config: AudioStreamConfig | undefined;
  #failed: Error | undefined;
  #nextUs: number | undefined;

  constructor(wc: unknown, sampleRate: number, onUnit: (u: AudioUnit, config: AudioStreamConfig) => void, onError: (err: Error) => void) {
    this.#wc = wc as AudioModule;
    this.sampleRate = sampleRate;
    this.#native = new this.#wc.AudioEncoder({
      output: (chunk, meta) => {
        const desc = meta?.decoderConfig?.description;
        if (desc && !this.#config) {
          const bytes =
            desc instanceof ArrayBuffer ? new Uint8Array(desc.slice(0)) : new Uint8Array(desc.buffer.slice(desc.byteOffset, desc.byteOffset + desc.byteLength));
          this.#config = { codec: 'mp4a.40.2', sampleRate, numberOfChannels: 1, description: bytes };
        }
        if (!this.#config) return;
        const data = new Uint8Array(chunk.byteLength);
        chunk.copyTo(data);
        onUnit({ data, ptsUs: chunk.timestamp, durationUs: chunk.duration ?? Math.round((1024 * 1e6) / sampleRate) }, this.#config);
      },
      error: (err) => {
        this.#failed ??= err;
        onError(err);
      },
    });
    this.#native.configure({ codec: 'mp4a.40.2', sampleRate, numberOfChannels: 1, bitrate: AAC_BITRATE });
  }

  /** The stream's decoder config, once the first packet is out. */
  get config(): AudioStreamConfig | undefined {
    return this.#config;
  }

  /**
   * Encodes a chunk played at `ptsUs`. Chunks are stamped back to back from the first one
   * (a gap of more than 100 ms restarts the count), so AAC frames get exact timestamps.
   */
  encode(pcm: Int16Array, ptsUs: number): void {
    if (this.#failed || pcm.length === 0) return;
    const expected = this.#nextUs;
    const ts = expected !== undefined && Math.abs(ptsUs - expected) < 100_000 ? expected : ptsUs;
    this.#nextUs = ts + (pcm.length * 1e6) / this.sampleRate;
    const data = new this.#wc.AudioData({
      format: 's16',
      sampleRate: this.sampleRate,
      numberOfFrames: pcm.length,
      numberOfChannels: 1,
      timestamp: Math.round(ts),
      data: pcm,
    });
    try {
      this.#native.encode(data);
    } finally {
      data.close();
    }
  }

  close(): void {
    try {
      if (this.#native.state !== 'closed') this.#native.close();
    } catch {
      // Closed by an error already.
    }
  }
}
