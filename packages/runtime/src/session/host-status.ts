/**
 * A host's status and readiness, from the facts the host holds (its state, its errors, its
 * session), and the app's own readiness report ({@link ReactorApp.readiness}) as reasons.
 */
import type { ErrorBody, SessionStatus } from '@reactor/protocol';
import type { AppReadiness, ReactorApp } from '../app/reactor-app.js';
import { hostContext, type HostContext } from '../app/weights.js';
import type { HostSession } from './host-client.js';
import { errorText } from './host-core.js';
import type { HostState } from './lifecycle.js';
import type { LoadProgressReport } from './runner-signals.js';
import { ReadinessCode } from './readiness.js';
import type { NotReadyReason, Readiness } from './transport.js';

/** What a host's status is made of. */
export interface HostFacts {
  /** The host's state (where it stood when `close()` began, once closing). */
  host: HostState;
  clients: number;
  loadError: ErrorBody | undefined;
  lastSessionError: ErrorBody | undefined;
  session: HostSession | undefined;
  /** The load progress (the app's or its runners' latest report), while loading. */
  progress: LoadProgressReport | undefined;
  /** The app's standing notice ({@link ReactorApp.notice}), once loaded. */
  notice: string | undefined;
}

/** Where the host stands: loading, ready, a session's phase, or failed (`AppHost.status`). */
export function hostStatus(facts: HostFacts): SessionStatus {
  const { host, clients } = facts;
  if (host === 'created' || host === 'loading') return { state: 'loading', clients, ...(facts.progress && { progress: { ...facts.progress } }) };
  if (host === 'failed') return { state: 'failed', clients, ...(facts.loadError ? { error: facts.loadError } : {}) };
  const notice = facts.notice ? { notice: facts.notice } : {};
  const s = facts.session;
  if (!s) return { state: 'ready', clients, ...(facts.lastSessionError ? { error: facts.lastSessionError } : {}), ...notice };
  const phase = s.lifecycle.state;
  const state = phase === 'starting' || phase === 'waiting' ? 'waiting' : phase === 'ended' ? 'closing' : phase;
  return {
    state,
    sessionId: s.id,
    clients,
    ...(s.error ? { error: s.error } : {}),
    ...(state === 'streaming' && s.lastRefusal !== undefined ? { refused: s.lastRefusal } : {}),
    ...notice,
  };
}

/** The app's notice ({@link ReactorApp.notice}): a throw or an empty string is none. */
export function appNotice(app: ReactorApp<any, any, any, any>): string | undefined {
  try {
    const n = app.notice();
    return typeof n === 'string' && n !== '' ? n.slice(0, 500) : undefined;
  } catch {
    return undefined;
  }
}

/** `AppHost.readiness()`: `now` is the host's state now (closing counts as closing here); `app` asks the app. */
export function hostReadiness(facts: HostFacts, now: HostState, app: () => NotReadyReason[]): Readiness {
  const reasons: NotReadyReason[] = [];
  switch (now) {
    case 'created':
    case 'loading':
      reasons.push(
        facts.progress
          ? {
              code: ReadinessCode.Loading,
              message: `the app is loading: ${facts.progress.stage} (${Math.floor(facts.progress.ratio * 100)} %)`,
              progress: { ...facts.progress },
            }
          : { code: ReadinessCode.Loading, message: 'the app is loading' },
      );
      break;
    case 'failed':
      reasons.push({ code: ReadinessCode.LoadFailed, message: `the app failed to load: ${facts.loadError?.message ?? 'unknown error'}` });
      break;
    case 'closing':
    case 'closed':
      reasons.push({ code: ReadinessCode.Closing, message: 'the app host is shutting down' });
      break;
    case 'ready':
      if (facts.session?.lifecycle.is('closing')) {
        reasons.push({ code: ReadinessCode.SessionClosing, message: 'the current session is ending; a new one starts when it has' });
      }
      reasons.push(...app());
      break;
  }
  return { ready: reasons.length === 0, reasons };
}

/** The app's own report ({@link ReactorApp.readiness}), as reasons (none: ready). */
export function appReadiness(app: ReactorApp<any, any, any, any>, name: string, ctx: HostContext): NotReadyReason[] {
  let report: AppReadiness;
  try {
    report = hostContext.run(ctx, () => app.readiness());
  } catch (err) {
    return [{ code: ReadinessCode.AppNotReady, message: `${name}.readiness() threw: ${errorText(err)}` }];
  }
  if (report === true) return [];
  const items: readonly unknown[] = Array.isArray(report) ? report : [report];
  const wrong = (value: unknown): NotReadyReason => ({
    code: ReadinessCode.AppNotReady,
    message: `${name}.readiness() returned ${describe(value)}; return true or the reason it is not ready (a message, or { code, message } with a snake_case code)`,
  });
  if (items.length === 0) return [wrong(report)];
  return items.map((item): NotReadyReason => {
    if (typeof item === 'string') return { code: ReadinessCode.AppNotReady, message: item };
    if (isReason(item)) return { code: item.code, message: item.message };
    return wrong(item);
  });
}

/** A `{ code, message }` readiness reason with a snake_case code and a string message. */
function isReason(value: unknown): value is { code: string; message: string } {
  if (typeof value !== 'object' || value === null) return false;
  const { code, message } = value as Record<string, unknown>;
  return typeof code === 'string' && /^[a-z][a-z0-9_]*$/.test(code) && typeof message === 'string';
}

function describe(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}
