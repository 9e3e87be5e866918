/**
 * The server-wide budget for unsent bytes: every byte handed to a client socket counts until
 * its write completes (the kernel took it). Checked before each send, so the memory that
 * clients who stop reading can make the server hold is bounded across all of them, not only
 * per connection.
 */

/** A connection as the budget sees it. */
export interface BudgetHolder {
  /** Bytes handed to this client's socket whose write has not completed. */
  readonly unsentBytes: number;
  /** Cuts the client at once (its unsent bytes are released by the holder). */
  evict(reason: string): void;
}

/** The shared budget (one per server). */
export class SendBudget {
  readonly limit: number;
  #used = 0;
  readonly #holders = new Set<BudgetHolder>();

  constructor(limit: number) {
    this.limit = limit;
  }

  /** Unsent bytes across every connection. */
  get used(): number {
    return this.#used;
  }

  add(holder: BudgetHolder): void {
    this.#holders.add(holder);
  }

  remove(holder: BudgetHolder): void {
    this.#holders.delete(holder);
  }

  /** Bytes handed to a socket. */
  take(bytes: number): void {
    this.#used += bytes;
  }

  /** Bytes whose write completed (or that will never be written). */
  release(bytes: number): void {
    this.#used = Math.max(0, this.#used - bytes);
  }

  /**
   * Whether `bytes` more may be sent by `sender`. While they would pass the limit, the client
   * holding the most unsent bytes is cut (`sender` included), if it holds at least
   * `minEvictBytes` and more than its fair share (limit / clients): over the limit, the largest
   * holder always holds more than the fair share, so for `minEvictBytes` 0 the total stays
   * within the limit; a client that reads holds little and is not cut.
   */
  admit(sender: BudgetHolder, bytes: number, minEvictBytes: number): boolean {
    while (this.#used + bytes > this.limit) {
      let worst: BudgetHolder | undefined;
      for (const h of this.#holders) if (!worst || h.unsentBytes > worst.unsentBytes) worst = h;
      if (!worst || worst.unsentBytes < minEvictBytes || worst.unsentBytes * this.#holders.size < this.limit) return false;
      const before = this.#used;
      this.#holders.delete(worst);
      worst.evict(`the server's unsent bytes (${before} of ${this.limit}) ran out and this client held the most (${worst.unsentBytes})`);
      if (worst === sender) return false;
    }
    return true;
  }
}
