/**
 * Coded video (H.264, VP8) for every client of a server: one {@link TrackEncoder} per outbound
 * video track, codec and tier, created when the first client selects it, fed once per played-out
 * frame whatever the number of clients on it (the first client's sink starts the encoding and
 * every other one awaits the same promise), and closed when its last client leaves it, when the
 * session ends, and when the server closes.
 *
 * Key frames: a new encoder starts with one; a client joining an encoder (or changing tier), a
 * client that lost a frame and a `request_key_frame` ask for one, forced on the next frame at
 * most once per {@link KEY_FRAME_MIN_INTERVAL_MS} per encoder (a request inside that window is
 * served by the first frame after it); a flush forces one on every encoder at once; between
 * those, one every `keyFrameInterval` frames.
 *
 * An encoder slower than the playout encodes at its own rate: at most
 * {@link MAX_CODED_IN_FLIGHT} frames are taken and not yet out of it, and a frame played out
 * beyond that is not encoded for anyone (counted once as `encoder_busy`). Every frame it takes
 * is part of an unbroken stream, so a client keeps each one: dropping frames after encoding
 * would break the chain of delta frames and make every client wait for the next key frame.
 */
import sharp from 'sharp';
import {
  FrameEncoding,
  KEY_FRAME_MIN_INTERVAL_MS,
  type FrameHeader,
  type VideoCodecName,
  type VideoConfigMessage,
  type VideoOffer,
  type VideoTierSchema,
} from '@reactor/protocol';
import type { Logger } from '@reactor/log';
import type { AppHostApi, OutputFrame } from '@reactor/runtime';
import type { ServerMetrics } from '../base/metrics.js';
import type { CodedVideoCodec, CodedVideoEncoder, VideoEncoderFactory } from './video-encoder.js';

/**
 * Frames an encoder holds (resizing, waiting for the native encoder, in it) before a new frame is
 * its drop (`encoder_busy`): one in the native encoder and a few behind it, so a step's frames
 * that arrive together, or a short stall of the event loop, cost no frame.
 */
export const MAX_CODED_IN_FLIGHT = 4;

/** The video options with defaults applied (see `ServerOptions.video`). */
export interface ResolvedVideoOptions {
  codec: VideoCodecName;
  tiers: VideoTierSchema[];
  keyFrameInterval: number;
  framerate: number;
  encoderFactory: VideoEncoderFactory;
}

/**
 * One encoded frame, the same object for every client of its encoder and for the clip ring. Each
 * media path takes `data` as it is: the WebSocket path puts its frame header before it
 * (`ws/coded-wire.ts`, once a frame), RTP cuts it into packets, the clip ring into MP4 samples.
 */
export interface CodedFrame {
  /** The access unit as the encoder wrote it (H.264: Annex B; VP8: one frame). Read-only: every path shares it. */
  readonly data: Uint8Array;
  readonly key: boolean;
  /** What the client must have been told (`video_config`) before this frame. */
  readonly config: VideoConfigMessage;
  /** The frame's header on the WebSocket wire: its track, seq, pts, the tier's size, the key flag and the app's metadata. */
  readonly header: FrameHeader;
}

/** A client of an encoder (a connection, for one of its tracks). */
export interface VideoSubscriber {
  /** The encoder failed and is closed: move this client's track to JPEG. */
  encoderFailed(encoder: TrackEncoder, err: Error): void;
}

/** Why a key frame was asked for (the label of `reactor_video_key_frame_requests_total`). */
export type KeyFrameReason = 'join' | 'request' | 'drop' | 'flush';

/** A snapshot of one encoder, for tests and operators. */
export interface VideoEncoderInfo {
  track: string;
  codec: CodedVideoCodec;
  tier: string;
  clients: number;
  /** Whether its native encoder is open (it is created on the first frame, and closed at the end of a session). */
  open: boolean;
  framesEncoded: number;
  keyFramesForced: number;
}

/** Coded size of a tier: the frame scaled, sides rounded down to even numbers (at least 2). */
export function tierSize(width: number, height: number, scale: number): { width: number; height: number } {
  const even = (n: number): number => Math.max(2, Math.floor((n * scale) / 2) * 2);
  return { width: even(width), height: even(height) };
}

/** The encoders of one server. */
export class VideoStreams {
  readonly options: ResolvedVideoOptions;
  readonly #host: AppHostApi;
  readonly #metrics: ServerMetrics;
  readonly #log: Logger;
  readonly #encoders = new Map<string, TrackEncoder>();
  /** Set when the configured codec's encoder could not be loaded: only JPEG is offered. */
  #unavailable: string | undefined;
  #lastFlush = -1;

