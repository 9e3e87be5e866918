/**
 * Coded video in the browser: one WebCodecs `VideoDecoder` per outbound video track, fed the
 * binary frames of a connection that selected `h264` or `vp8`, giving a `VideoFrame` per frame.
 * DOM only (exported as `@reactor/client/browser`).
 */
import { TypedEmitter } from '../base/emitter.js';
import { KeyFrameGate, type ReferenceLoss } from './key-frame-gate.js';
import { FrameEncoding, h264CodecString, type DecodedFrame, type VideoCodecName, type VideoConfigMessage } from '../base/protocol.js';

/** Where a decoded frame came from. */
export interface DecodedVideoInfo {
  /** Track wire name. */
  track: string;
  seq: number;
  ptsMs: number;
  key: boolean;
  /** The frame's encoding on the wire (`FrameEncoding.H264`, `Vp8`, `Jpeg`). */
  encoding: number;
  /** Payload bytes on the wire. */
  bytes: number;
  /** `performance.now()` when the frame arrived, if the caller said. */
  receivedAt?: number;
  /** `performance.now()` when the decoder gave the picture. */
  decodedAt: number;
}

/** A frame as the decoder reads it: a {@link DecodedFrame} (a `ClientFrame` is one), optionally with its arrival time. */
export type VideoInputFrame = Pick<DecodedFrame, 'encoding' | 'seq' | 'ptsMs' | 'width' | 'height' | 'payload' | 'key'> & { receivedAt?: number };

/** Events of a {@link VideoTrackDecoder}. */
export interface VideoTrackDecoderEvents {
  /**
   * A decoded picture. The `VideoFrame` is valid only while the listeners run: the decoder closes
   * it right after them (`frame.clone()` to keep one, and close the clone).
   */
  frame: { frame: VideoFrame; info: DecodedVideoInfo };
  /** The decoder lost its reference and wants a key frame (send `request_key_frame` for the track). */
  keyframe_needed: { track: string; reason: ReferenceLoss };
  /** A decode error or an unsupported configuration (the track waits for the next key frame, or a new `video_config`). */
  error: Error;
  /** This browser refused the `video_config`'s configuration: frames are discarded until another one (select JPEG). */
  unsupported: { track: string; codec: VideoCodecName; codecString: string };
}

/** Options of a {@link VideoTrackDecoder}. */
export interface VideoTrackDecoderOptions {
  /**
   * Coded frames waiting in the decoder beyond which the decoder counts as behind: deltas are
   * skipped until a key frame (default 10).
   */
  maxQueue?: number;
  /** Shortest time between two key-frame requests, ms (default `KEY_FRAME_MIN_INTERVAL_MS`). */
  minKeyFrameRequestMs?: number;
}

/** Counters of one track's decoder. */
export interface VideoDecoderCounters {
  /** Pictures given out (and closed). */
  decoded: number;
  /**
   * Frames given to `decode()` that gave no picture: deltas without a reference, stale frames,
   * frames skipped while behind, a JPEG frame a newer one replaced, and the frames still queued in
   * the decoder when a flush, a decoder error or a switch to JPEG dropped them. Every frame fed is
   * decoded or counted here (a failing frame may be counted in `errors` too).
   */
  discarded: number;
  /** Key frames asked for. */
  keyFrameRequests: number;
  /** Decoder errors. */
  errors: number;
}

/** The WebCodecs codec string to probe support for a codec the server offers (its own string comes in `video_config`). */
export const PROBE_CODEC_STRINGS: Readonly<Record<Exclude<VideoCodecName, 'jpeg'>, string>> = {
  h264: 'avc1.42E01F',
  vp8: 'vp8',
};

/** True when this page has WebCodecs video decoding (`VideoDecoder`, `VideoFrame`, `EncodedVideoChunk`). */
export function hasWebCodecs(): boolean {
  const g = globalThis as { VideoDecoder?: unknown; VideoFrame?: unknown; EncodedVideoChunk?: unknown };
  return typeof g.VideoDecoder === 'function' && typeof g.VideoFrame === 'function' && typeof g.EncodedVideoChunk === 'function';
}

