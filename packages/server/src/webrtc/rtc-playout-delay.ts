/**
 * The playout delay one WebRTC viewer is asked for (the playout-delay RTP header extension:
 * a min and max of 12 bits each, in 10 ms units), chosen from that viewer's own feedback.
 *
 * On a clean path: 0..0, which makes Chromium render each frame as soon as it decodes, with no
 * smoothing buffer (the loopback latency target). On a lossy one that costs frames: a packet lost
 * and repaired by NACK arrives about one round trip late, the frames behind it wait for it, and
 * when they all decode together only the newest is shown: a stall, then a jump. So while the
 * viewer keeps sending NACKs (at least {@link LOSSY_NACKS} within {@link LOSSY_WINDOW_MS}), it is
 * asked for a delay that covers one repair (its round trip plus {@link REPAIR_MARGIN_MS}, within
 * {@link MIN_DELAY_MS}..{@link MAX_DELAY_MS}); after {@link QUIET_MS} without a NACK it is back to
 * 0..0. Chromium honours each change of the extension. Pure logic with an injected clock.
 */

/** NACK messages within {@link LOSSY_WINDOW_MS} that make a viewer's path lossy. */
export const LOSSY_NACKS = 2;
export const LOSSY_WINDOW_MS = 5000;
/** Time without a NACK after which the path is clean again. */
export const QUIET_MS = 10_000;
/** Added to the round trip: the receiver's gap detection, the retransmission's own send and decode. */
const REPAIR_MARGIN_MS = 50;
const MIN_DELAY_MS = 60;
const MAX_DELAY_MS = 400;
/** Round trip assumed before one is measured. */
const DEFAULT_RTT_MS = 100;

/** A playout-delay range, ms (multiples of 10). */
export interface PlayoutDelay {
  minMs: number;
  maxMs: number;
}

/** The 3-byte payload of the playout-delay extension: min and max in 10 ms units, 12 bits each. */
export function playoutDelayPayload(d: PlayoutDelay): Buffer {
  const min = Math.min(0xfff, Math.round(d.minMs / 10));
  const max = Math.min(0xfff, Math.round(d.maxMs / 10));
  return Buffer.from([min >> 4, ((min & 0xf) << 4) | (max >> 8), max & 0xff]);
}

export class PlayoutDelayPolicy {
  readonly #now: () => number;
  /** Times of the recent NACK messages (within LOSSY_WINDOW_MS). */
  #nacks: number[] = [];
  #lastNack = -Infinity;
  #rttMs: number | undefined;
  #delay: PlayoutDelay = { minMs: 0, maxMs: 0 };
  #payload = playoutDelayPayload(this.#delay);
  #raises = 0;

  constructor(now: () => number = () => performance.now()) {
    this.#now = now;
  }

  /** A NACK message from the viewer (its browser lost a packet and asks for it again). */
  nack(): void {
    const now = this.#now();
    this.#lastNack = now;
    this.#nacks.push(now);
    while (this.#nacks.length > 0 && now - this.#nacks[0]! > LOSSY_WINDOW_MS) this.#nacks.shift();
  }

  /** The round trip to the viewer, as measured from its receiver reports. */
  rtt(ms: number | undefined): void {
    if (ms !== undefined && Number.isFinite(ms) && ms >= 0) this.#rttMs = ms;
  }

  /** How many times this viewer was moved off 0..0 (a lossy spell began). */
  get raises(): number {
    return this.#raises;
  }

  /** The delay to ask for now. */
  get delay(): PlayoutDelay {
    this.#update();
    return this.#delay;
  }

  /** The extension payload to send now (the same Buffer while the delay does not change). */
  payload(): Buffer {
    this.#update();
    return this.#payload;
  }

  #update(): void {
    const now = this.#now();
    const lossy = this.#delay.maxMs > 0 ? now - this.#lastNack < QUIET_MS : this.#nacks.filter((t) => now - t <= LOSSY_WINDOW_MS).length >= LOSSY_NACKS;
    let next: PlayoutDelay = { minMs: 0, maxMs: 0 };
    if (lossy) {
      const ms = Math.min(MAX_DELAY_MS, Math.max(MIN_DELAY_MS, Math.ceil(((this.#rttMs ?? DEFAULT_RTT_MS) + REPAIR_MARGIN_MS) / 10) * 10));
      // While lossy the range only grows (a jitter buffer that shrinks back and forth is worse than one a little long).
      // min = max: with min 0 Chromium's own target (its jitter estimate) hid fewer repairs (docs/decisions.md).
      const d = Math.max(ms, this.#delay.maxMs);
      next = { minMs: d, maxMs: d };
    }
    if (next.minMs === this.#delay.minMs && next.maxMs === this.#delay.maxMs) return;
    if (this.#delay.maxMs === 0) this.#raises++;
    this.#delay = next;
    this.#payload = playoutDelayPayload(next);
  }
}
