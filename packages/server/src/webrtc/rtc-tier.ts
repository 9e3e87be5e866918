/**
 * A WebRTC viewer's tier, chosen from its own congestion feedback: the browser's bandwidth
 * estimate (REMB) and the loss its receiver reports show over each window. The hysteresis is the
 * client's (`TierHysteresis` of `@reactor/protocol`: down after 2 bad windows in a row, up after
 * 10 s stable on a tier, doubled after a failed step up, at most 120 s, 2 s after a switch not
 * judged); what makes a window bad is this transport's. A viewer starts on the lowest tier
 * and, until its first step down, ramps up faster: one tier per {@link RAMP_UP_MS} of good
 * windows with the estimate above what is sent (as GCC starts low and probes up), so that a
 * viewer on a narrow path is never sent more than it carries at the start. Pure logic.
 */
import { TierHysteresis, type VideoTierSchema } from '@reactor/protocol';

/** A move the controller asks for. */
export interface RtcTierDecision {
  tier: VideoTierSchema;
  direction: 'down' | 'up';
  reason: string;
}

/** One receiver report block about our stream: cumulative packets lost and the extended highest sequence number received. */
export interface RtcReceiverReport {
  packetsLost: number;
  highestSequence: number;
}

const HYSTERESIS = { windowMs: 1000, downAfterWindows: 2, upAfterMs: 10_000, maxUpHoldMs: 120_000, settleMs: 2000 };
/**
 * A window is bad when the browser's estimate is under this share of what we really sent in it
 * (the path does not carry the tier), or its loss is over LOSS_BAD. The tier's nominal bitrate
 * is not the yardstick: a small or static picture sends far less than it, and REMB follows the
 * rate received.
 */
const HEADROOM = 0.85;
/**
 * Loss over a window is measured from the cumulative counters of the first and last receiver
 * reports in it (packets lost / packets expected), never from a report's own `fraction lost`:
 * Chromium sends a receiver report with every NACK, a few packets apart, so that fraction is one
 * lost packet out of two (50 %) under 2 % random loss. A packet repaired by a retransmission
 * counts as received again, so this is the loss NACK did not repair, which random loss on a path
 * that carries the rate does not raise.
 */
const LOSS_BAD = 0.02;
/**
 * Packets the viewer asked again for (the sequence numbers its NACKs list) over those sent in a
 * window: the loss before repair. Random loss on a path that carries the rate stays at its own
 * level (2 % asks for ~2 %); a path that cannot carry the tier drops whole bursts at its queue
 * (measured: ~10 % asked for at 720p through a 4 Mbit/s cap with 2 % random loss, while the
 * repair kept the loss after it under 1 % and the estimate stayed near what was sent). Over
 * this share the window is bad: the tier is too much for the path even when NACK hides it.
 */
const NACKED_BAD = 0.06;
/** Fewer packets expected over a window than this say nothing about its loss. */
const MIN_EXPECTED = 20;
/** Stepping up needs an estimate this far above what is sent now (Chromium raises it only while the path keeps up). */
const UP_MARGIN = 1.2;
/** Good time with headroom on a tier before the start-up ramp tries the next one, ms (the settling after each switch comes on top). */
export const RAMP_UP_MS = 2000;

export class RtcTierController {
  /** Highest bitrate first. */
  readonly #tiers: VideoTierSchema[];
  readonly #h: TierHysteresis;
  readonly #now: () => number;
  #windowStart: number;
  #estimate: number | undefined;
  /** The last receiver report of the previous window, and the last one so far. */
  #reportAtStart: RtcReceiverReport | undefined;
  #report: RtcReceiverReport | undefined;
  #bytes = 0;
  #packets = 0;
  /** Distinct sequence numbers asked for again in this window (Chromium asks for a missing packet again every round trip). */
  readonly #nacked = new Set<number>();
  /** The start-up ramp runs until the first step down. */
  #ramping = true;
  #rampGoodSince: number | undefined;

