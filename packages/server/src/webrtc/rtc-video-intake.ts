/**
 * A camera that comes in over WebRTC: the RTP of one inbound video track (VP8 or H.264, as
 * Chromium sends them) into RGB24 frames of the track's declared size, handed to the app's
 * `InputBuffer` exactly as decoded frames of the WebSocket's binary intake are.
 *
 * RTP -> a reorder buffer (waits for retransmissions, `rtp-reorder.ts`) -> werift's depacketizer (one
 * encoded frame per marker bit) -> `@napi-rs/webcodecs` `VideoDecoder` -> RGBA -> RGB (sharp
 * scales it when the sender sent another size than the schema's `width`x`height`, as a browser
 * does when it adapts its resolution) -> `pushFrame`.
 *
 * Every frame is checked as over the WebSocket: publisher, the track's `maxFps`, its
 * `maxWidth`x`maxHeight`, at most {@link MAX_CONVERTING_BYTES} of pictures converting at once.
 * A frame that lost packets, and every frame after it up to the next key frame, are dropped
 * (`packet_loss`) and the sender asked for a key frame (PLI, at most every
 * {@link KEY_FRAME_REQUEST_INTERVAL_MS}); a decoder error drops the decoder, which a key frame
 * starts again.
 */
import sharp from 'sharp';
import type { RtpPacket } from 'werift';
import type { DepacketizeBase, DepacketizerCodec } from 'werift/nonstandard';
import { ServerErrorCode } from '../base/errors.js';
import { loadDecoders, type NativeVideoDecoder, type NativeVideoFrame, type WebCodecsDecoding } from './rtc-decoders.js';
import { RtcIntakeReport, RtpClock, type RtcIntakeInfo, type RtcTrackIntakeContext } from './rtc-intake-report.js';
import { RtpReorder } from './rtp-reorder.js';

/**
 * Encoded frames waiting in the decoder before newer ones are dropped (and a key frame asked
 * for): about a second at 30 fps, a backstop for a server that cannot keep up (encoded frames
 * are small; RTP bunches after a stall of the event loop must not trip it).
 */
export const MAX_DECODE_QUEUE = 30;
/**
 * Bytes of decoded pictures (RGBA at the track's `maxWidth` x `maxHeight`) converting to RGB at
 * once before newer frames are dropped (`decode_backlog`): 32 MiB, so 3 to 30 frames. More than
 * the WebSocket intake's 3 frames, since RTP frames arrive in bunches (a busy event loop, a radio
 * burst) that the WebSocket's TCP pacing would have spread; bounded in bytes, not frames.
 */
export const MAX_CONVERTING_BYTES = 32 * 1024 * 1024;

/** Frames of `schema` that may convert at once (see {@link MAX_CONVERTING_BYTES}). */
export function maxConverting(schema: { maxWidth?: number; maxHeight?: number }): number {
  const picture = (schema.maxWidth ?? 1920) * (schema.maxHeight ?? 1080) * 4;
  return Math.max(3, Math.min(30, Math.floor(MAX_CONVERTING_BYTES / picture)));
}
/** Shortest interval between two key frame requests (PLI) of one track, ms. */
export const KEY_FRAME_REQUEST_INTERVAL_MS = 500;
/** How long a packet that came early waits for a missing one (a NACKed retransmission) before that is given up, ms. */
export const VIDEO_REORDER_WAIT_MS = 150;
/** Packets the reorder buffer holds at most (a 720p key frame is ~100). */
const REORDER_PACKETS = 1024;

/** The codecs an inbound video track may use over WebRTC. */
export type RtcVideoCodec = 'vp8' | 'h264';

/** werift's depacketizer names. */
const DEPACKETIZER_CODEC: Record<RtcVideoCodec, DepacketizerCodec> = { vp8: 'VP8', h264: 'MPEG4/ISO/AVC' };
/** The WebCodecs codec strings (the decoder reads the real profile from the stream). */
const DECODER_CODEC: Record<RtcVideoCodec, string> = { vp8: 'vp8', h264: 'avc1.42E01F' };

interface FrameMeta {
  receivedAtMs: number;
  ptsMs: number;
  decodeStart: number;
}

