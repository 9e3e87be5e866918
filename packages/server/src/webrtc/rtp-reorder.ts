/**
 * Puts the RTP packets of one stream back in sequence order: a packet that comes early waits
 * for the ones before it (a retransmission the receiver NACKed, or plain reordering) for at most
 * `waitMs` of wall-clock time, or until `maxHeld` packets wait; then the missing ones are given
 * up and reported as a gap. Duplicates and packets older than what was already released are
 * dropped. (werift's jitter buffer loses packets that are still within their wait when an older
 * one times out, and waits by RTP time, which audio DTX stretches; hence this one.)
 */
import type { RtpPacket } from 'werift';

/** What {@link RtpReorder.push} releases, in order. */
export type Released = { rtp: RtpPacket } | { lost: number };

/** One stream's reorder buffer (see the module comment). */
export class RtpReorder {
  readonly #waitMs: number;
  readonly #maxHeld: number;
  /** The next sequence number to release; undefined before the first packet. */
  #next: number | undefined;
  readonly #held = new Map<number, { rtp: RtpPacket; at: number }>();

  constructor(waitMs: number, maxHeld = 512) {
    this.#waitMs = waitMs;
    this.#maxHeld = maxHeld;
  }

  /** Packets waiting for an earlier one. */
  get held(): number {
    return this.#held.size;
  }

  /** One packet in (`now`: `performance.now()`), the packets and gaps it releases out. */
  push(rtp: RtpPacket, now: number): Released[] {
    const seq = rtp.header.sequenceNumber;
    if (this.#next === undefined) this.#next = seq;
    const ahead = (seq - this.#next) & 0xffff;
    // More than half the sequence space ahead: an old packet (a late retransmission or a duplicate).
    if (ahead >= 0x8000 || this.#held.has(seq)) return [];
    const out: Released[] = [];
    if (ahead === 0) {
      out.push({ rtp });
      this.#next = (seq + 1) & 0xffff;
      this.#drain(out);
    } else {
      this.#held.set(seq, { rtp, at: now });
    }
    this.#expire(now, out);
    return out;
  }

  /** Gives up the missing packets before the oldest held one once it waited too long, or the buffer is full. */
  #expire(now: number, out: Released[]): void {
    while (this.#held.size > 0) {
      let oldest: number | undefined;
      let oldestAt = Infinity;
      let nearest = 0x10000;
      for (const [seq, h] of this.#held) {
        const d = (seq - this.#next!) & 0xffff;
        if (d < nearest) {
          nearest = d;
          oldest = seq;
        }
        oldestAt = Math.min(oldestAt, h.at);
      }
      if (now - oldestAt < this.#waitMs && this.#held.size < this.#maxHeld) return;
      out.push({ lost: nearest });
      this.#next = oldest!;
      this.#drain(out);
    }
  }

  #drain(out: Released[]): void {
    for (let h = this.#held.get(this.#next!); h; h = this.#held.get(this.#next!)) {
      this.#held.delete(this.#next!);
      out.push({ rtp: h.rtp });
      this.#next = (this.#next! + 1) & 0xffff;
    }
  }
}
