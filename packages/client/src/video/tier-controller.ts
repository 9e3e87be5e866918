/**
 * Chooses a connection's rung on the server's quality ladder (`welcome.video.tiers`) from what
 * really went wrong: frames the server dropped for this client (`stats.dropped`: over TCP a frame
 * is never lost on the way, a link too slow for the tier makes the server drop them) and how
 * late frames arrive (queueing delay over the lowest seen). Frames received against the server's
 * frame rate are not loss: a model slower than real time plays bursts with gaps between them. Down fast on sustained loss, up slowly after a stable period, with a growing hold after a
 * failed step up so it never flaps (the hysteresis is `@reactor/protocol`'s `TierHysteresis`, shared with the server's WebRTC controller). Pure logic: no DOM, no socket; tested in Node.
 */
import { TierHysteresis, type VideoTierSchema } from '../base/protocol.js';

/** Options of a {@link TierController}; every time is in ms. */
export interface TierControllerOptions {
  /** Length of one measurement window (default 1000). */
  windowMs?: number;
  /** Bad windows in a row that move down one tier (default 2). */
  downAfterWindows?: number;
  /** Share of a window's frames the server dropped for this client that makes it bad (default 0.1). */
  lossRatio?: number;
  /** Median queueing delay over the lowest seen that makes a window bad (default 400). */
  latenessMs?: number;
  /** Stable time on a tier before trying the one above (default 10000); doubled after each failed try of that tier. */
  upAfterMs?: number;
  /** Upper bound of that hold (default 120000). */
  maxUpHoldMs?: number;
  /** Windows after a switch that are not judged (the key frame, the new encoder's start) (default 2000 ms). */
  settleMs?: number;
  /** Clock (default `performance.now`). */
  now?: () => number;
}

/** A move on the ladder the controller asks for. */
export interface TierDecision {
  from: string;
  tier: string;
  direction: 'down' | 'up';
  /** What was measured, in words (`12% of frames lost over 2 windows`). */
  reason: string;
}

/** The last closed window's measurements. */
export interface TierWindow {
  /** Received video bits per second. */
  bitrate: number;
  /** Frames per second received. */
  fps: number;
  /** Share of the window's frames the server dropped for this client (0..1): dropped / (received + dropped). */
  loss: number;
  /** Median queueing delay over the lowest seen, ms. */
  latenessMs: number;
  /** Judged bad (loss or lateness over their bounds), good, or not judged (settling, no data). */
  verdict: 'bad' | 'good' | 'none';
}

const DEFAULTS = {
  windowMs: 1000,
  downAfterWindows: 2,
  lossRatio: 0.1,
  latenessMs: 400,
  upAfterMs: 10_000,
  maxUpHoldMs: 120_000,
  settleMs: 2000,
};
/** Windows kept for the delay baseline (clock offsets are constant; a route change may lower it). */
const BASELINE_WINDOWS = 30;

/**
 * Picks the tier; feed it every received video frame ({@link frame}) and every `stats` message
 * ({@link stats}), call {@link tick} periodically, and send `select_video` with the decision's
 * tier when it returns one.
 *
 * @throws {RangeError} when `tiers` is empty or an option is out of range.
 * @example
 * const ctl = new TierController(welcome.video.tiers);
 * client.on('frame', (f) => ctl.frame(f.payload.byteLength, f.receivedAt, f.ptsMs));
 * client.on('stats', (s) => ctl.stats(s));
 * setInterval(() => { const d = ctl.tick(); if (d) void client.selectVideo('h264', d.tier); }, 250);
 */
export class TierController {
  readonly tiers: readonly VideoTierSchema[];
  readonly #o: Required<Omit<TierControllerOptions, 'now'>>;
  readonly #now: () => number;
  readonly #h: TierHysteresis;
  #windowStart: number;
  #bytes = 0;
  #frames = 0;
  #delays: number[] = [];
  #dropped: number | undefined;
  #droppedAtStart: number | undefined;
  #baselines: number[] = [];
  #last: TierWindow | undefined;

  constructor(tiers: readonly VideoTierSchema[], initialTier?: string, options: TierControllerOptions = {}) {
    if (tiers.length === 0) throw new RangeError('tiers must name at least one tier (welcome.video.tiers)');
    const o = { ...DEFAULTS, ...stripUndefined(options) };
    for (const [k, v] of Object.entries(o)) {
      if (k === 'now') continue;
      if (typeof v !== 'number' || !(v >= 0) || !Number.isFinite(v)) throw new RangeError(`options.${k} must be a finite number >= 0, got ${String(v)}`);
    }
    if (o.windowMs <= 0) throw new RangeError(`options.windowMs must be > 0, got ${o.windowMs}`);
    if (o.downAfterWindows < 1) throw new RangeError(`options.downAfterWindows must be >= 1, got ${o.downAfterWindows}`);
    this.tiers = tiers;
    this.#o = o;
    this.#now = options.now ?? (() => performance.now());
    const i = initialTier === undefined ? 0 : tiers.findIndex((t) => t.name === initialTier);
    if (i < 0) throw new RangeError(`initialTier "${initialTier}" is not one of the tiers: ${tiers.map((t) => t.name).join(', ')}`);
    const now = this.#now();
    this.#windowStart = now;
    this.#h = new TierHysteresis(tiers.length, i, o, now);
  }

