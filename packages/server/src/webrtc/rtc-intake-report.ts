/**
 * What the intakes of WebRTC tracks share with the WebSocket's frame intake: every frame is
 * counted (`reactor_input_frames_*_total{track}`), a dropped one with its reason, and the client
 * is told why in an `error`, at most one per cause per second (the rest are counted and
 * mentioned in the next one): the token bucket and that error are `drop-report.ts`'s, as for
 * binary frames in `frame-intake.ts`.
 */
import type { Logger } from '@reactor/log';
import type { ClientHandle, InboundFrame } from '@reactor/runtime';
import type { TrackSchema } from '@reactor/protocol';
import type { ServerErrorCode } from '../base/errors.js';
import { DropErrorThrottle, rateBurst, refill, type TokenBucket } from '../base/drop-report.js';
import type { InputDropReason } from '../intake/frame-intake.js';
import type { ServerMetrics } from '../base/metrics.js';

/** The error codes a WebRTC track's intake answers with. */
export type RtcIntakeErrorCode =
  | typeof ServerErrorCode.NotPublisher
  | typeof ServerErrorCode.FrameRateLimited
  | typeof ServerErrorCode.FrameTooLarge
  | typeof ServerErrorCode.UndecodableFrame;

/**
 * Why a frame of a WebRTC track was dropped: the intake's reasons, or `packet_loss` (packets of
 * the frame never came, or it needs a frame that did not: the frames up to the next key frame,
 * which the server asks for at once, are dropped).
 */
export type RtcDropReason = Extract<InputDropReason, RtcIntakeErrorCode | 'decode_backlog' | 'not_accepted' | 'disconnected'> | 'packet_loss';

/** What an intake of one inbound WebRTC track needs from its connection. */
export interface RtcTrackIntakeContext {
  /** The inbound track (its schema entry). */
  readonly schema: TrackSchema;
  readonly handle: ClientHandle;
  readonly metrics: ServerMetrics;
  readonly logger: Logger;
  /** Sends an `error` to the client (already rate-limited here). */
  sendError(code: RtcIntakeErrorCode, message: string): void;
  /** Asks the sender for a key frame (an RTCP PLI on the track); video only. */
  requestKeyFrame?(): void;
}

/** Counters of one WebRTC track's intake. */
export interface RtcIntakeInfo {
  /** Frames (audio: Opus packets) reassembled from RTP. */
  received: number;
  /** Handed to the app. */
  accepted: number;
  dropped: number;
  /** Key frames asked of the sender (PLI). */
  keyFramesRequested: number;
  /** Frames in the decoder or being converted now (`received` = `accepted` + `dropped` + `pending`). */
  pending: number;
}

/** Arrival bursts a WebRTC track's rate limit allows, in seconds of its `maxFps` (see {@link RtcIntakeReport.takeToken}). */
export const RTC_WALL_BURST_SECONDS = 2;

/** Counting, dropping with a rate-limited error, the track's token bucket, and delivery to the host. */
export class RtcIntakeReport {
  readonly #ctx: RtcTrackIntakeContext;
  readonly #errors: DropErrorThrottle<RtcIntakeErrorCode>;
  readonly #media: TokenBucket;
  readonly #wall: TokenBucket;
  readonly counts: Omit<RtcIntakeInfo, 'pending'> = { received: 0, accepted: 0, dropped: 0, keyFramesRequested: 0 };

  constructor(ctx: RtcTrackIntakeContext) {
    this.#ctx = ctx;
    this.#errors = new DropErrorThrottle(ctx.logger, (code, message) => ctx.sendError(code, message));
    // Each bucket starts full at its own burst: a stall in the first seconds of a publication
    // bunches its first frames as it does later ones.
    this.#media = { tokens: this.#burst(), at: undefined };
    this.#wall = { tokens: this.#wallBurst(), at: undefined };
  }

  get track(): string {
    return this.#ctx.schema.name;
  }

