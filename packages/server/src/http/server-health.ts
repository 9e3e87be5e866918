/**
 * What `GET /health` and `/health/ready` answer for one server: the host's readiness (not ready
 * while the server closes, or when `readiness()` throws), and the report built on it.
 */
import type { Logger } from '@reactor/log';
import { type Readiness, ReadinessCode } from '@reactor/runtime';
import type { HealthReport, ServableHost } from '../base/servable-host.js';

/** The host's readiness; a host that throws is not ready (and says why); `draining`: the server's `beginDrain()` was called. */
export function readinessOf(host: ServableHost, closing: boolean, log: Logger, draining = false): Readiness {
  if (closing) return { ready: false, reasons: [{ code: ReadinessCode.Closing, message: 'the server is shutting down' }] };
  if (draining) {
    return { ready: false, reasons: [{ code: ReadinessCode.Closing, message: 'the instance is draining: it takes no new session (a running one goes on)' }] };
  }
  try {
    const r = host.readiness();
    return { ready: r.ready && r.reasons.length === 0, reasons: r.reasons };
  } catch (err) {
    log.error(`readiness() threw: ${(err as Error)?.stack ?? String(err)}`);
    return { ready: false, reasons: [{ code: ReadinessCode.ReadinessFailed, message: `readiness() threw: ${(err as Error)?.message ?? String(err)}` }] };
  }
}

/**
 * Health: `ready` (and `ready: true`) exactly when the host's `readiness()` says a new user
 * would get a stream; otherwise `loading`, `failed` (with the reason) or `not_ready`, with
 * every reason.
 */
export function healthOf(host: ServableHost, r: Readiness, instance: string | undefined): HealthReport {
  const s = host.status;
  const status = r.ready ? 'ready' : s.state === 'loading' ? 'loading' : s.state === 'failed' ? 'failed' : 'not_ready';
  const report: HealthReport = { status, ready: r.ready, reasons: r.reasons, session: s.state, clients: s.clients };
  if (s.sessionId !== undefined) report.sessionId = s.sessionId;
  if (instance !== undefined) report.instance = instance;
  if (status === 'failed') report.reason = s.error?.message ?? 'the app failed to load';
  return report;
}