  /** The current tier's name. */
  get tier(): string {
    return this.tiers[this.#h.index]!.name;
  }

  /** The last closed window's measurements (undefined before the first). */
  get lastWindow(): TierWindow | undefined {
    return this.#last;
  }

  /** The hold before stepping up to `tier` again (grows after failed tries). */
  upHoldMs(tier: string): number {
    const i = this.tiers.findIndex((t) => t.name === tier);
    return i < 0 ? NaN : this.#h.upHoldMs(i);
  }

  /**
   * One received video frame: its size and when it arrived against its playout time (both on
   * stable clocks; their offset does not matter, only its changes).
   */
  frame(bytes: number, receivedAt: number, ptsMs: number): void {
    this.#bytes += bytes;
    this.#frames++;
    this.#delays.push(receivedAt - ptsMs);
  }

  /** A `stats` message: this client's dropped frames so far (`fps` is taken for compatibility; it does not count as loss). */
  stats(s: { fps: number; dropped: number }): void {
    this.#dropped = s.dropped;
    this.#droppedAtStart ??= s.dropped;
  }

  /**
   * The server now sends `tier` (a `select_video` reply, or a `video_config`): follow it without
   * judging the next `settleMs`.
   */
  setTier(tier: string): void {
    const i = this.tiers.findIndex((t) => t.name === tier);
    if (i < 0 || i === this.#h.index) return;
    this.#h.switchTo(i, this.#now());
  }

  /** Closes the window when it is over and returns a move when one is due. */
  tick(now: number = this.#now()): TierDecision | undefined {
    if (now - this.#windowStart < this.#o.windowMs) return undefined;
    const w = this.#closeWindow(now);
    this.#last = w;
    if (w.verdict === 'none') return undefined;
    const severe = w.loss >= 3 * this.#o.lossRatio || w.latenessMs >= 3 * this.#o.latenessMs;
    const step = this.#h.window(now, w.verdict === 'good' ? 'good' : severe ? 'severe' : 'bad');
    if (!step) return undefined;
    const from = this.tiers[step.from]!.name;
    const reason = step.direction === 'down' ? describe(w, step.badRun) : `stable for ${Math.round(step.stableMs / 1000)} s`;
    return { from, tier: this.tier, direction: step.direction, reason };
  }

  #closeWindow(now: number): TierWindow {
    const seconds = (now - this.#windowStart) / 1000;
    const frames = this.#frames;
    const delays = this.#delays;
    const bitrate = (this.#bytes * 8) / seconds;
    const droppedNow = this.#dropped ?? 0;
    const dropped = Math.max(0, droppedNow - (this.#droppedAtStart ?? droppedNow));
    this.#windowStart = now;
    this.#bytes = 0;
    this.#frames = 0;
    this.#delays = [];
    this.#droppedAtStart = this.#dropped;

    const median = delays.length ? delays.sort((a, b) => a - b)[delays.length >> 1]! : undefined;
    if (median !== undefined) {
      this.#baselines.push(delays[0]!);
      if (this.#baselines.length > BASELINE_WINDOWS) this.#baselines.shift();
    }
    const baseline = this.#baselines.length ? Math.min(...this.#baselines) : 0;
    const latenessMs = median === undefined ? 0 : median - baseline;
    // Loss is what the server dropped for this client, not frames received against its rate: a
    // model slower than real time plays bursts (8 frames, then a second of nothing), and a
    // window in a gap would read as 100 % loss.
    const loss = dropped > 0 ? dropped / (frames + dropped) : 0;
    const fps = frames / seconds;
    let verdict: TierWindow['verdict'];
    // A window with no frame and no drop says nothing (a paused stream, a gap between bursts).
    if (this.#h.settling(now) || (frames === 0 && dropped === 0)) verdict = 'none';
    else verdict = loss > this.#o.lossRatio || latenessMs > this.#o.latenessMs ? 'bad' : 'good';
    return { bitrate, fps, loss, latenessMs, verdict };
  }
}

function describe(w: TierWindow, run: number): string {
  const parts: string[] = [];
  if (w.loss > 0) parts.push(`${Math.round(w.loss * 100)}% of frames lost`);
  if (w.latenessMs > 0) parts.push(`frames ${Math.round(w.latenessMs)} ms late`);
  return `${parts.join(', ') || 'poor reception'} (${run} bad window${run === 1 ? '' : 's'} in a row)`;
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}
