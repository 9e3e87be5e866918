/**
 * Why an instance is not ready (`NotReadyReason.code` of `AppHost.readiness()`, served as
 * `/health/ready` and the `reactor_not_ready{reason}` metric). The host gives the first five;
 * an app's own `readiness()` may give any code, the runner codes below for the usual causes.
 */
export const ReadinessCode = {
  /** The app's `load()` has not finished. */
  Loading: 'loading',
  /** The app's `load()` threw; nothing will run (the same code as the load error). */
  LoadFailed: 'load_failed',
  /** The host (or the server in front of it) is shutting down. */
  Closing: 'closing',
  /** The current session is ending; a new client waits until it has. */
  SessionClosing: 'session_closing',
  /** The app's own `readiness()` gave a reason without a code (a string), or threw. */
  AppNotReady: 'app_not_ready',
  /** The app's model runner is broken (a rank died, it could not start) or not running. */
  RunnerUnhealthy: 'runner_unhealthy',
  /** The app is replacing its model runner (after a rank died); ready again once the new one is up. */
  RunnerRestarting: 'runner_restarting',
  /** A rank of the app's runner has made no progress during a call for the runner's `stallMs`. */
  RankStalled: 'rank_stalled',
  /** The server asked the host for its readiness and the host threw (a bug: see the server log). */
  ReadinessFailed: 'readiness_failed',
} as const;
export type ReadinessCode = (typeof ReadinessCode)[keyof typeof ReadinessCode];