interface Pending {
  done: boolean;
  rgb?: Uint8Array;
  width?: number;
  height?: number;
  meta: FrameMeta;
  error?: Error;
}

/** One inbound WebRTC video track of one client (see the module comment). */
export class RtcVideoIntake {
  readonly #ctx: RtcTrackIntakeContext;
  readonly #codec: RtcVideoCodec;
  readonly #wc: WebCodecsDecoding;
  readonly #report: RtcIntakeReport;
  readonly #reorder: RtpReorder;
  readonly #depacketizer: DepacketizeBase;
  readonly #clock: RtpClock;
  #decoder: NativeVideoDecoder | undefined;
  readonly #meta = new Map<number, FrameMeta>();
  readonly #queue: Pending[] = [];
  /** A packet was lost since the last key frame: delta frames cannot be decoded. */
  #needKey = true;
  #keyRequestedAt = -Infinity;
  #closed = false;

  /** Loads the decoder module first (rejects with `undecodable_frame` when it cannot be loaded here). */
  static async create(ctx: RtcTrackIntakeContext, codec: RtcVideoCodec, clockRate = 90_000): Promise<RtcVideoIntake> {
    // werift's depacketizer, loaded with the first track: a server that never sees one never loads werift.
    const { DepacketizeBase } = await import('werift/nonstandard');
    const depacketizer = new DepacketizeBase(DEPACKETIZER_CODEC[codec], { isFinalPacketInSequence: (h) => h.marker });
    return new RtcVideoIntake(ctx, codec, clockRate, await loadDecoders(), depacketizer);
  }

  private constructor(ctx: RtcTrackIntakeContext, codec: RtcVideoCodec, clockRate: number, wc: WebCodecsDecoding, depacketizer: DepacketizeBase) {
    this.#ctx = ctx;
    this.#codec = codec;
    this.#wc = wc;
    this.#report = new RtcIntakeReport(ctx);
    this.#clock = new RtpClock(clockRate);
    this.#reorder = new RtpReorder(VIDEO_REORDER_WAIT_MS, REORDER_PACKETS);
    this.#depacketizer = depacketizer;
  }

