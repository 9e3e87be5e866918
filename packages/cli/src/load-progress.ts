/**
 * `reactor run`'s view of the app's load progress (the session status's `progress`, which the
 * app's `context.reportProgress()` and its ranks' `reportProgress()` feed): a progress bar
 * redrawn in place on a terminal, plain log lines when stderr is not one (a pipe, a file, a
 * container log), one per new stage or per 10 % step.
 */
import type { Logger } from '@reactor/log';

/** What the display reads of a session status (`SessionStatus` of the wire protocol). */
interface SessionStatus {
  readonly state: string;
  readonly progress?: { readonly ratio: number; readonly stage: string };
}

/** Characters of the bar itself. */
const BAR_WIDTH = 24;
/** Plain lines say a new ratio once it has grown this much (a new stage always). */
const LINE_STEP = 0.1;

/** Where the bar is drawn: a terminal stream (process.stderr). */
export interface ProgressTerminal {
  readonly isTTY?: boolean;
  readonly columns?: number;
  write(text: string): boolean;
}

/** The host as the display reads it. */
export interface ProgressSource {
  readonly status: SessionStatus;
  onStatus?(listener: (status: SessionStatus) => void): (() => void) | void;
}

/** One line of the bar: `loading [#########---------------]  38 % reading weights`. */
export function progressBar(ratio: number, stage: string, columns = 80): string {
  const filled = Math.round(Math.min(1, Math.max(0, ratio)) * BAR_WIDTH);
  const pct = `${Math.floor(ratio * 100)}`.padStart(3);
  const head = `loading [${'#'.repeat(filled)}${'-'.repeat(BAR_WIDTH - filled)}] ${pct} % `;
  const room = Math.max(0, columns - head.length - 1);
  return head + (stage.length > room ? `${stage.slice(0, Math.max(0, room - 1))}…` : stage);
}

/**
 * Shows the load progress of `host` until it stops loading; returns the function that stops
 * showing it (it clears the bar). On a terminal the bar is redrawn on each report; otherwise
 * `logger` gets a line per new stage or 10 % step.
 */
export function showLoadProgress(host: ProgressSource, term: ProgressTerminal, logger: Logger): () => void {
  const tty = term.isTTY === true;
  let drawn = false;
  let lastStage = '';
  let lastRatio = -1;
  const clear = (): void => {
    if (drawn) term.write('\r\x1b[2K');
    drawn = false;
  };
  const show = (s: SessionStatus): void => {
    const p = s.state === 'loading' ? s.progress : undefined;
    if (!p) {
      if (s.state !== 'loading') clear();
      return;
    }
    if (tty) {
      term.write(`\r\x1b[2K${progressBar(p.ratio, p.stage, term.columns !== undefined && term.columns >= 40 ? term.columns : 80)}`);
      drawn = true;
      return;
    }
    if (p.stage === lastStage && p.ratio - lastRatio < LINE_STEP && p.ratio < 1) return;
    lastStage = p.stage;
    lastRatio = p.ratio;
    logger.info(`loading: ${p.stage} (${Math.floor(p.ratio * 100)} %)`);
  };
  const off = host.onStatus?.(show);
  show(host.status);
  return () => {
    if (typeof off === 'function') off();
    clear();
  };
}
