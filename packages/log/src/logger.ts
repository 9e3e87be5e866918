/**
 * The one logging interface of every Reactor package. Its shape is pino's, so a pino logger
 * (or anything with the same methods) can be passed wherever a `Logger` is taken; the
 * packages pass it down with `child()` bindings (`{ rank: 1 }`, `{ session: 'ab12' }`).
 */

/** Structured fields of one log line (pino's "merging object"). */
export type LogFields = Record<string, unknown>;

/** One level's method: a message, or fields and then a message (pino's argument order). */
export interface LogFn {
  (msg: string, ...args: unknown[]): void;
  (fields: LogFields, msg?: string, ...args: unknown[]): void;
}

/** A pino-compatible logger. */
export interface Logger {
  debug: LogFn;
  info: LogFn;
  warn: LogFn;
  error: LogFn;
  /** A logger that adds `bindings` to every line. */
  child(bindings: LogFields): Logger;
}

/** Levels in increasing severity; `silent` logs nothing. */
export const LOG_LEVELS = ['debug', 'info', 'warn', 'error', 'silent'] as const;
/** A level name. */
export type LogLevel = (typeof LOG_LEVELS)[number];

/** Options of {@link consoleLogger}. */
export interface ConsoleLoggerOptions {
  /** The line prefix, in brackets (default `reactor`). */
  name?: string;
  /** Lines below this level are dropped (default `info`). */
  level?: LogLevel;
  /** Fields added to every line. */
  bindings?: LogFields;
  /** Where lines go (default `console`); tests pass their own. */
  sink?: Pick<Console, 'debug' | 'info' | 'warn' | 'error'>;
}

/** The `key=value` tail of a line; an Error whose message the line already says is left out (said once). */
function formatFields(fields: LogFields, msg = ''): string {
  const parts: string[] = [];
  for (const [k, v] of Object.entries(fields)) {
    if (v === undefined) continue;
    if (v instanceof Error && v.message !== '' && msg.includes(v.message)) continue;
    const text = typeof v === 'string' ? (/^[\w.:/@-]+$/.test(v) ? v : JSON.stringify(v)) : v instanceof Error ? JSON.stringify(v.message) : safeJson(v);
    parts.push(`${k}=${text}`);
  }
  return parts.join(' ');
}

function safeJson(v: unknown): string {
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}

/**
 * A human-readable logger on `console`: `[name] message key=value ...`, one line each.
 *
 * @throws RangeError for an unknown level.
 * @example
 * const log = consoleLogger({ name: 'video', level: 'debug' });
 * log.child({ rank: 1 }).info('loaded'); // [video] loaded rank=1
 */
export function consoleLogger(options: ConsoleLoggerOptions = {}): Logger {
  const level = options.level ?? 'info';
  const threshold = LOG_LEVELS.indexOf(level);
  if (threshold < 0) throw new RangeError(`options.level must be one of ${LOG_LEVELS.join(', ')}, got ${String(level)}`);
  const name = options.name ?? 'reactor';
  const sink = options.sink ?? console;
  const bindings = options.bindings ?? {};
  const method = (lvl: Exclude<LogLevel, 'silent'>): LogFn => {
    if (LOG_LEVELS.indexOf(lvl) < threshold) return () => {};
    return (first: string | LogFields, ...rest: unknown[]) => {
      let fields: LogFields = bindings;
      let msg: string;
      let args: unknown[];
      if (typeof first === 'string') {
        msg = first;
        args = rest;
      } else {
        fields = { ...bindings, ...first };
        msg = typeof rest[0] === 'string' ? rest[0] : '';
        args = rest.slice(1);
      }
      const tail = formatFields(fields, msg);
      sink[lvl](`[${name}] ${msg}${tail ? ` ${tail}` : ''}`, ...args);
    };
  };
  return {
    debug: method('debug'),
    info: method('info'),
    warn: method('warn'),
    error: method('error'),
    child: (more) => consoleLogger({ ...options, bindings: { ...bindings, ...more } }),
  };
}

const noop: LogFn = () => {};

/** A logger that drops every line (tests, embedding). */
export const silentLogger: Logger = { debug: noop, info: noop, warn: noop, error: noop, child: () => silentLogger };

/**
 * The level named by an environment variable (default `REACTOR_LOG_LEVEL`), or `fallback`.
 *
 * @throws RangeError when the variable is set to an unknown level, naming the variable.
 */
export function levelFromEnv(fallback: LogLevel = 'info', variable = 'REACTOR_LOG_LEVEL', env: Record<string, string | undefined> = process.env): LogLevel {
  const v = env[variable];
  if (v === undefined || v === '') return fallback;
  if (!(LOG_LEVELS as readonly string[]).includes(v)) throw new RangeError(`${variable} must be one of ${LOG_LEVELS.join(', ')}, got "${v}"`);
  return v as LogLevel;
}