  /** Its counters. */
  info(): RtcIntakeInfo {
    return { ...this.#report.counts, pending: this.#meta.size + this.#queue.length };
  }

  /** One RTP packet of the track (after SRTP), `receivedAtMs` being `performance.now()` when it arrived. */
  receiveRtp(rtp: RtpPacket, receivedAtMs = performance.now()): void {
    if (this.#closed) return;
    for (const out of this.#reorder.push(rtp, receivedAtMs)) {
      // The depacketizer sees the gap too (it drops the frame that lost packets).
      if ('lost' in out) this.#lost();
      else
        for (const d of this.#depacketizer.processInput({ rtp: out.rtp, time: receivedAtMs })) {
          if (d.frame) this.#frame(d.frame.data, this.#codec === 'h264' ? hasIdr(d.frame.data) : d.frame.isKeyframe, out.rtp.header.timestamp, receivedAtMs);
        }
    }
  }

  /** The track ended or the client left: frames still converting are dropped, the decoder freed. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#closeDecoder();
    this.#report.drop('disconnected', this.#queue.length + this.#meta.size + this.#reorder.held);
    this.#queue.length = 0;
    this.#meta.clear();
  }

  /** Packets went missing: the frame that lost them was dropped by the depacketizer; the ones after it wait for a key frame. */
  #lost(): void {
    if (!this.#needKey) {
      this.#report.received();
      this.#report.drop('packet_loss');
    }
    this.#needKey = true;
    this.#requestKeyFrame();
  }

  #frame(data: Buffer, key: boolean, timestamp: number, receivedAtMs: number): void {
    const report = this.#report;
    const schema = this.#ctx.schema;
    report.received();
    if (!this.#ctx.handle.publishes(schema.name)) {
      this.#needKey = true;
      return report.refuse(
        ServerErrorCode.NotPublisher,
        `this client sends video on its WebRTC track for "${schema.name}" but does not publish it; send {"type":"publish","id":"1","track":"${schema.name}","transport":"webrtc","mid":"<the transceiver's mid>"} first`,
      );
    }
    if (!key && this.#needKey) {
      this.#requestKeyFrame();
      return report.drop('packet_loss');
    }
    if (key) this.#needKey = false;
    const decoder = this.#decoder ?? this.#openDecoder();
    if (decoder.state === 'closed') {
      // It failed and its error is on its way (reported then): this frame goes with it.
      this.#needKey = true;
      return report.drop(ServerErrorCode.UndecodableFrame);
    }
    const queued = decoder.decodeQueueSize;
    if (queued >= MAX_DECODE_QUEUE) {
      this.#needKey = true;
      this.#requestKeyFrame();
      return report.refuse(
        ServerErrorCode.FrameRateLimited,
        `the server is still decoding ${queued} earlier frames of track "${schema.name}"; frames are dropped up to the next key frame: send fewer or smaller frames`,
        'decode_backlog',
      );
    }
    const micros = this.#clock.micros(timestamp, receivedAtMs);
    this.#meta.set(micros, { receivedAtMs, ptsMs: this.#clock.ptsMs(micros), decodeStart: performance.now() });
    try {
      decoder.decode(new this.#wc.EncodedVideoChunk({ type: key ? 'key' : 'delta', timestamp: micros, data }));
    } catch (err) {
      this.#meta.delete(micros);
      if (decoder.state === 'closed') {
        this.#needKey = true;
        report.drop(ServerErrorCode.UndecodableFrame);
      } else {
        this.#decoderFailed(err as Error);
      }
    }
  }

  #openDecoder(): NativeVideoDecoder {
    const decoder = new this.#wc.VideoDecoder({
      output: (frame) => this.#decoded(frame),
      error: (err) => {
        if (this.#decoder === decoder) this.#decoderFailed(err);
      },
    });
    // Without it the binding decodes on several threads, each holding a frame back (~2 frames of delay).
    decoder.configure({ codec: DECODER_CODEC[this.#codec], optimizeForLatency: true });
    this.#decoder = decoder;
    return decoder;
  }

  #closeDecoder(): void {
    const d = this.#decoder;
    this.#decoder = undefined;
    try {
      if (d && d.state !== 'closed') d.close();
    } catch {
      // Already closed by its error.
    }
  }

  /** The decoder failed (a corrupt stream): the frames it held are dropped; the next key frame starts a new one. */
  #decoderFailed(err: Error): void {
    this.#closeDecoder();
    const held = this.#meta.size;
    this.#meta.clear();
    this.#needKey = true;
    this.#requestKeyFrame();
    if (held > 1) this.#report.drop(ServerErrorCode.UndecodableFrame, held - 1);
    this.#report.refuse(
      ServerErrorCode.UndecodableFrame,
      `a ${this.#codec.toUpperCase()} frame of track "${this.#ctx.schema.name}" cannot be decoded (${clip(err?.message ?? String(err))}); the server waits for the next key frame`,
    );
  }

  #decoded(frame: NativeVideoFrame): void {
    const meta = this.#meta.get(frame.timestamp);
    this.#meta.delete(frame.timestamp);
    // Frames decoded in order: older ones still waiting were skipped by the decoder (corrupt data it did not report).
    let skipped = 0;
    for (const t of this.#meta.keys()) if (t < frame.timestamp && this.#meta.delete(t)) skipped++;
    this.#report.drop(ServerErrorCode.UndecodableFrame, skipped);
    if (this.#closed || !meta) return frame.close();
    this.#ctx.metrics.inputDecodeSeconds.observe((performance.now() - meta.decodeStart) / 1000);
    const schema = this.#ctx.schema;
    const report = this.#report;
    const width = frame.displayWidth;
    const height = frame.displayHeight;
    if (width > schema.maxWidth! || height > schema.maxHeight!) {
      frame.close();
      return report.refuse(
        ServerErrorCode.FrameTooLarge,
        `the camera sends ${width}x${height} frames, beyond track "${schema.name}"'s limit of ${schema.maxWidth}x${schema.maxHeight}; capture at ${schema.width}x${schema.height} as the schema asks`,
      );
    }
    if (!report.takeToken(meta.ptsMs, meta.receivedAtMs)) {
      frame.close();
      return report.refuse(
        ServerErrorCode.FrameRateLimited,
        `more than ${schema.maxFps} frames per second on track "${schema.name}" (its maxFps); the extra frames are dropped: send at most ${schema.maxFps} per second`,
      );
    }
    if (this.#queue.length >= maxConverting(schema)) {
      frame.close();
      return report.refuse(
        ServerErrorCode.FrameRateLimited,
        `the server is still converting ${this.#queue.length} earlier frames of track "${schema.name}"; this one is dropped: send fewer or smaller frames`,
        'decode_backlog',
      );
    }
    const pending: Pending = { done: false, meta };
    this.#queue.push(pending);
    toRgb(frame, schema.width ?? width, schema.height ?? height)
      .then(
        (pic) => Object.assign(pending, pic),
        (err: Error) => (pending.error = err),
      )
      .finally(() => {
        pending.done = true;
        this.#deliver();
      });
  }

  /** Hands converted frames to the host, oldest first, up to the first one still converting. */
  #deliver(): void {
    while (!this.#closed && this.#queue[0]?.done) {
      const p = this.#queue.shift()!;
      if (p.error || !p.rgb) {
        this.#report.refuse(
          ServerErrorCode.UndecodableFrame,
          `a decoded frame of track "${this.#ctx.schema.name}" could not be converted to RGB (${clip(p.error?.message ?? 'no data')})`,
        );
        continue;
      }
      this.#report.deliver({ data: p.rgb, width: p.width!, height: p.height!, ptsMs: p.meta.ptsMs, receivedAtMs: p.meta.receivedAtMs });
    }
  }

  #requestKeyFrame(): void {
    const now = performance.now();
    if (!this.#ctx.requestKeyFrame || now - this.#keyRequestedAt < KEY_FRAME_REQUEST_INTERVAL_MS) return;
    this.#keyRequestedAt = now;
    this.#report.counts.keyFramesRequested++;
    this.#ctx.requestKeyFrame();
  }
}

