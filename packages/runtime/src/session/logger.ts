/** Where the host writes its log lines. `console` fits. */
export interface Logger {
  debug(message: string, ...details: unknown[]): void;
  info(message: string, ...details: unknown[]): void;
  warn(message: string, ...details: unknown[]): void;
  error(message: string, ...details: unknown[]): void;
}

/** The default logger: `console` with a `[reactor]` prefix; debug lines are dropped. */
export const consoleLogger: Logger = {
  debug: () => {},
  info: (m, ...d) => console.info(`[reactor] ${m}`, ...d),
  warn: (m, ...d) => console.warn(`[reactor] ${m}`, ...d),
  error: (m, ...d) => console.error(`[reactor] ${m}`, ...d),
};
