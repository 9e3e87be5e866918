/**
 * What a host hears from the runners its app starts, through the `diagnostics_channel`s of
 * `@reactor/distributed` (subscribed by name: the app model does not depend on the runner
 * package): their ranks' load progress while the host loads ({@link LoadProgress}, which the
 * app's own `context.reportProgress()` feeds too) and their ranks' GPU busy ratio
 * ({@link RankGpuBusy}). A runner publishes in the async context that started it, so each host
 * takes only its own app's runners.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { hostContext, type HostContext } from '../app/weights.js';

/** `@reactor/distributed`'s `RUNNER_PROGRESS_CHANNEL`. */
export const RUNNER_PROGRESS_CHANNEL = 'reactor:runner:progress';
/** `@reactor/distributed`'s `RUNNER_GPU_CHANNEL`. */
export const RUNNER_GPU_CHANNEL = 'reactor:runner:gpu';
/** A rank's GPU busy report counts for this long (ranks report once a second), ms. */
export const GPU_BUSY_STALE_MS = 3000;
/** Status messages for load progress go out at most this often, ms (the last report always goes). */
export const PROGRESS_PUBLISH_MS = 100;
/** Longest stage text kept. */
const MAX_STAGE_CHARS = 100;

/** How far loading is: 0..1, and what it is doing. */
export interface LoadProgressReport {
  ratio: number;
  stage: string;
}

/**
 * Checks a progress report (the words of the runner's `reportProgress()`); returns the stage as kept.
 * @throws RangeError for a ratio that is not a number in 0..1; TypeError for a stage that is not a non-empty string
 */
export function checkProgressReport(ratio: unknown, stage: unknown, where: string): string {
  if (typeof ratio !== 'number' || !Number.isFinite(ratio) || ratio < 0 || ratio > 1) {
    throw new RangeError(`${where}: ratio must be a number from 0 to 1 (0.63 for 63 %), got ${JSON.stringify(ratio) ?? String(ratio)}`);
  }
  if (typeof stage !== 'string' || stage.trim() === '') {
    throw new TypeError(
      `${where}: stage must be a non-empty string saying what the app is doing ('reading weights', 'compiling'), got ${JSON.stringify(stage) ?? String(stage)}`,
    );
  }
  return stage.trim().slice(0, MAX_STAGE_CHARS);
}

/** The host's load progress: the latest report of the app or of one of its runners, while it loads. */
export class LoadProgress {
  #current: LoadProgressReport | undefined;
  #lastPublish = -Infinity;
  #timer: NodeJS.Timeout | undefined;
  #listening = false;
  readonly #onRunner = (msg: unknown): void => {
    if (hostContext.getStore() !== this.ctx) return;
    const p = msg as LoadProgressReport;
    this.#set({ ratio: p.ratio, stage: p.stage });
  };

  /** @param publish sends the status (with the progress) to clients and listeners */
  constructor(
    private readonly ctx: HostContext,
    private readonly publish: () => void,
  ) {}

  /** The latest report, while loading. */
  get current(): LoadProgressReport | undefined {
    return this.#current;
  }

  /** Loading begins: the host's runners' reports count from now. */
  start(): void {
    if (this.#listening) return;
    subscribe(RUNNER_PROGRESS_CHANNEL, this.#onRunner);
    this.#listening = true;
  }

  /** Loading is over (loaded, failed or closing): progress is forgotten. */
  stop(): void {
    if (this.#listening) unsubscribe(RUNNER_PROGRESS_CHANNEL, this.#onRunner);
    this.#listening = false;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#current = undefined;
  }

  /** The app's own report (`context.reportProgress`), checked. */
  report(ratio: number, stage: string, where: string): void {
    const text = checkProgressReport(ratio, stage, where);
    if (!this.#listening) return;
    this.#set({ ratio, stage: text });
  }

  #set(p: LoadProgressReport): void {
    this.#current = p;
    if (this.#timer) return;
    const wait = this.#lastPublish + PROGRESS_PUBLISH_MS - performance.now();
    if (wait <= 0) return this.#publishNow();
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      if (this.#listening) this.#publishNow();
    }, wait);
    this.#timer.unref();
  }

  #publishNow(): void {
    this.#lastPublish = performance.now();
    this.publish();
  }
}

/** The GPU busy ratio of each rank of the host's runners, as the ranks last reported it. */
export class RankGpuBusy {
  readonly #ranks = new Map<number, { ratio: number; at: number }>();
  #listening = false;
  readonly #onSample = (msg: unknown): void => {
    if (hostContext.getStore() !== this.ctx) return;
    const m = msg as { rank: number; ratio: number };
    this.#ranks.set(m.rank, { ratio: m.ratio, at: performance.now() });
  };

  constructor(private readonly ctx: HostContext) {}

  start(): void {
    if (this.#listening) return;
    subscribe(RUNNER_GPU_CHANNEL, this.#onSample);
    this.#listening = true;
  }

  stop(): void {
    if (this.#listening) unsubscribe(RUNNER_GPU_CHANNEL, this.#onSample);
    this.#listening = false;
    this.#ranks.clear();
  }

  /** Ranks with a report younger than {@link GPU_BUSY_STALE_MS}, by rank; a rank without one is unknown (absent). */
  read(): { rank: number; ratio: number }[] {
    const now = performance.now();
    const out: { rank: number; ratio: number }[] = [];
    for (const [rank, g] of this.#ranks) if (now - g.at <= GPU_BUSY_STALE_MS) out.push({ rank, ratio: g.ratio });
    return out.sort((a, b) => a.rank - b.rank);
  }
}