/** A decoded frame as RGB24 of `width`x`height` (scaled by sharp, off the event loop, when it is another size); closes the frame. */
async function toRgb(frame: NativeVideoFrame, width: number, height: number): Promise<{ rgb: Uint8Array; width: number; height: number }> {
  const w = frame.displayWidth;
  const h = frame.displayHeight;
  let rgba: Uint8Array;
  try {
    rgba = new Uint8Array(frame.allocationSize({ format: 'RGBA' }));
    await frame.copyTo(rgba, { format: 'RGBA' });
  } finally {
    frame.close();
  }
  if (rgba.byteLength < w * h * 4) throw new Error(`the decoder gave ${rgba.byteLength} bytes for a ${w}x${h} picture`);
  if (w === width && h === height) {
    const rgb = new Uint8Array(w * h * 3);
    for (let i = 0, o = 0; o < rgb.length; i += 4, o += 3) {
      rgb[o] = rgba[i]!;
      rgb[o + 1] = rgba[i + 1]!;
      rgb[o + 2] = rgba[i + 2]!;
    }
    return { rgb, width, height };
  }
  const { data } = await sharp(rgba.subarray(0, w * h * 4), { raw: { width: w, height: h, channels: 4 } })
    .removeAlpha()
    .resize(width, height, { fit: 'fill' })
    .raw()
    .toBuffer({ resolveWithObject: true });
  return { rgb: new Uint8Array(data.buffer, data.byteOffset, data.byteLength), width, height };
}

/** An H.264 access unit (Annex B, as the depacketizer gives it) holds an IDR slice: it decodes on its own. */
function hasIdr(au: Uint8Array): boolean {
  for (let i = 0; i + 3 < au.length; i++) {
    if (au[i] === 0 && au[i + 1] === 0 && au[i + 2] === 1 && (au[i + 3]! & 0x1f) === 5) return true;
  }
  return false;
}

function clip(text: string, max = 200): string {
  return text.length <= max ? text : `${text.slice(0, max - 3)}...`;
}
