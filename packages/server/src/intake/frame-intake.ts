/**
 * Binary frames one client sends to the app's inbound tracks: every frame is checked, in this
 * order, against what the schema declares (track index, direction, publisher, encoding, rate,
 * size limits, header vs payload), decoded (JPEG on the thread pool, RGB and PCM copied), and
 * handed to the host in arrival order.
 *
 * A refused frame is dropped and counted (`reactor_input_frames_dropped_total{track,reason}`),
 * and the client gets an `error` naming the cause, at most one per cause per second (the rest
 * are counted and mentioned in the next one); the connection and the session are untouched.
 * Memory stays bounded: at most {@link MAX_FRAMES_PENDING_PER_TRACK} frames of a track wait for
 * their decode (or behind one), newer ones are dropped (`decode_backlog`).
 */
import type { RawData } from 'ws';
import { FrameEncoding, decodeFrame, type DecodedFrame, type TrackSchema } from '@reactor/protocol';
import type { Logger } from '@reactor/log';
import type { ClientHandle, InboundFrame } from '@reactor/runtime';
import { DropErrorThrottle, rateBurst, refill, type TokenBucket } from '../base/drop-report.js';
import { ServerErrorCode } from '../base/errors.js';
import { jpegSize, type FrameDecoder } from './frame-decoder.js';
import type { ServerMetrics } from '../base/metrics.js';

/** Frames of one track that may wait for delivery (decoding, or decoded behind an earlier one still decoding). */
export const MAX_FRAMES_PENDING_PER_TRACK = 3;

/** Why an inbound frame was dropped: a frame error code, or one of the intake's own reasons. */
export type InputDropReason =
  | typeof ServerErrorCode.UnknownTrack
  | typeof ServerErrorCode.WrongTrackDirection
  | typeof ServerErrorCode.NotPublisher
  | typeof ServerErrorCode.WrongEncoding
  | typeof ServerErrorCode.FrameRateLimited
  | typeof ServerErrorCode.FrameTooLarge
  | typeof ServerErrorCode.FrameHeaderMismatch
  | typeof ServerErrorCode.UndecodableFrame
  /** More than {@link MAX_FRAMES_PENDING_PER_TRACK} frames of the track waiting (answered `frame_rate_limited`). */
  | 'decode_backlog'
  /** The host refused it (`pushFrame` returned false: the track was released meanwhile). */
  | 'not_accepted'
  /** The client left while the frame was being decoded. */
  | 'disconnected';

type FrameErrorCode = Exclude<InputDropReason, 'decode_backlog' | 'not_accepted' | 'disconnected'>;

/** Header and metadata allowance of an inbound frame, beyond its largest payload. */
const FRAME_OVERHEAD_BYTES = 64 * 1024;

/** The largest binary frame an inbound track may need: RGB24 at its size limit, or one second of PCM. */
export function frameBytesFor(t: TrackSchema): number {
  const payload = t.kind === 'audio' ? (t.sampleRate ?? 48_000) * 2 : (t.maxWidth ?? 1920) * (t.maxHeight ?? 1080) * 3;
  return FRAME_OVERHEAD_BYTES + payload;
}

/** The `track` label of a frame whose header names no track (bounded label set). */
const UNKNOWN_TRACK_LABEL = '(unknown)';

/** Counters of one connection's intake (see `ConnectionInfo`). */
export interface FrameIntakeInfo {
  received: number;
  accepted: number;
  dropped: number;
  /** Frames waiting for delivery now, all tracks. */
  pending: number;
  /** The most frames that ever waited at once on one track (at most {@link MAX_FRAMES_PENDING_PER_TRACK}). */
  pendingPeak: number;
}

/** What the intake needs from its connection and server. */
export interface FrameIntakeContext {
  /** `schema.tracks`: inbound first, then outbound; a frame's `track` indexes it. */
  readonly tracks: readonly TrackSchema[];
  readonly handle: ClientHandle;
  readonly decoder: FrameDecoder;
  readonly metrics: ServerMetrics;
  readonly logger: Logger;
  /** Sends an `error` to the client (the intake has already rate-limited it). */
  sendError(code: FrameErrorCode, message: string): void;
}