/**
 * The first codec of `offered` (the server's preference order) that this browser decodes: a coded
 * one when `VideoDecoder.isConfigSupported` says so, else `jpeg`.
 * @example const codec = await pickVideoCodec(welcome.video?.codecs ?? ['jpeg']);
 */
export async function pickVideoCodec(offered: readonly VideoCodecName[]): Promise<VideoCodecName> {
  if (!hasWebCodecs()) return 'jpeg';
  for (const codec of offered) {
    if (codec === 'jpeg') return 'jpeg';
    const probe = PROBE_CODEC_STRINGS[codec];
    if (probe === undefined) continue;
    try {
      const r = await VideoDecoder.isConfigSupported({ codec: probe, optimizeForLatency: true });
      if (r.supported === true) return codec;
    } catch {
      // a codec string this browser cannot parse: not supported
    }
  }
  return 'jpeg';
}

interface PendingInfo {
  timestamp: number;
  info: Omit<DecodedVideoInfo, 'decodedAt'>;
}

/**
 * One outbound video track's decoder: configured from `video_config`, fed the track's binary
 * frames in arrival order, it gives one `VideoFrame` per decoded frame (the `frame` event) and
 * closes it after the listeners. It keeps a reference-state gate: deltas before a key frame,
 * after a gap, a decode error or while it falls behind are discarded and `keyframe_needed` asks
 * for a key frame. JPEG frames (before a `video_config`, or after the server fell back to JPEG)
 * are decoded too, with `createImageBitmap`.
 *
 * @example
 * const dec = new VideoTrackDecoder('main');
 * dec.on('frame', ({ frame }) => ctx.drawImage(frame, 0, 0));
 * dec.on('keyframe_needed', ({ track }) => client.requestKeyFrame(track));
 * client.on('video_config', (m) => m.track === 'main' && dec.configure(m));
 * client.on('frame', (f) => f.trackName === 'main' && dec.decode(f));
 */
export class VideoTrackDecoder extends TypedEmitter<VideoTrackDecoderEvents> {
  readonly track: string;
  readonly #gate: KeyFrameGate;
  readonly #maxQueue: number;
  #decoder: VideoDecoder | undefined;
  #config: VideoDecoderConfig | undefined;
  #codec: VideoCodecName = 'jpeg';
  #pending: PendingInfo[] = [];
  #closed = false;
  /** Bumped by flush/configure/close: JPEG decodes started before are dropped. */
  #epoch = 0;
  #jpegNext: VideoInputFrame | undefined;
  #jpegBusy = false;
  /** Seq of the last picture given out: an older one (a JPEG decode finishing late) is never shown after it. */
  #lastGiven = -1;
  readonly #counters: VideoDecoderCounters = { decoded: 0, discarded: 0, keyFrameRequests: 0, errors: 0 };

  constructor(track: string, options: VideoTrackDecoderOptions = {}) {
    super();
    const maxQueue = options.maxQueue ?? 10;
    if (!Number.isInteger(maxQueue) || maxQueue < 1) throw new RangeError(`options.maxQueue must be an integer >= 1, got ${String(maxQueue)}`);
    this.track = track;
    this.#maxQueue = maxQueue;
    this.#gate = new KeyFrameGate(options.minKeyFrameRequestMs === undefined ? {} : { minRequestIntervalMs: options.minKeyFrameRequestMs });
  }

  /** The codec of the last `video_config` (`jpeg` before any). */
  get codec(): VideoCodecName {
    return this.#codec;
  }

