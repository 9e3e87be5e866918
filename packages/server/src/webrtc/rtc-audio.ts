/**
 * Opus for WebRTC viewers: one encoder per outbound audio track (`@napi-rs/webcodecs`'
 * `AudioEncoder`, libopus inside), fed once per played-out chunk whatever the number of viewers,
 * its packets fanned out to every WebRTC viewer of the track. The app's mono PCM is cut into
 * 20 ms frames; Opus takes 8, 12, 16, 24 or 48 kHz, any other rate is resampled (linear) to 48
 * kHz. RTP timestamps run at 48 kHz (RFC 7587) from the track's sample count, and jump with the
 * played-out pts across a gap (an underrun, a stall, a session left without a client), so that
 * they stay on the video's clock (its RTP timestamps are its pts): the receiver lines both up by
 * them. The encoder stamps its packets from its own count whatever it is given, so each packet
 * gets the timestamp kept here for its input frame.
 */
import type { Logger } from '@reactor/log';
import type { OutputAudio } from '@reactor/runtime';
import { loadWebCodecs } from '../video/video-encoder.js';

/** One Opus packet (20 ms). */
export interface OpusPacket {
  data: Uint8Array;
  /** RTP timestamp, 48 kHz units since the track's first sample. */
  timestamp48k: number;
}

/** Opus bitrate of a mono track. */
const OPUS_BITRATE = 48_000;
const OPUS_RATES = new Set([8000, 12000, 16000, 24000, 48000]);
/** One Opus frame, µs: a pts jump longer than this is a gap the RTP timestamps jump over. */
const OPUS_FRAME_US = 20_000;

// The subset of @napi-rs/webcodecs used here.
interface NativeAudioChunk {
  readonly timestamp: number;
  readonly byteLength: number;
  copyTo(dest: Uint8Array): void;
}
interface NativeAudioEncoder {
  configure(config: Record<string, unknown>): void;
  encode(data: { close(): void }): void;
  close(): void;
  readonly state: string;
}
interface AudioModule {
  AudioEncoder: new (init: { output: (c: NativeAudioChunk) => void; error: (e: Error) => void }) => NativeAudioEncoder;
  AudioData: new (init: { format: string; sampleRate: number; numberOfFrames: number; numberOfChannels: number; timestamp: number; data: Int16Array }) => {
    close(): void;
  };
}

type Listener = (p: OpusPacket) => void;

class TrackOpus {
  readonly #listeners = new Set<Listener>();
  #encoder: NativeAudioEncoder | undefined;
  #rate = 0;
  #inRate = 0;
  /** RTP timestamp (48 kHz) of the next sample handed to the encoder. */
  #rtpNext = 0;
  /** The pts the next sample received plays at, µs (undefined before the first chunk). */
  #ptsNextUs: number | undefined;
  /** The RTP timestamps of the frames handed to the encoder whose packet is not out yet, in order. */
  #stamps: number[] = [];
  #lastStamp = 0;
  #carry = new Int16Array(0);
  #failed = false;
  readonly #wc: AudioModule;
  readonly #log: Logger;
  readonly #track: string;

  constructor(wc: AudioModule, track: string, log: Logger) {
    this.#wc = wc;
    this.#track = track;
    this.#log = log;
  }

  get listeners(): number {
    return this.#listeners.size;
  }

  add(l: Listener): void {
    this.#listeners.add(l);
  }

