/** `@reactor/log`: the pino-compatible `Logger` every Reactor package takes, and two ready ones. */
export { consoleLogger, silentLogger, levelFromEnv, LOG_LEVELS } from './logger.js';
export type { Logger, LogFn, LogFields, LogLevel, ConsoleLoggerOptions } from './logger.js';
export { SHUTDOWN_SIGNALS, holdShutdown, onProcessExit, onProcessSignal, shutdownHeldUntil, signalHandledElsewhere } from './signals.js';
