/**
 * Session admission: what a host asks before it starts a new session (issue 42). The host keeps
 * no ledger itself; an {@link SessionAdmission} (the CLI's GPU slot lease of
 * `@reactor/distributed`, `gpu.sessions_per_gpu` in reactor.yaml) says whether this instance may
 * run a session now. A host without one admits every session.
 */
import type { SessionFrameHealth } from './frame-health.js';
import { ReadinessCode } from './readiness.js';
import type { NotReadyReason } from './transport.js';

/**
 * Decides whether a new session may start on this host. Both calls are synchronous and cheap:
 * the host calls {@link SessionAdmission.refusal} when a session would start (a client arrives
 * and none runs) and from `readiness()` while no session runs.
 */
export interface SessionAdmission {
  /**
   * Why a new session may not start now (a coded reason, e.g. `gpu_full`), or `undefined` when
   * it may. The reason's message is what the refused client and `/health/ready` read.
   */
  refusal(): NotReadyReason | undefined;
  /**
   * Called once, when the host has closed (after the app's `unload()`): what the admission holds
   * for this host goes back (the GPU slot lease gives its slot to a waiting instance).
   */
  close?(): void;
  /**
   * Called every second from the app's load until the host closes, with the running session's
   * frame times ({@link SessionFrameHealth}: the p99 of the intervals between its played frames
   * over the last 5 s, and its fps), or `undefined` while no session runs; once more with
   * `undefined` right when a session ends. The GPU slot lease (`gpu.admit: deadline`) publishes
   * it for the other instances on its GPU, which refuse new sessions while it misses its
   * deadline. Must not throw (a throw is logged and ignored).
   */
  report?(health: SessionFrameHealth | undefined): void;
}

/**
 * `options.admission` checked: an object with a `refusal()` method.
 * @internal
 */
export function isSessionAdmission(value: unknown): value is SessionAdmission {
  return typeof value === 'object' && value !== null && typeof (value as { refusal?: unknown }).refusal === 'function';
}

/** A refusal of `admission` that never throws: one that throws is a refusal that says so. */
export function admissionRefusal(admission: SessionAdmission | undefined): NotReadyReason | undefined {
  if (!admission) return undefined;
  try {
    return admission.refusal();
  } catch (err) {
    return { code: ReadinessCode.ReadinessFailed, message: `the session admission threw: ${(err as Error)?.message ?? String(err)}` };
  }
}
