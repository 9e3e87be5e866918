/**
 * The dashboard's recent errors and warnings: a bounded ring the server fills from three
 * sources — every `warn` / `error` line its logger writes, the session's errors and refusals
 * (its status), and the error answers it sent and the connections it refused (counted by code,
 * from its metrics). A repeat of the newest entry with the same source, code and text is
 * counted on it instead of taking a new slot.
 */
import type { LogFields, Logger } from '@reactor/log';
import type { DashboardEvent, DashboardEventSource } from '@reactor/protocol';

/** Entries the ring keeps (the oldest goes first). */
export const DASHBOARD_EVENTS = 100;
/** Longest message kept, in UTF-16 units. */
const MAX_TEXT = 500;

const clip = (s: string): string => (s.length <= MAX_TEXT ? s : `${s.slice(0, MAX_TEXT - 3)}...`);

/** The bounded ring of recent errors and warnings. */
export class DashboardEvents {
  readonly #ring: DashboardEvent[] = [];
  readonly #capacity: number;
  readonly #now: () => number;

  constructor(capacity = DASHBOARD_EVENTS, now: () => number = Date.now) {
    this.#capacity = capacity;
    this.#now = now;
  }

  /** Records an entry (`n` occurrences); a repeat of the newest one of its source is counted on it. */
  add(level: DashboardEvent['level'], source: DashboardEventSource, message: string, code?: string, n = 1): void {
    const t = this.#now();
    const text = clip(message);
    const last = this.#ring.findLast((e) => e.source === source);
    if (last && last.level === level && last.code === code && last.message === text) {
      last.count += n;
      last.t = t;
      return;
    }
    const e: DashboardEvent = { t, first: t, level, source, message: text, count: n };
    if (code !== undefined) e.code = code;
    this.#ring.push(e);
    if (this.#ring.length > this.#capacity) this.#ring.shift();
  }

  /** The entries, newest first (copies). */
  list(): DashboardEvent[] {
    return this.#ring.map((e) => ({ ...e })).reverse();
  }

  /**
   * A logger that writes through `log` and records its `warn` and `error` lines here (its
   * children too).
   */
  tap(log: Logger): Logger {
    const record =
      (level: 'warn' | 'error') =>
      (first: string | LogFields, ...rest: unknown[]): void => {
        (log[level] as (...a: unknown[]) => void)(first, ...rest);
        const fields = typeof first === 'object' && first !== null ? first : undefined;
        const msg = fields ? rest[0] : first;
        const code = fields && typeof fields['code'] === 'string' ? fields['code'] : undefined;
        this.add(level, 'log', typeof msg === 'string' ? msg : fields ? JSON.stringify(fields) : String(msg), code);
      };
    return {
      debug: (...a: unknown[]) => (log.debug as (...a: unknown[]) => void)(...a),
      info: (...a: unknown[]) => (log.info as (...a: unknown[]) => void)(...a),
      warn: record('warn'),
      error: record('error'),
      child: (bindings: LogFields) => this.tap(typeof log.child === 'function' ? log.child(bindings) : log),
    };
  }
}