  constructor(options: ResolvedVideoOptions, host: AppHostApi, metrics: ServerMetrics, log: Logger) {
    this.options = options;
    this.#host = host;
    this.#metrics = metrics;
    this.#log = log;
  }

  /** Whether the server streams a coded codec (besides JPEG). */
  get coded(): boolean {
    return this.options.codec !== 'jpeg' && this.#unavailable === undefined;
  }

  /** Why the configured codec is not offered (its encoder did not load), if so. */
  get unavailable(): string | undefined {
    return this.#unavailable;
  }

  /** Marks the configured codec unavailable (its encoder failed to load at start); only JPEG is offered then. */
  markUnavailable(reason: string): void {
    this.#unavailable = reason;
  }

  /** `welcome.video`: absent when the server streams JPEG only. */
  offer(): VideoOffer | undefined {
    if (!this.coded) return undefined;
    return { codecs: [this.options.codec, 'jpeg'], tiers: this.options.tiers.map((t) => ({ ...t })), keyFrameInterval: this.options.keyFrameInterval };
  }

  /** The encoder of (track, codec, tier), created if needed, with `sub` added to its clients. */
  subscribe(trackIndex: number, codec: CodedVideoCodec, tier: VideoTierSchema, sub: VideoSubscriber): TrackEncoder {
    const key = `${trackIndex}/${codec}/${tier.name}`;
    let enc = this.#encoders.get(key);
    if (!enc) {
      const track = this.#host.schema.tracks[trackIndex]?.name ?? String(trackIndex);
      enc = new TrackEncoder({
        trackIndex,
        track,
        codec,
        tier,
        options: this.options,
        host: this.#host,
        metrics: this.#metrics,
        log: this.#log,
        onGone: (e) => {
          if (this.#encoders.get(key) === e) this.#encoders.delete(key);
        },
      });
      this.#encoders.set(key, enc);
    }
    enc.add(sub);
    return enc;
  }

  /** A flush cut the playout: every encoder starts again with a key frame (once per flush, however many clients saw it). */
  flush(nextSeq: number): void {
    if (nextSeq === this.#lastFlush) return;
    this.#lastFlush = nextSeq;
    for (const e of this.#encoders.values()) e.requestKeyFrame('flush');
  }

  /** The session ended: every native encoder is closed (clients keep their selection; the next session's frames open new ones). */
  endSession(): void {
    this.#lastFlush = -1;
    for (const e of this.#encoders.values()) e.closeNative();
  }

  /** A snapshot of every encoder. */
  info(): VideoEncoderInfo[] {
    return [...this.#encoders.values()].map((e) => e.info());
  }

  /** Closes every encoder (server shutdown). */
  close(): void {
    for (const e of [...this.#encoders.values()]) e.close();
    this.#encoders.clear();
  }
}

interface TrackEncoderInit {
  trackIndex: number;
  track: string;
  codec: CodedVideoCodec;
  tier: VideoTierSchema;
  options: ResolvedVideoOptions;
  host: AppHostApi;
  metrics: ServerMetrics;
  log: Logger;
  onGone(e: TrackEncoder): void;
}

/** The native encoder of the current session, with the frame size it was made for. */
interface NativeState {
  readonly encoder: Promise<CodedVideoEncoder>;
  readonly session: string | undefined;
  readonly srcWidth: number;
  readonly srcHeight: number;
  readonly width: number;
  readonly height: number;
  readonly bitrate: number;
  /** The last `video_config` built for it (rebuilt when the codec string changes). */
  config?: VideoConfigMessage;
}

/** One encoder: one outbound video track at one codec and tier, shared by its clients. */
export class TrackEncoder {
  readonly trackIndex: number;
  readonly track: string;
  readonly codec: CodedVideoCodec;
  readonly tier: VideoTierSchema;
  readonly #o: TrackEncoderInit;
  readonly #subs = new Set<VideoSubscriber>();
  /** Each frame's encoding (`null`: not taken, the encoder was busy). */
  readonly #cache = new WeakMap<OutputFrame, Promise<CodedFrame | null> | null>();
  /** Frames taken whose encoding has not settled. */
  #inFlight = 0;
  #native: NativeState | undefined;
  /** Serialises the hand-off of frames to the native encoder in playout order (resizing runs ahead, in parallel). */
  #chain: Promise<unknown> = Promise.resolve();
  /** A key frame was asked for (served on the first frame KEY_FRAME_MIN_INTERVAL_MS after the last forced one). */
  #wanted = false;
  /** A key frame is due on the next frame, whatever the interval (new encoder, flush). */
  #due = false;
  #lastForcedAt = -Infinity;
  /** Frames handed to the encoder since the last key frame was asked of it (counted when the frame is handed over, not when its chunk is out: hand-offs overlap). */
  #sinceKey = 0;
  #lastTimestamp = -1;
  #framesEncoded = 0;
  #keyFramesForced = 0;
  #failed = false;
  #closed = false;

  constructor(init: TrackEncoderInit) {
    this.#o = init;
    this.trackIndex = init.trackIndex;
    this.track = init.track;
    this.codec = init.codec;
    this.tier = init.tier;
  }

  get #labels(): { codec: string; tier: string } {
    return { codec: this.codec, tier: this.tier.name };
  }

  /** Whether it failed or was closed (its clients have moved away). */
  get closed(): boolean {
    return this.#closed;
  }

  add(sub: VideoSubscriber): void {
    this.#subs.add(sub);
  }

  /** Removes a client; the last one out closes the encoder. */
  remove(sub: VideoSubscriber): void {
    this.#subs.delete(sub);
    if (this.#subs.size === 0) this.close();
  }

  /**
   * Asks for a key frame. `flush` forces one on the next frame; other reasons are served at most
   * once per {@link KEY_FRAME_MIN_INTERVAL_MS} (a request inside that window waits for its end).
   */
  requestKeyFrame(reason: KeyFrameReason): void {
    this.#o.metrics.keyFrameRequests.inc({ reason });
    if (reason === 'flush') this.#due = true;
    else this.#wanted = true;
  }

  /**
   * The encoded frame; the same promise for every client (the frame is encoded once). It resolves
   * `null` when the native encoder skipped the frame (a gap in the stream: clients wait for a key
   * frame). `null` instead of a promise: the encoder was {@link MAX_CODED_IN_FLIGHT} frames
   * behind and did not take the frame (counted once as `encoder_busy`; the stream has no gap).
   */
  encode(frame: OutputFrame): Promise<CodedFrame | null> | null {
    let p = this.#cache.get(frame);
    if (p === undefined) {
      if (this.#inFlight >= MAX_CODED_IN_FLIGHT && !this.#closed) {
        this.#o.metrics.framesDropped.inc({ reason: 'encoder_busy' });
        p = null;
      } else {
        this.#inFlight++;
        p = this.#encode(frame);
        const settled = (): void => {
          this.#inFlight--;
        };
        // Also keeps a frame dropped before anyone awaits it from becoming an unhandled rejection.
        p.then(settled, settled);
      }
      this.#cache.set(frame, p);
    }
    return p;
  }

  async #encode(frame: OutputFrame): Promise<CodedFrame | null> {
    if (this.#closed) throw new Error(`the ${this.codec} encoder of track "${this.track}" (tier ${this.tier.name}) is closed`);
    const expected = frame.width * frame.height * 3;
    if (frame.rgb.byteLength !== expected) {
      throw new RangeError(
        `frame ${frame.seq} of track "${frame.track}" has ${frame.rgb.byteLength} bytes; ${frame.width}x${frame.height} RGB needs ${expected}`,
      );
    }
    const size = tierSize(frame.width, frame.height, this.tier.scale);
    const scaled = size.width === frame.width && size.height === frame.height ? Promise.resolve(frame.rgb) : resize(frame, size.width, size.height);
    scaled.catch(() => undefined);
    const handOff = this.#chain.then(async () => {
      const rgb = await scaled;
      if (this.#closed) throw new Error(`the ${this.codec} encoder of track "${this.track}" (tier ${this.tier.name}) is closed`);
      const native = this.#nativeFor(frame, size.width, size.height);
      const encoder = await native.encoder;
      const key = this.#takeKey();
      const ts = Math.max(this.#lastTimestamp + 1, Math.round(frame.ptsMs * 1000));
      this.#lastTimestamp = ts;
      return { native, chunk: encoder.encode(rgb, ts, key), start: performance.now() };
    });
    this.#chain = handOff.catch(() => undefined);
    let chunk;
    let native: NativeState;
    let start: number;
    try {
      const h = await handOff;
      native = h.native;
      start = h.start;
      chunk = await h.chunk;
    } catch (err) {
      this.#fail(err as Error);
      throw err;
    }
    this.#framesEncoded++;
    this.#o.metrics.videoFramesEncoded.inc(this.#labels);
    const seconds = (performance.now() - start) / 1000;
    this.#o.metrics.videoEncodeSeconds.observe(this.#labels, seconds);
    this.#o.metrics.stage.encode.observe(seconds);
    if (!chunk) return null;
    const header: FrameHeader = {
      encoding: this.codec === 'h264' ? FrameEncoding.H264 : FrameEncoding.Vp8,
      track: frame.trackIndex,
      seq: frame.seq,
      ptsMs: frame.ptsMs,
      width: size.width,
      height: size.height,
      key: chunk.key,
      metadata: frame.metadata,
    };
    return { data: chunk.data, key: chunk.key, config: this.#configOf(native, await native.encoder), header };
  }

  /** Whether the next frame is a key frame (and counts a forced one). */
  #takeKey(): boolean {
    const now = performance.now();
    if (this.#due || (this.#wanted && now - this.#lastForcedAt >= KEY_FRAME_MIN_INTERVAL_MS)) {
      this.#due = false;
      this.#wanted = false;
      this.#lastForcedAt = now;
      this.#keyFramesForced++;
      this.#o.metrics.keyFramesForced.inc(this.#labels);
      this.#sinceKey = 0;
      return true;
    }
    if (this.#sinceKey + 1 >= this.#o.options.keyFrameInterval) {
      this.#wanted = false;
      this.#sinceKey = 0;
      return true;
    }
    this.#sinceKey++;
    return false;
  }

  /** The native encoder for this frame: a new one for a new session or a new frame size (starting with a key frame). */
  #nativeFor(frame: OutputFrame, width: number, height: number): NativeState {
    const session = this.#o.host.status.sessionId;
    const n = this.#native;
    if (n && n.session === session && n.srcWidth === frame.width && n.srcHeight === frame.height) return n;
    this.closeNative();
    const bitrate = this.tier.bitrate;
    const encoder = Promise.resolve().then(() =>
      this.#o.options.encoderFactory({ codec: this.codec, width, height, bitrate, framerate: this.#o.options.framerate }),
    );
    encoder.catch(() => undefined);
    this.#native = { encoder, session, srcWidth: frame.width, srcHeight: frame.height, width, height, bitrate };
    this.#o.metrics.videoEncoders.inc(this.#labels);
    this.#due = true;
    this.#sinceKey = 0;
    return this.#native;
  }

  #configOf(native: NativeState, encoder: CodedVideoEncoder): VideoConfigMessage {
    if (native.config?.codecString !== encoder.codecString) {
      native.config = {
        type: 'video_config',
        track: this.track,
        codec: this.codec,
        codecString: encoder.codecString,
        width: native.width,
        height: native.height,
        tier: this.tier.name,
        bitrate: native.bitrate,
      };
    }
    return native.config;
  }

  /** Closes the native encoder (end of session, new size); the next frame opens a new one. */
  closeNative(): void {
    const n = this.#native;
    if (!n) return;
    this.#native = undefined;
    this.#o.metrics.videoEncoders.dec(this.#labels);
    n.encoder.then(
      (e) => e.close(),
      () => undefined,
    );
  }

  #fail(err: Error): void {
    if (this.#failed || this.#closed) return;
    this.#failed = true;
    this.#o.metrics.videoEncoderFailures.inc(this.#labels);
    this.#o.log.error(`the ${this.codec} encoder of track "${this.track}" (tier ${this.tier.name}) failed: ${err.message}; its clients fall back to JPEG`);
    const subs = [...this.#subs];
    this.close();
    for (const s of subs) s.encoderFailed(this, err);
  }

  /** Closes it for good (last client gone, failure, server shutdown). Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#subs.clear();
    this.closeNative();
    this.#o.onGone(this);
  }

  info(): VideoEncoderInfo {
    return {
      track: this.track,
      codec: this.codec,
      tier: this.tier.name,
      clients: this.#subs.size,
      open: this.#native !== undefined,
      framesEncoded: this.#framesEncoded,
      keyFramesForced: this.#keyFramesForced,
    };
  }
}

/** The frame scaled to the tier's size (on libuv's thread pool, off the event loop). */
async function resize(frame: OutputFrame, width: number, height: number): Promise<Uint8Array> {
  const out = await sharp(frame.rgb, { raw: { width: frame.width, height: frame.height, channels: 3 } })
    .resize(width, height, { fit: 'fill' })
    .raw()
    .toBuffer();
  return out;
}
