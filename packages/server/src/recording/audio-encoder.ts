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

/**
 * Largest gap in the sound that is filled with silence, µs. Longer gaps (a session left without
 * a client for minutes) are not encoded: the packets after one are stamped past it, so the track
 * has a hole there, as the picture has a frozen frame.
 */
export const MAX_SILENCE_FILL_US = 60_000_000;

/**
 * A jump of the played-out pts ahead of the sound's own count of samples larger than this is a
 * gap (filled with silence); smaller ones are rounding of the pieces' boundaries, µs. One AAC
 * frame at 48 kHz: the sound stays within it of the picture.
 */
const GAP_TOLERANCE_US = 20_000;

/** Silence is handed to the encoder in pieces of this many samples at most. */
const SILENCE_PIECE = 8192;

/** Where a run of contiguous samples starts: its first sample's index and its pts on the session clock. */
interface Segment {
  readonly sample: number;
  readonly ptsUs: number;
}

/**
 * Encodes one audio track; units come out in order through `onUnit`.
 *
 * FFmpeg's AAC encoder (as `@napi-rs/webcodecs` drives it) stamps its packets from the first
 * input timestamp and the samples counted since, ignoring every later input timestamp: across a
 * gap in the stream its packets would run on as if there were none, minutes behind the picture
 * (issue 43). So the timeline is kept here: the encoder is fed one contiguous count of samples,
 * gaps up to {@link MAX_SILENCE_FILL_US} are filled with silence, and each packet's pts is
 * mapped back from its sample index to the session clock through the segments fed.
 */
export class AacEncoder {
  readonly sampleRate: number;
  readonly #native: NativeAudioEncoder;
  readonly #wc: AudioModule;
  #config: AudioStreamConfig | undefined;
  #failed: Error | undefined;
  /** The encoder's own timestamp of its first sample (the first chunk's pts). */
  #baseUs: number | undefined;
  /** Samples fed so far (silence included). */
  #samples = 0;
  /** Runs of contiguous samples fed, oldest first (the first still needed by a packet to come at the front). */
  readonly #segments: Segment[] = [];

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
        onUnit({ data, ptsUs: this.#ptsOf(chunk.timestamp), durationUs: chunk.duration ?? Math.round((1024 * 1e6) / sampleRate) }, this.#config);
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

  /** The pts the next sample fed would play at on the current segment, µs (undefined before the first chunk). */
  get nextUs(): number | undefined {
    const seg = this.#segments[this.#segments.length - 1];
    return seg && seg.ptsUs + ((this.#samples - seg.sample) * 1e6) / this.sampleRate;
  }

  /**
   * Encodes a chunk played at `ptsUs`. Chunks within {@link GAP_TOLERANCE_US} of where the sound
   * has got to are taken as contiguous (exact timestamps, no rounding drift); a later one is a
   * gap: filled with silence, or, past {@link MAX_SILENCE_FILL_US}, a new segment. A chunk that
   * starts earlier than the sound has got to (an app that gives more sound than its frames
   * last) stays contiguous: packets never go back in time.
   */
  encode(pcm: Int16Array, ptsUs: number): void {
    if (this.#failed || pcm.length === 0) return;
    this.#jumpTo(ptsUs);
    this.#feed(pcm);
  }

  /**
   * Plays silence up to `ptsUs` when the sound has fallen behind it by more than `slackUs` (a
   * stretch where the app sends no sound): a recording's muxer interleaves by time and would
   * hold every fragment back until the sound catches up.
   */
  padTo(ptsUs: number, slackUs: number): void {
    if (this.#failed) return;
    const next = this.nextUs;
    // The first frame starts the sound's timeline, whether sound comes with it or not.
    if (next === undefined || ptsUs - next > slackUs) this.#jumpTo(ptsUs);
  }

  #jumpTo(ptsUs: number): void {
    const next = this.nextUs;
    if (next === undefined) {
      this.#baseUs = ptsUs;
      this.#segments.push({ sample: 0, ptsUs });
      return;
    }
    const gap = ptsUs - next;
    if (gap <= GAP_TOLERANCE_US) return;
    if (gap <= MAX_SILENCE_FILL_US) {
      let n = Math.round((gap * this.sampleRate) / 1e6);
      const zeros = new Int16Array(Math.min(n, SILENCE_PIECE));
      while (n > 0 && !this.#failed) {
        const k = Math.min(n, zeros.length);
        this.#feed(k === zeros.length ? zeros : zeros.subarray(0, k));
        n -= k;
      }
    } else {
      this.#segments.push({ sample: this.#samples, ptsUs });
    }
  }

  #feed(pcm: Int16Array): void {
    const data = new this.#wc.AudioData({
      format: 's16',
      sampleRate: this.sampleRate,
      numberOfFrames: pcm.length,
      numberOfChannels: 1,
      // One contiguous count: what the encoder stamps its packets with in any case.
      timestamp: Math.round(this.#baseUs! + (this.#samples * 1e6) / this.sampleRate),
      data: pcm,
    });
    this.#samples += pcm.length;
    try {
      this.#native.encode(data);
    } finally {
      data.close();
    }
  }

  /** The session-clock pts of the packet the encoder stamped `encoderUs` (its own contiguous count). */
  #ptsOf(encoderUs: number): number {
    const sample = Math.round(((encoderUs - this.#baseUs!) * this.sampleRate) / 1e6);
    // Packets come out in order: segments wholly before this one are done with.
    while (this.#segments.length > 1 && this.#segments[1]!.sample <= sample) this.#segments.shift();
    const seg = this.#segments[0]!;
    return Math.round(seg.ptsUs + ((sample - seg.sample) * 1e6) / this.sampleRate);
  }

  close(): void {
    try {
      if (this.#native.state !== 'closed') this.#native.close();
    } catch {
      // Closed by an error already.
    }
  }
}
