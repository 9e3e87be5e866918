/**
 * The checks of a load-progress report (`reportProgress(ratio, stage)` on a rank, and the app's
 * `context.reportProgress` in `@reactor/runtime`, which words them the same way), and the rank
 * side's throttle.
 */

/** Longest stage text kept (longer ones are cut). */
export const MAX_PROGRESS_STAGE_CHARS = 100;
/** A rank sends at most one report per this many ms (a new stage, and ratio 1, always go). */
export const PROGRESS_REPORT_INTERVAL_MS = 50;

/**
 * Checks a report; returns the stage as sent (trimmed, cut at {@link MAX_PROGRESS_STAGE_CHARS}).
 * @throws RangeError when `ratio` is not a finite number in 0..1; TypeError when `stage` is not a non-empty string
 */
export function checkProgressReport(ratio: unknown, stage: unknown, where: string): string {
  if (typeof ratio !== 'number' || !Number.isFinite(ratio) || ratio < 0 || ratio > 1) {
    throw new RangeError(`${where}: ratio must be a number from 0 to 1 (0.63 for 63 %), got ${JSON.stringify(ratio) ?? String(ratio)}`);
  }
  if (typeof stage !== 'string' || stage.trim() === '') {
    throw new TypeError(
      `${where}: stage must be a non-empty string saying what the rank is doing ('reading weights', 'compiling'), got ${JSON.stringify(stage) ?? String(stage)}`,
    );
  }
  return stage.trim().slice(0, MAX_PROGRESS_STAGE_CHARS);
}

/** Drops reports that come faster than {@link PROGRESS_REPORT_INTERVAL_MS} (unless the stage changed or the ratio is 1). */
export class ProgressThrottle {
  private last = -Infinity;
  private lastStage = '';

  /** Whether a report of `stage` at `ratio` goes out now. */
  take(ratio: number, stage: string, now = performance.now()): boolean {
    if (ratio < 1 && stage === this.lastStage && now - this.last < PROGRESS_REPORT_INTERVAL_MS) return false;
    this.last = now;
    this.lastStage = stage;
    return true;
  }
}
