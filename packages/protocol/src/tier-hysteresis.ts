/**
 * The hysteresis every tier controller shares (the client SDK's `TierController` over the
 * WebSocket, the server's per-viewer WebRTC controller): down after a run of bad windows (or one
 * severe one), up one tier only after a stable hold on the tier below it, the hold of a tier
 * doubled (up to a cap) each time a step up to it fails before it held, and no window judged for
 * a settling time after any switch. What makes a window bad, and whether a good one may step up,
 * is the caller's: each transport measures its own path. Pure logic, no clock of its own.
 */

/** Times and counts of a {@link TierHysteresis}; every time in ms. */
export interface TierHysteresisOptions {
  /** Length of one measurement window. */
  windowMs: number;
  /** Bad windows in a row that move down one tier. */
  downAfterWindows: number;
  /** Stable time on a tier before trying the one above; doubled after each failed try of that tier. */
  upAfterMs: number;
  /** Upper bound of that hold. */
  maxUpHoldMs: number;
  /** Time after a switch in which no window is judged (the key frame, the new encoder's start). */
  settleMs: number;
}

/** What one window was, as the caller judged it: `severe` moves down at once. */
export type TierWindowVerdict = 'good' | 'bad' | 'severe';

/** A move the hysteresis asks for: tier indexes, highest bitrate first (0). */
export interface TierStep {
  from: number;
  to: number;
  direction: 'down' | 'up';
  /** Bad windows in a row that made a step down. */
  badRun: number;
  /** Time stable on the tier before a step up, ms. */
  stableMs: number;
}

/**
 * The position on a ladder of `count` tiers (index 0 the highest) and the state that keeps it
 * from flapping. Feed it one verdict per closed window ({@link window}); tell it about switches
 * made elsewhere ({@link switchTo}).
 */
export class TierHysteresis {
  readonly #o: TierHysteresisOptions;
  readonly #count: number;
  #index: number;
  #badRun = 0;
  #goodSince: number | undefined;
  #settleUntil: number;
  /** Hold before trying each tier again from below, by index. */
  readonly #upHold: number[];
  /** When each tier was last entered from below (a step up), by index. */
  readonly #triedUpAt: (number | undefined)[];

  constructor(count: number, initial: number, options: TierHysteresisOptions, now: number) {
    this.#o = options;
    this.#count = count;
    this.#index = Math.min(Math.max(0, initial), count - 1);
    this.#settleUntil = now + options.settleMs;
    this.#upHold = Array.from({ length: count }, () => options.upAfterMs);
    this.#triedUpAt = Array.from({ length: count }, () => undefined);
  }

  /** The current tier's index (0: the highest). */
  get index(): number {
    return this.#index;
  }

  /** Whether a window closing at `now` is still in the settling time after a switch (not judged). */
  settling(now: number): boolean {
    return now <= this.#settleUntil;
  }

  /** The hold before stepping up to tier `index` again (grows after failed tries). */
  upHoldMs(index: number): number {
    return this.#upHold[index] ?? NaN;
  }

  /**
   * One judged window closing at `now` (call it only outside {@link settling}); `mayStepUp`
   * false holds a good window on its tier (the caller has no evidence the path carries more).
   * Returns the move to make, already applied, or undefined.
   */
  window(now: number, verdict: TierWindowVerdict, mayStepUp = true): TierStep | undefined {
    if (verdict !== 'good') {
      this.#goodSince = undefined;
      this.#badRun++;
      if ((this.#badRun < this.#o.downAfterWindows && verdict !== 'severe') || this.#index >= this.#count - 1) return undefined;
      const from = this.#index;
      const badRun = this.#badRun;
      // A tier we stepped up to and leave again before it held: wait longer before the next try.
      const triedAt = this.#triedUpAt[from];
      if (triedAt !== undefined && now - triedAt < this.#upHold[from]! + this.#o.settleMs) {
        this.#upHold[from] = Math.min(this.#o.maxUpHoldMs, this.#upHold[from]! * 2);
      }
      this.switchTo(from + 1, now);
      return { from, to: from + 1, direction: 'down', badRun, stableMs: 0 };
    }
    this.#badRun = 0;
    this.#goodSince ??= now - this.#o.windowMs;
    const stableMs = now - this.#goodSince;
    if (!mayStepUp || this.#index === 0 || stableMs < this.#upHold[this.#index - 1]!) return undefined;
    const from = this.#index;
    this.switchTo(from - 1, now);
    this.#triedUpAt[from - 1] = now;
    return { from, to: from - 1, direction: 'up', badRun: 0, stableMs };
  }

  /** The tier is now `index` (a move of ours, or one made elsewhere): the run restarts and the next `settleMs` are not judged. */
  switchTo(index: number, now: number): void {
    this.#index = index;
    this.#badRun = 0;
    this.#goodSince = undefined;
    this.#settleUntil = now + this.#o.settleMs;
  }
}