interface Pending {
  done: boolean;
  frame?: InboundFrame;
  refusal?: { code: FrameErrorCode; message: string };
}

/** One inbound track as one connection sends it: its rate bucket and its frames waiting for delivery. */
interface TrackIntake {
  readonly schema: TrackSchema;
  readonly bucket: TokenBucket;
  readonly queue: Pending[];
}

/** One connection's binary frame intake (see the module comment). */
export class FrameIntake {
  readonly #ctx: FrameIntakeContext;
  readonly #tracks = new Map<number, TrackIntake>();
  readonly #errors: DropErrorThrottle<FrameErrorCode>;
  #closed = false;
  #received = 0;
  #accepted = 0;
  #dropped = 0;
  #pendingPeak = 0;

  constructor(ctx: FrameIntakeContext) {
    this.#ctx = ctx;
    this.#errors = new DropErrorThrottle(ctx.logger, (code, message) => ctx.sendError(code, message));
  }

  /** A snapshot of the counters. */
  info(): FrameIntakeInfo {
    let pending = 0;
    for (const t of this.#tracks.values()) pending += t.queue.length;
    return { received: this.#received, accepted: this.#accepted, dropped: this.#dropped, pending, pendingPeak: this.#pendingPeak };
  }

  /** One binary message, `receivedAtMs` being `performance.now()` when it arrived. */
  receive(data: RawData, receivedAtMs: number): void {
    if (this.#closed) return;
    this.#received++;
    let f: DecodedFrame;
    try {
      f = decodeFrame(toBytes(data));
    } catch (err) {
      this.#ctx.metrics.inputFramesReceived.inc({ track: UNKNOWN_TRACK_LABEL });
      return this.#refuse(
        UNKNOWN_TRACK_LABEL,
        ServerErrorCode.UndecodableFrame,
        `a binary message is not a frame: ${clip((err as Error).message)}; send the 32-byte frame header (docs/protocol.md, "Binary frames") then the payload`,
      );
    }
    const schema = this.#ctx.tracks[f.track];
    if (!schema) {
      this.#ctx.metrics.inputFramesReceived.inc({ track: UNKNOWN_TRACK_LABEL });
      return this.#refuse(
        UNKNOWN_TRACK_LABEL,
        ServerErrorCode.UnknownTrack,
        `frame for track index ${f.track}, but schema.tracks has ${this.#ctx.tracks.length}; ${this.#inboundList()}`,
      );
    }
    const name = schema.name;
    this.#ctx.metrics.inputFramesReceived.inc({ track: name });
    if (schema.direction !== 'in') {
      return this.#refuse(
        name,
        ServerErrorCode.WrongTrackDirection,
        `track index ${f.track} ("${name}") is an outbound track (the app streams it); ${this.#inboundList()}`,
      );
    }
    if (!this.#ctx.handle.publishes(name)) {
      return this.#refuse(
        name,
        ServerErrorCode.NotPublisher,
        `this client does not publish track "${name}"; send {"type":"publish","id":"1","track":"${name}"} and wait for its reply before sending frames`,
      );
    }
    const video = schema.kind === 'video';
    if (video ? f.encoding !== FrameEncoding.Jpeg && f.encoding !== FrameEncoding.Rgb : f.encoding !== FrameEncoding.PcmS16le) {
      return this.#refuse(
        name,
        ServerErrorCode.WrongEncoding,
        `frame encoding ${f.encoding} does not fit ${schema.kind} track "${name}": ${video ? 'send JPEG (0) or RGB24 (1)' : 'send PCM s16le (2)'}`,
      );
    }
    const track = this.#track(f.track, schema);
    if (!takeToken(track, receivedAtMs)) {
      return this.#refuse(
        name,
        ServerErrorCode.FrameRateLimited,
        `more than ${schema.maxFps} frames per second on track "${name}" (its maxFps); the extra frames are dropped: send at most ${schema.maxFps} per second`,
      );
    }
    const refusal = video ? checkVideo(f, schema) : checkAudio(f, schema);
    if (refusal) return this.#refuse(name, refusal.code, refusal.message);
    if (track.queue.length >= MAX_FRAMES_PENDING_PER_TRACK) {
      return this.#refuse(
        name,
        ServerErrorCode.FrameRateLimited,
        `the server is still decoding ${track.queue.length} earlier frames of track "${name}"; this one is dropped: send fewer or smaller frames`,
        'decode_backlog',
      );
    }
    const pending: Pending = { done: false };
    track.queue.push(pending);
    this.#pendingPeak = Math.max(this.#pendingPeak, track.queue.length);
    const base = { ptsMs: f.ptsMs, receivedAtMs, ...(f.metadata !== undefined ? { metadata: f.metadata } : {}) };
    if (f.encoding === FrameEncoding.PcmS16le) {
      pending.frame = { ...base, data: pcmFromLittleEndian(f.payload), sampleRate: schema.sampleRate! };
      pending.done = true;
    } else if (f.encoding === FrameEncoding.Rgb) {
      // A copy: the message buffer may be a slice of a larger socket read, which the host must not keep alive.
      pending.frame = { ...base, data: f.payload.slice(), width: f.width, height: f.height };
      pending.done = true;
    } else {
      this.#decode(track, pending, f, base);
      return;
    }
    this.#deliver(track);
  }

  /** The client left: frames still waiting are dropped (their decodes finish and are discarded). */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const t of this.#tracks.values()) {
      if (t.queue.length > 0) this.#count(t.schema.name, 'disconnected', t.queue.length);
      t.queue.length = 0;
    }
  }

  #decode(track: TrackIntake, pending: Pending, f: DecodedFrame, base: Pick<InboundFrame, 'ptsMs' | 'receivedAtMs' | 'metadata'>): void {
    const schema = track.schema;
    this.#ctx.decoder
      .decodeJpeg(f.payload, schema.maxWidth! * schema.maxHeight!)
      .then(
        (pic) => {
          if (pic.width !== f.width || pic.height !== f.height) {
            pending.refusal = {
              code: ServerErrorCode.FrameHeaderMismatch,
              message: `the JPEG decodes to ${pic.width}x${pic.height} but the header says ${f.width}x${f.height} (track "${schema.name}"); fill the header from the picture you send`,
            };
          } else {
            pending.frame = { ...base, data: pic.data, width: pic.width, height: pic.height };
          }
        },
        (err: Error) => {
          pending.refusal = {
            code: ServerErrorCode.UndecodableFrame,
            message: `a JPEG frame of track "${schema.name}" cannot be decoded (${clip(err.message)}); send complete baseline or progressive JPEG files`,
          };
        },
      )
      .finally(() => {
        pending.done = true;
        this.#deliver(track);
      });
  }

  /** Hands the track's decoded frames to the host, oldest first, up to the first one still decoding. */
  #deliver(track: TrackIntake): void {
    while (!this.#closed && track.queue[0]?.done) {
      const next = track.queue.shift()!;
      const name = track.schema.name;
      if (next.refusal) {
        this.#refuse(name, next.refusal.code, next.refusal.message);
      } else if (this.#ctx.handle.pushFrame(name, next.frame!)) {
        this.#accepted++;
        this.#ctx.metrics.inputFramesAccepted.inc({ track: name });
      } else {
        this.#count(name, 'not_accepted', 1);
      }
    }
  }

  #track(index: number, schema: TrackSchema): TrackIntake {
    let t = this.#tracks.get(index);
    if (!t) {
      t = { schema, bucket: { tokens: rateBurst(schema.maxFps), at: undefined }, queue: [] };
      this.#tracks.set(index, t);
    }
    return t;
  }

  #inboundList(): string {
    const inbound = this.#ctx.tracks.flatMap((t, i) => (t.direction === 'in' ? [`${i} ("${t.name}", ${t.kind})`] : []));
    return `send frames only to an inbound track: ${inbound.join(', ') || '(none)'}`;
  }

  #count(track: string, reason: InputDropReason, n: number): void {
    this.#dropped += n;
    this.#ctx.metrics.inputFramesDropped.inc({ track, reason }, n);
  }

  /** Drops a frame: counted, and the client told unless it was told of this cause less than a second ago. */
  #refuse(track: string, code: FrameErrorCode, message: string, reason: InputDropReason = code): void {
    this.#count(track, reason, 1);
    this.#errors.report(track, code, message);
  }
}