  /** This track's counters. */
  get counters(): Readonly<VideoDecoderCounters> {
    return { ...this.#counters, discarded: this.#counters.discarded + this.#gate.discarded };
  }

  /** True while deltas are discarded until a key frame. */
  get waitingForKey(): boolean {
    return this.#gate.waitingForKey;
  }

  /** Coded frames queued in the WebCodecs decoder. */
  get queueSize(): number {
    return this.#decoder?.decodeQueueSize ?? 0;
  }

  /**
   * Configures the decoder from a `video_config` message; the next frame is a key frame.
   * A `jpeg` config closes the coded decoder. An unsupported codec string emits `error`.
   */
  configure(msg: VideoConfigMessage): void {
    if (this.#closed) return;
    this.#epoch++;
    this.#codec = msg.codec;
    this.#gate.configure();
    if (msg.codec === 'jpeg' || msg.codecString === undefined) {
      this.#closeDecoder();
      this.#config = undefined;
      return;
    }
    const config: VideoDecoderConfig = {
      // an older server may name a level the browser does not parse (1b as 9)
      codec: msg.codec === 'h264' ? h264CodecString(msg.codecString) : msg.codecString,
      codedWidth: msg.width,
      codedHeight: msg.height,
      optimizeForLatency: true,
    };
    if (msg.description !== undefined) config.description = base64Bytes(msg.description);
    this.#config = config;
    this.#openDecoder();
  }

  /**
   * Feeds one frame of this track, in arrival order. `gap` says a frame may be missing right
   * before it (the caller saw a hole in the connection's sequence numbers).
   */
  decode(frame: VideoInputFrame, gap = false): void {
    if (this.#closed) return;
    if (frame.encoding === FrameEncoding.Jpeg) {
      this.#dropJpeg(); // JPEG frames stand alone: the newest wins while one decodes
      this.#jpegNext = frame;
      if (!this.#jpegBusy) void this.#jpegLoop();
      return;
    }
    if (frame.encoding !== FrameEncoding.H264 && frame.encoding !== FrameEncoding.Vp8) return;
    const decoder = this.#decoder;
    if (!decoder || decoder.state !== 'configured') {
      // No usable configuration (none yet, or an unsupported one): nothing to decode with.
      this.#counters.discarded++;
      return;
    }
    if (frame.key !== true && !this.#gate.waitingForKey && decoder.decodeQueueSize >= this.#maxQueue) {
      this.#counters.discarded++;
      this.#lose('behind');
      return;
    }
    const d = this.#gate.offer(frame, gap);
    if (d.requestKeyFrame) this.#askKey(d.loss ?? 'gap');
    if (!d.decode) return;
    const timestamp = Math.round(frame.ptsMs * 1000);
    try {
      decoder.decode(new EncodedVideoChunk({ type: frame.key === true ? 'key' : 'delta', timestamp, data: frame.payload as Uint8Array<ArrayBuffer> }));
    } catch (err) {
      this.#counters.errors++;
      this.emit('error', new Error(`cannot decode frame ${frame.seq} of track "${this.track}": ${(err as Error).message}`, { cause: err }));
      this.#lose('decode_error');
      return;
    }
    const info: PendingInfo['info'] = {
      track: this.track,
      seq: frame.seq,
      ptsMs: frame.ptsMs,
      key: frame.key === true,
      encoding: frame.encoding,
      bytes: frame.payload.byteLength,
    };
    if (frame.receivedAt !== undefined) info.receivedAt = frame.receivedAt;
    this.#pending.push({ timestamp, info });
  }

  /** Playout was cut (`flush`): drops queued work, frames below `nextSeq`, and waits for a key frame. */
  flush(nextSeq: number): void {
    if (this.#closed) return;
    this.#epoch++;
    this.#dropJpeg();
    this.#gate.flush(nextSeq);
    this.#dropPending();
    const decoder = this.#decoder;
    if (decoder && decoder.state === 'configured' && this.#config) {
      decoder.reset();
      decoder.configure(this.#config);
    }
  }

  /** A new connection: forget the reference and the sequence numbers seen. */
  reset(): void {
    this.#gate.reset();
    this.flush(0);
    this.#lastGiven = -1;
  }

  /** Closes the WebCodecs decoder; later calls do nothing. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#epoch++;
    this.#jpegNext = undefined;
    this.#closeDecoder();
    this.removeAllListeners();
  }

  #openDecoder(): void {
    const config = this.#config!;
    if (!this.#decoder || this.#decoder.state === 'closed') {
      const decoder: VideoDecoder = new VideoDecoder({
        output: (frame) => this.#output(frame),
        error: (err) => {
          // The decoder closed itself; a new one waits for the next key frame.
          if (this.#decoder !== decoder || this.#closed) return;
          this.#counters.errors++;
          this.#dropPending();
          this.emit('error', new Error(`the ${config.codec} decoder of track "${this.track}" failed: ${err.message}`, { cause: err }));
          this.#decoder = undefined;
          if (err.name === 'NotSupportedError') {
            // The configuration itself is refused: a new decoder would fail the same way. Frames
            // are discarded until the next video_config.
            this.#config = undefined;
            this.emit('unsupported', { track: this.track, codec: this.#codec, codecString: config.codec });
            return;
          }
          if (this.#config) this.#openDecoder();
          this.#lose('decode_error');
        },
      });
      this.#decoder = decoder;
    }
    // A live decoder keeps its queue: frames fed before this configure still come out, in order,
    // and are given (a tier change must not lose them); a decoder that drops them instead has them
    // counted as discarded when the next output passes them.
    try {
      this.#decoder.configure(config);
    } catch (err) {
      this.#counters.errors++;
      this.emit('error', new Error(`cannot configure ${config.codec} for track "${this.track}": ${(err as Error).message}`, { cause: err }));
    }
  }

  #closeDecoder(): void {
    const d = this.#decoder;
    this.#decoder = undefined;
    this.#dropPending();
    if (d && d.state !== 'closed') d.close();
  }

  #output(frame: VideoFrame): void {
    // Outputs come in decode order, one per chunk unless the decoder dropped one: the entries
    // before this output's own gave no picture. An output with no entry (its frame was dropped
    // here already) takes none of the later frames' entries.
    const at = this.#pending.findIndex((p) => p.timestamp === frame.timestamp);
    if (this.#closed || at < 0) {
      frame.close();
      return;
    }
    this.#counters.discarded += at;
    const p = this.#pending.splice(0, at + 1)[at]!;
    this.#give(frame, { ...p.info, decodedAt: performance.now() });
  }

  #give(frame: VideoFrame, info: DecodedVideoInfo): void {
    if (info.seq <= this.#lastGiven) {
      frame.close();
      this.#counters.discarded++;
      return;
    }
    this.#lastGiven = info.seq;
    try {
      this.#counters.decoded++;
      this.emit('frame', { frame, info });
    } finally {
      frame.close();
    }
  }

  /** The frames queued in the decoder will give no picture. */
  #dropPending(): void {
    this.#counters.discarded += this.#pending.length;
    this.#pending = [];
  }

  /** The JPEG frame waiting to decode will not be. */
  #dropJpeg(): void {
    if (this.#jpegNext) this.#counters.discarded++;
    this.#jpegNext = undefined;
  }

  #lose(reason: ReferenceLoss): void {
    if (this.#gate.lose(reason)) this.#askKey(reason);
  }

  #askKey(reason: ReferenceLoss): void {
    this.#counters.keyFrameRequests++;
    this.emit('keyframe_needed', { track: this.track, reason });
  }

  async #jpegLoop(): Promise<void> {
    this.#jpegBusy = true;
    try {
      while (this.#jpegNext) {
        const f = this.#jpegNext;
        this.#jpegNext = undefined;
        const epoch = this.#epoch;
        let bitmap: ImageBitmap;
        try {
          bitmap = await createImageBitmap(new Blob([f.payload as Uint8Array<ArrayBuffer>], { type: 'image/jpeg' }));
        } catch (err) {
          this.#counters.errors++;
          this.emit('error', new Error(`cannot decode JPEG frame ${f.seq} of track "${this.track}": ${(err as Error).message}`, { cause: err }));
          continue;
        }
        if (epoch !== this.#epoch || this.#closed) {
          bitmap.close();
          this.#counters.discarded++;
          continue;
        }
        const frame = new VideoFrame(bitmap, { timestamp: Math.round(f.ptsMs * 1000) });
        bitmap.close();
        const info: DecodedVideoInfo = {
          track: this.track,
          seq: f.seq,
          ptsMs: f.ptsMs,
          key: true,
          encoding: f.encoding,
          bytes: f.payload.byteLength,
          decodedAt: performance.now(),
        };
        if (f.receivedAt !== undefined) info.receivedAt = f.receivedAt;
        this.#give(frame, info);
      }
    } finally {
      this.#jpegBusy = false;
    }
  }
}

function base64Bytes(b64: string): Uint8Array<ArrayBuffer> {
  const s = atob(b64);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}