  /**
   * @param initial the tier to start on; default the lowest (the start-up ramp takes it up)
   */
  constructor(tiers: readonly VideoTierSchema[], initial?: VideoTierSchema, now: () => number = () => performance.now()) {
    this.#tiers = [...tiers].sort((a, b) => b.bitrate - a.bitrate);
    this.#now = now;
    const t = now();
    this.#windowStart = t;
    const at =
      initial === undefined
        ? this.#tiers.length - 1
        : Math.max(
            0,
            this.#tiers.findIndex((x) => x.name === initial.name),
          );
    this.#h = new TierHysteresis(this.#tiers.length, at, HYSTERESIS, t);
  }

  get tier(): VideoTierSchema {
    return this.#tiers[this.#h.index]!;
  }

  /** The last bandwidth estimate (bits per second), if any. */
  get estimate(): number | undefined {
    return this.#estimate;
  }

  /** A REMB: the browser's estimate of what the path carries, bits per second. */
  remb(bitrate: number): void {
    this.#estimate = bitrate;
  }

  /** Bytes (and RTP packets) sent to this viewer (counted into the current window). */
  sent(bytes: number, packets = 1): void {
    this.#bytes += bytes;
    this.#packets += packets;
  }

  /** The sequence numbers a NACK of this viewer asked for again (each counted once per window). */
  nacked(seqs: readonly number[]): void {
    for (const q of seqs) this.#nacked.add(q & 0xffff);
  }

  /** A receiver report block about this viewer's stream (cumulative counters). */
  report(r: RtcReceiverReport): void {
    this.#reportAtStart ??= r;
    this.#report = r;
  }

  /** Closes the window when it is due; returns a move when one is needed. */
  tick(): RtcTierDecision | undefined {
    const now = this.#now();
    const elapsed = now - this.#windowStart;
    if (elapsed < HYSTERESIS.windowMs) return undefined;
    this.#windowStart = now;
    const loss = this.#windowLoss();
    const rate = (this.#bytes * 8 * 1000) / elapsed;
    const nacked = this.#packets >= MIN_EXPECTED ? this.#nacked.size / this.#packets : 0;
    this.#bytes = 0;
    this.#packets = 0;
    this.#nacked.clear();
    const est = this.#estimate;
    if (this.#h.settling(now) || est === undefined) {
      this.#rampGoodSince = undefined;
      return undefined;
    }
    const cur = this.tier;
    const bad = est < rate * HEADROOM || loss > LOSS_BAD || nacked > NACKED_BAD;
    const headroom = est >= rate * UP_MARGIN;
    let step: { direction: 'down' | 'up' } | undefined;
    if (this.#ramping && !bad && this.#h.index > 0) {
      this.#rampGoodSince = headroom ? (this.#rampGoodSince ?? now - elapsed) : undefined;
      if (this.#rampGoodSince !== undefined && now - this.#rampGoodSince >= RAMP_UP_MS) {
        this.#h.switchTo(this.#h.index - 1, now);
        this.#rampGoodSince = undefined;
        step = { direction: 'up' };
      }
    } else {
      this.#rampGoodSince = undefined;
      step = this.#h.window(now, bad ? 'bad' : 'good', headroom);
      if (step?.direction === 'down') this.#ramping = false;
    }
    if (!step) return undefined;
    const reason =
      step.direction === 'up'
        ? `estimate ${Math.round(est / 1000)} kbit/s over the ${Math.round(rate / 1000)} kbit/s sent: trying tier ${this.tier.name}`
        : loss > LOSS_BAD
          ? `${Math.round(loss * 100)}% loss not repaired`
          : nacked > NACKED_BAD
            ? `${Math.round(nacked * 100)}% of packets asked for again (NACK)`
            : `estimate ${Math.round(est / 1000)} kbit/s under the ${Math.round(rate / 1000)} kbit/s sent on tier ${cur.name}`;
    return { tier: this.tier, direction: step.direction, reason };
  }

  /** Packets lost over the window closing now, of those expected (0 when too few were expected to say). */
  #windowLoss(): number {
    const a = this.#reportAtStart;
    const b = this.#report;
    this.#reportAtStart = b;
    if (!a || !b) return 0;
    const expected = b.highestSequence - a.highestSequence;
    if (expected < MIN_EXPECTED) return 0;
    return Math.max(0, b.packetsLost - a.packetsLost) / expected;
  }
}