/** The track's token bucket: `maxFps` tokens a second, up to its burst; a frame takes one. */
function takeToken(t: TrackIntake, now: number): boolean {
  if (refill(t.bucket, now, t.schema.maxFps ?? Infinity, rateBurst(t.schema.maxFps)) < 1) return false;
  t.bucket.tokens -= 1;
  return true;
}

interface Refusal {
  code: FrameErrorCode;
  message: string;
}

/** A video frame's header against the track's limits, then against its payload (JPEG: its own header). */
function checkVideo(f: DecodedFrame, t: TrackSchema): Refusal | undefined {
  const maxW = t.maxWidth!;
  const maxH = t.maxHeight!;
  if (f.width > maxW || f.height > maxH) {
    return {
      code: ServerErrorCode.FrameTooLarge,
      message: `a ${f.width}x${f.height} frame is beyond track "${t.name}"'s limit of ${maxW}x${maxH}; capture at ${t.width}x${t.height} as the schema asks`,
    };
  }
  const lie = (what: string): Refusal => ({
    code: ServerErrorCode.FrameHeaderMismatch,
    message: `${what} (track "${t.name}"); fill the header from the payload you send`,
  });
  if (f.width === 0 || f.height === 0) return lie(`the header says the frame is ${f.width}x${f.height}`);
  if (!Number.isFinite(f.ptsMs)) return lie(`the header's presentation time is ${f.ptsMs}, not a finite number`);
  if (f.encoding === FrameEncoding.Rgb) {
    const expected = f.width * f.height * 3;
    if (f.payload.byteLength !== expected) return lie(`an RGB payload of ${f.payload.byteLength} bytes, but ${f.width}x${f.height}x3 is ${expected}`);
    return undefined;
  }
  const size = jpegSize(f.payload);
  if (!size) {
    return {
      code: ServerErrorCode.UndecodableFrame,
      message: `the payload of a JPEG frame of track "${t.name}" is not a JPEG file (no start-of-frame header found); send complete JPEG files`,
    };
  }
  if (size.width !== f.width || size.height !== f.height) return lie(`the JPEG is ${size.width}x${size.height} but the header says ${f.width}x${f.height}`);
  return undefined;
}