  remove(l: Listener): void {
    this.#listeners.delete(l);
    if (this.#listeners.size === 0) this.close();
  }

  feed(chunk: OutputAudio): void {
    if (this.#failed) return;
    if (!this.#encoder || chunk.sampleRate !== this.#inRate) this.#open(chunk.sampleRate);
    const enc = this.#encoder;
    if (!enc) return;
    const pcm = this.#inRate === this.#rate ? chunk.pcm : resample(chunk.pcm, this.#inRate, this.#rate);
    const frame = this.#rate / 50;
    const ptsUs = chunk.ptsMs * 1000;
    const gapUs = this.#ptsNextUs === undefined ? 0 : ptsUs - this.#ptsNextUs;
    if (gapUs > OPUS_FRAME_US) {
      // A gap: what is left of the sound before it is played out (padded to a frame), and the timestamps jump over it.
      if (this.#carry.length > 0) {
        const last = new Int16Array(frame);
        last.set(this.#carry);
        this.#carry = new Int16Array(0);
        if (!this.#encode(enc, last)) return;
      }
      this.#rtpNext += Math.round((gapUs * 48000) / 1e6);
    }
    this.#ptsNextUs = ptsUs + (chunk.pcm.length * 1e6) / this.#inRate;
    const all = new Int16Array(this.#carry.length + pcm.length);
    all.set(this.#carry, 0);
    all.set(pcm, this.#carry.length);
    let off = 0;
    for (; off + frame <= all.length; off += frame) if (!this.#encode(enc, all.slice(off, off + frame))) return;
    this.#carry = all.slice(off);
  }

  /** Hands one 20 ms frame to the encoder; false once it failed. */
  #encode(enc: NativeAudioEncoder, samples: Int16Array): boolean {
    const stamp = this.#rtpNext;
    this.#rtpNext += (samples.length * 48000) / this.#rate;
    try {
      const data = new this.#wc.AudioData({
        format: 's16',
        sampleRate: this.#rate,
        numberOfFrames: samples.length,
        numberOfChannels: 1,
        timestamp: Math.round((stamp * 1_000_000) / 48000),
        data: samples,
      });
      this.#stamps.push(stamp);
      enc.encode(data);
      data.close();
      return true;
    } catch (err) {
      this.#fail(err as Error);
      return false;
    }
  }

  #open(inRate: number): void {
    this.close();
    this.#inRate = inRate;
    this.#rate = OPUS_RATES.has(inRate) ? inRate : 48000;
    this.#rtpNext = 0;
    this.#ptsNextUs = undefined;
    this.#stamps = [];
    this.#lastStamp = 0;
    this.#carry = new Int16Array(0);
    const rate = this.#rate;
    try {
      const enc = new this.#wc.AudioEncoder({
        output: (c) => {
          const data = new Uint8Array(c.byteLength);
          c.copyTo(data);
          // One packet per frame, in order (a packet more at a flush, which never comes here: one frame on).
          const stamp = this.#stamps.shift() ?? this.#lastStamp + 960;
          this.#lastStamp = stamp;
          const p = { data, timestamp48k: Math.round(stamp) };
          for (const l of this.#listeners) l(p);
        },
        error: (e) => this.#fail(e),
      });
      enc.configure({ codec: 'opus', sampleRate: rate, numberOfChannels: 1, bitrate: OPUS_BITRATE });
      this.#encoder = enc;
    } catch (err) {
      this.#fail(err as Error);
    }
  }

  #fail(err: Error): void {
    if (this.#failed) return;
    this.#failed = true;
    this.#log.error(`the Opus encoder of audio track "${this.#track}" failed: ${err.message}; its WebRTC viewers get no audio`);
    this.close();
  }

  close(): void {
    const e = this.#encoder;
    this.#encoder = undefined;
    try {
      if (e && e.state !== 'closed') e.close();
    } catch {
      // Already closed by an error.
    }
  }
}

/** The Opus encoders of one server (one per outbound audio track with a WebRTC viewer). */
export class OpusStreams {
  readonly #tracks = new Map<number, TrackOpus>();
  readonly #fed = new WeakSet<OutputAudio>();
  readonly #wc: AudioModule;
  readonly #log: Logger;

  private constructor(wc: AudioModule, log: Logger) {
    this.#wc = wc;
    this.#log = log;
  }

  /** Loads the encoder module; undefined (logged) when it does not load here. */
  static async load(log: Logger): Promise<OpusStreams | undefined> {
    try {
      return new OpusStreams((await loadWebCodecs()) as unknown as AudioModule, log);
    } catch (err) {
      log.warn(`WebRTC viewers get no audio: ${(err as Error).message}`);
      return undefined;
    }
  }

  /** Adds a viewer of `trackIndex`; returns its removal. */
  subscribe(trackIndex: number, track: string, listener: Listener): () => void {
    let t = this.#tracks.get(trackIndex);
    if (!t) {
      t = new TrackOpus(this.#wc, track, this.#log);
      this.#tracks.set(trackIndex, t);
    }
    t.add(listener);
    const own = t;
    return () => {
      own.remove(listener);
      if (own.listeners === 0 && this.#tracks.get(trackIndex) === own) this.#tracks.delete(trackIndex);
    };
  }

  /** A played-out chunk: encoded once (later calls with the same chunk do nothing). */
  feed(chunk: OutputAudio): void {
    if (this.#fed.has(chunk)) return;
    this.#fed.add(chunk);
    this.#tracks.get(chunk.trackIndex)?.feed(chunk);
  }

  /** Encoders open (tests). */
  get open(): number {
    return this.#tracks.size;
  }

  close(): void {
    for (const t of this.#tracks.values()) t.close();
    this.#tracks.clear();
  }
}

/** Linear resampling of mono PCM. */
function resample(pcm: Int16Array, from: number, to: number): Int16Array {
  const n = Math.floor((pcm.length * to) / from);
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) {
    const x = (i * from) / to;
    const i0 = Math.floor(x);
    const a = pcm[i0] ?? 0;
    const b = pcm[i0 + 1] ?? a;
    out[i] = Math.round(a + (b - a) * (x - i0));
  }
  return out;
}
