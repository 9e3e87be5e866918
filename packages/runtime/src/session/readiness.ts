/** Why the host is not ready (`NotReadyReason.code` of {@link AppHost.readiness}). */
export const ReadinessCode = {
  /** The app's `load()` has not finished. */
  Loading: 'loading',
  /** The app's `load()` threw; nothing will run (the same code as the load error). */
  LoadFailed: 'load_failed',
  /** The host is shutting down. */
  Closing: 'closing',
  /** The current session is ending; a new client waits until it has. */
  SessionClosing: 'session_closing',
  /** The app's own `readiness()` gave a reason. */
  AppNotReady: 'app_not_ready',
} as const;
export type ReadinessCode = (typeof ReadinessCode)[keyof typeof ReadinessCode];
