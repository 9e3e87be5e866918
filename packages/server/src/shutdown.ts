/** SIGINT/SIGTERM/SIGHUP handling for processes that serve an app (the CLI uses it). */
import { consoleLogger, type Logger, SHUTDOWN_SIGNALS as SIGNALS, onProcessSignal } from '@reactor/log';
import type { ReactorServer } from './reactor-server.js';

/** The signals {@link installShutdownHandlers} handles by default: each closes the server in order. */
export const SHUTDOWN_SIGNALS: readonly NodeJS.Signals[] = SIGNALS;

/** Options of {@link installShutdownHandlers}. */
export interface ShutdownOptions {
  /** Signals to handle (default {@link SHUTDOWN_SIGNALS}: SIGINT, SIGTERM and SIGHUP). */
  signals?: NodeJS.Signals[];
  /** Called instead of `process.exit` (tests); receives the exit code. */
  exit?: (code: number) => void;
  /** Called before closing, with the signal. */
  onSignal?: (signal: NodeJS.Signals) => void;
  /** Where a failed shutdown is reported (default: the server's logger, else `consoleLogger()`). */
  logger?: Logger;
}

/**
 * On SIGINT, SIGTERM or SIGHUP (a closed terminal, or a process manager's stop): sends every client a close frame, closes the host (which shuts the app's
 * runner down through the app's hooks) and exits 0; exits 1 if closing fails. A second signal
 * while closing exits 1 at once. Returns a function that removes the handlers.
 *
 * @example
 * const server = await serve(MyApp, { port: 8080 });
 * installShutdownHandlers(server);
 */
export function installShutdownHandlers(server: Pick<ReactorServer, 'close'> & { options?: { logger: Logger } }, options: ShutdownOptions = {}): () => void {
  const signals = options.signals ?? SHUTDOWN_SIGNALS;
  const logger = options.logger ?? server.options?.logger ?? consoleLogger();
  const exit = options.exit ?? ((code: number) => process.exit(code));
  let closing = false;
  const handler = (signal: NodeJS.Signals): void => {
    if (closing) {
      exit(1);
      return;
    }
    closing = true;
    options.onSignal?.(signal);
    server.close().then(
      () => exit(0),
      (err: unknown) => {
        logger.error(`shutdown failed: ${(err as Error)?.stack ?? String(err)}`);
        exit(1);
      },
    );
  };
  // Through the process signal registry (@reactor/log): a runner's cleanup sees this handler and leaves the signal to it.
  return onProcessSignal(signals, handler);
}