  /** One frame came in (counted before any check). */
  received(): void {
    this.counts.received++;
    this.#ctx.metrics.inputFramesReceived.inc({ track: this.track });
  }

  /** Drops `n` frames silently (counted under `reason`). */
  drop(reason: RtcDropReason, n = 1): void {
    if (n <= 0) return;
    this.counts.dropped += n;
    this.#ctx.metrics.inputFramesDropped.inc({ track: this.track, reason }, n);
  }

  /** Drops a frame and tells the client why (at most once per cause per second). */
  refuse(code: RtcIntakeErrorCode, message: string, reason: RtcDropReason = code): void {
    this.drop(reason);
    this.#errors.report(this.track, code, message);
  }

  /**
   * The track's `maxFps`, as over the WebSocket, but on two clocks: the sender's media time
   * (`mediaMs`, from RTP timestamps: the rate it captures at, burst a quarter second's worth as
   * over the WebSocket), and arrival time (`wallMs`) with a burst of {@link RTC_WALL_BURST_SECONDS}:
   * packets bunch on their way (a busy event loop, a Wi-Fi burst) without the sender sending
   * faster, and a sender that lies in its timestamps is still held to the rate.
   * @returns `false` when this frame is over either.
   */
  takeToken(mediaMs: number, wallMs = performance.now()): boolean {
    const rate = this.#ctx.schema.maxFps ?? Infinity;
    const media = refill(this.#media, mediaMs, rate, this.#burst());
    const wall = refill(this.#wall, wallMs, rate, this.#wallBurst());
    if (media < 1 || wall < 1) return false;
    this.#media.tokens -= 1;
    this.#wall.tokens -= 1;
    return true;
  }

  /** A decoded frame into the app's buffer: counted accepted, or dropped (`not_accepted`) when the host refuses it. */
  deliver(frame: InboundFrame): void {
    if (this.#ctx.handle.pushFrame(this.track, frame)) {
      this.counts.accepted++;
      this.#ctx.metrics.inputFramesAccepted.inc({ track: this.track });
    } else {
      this.drop('not_accepted');
    }
  }

  #burst(): number {
    return rateBurst(this.#ctx.schema.maxFps);
  }

  /** The arrival clock's burst: {@link RTC_WALL_BURST_SECONDS} of the track's `maxFps`. */
  #wallBurst(): number {
    return rateBurst(this.#ctx.schema.maxFps, RTC_WALL_BURST_SECONDS);
  }
}

/**
 * RTP timestamps (32 bits, wrapping, random start) as a clock that starts at the first packet:
 * microseconds since it (for the decoder) and the matching server time in ms (the frame's `ptsMs`).
 */
export class RtpClock {
  readonly #rate: number;
  #base: number | undefined;
  #prev = 0;
  #wraps = 0;
  #startMs = 0;

  constructor(clockRate: number) {
    this.#rate = clockRate;
  }

  /** Microseconds since the first timestamp seen (`receivedAtMs` is when that one arrived). */
  micros(timestamp: number, receivedAtMs: number): number {
    if (this.#base === undefined) {
      this.#base = timestamp;
      this.#prev = timestamp;
      this.#startMs = receivedAtMs;
    }
    // A jump back of more than half the range is a wrap; a small one a reordered packet.
    if (timestamp < this.#prev && this.#prev - timestamp > 0x80000000) this.#wraps++;
    else if (timestamp > this.#prev && timestamp - this.#prev > 0x80000000) this.#wraps--;
    this.#prev = timestamp;
    const ticks = timestamp + this.#wraps * 0x1_0000_0000 - this.#base;
    return Math.round((ticks * 1_000_000) / this.#rate);
  }

  /** The capture time of a frame at `micros` on the server's clock (ms): the first frame's arrival, plus the sender's spacing. */
  ptsMs(micros: number): number {
    return this.#startMs + micros / 1000;
  }
}
