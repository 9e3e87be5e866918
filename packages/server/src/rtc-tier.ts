/**
 * A WebRTC viewer's tier, chosen from its own congestion feedback: the browser's bandwidth
 * estimate (REMB) and the loss its receiver reports show. The same hysteresis as the client's
 * `TierController`: down after 2 bad windows in a row, up after 10 s stable on a tier (doubled
 * after a failed step up, at most 120 s), 2 s after a switch not judged. Pure logic.
 */
import type { VideoTierSchema } from '@reactor/protocol';

/** A move the controller asks for. */
export interface RtcTierDecision {
  tier: VideoTierSchema;
  direction: 'down' | 'up';
  reason: string;
}

const WINDOW_MS = 1000;
const DOWN_AFTER = 2;
const UP_AFTER_MS = 10_000;
const MAX_UP_HOLD_MS = 120_000;
const SETTLE_MS = 2000;
/**
 * A window is bad when the browser's estimate is under this share of what we really sent in it
 * (the path does not carry the tier), or its loss is over LOSS_BAD. The tier's nominal bitrate
 * is not the yardstick: a small or static picture sends far less than it, and REMB follows the
 * rate received.
 */
const HEADROOM = 0.85;
const LOSS_BAD = 0.1;
/** Stepping up needs an estimate this far above what is sent now (Chromium raises it only while the path keeps up). */
const UP_MARGIN = 1.2;

export class RtcTierController {
  /** Highest bitrate first. */
  readonly #tiers: VideoTierSchema[];
  #index: number;
  readonly #now: () => number;
  #windowStart: number;
  #estimate: number | undefined;
  #loss = 0;
  #bytes = 0;
  #badRun = 0;
  #goodSince: number;
  #settleUntil: number;
  readonly #upHold: number[];
  readonly #triedUpAt: (number | undefined)[];

  constructor(tiers: readonly VideoTierSchema[], initial: VideoTierSchema, now: () => number = () => performance.now()) {
    this.#tiers = [...tiers].sort((a, b) => b.bitrate - a.bitrate);
    this.#index = Math.max(
      0,
      this.#tiers.findIndex((t) => t.name === initial.name),
    );
    this.#now = now;
    const t = now();
    this.#windowStart = t;
    this.#goodSince = t;
    this.#settleUntil = t + SETTLE_MS;
    this.#upHold = this.#tiers.map(() => UP_AFTER_MS);
    this.#triedUpAt = this.#tiers.map(() => undefined);
  }

  get tier(): VideoTierSchema {
    return this.#tiers[this.#index]!;
  }

  /** The last bandwidth estimate (bits per second), if any. */
  get estimate(): number | undefined {
    return this.#estimate;
  }

  /** A REMB: the browser's estimate of what the path carries, bits per second. */
  remb(bitrate: number): void {
    this.#estimate = bitrate;
  }

  /** Bytes sent to this viewer (counted into the current window). */
  sent(bytes: number): void {
    this.#bytes += bytes;
  }

  /** A receiver report's fraction lost (0..1). */
  loss(fraction: number): void {
    this.#loss = Math.max(this.#loss, fraction);
  }

  /** Closes the window when it is due; returns a move when one is needed. */
  tick(): RtcTierDecision | undefined {
    const now = this.#now();
    const elapsed = now - this.#windowStart;
    if (elapsed < WINDOW_MS) return undefined;
    this.#windowStart = now;
    const loss = this.#loss;
    this.#loss = 0;
    const rate = (this.#bytes * 8 * 1000) / elapsed;
    this.#bytes = 0;
    const est = this.#estimate;
    if (now <= this.#settleUntil || est === undefined) return undefined;
    const cur = this.tier;
    const bad = est < rate * HEADROOM || loss > LOSS_BAD;
    if (bad) {
      this.#goodSince = now;
      if (++this.#badRun < DOWN_AFTER || this.#index === this.#tiers.length - 1) return undefined;
      // A step up that failed within its hold: that tier waits twice as long next time.
      const tried = this.#triedUpAt[this.#index];
      if (tried !== undefined && now - tried < this.#upHold[this.#index]!) {
        this.#upHold[this.#index] = Math.min(MAX_UP_HOLD_MS, this.#upHold[this.#index]! * 2);
      }
      const reason =
        loss > LOSS_BAD
          ? `${Math.round(loss * 100)}% loss`
          : `estimate ${Math.round(est / 1000)} kbit/s under the ${Math.round(rate / 1000)} kbit/s sent on tier ${cur.name}`;
      return this.#move(this.#index + 1, 'down', reason, now);
    }
    this.#badRun = 0;
    if (this.#index === 0) return undefined;
    const up = this.#tiers[this.#index - 1]!;
    if (now - this.#goodSince >= this.#upHold[this.#index - 1]! && est >= rate * UP_MARGIN) {
      this.#triedUpAt[this.#index - 1] = now;
      return this.#move(
        this.#index - 1,
        'up',
        `estimate ${Math.round(est / 1000)} kbit/s over the ${Math.round(rate / 1000)} kbit/s sent: trying tier ${up.name}`,
        now,
      );
    }
    return undefined;
  }

  #move(index: number, direction: 'down' | 'up', reason: string, now: number): RtcTierDecision {
    this.#index = index;
    this.#badRun = 0;
    this.#goodSince = now;
    this.#settleUntil = now + SETTLE_MS;
    return { tier: this.tier, direction, reason };
  }
}
