/**
 * What every intake of inbound frames shares, over the WebSocket (`frame-intake.ts`) and over
 * WebRTC (`rtc-intake-report.ts`): a track's token bucket (its `maxFps`, with a burst), and the
 * `error` that tells the client why a frame was dropped, at most one per cause per second (the
 * rest are counted and mentioned in the next one).
 */
import type { Logger } from '@reactor/log';

/** Shortest interval between two errors of the same cause to one client, ms. */
export const FRAME_ERROR_INTERVAL_MS = 1000;
/** Burst of a track's rate limit, in seconds of its `maxFps`: a publisher may catch up this much after a stall. */
export const FRAME_RATE_BURST_SECONDS = 0.25;

/** A track's token bucket: `maxFps` tokens a second, up to its burst; a frame takes one. */
export interface TokenBucket {
  tokens: number;
  /** The clock's time of the last refill (undefined before the first frame). */
  at: number | undefined;
}

/** The burst of a track of `maxFps` over `seconds` of it (at least one frame). */
export function rateBurst(maxFps: number | undefined, seconds = FRAME_RATE_BURST_SECONDS): number {
  return Math.max(1, Math.ceil((maxFps ?? 1) * seconds));
}

/** Refills `b` up to `burst` at `rate` a second for the time since its last refill; returns its tokens. */
export function refill(b: TokenBucket, now: number, rate: number, burst: number): number {
  if (b.at !== undefined && now > b.at) b.tokens = Math.min(burst, b.tokens + ((now - b.at) / 1000) * rate);
  b.at = b.at === undefined ? now : Math.max(b.at, now);
  return b.tokens;
}

/** The rate-limited `error` about dropped frames, one per cause per second, to one client. */
export class DropErrorThrottle<C extends string> {
  readonly #logger: Logger;
  readonly #send: (code: C, message: string) => void;
  readonly #lastError = new Map<C, number>();
  readonly #unsent = new Map<C, number>();

  constructor(logger: Logger, send: (code: C, message: string) => void) {
    this.#logger = logger;
    this.#send = send;
  }

  /** Tells the client why a frame of `track` was dropped, unless it was told of this cause less than a second ago. */
  report(track: string, code: C, message: string): void {
    const now = performance.now();
    const last = this.#lastError.get(code);
    if (last !== undefined && now - last < FRAME_ERROR_INTERVAL_MS) {
      this.#unsent.set(code, (this.#unsent.get(code) ?? 0) + 1);
      return;
    }
    this.#lastError.set(code, now);
    const unsent = this.#unsent.get(code) ?? 0;
    this.#unsent.delete(code);
    this.#logger.debug({ track, code }, message);
    this.#send(code, unsent > 0 ? `${message} (${unsent} more frame${unsent === 1 ? '' : 's'} dropped for this cause since the last such error)` : message);
  }
}