/** An audio chunk's header against the track's limit (one second of samples), then against its payload. */
function checkAudio(f: DecodedFrame, t: TrackSchema): Refusal | undefined {
  const rate = t.sampleRate!;
  if (f.width > rate) {
    return {
      code: ServerErrorCode.FrameTooLarge,
      message: `an audio chunk of ${f.width} samples is longer than one second at track "${t.name}"'s ${rate} Hz; send shorter chunks (e.g. 10-20 ms)`,
    };
  }
  const lie = (what: string): Refusal => ({
    code: ServerErrorCode.FrameHeaderMismatch,
    message: `${what} (track "${t.name}"); the header's width is the sample count and its height 1 (mono)`,
  });
  if (f.height !== 1) return lie(`the header says ${f.height} channels`);
  if (f.width === 0) return lie('an audio chunk of 0 samples: the host has nothing to play from it');
  if (!Number.isFinite(f.ptsMs)) return lie(`the header's presentation time is ${f.ptsMs}, not a finite number`);
  if (f.payload.byteLength % 2 !== 0) return lie(`a PCM payload of ${f.payload.byteLength} bytes, an odd length for 16-bit samples`);
  if (f.payload.byteLength / 2 !== f.width) return lie(`a PCM payload of ${f.payload.byteLength / 2} samples, but the header says ${f.width}`);
  return undefined;
}

/** Little-endian s16 samples into an aligned `Int16Array` of their own (a copy: the message's bytes may be unaligned). */
function pcmFromLittleEndian(bytes: Uint8Array): Int16Array {
  const out = new Int16Array(bytes.byteLength / 2);
  // Node runs on little-endian machines (x64, arm64): the bytes are the samples.
  new Uint8Array(out.buffer).set(bytes);
  return out;
}

function toBytes(data: RawData): Uint8Array {
  if (Array.isArray(data)) return Buffer.concat(data);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  return data;
}

function clip(text: string, max = 200): string {
  return text.length <= max ? text : `${text.slice(0, max - 3)}...`;
}
