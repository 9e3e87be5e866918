/**
 * Options of the Agones integration, with their defaults and eager checks (a bad option throws
 * before anything connects, naming the option, the value and the allowed range).
 */
import { consoleLogger, type Logger } from '@reactor/log';
import { ReactorError } from '@reactor/runtime';
import { AgonesErrorCode } from './errors.js';
import type { AgonesSdk } from './sdk.js';

/** Default interval of `Health()` pings, ms (Agones marks a server unhealthy after `failureThreshold` missed `periodSeconds`, 3 x 5 s by default). */
export const DEFAULT_HEALTH_INTERVAL_MS = 2000;
/** Shortest and longest ping interval accepted, ms (longer than Agones' default 5 s period would miss it). */
export const MIN_HEALTH_INTERVAL_MS = 50;
export const MAX_HEALTH_INTERVAL_MS = 5000;
/** Default and longest wait for the first client of an instance the router allocated, ms. */
export const DEFAULT_ALLOCATION_TIMEOUT_MS = 60_000;
export const MAX_ALLOCATION_TIMEOUT_MS = 60_000;
/** How long one SDK call may take before it counts as failed, ms. */
export const DEFAULT_CALL_TIMEOUT_MS = 5000;
/** After SIGTERM, how long a running session may go on before its viewers are closed, ms (the chart's agones.drainSeconds). */
export const DEFAULT_DRAIN_TIMEOUT_MS = 60_000;

/** What the instance tells Agones when its session ends. */
export type SessionEndAction = 'ready' | 'shutdown';

/** Options of {@link startAgones}. */
export interface AgonesOptions {
  /**
   * When a session ends: `ready` (default) returns the instance to the fleet with its model
   * loaded (warm); `shutdown` asks Agones for a fresh process (the pod is replaced).
   */
  onSessionEnd?: SessionEndAction;
  /** `Health()` ping interval while the instance is healthy, ms (default 2000; 50 to 5000). */
  healthIntervalMs?: number;
  /**
   * An instance the router allocated whose session never starts (no client joins) goes back to
   * `Ready` after this long, ms (default and maximum 60000).
   */
  allocationTimeoutMs?: number;
  /** How long one SDK call may take before it counts as failed and is retried, ms (default 5000). */
  callTimeoutMs?: number;
  /**
   * After SIGTERM the instance leaves the pool at once and lets a running session go on for up
   * to this long before closing its viewers, ms (default 60000; keep it below the pod's
   * `terminationGracePeriodSeconds`).
   */
  drainTimeoutMs?: number;
  /** Where progress and SDK failures are logged (default: the server's logger). */
  logger?: Logger;
  /** Makes the SDK client (default: the official `@google-cloud/agones-sdk`, loaded on first use). Tests and other transports. */
  sdk?: () => AgonesSdk | Promise<AgonesSdk>;
  /**
   * The session router asked this instance to drain (its `DELETE /instances/{name}`: the
   * `reactor.dev/drain` annotation). Default: the process sends itself SIGTERM, so the drain is
   * the one a pod deletion starts (the same handlers: leave the pool, the router moves the
   * session, exit once empty).
   */
  onDrainRequest?: () => void;
}

/** {@link AgonesOptions} with every default applied. */
export interface ResolvedAgonesOptions {
  onSessionEnd: SessionEndAction;
  healthIntervalMs: number;
  allocationTimeoutMs: number;
  callTimeoutMs: number;
  drainTimeoutMs: number;
  logger: Logger;
  sdk: (() => AgonesSdk | Promise<AgonesSdk>) | undefined;
  onDrainRequest: () => void;
}

function invalid(message: string): ReactorError {
  return new ReactorError(AgonesErrorCode.InvalidOption, message);
}

function intIn(value: unknown, name: string, min: number, max: number, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw invalid(`agones.${name} must be an integer from ${min} to ${max} (ms), got ${JSON.stringify(value)}`);
  }
  return value;
}

/**
 * Applies the defaults and checks every option.
 * @throws ReactorError `invalid_agones_option`, naming the option, the value and what is allowed.
 * @example
 * resolveAgonesOptions({ onSessionEnd: 'shutdown', allocationTimeoutMs: 30_000 });
 */
export function resolveAgonesOptions(options: AgonesOptions = {}, fallbackLogger?: Logger): ResolvedAgonesOptions {
  if (typeof options !== 'object' || options === null) throw invalid(`agones options must be an object, got ${JSON.stringify(options)}`);
  const onSessionEnd = options.onSessionEnd ?? 'ready';
  if (onSessionEnd !== 'ready' && onSessionEnd !== 'shutdown') {
    throw invalid(
      `agones.onSessionEnd must be "ready" (keep the model warm for the next session) or "shutdown" (a fresh process), got ${JSON.stringify(onSessionEnd)}`,
    );
  }
  if (options.sdk !== undefined && typeof options.sdk !== 'function') throw invalid('agones.sdk must be a function that returns an AgonesSdk');
  if (options.onDrainRequest !== undefined && typeof options.onDrainRequest !== 'function') throw invalid('agones.onDrainRequest must be a function');
  return {
    onSessionEnd,
    healthIntervalMs: intIn(options.healthIntervalMs, 'healthIntervalMs', MIN_HEALTH_INTERVAL_MS, MAX_HEALTH_INTERVAL_MS, DEFAULT_HEALTH_INTERVAL_MS),
    allocationTimeoutMs: intIn(options.allocationTimeoutMs, 'allocationTimeoutMs', 1, MAX_ALLOCATION_TIMEOUT_MS, DEFAULT_ALLOCATION_TIMEOUT_MS),
    callTimeoutMs: intIn(options.callTimeoutMs, 'callTimeoutMs', 1, 60_000, DEFAULT_CALL_TIMEOUT_MS),
    drainTimeoutMs: intIn(options.drainTimeoutMs, 'drainTimeoutMs', 0, 24 * 3600_000, DEFAULT_DRAIN_TIMEOUT_MS),
    logger: options.logger ?? fallbackLogger ?? consoleLogger(),
    sdk: options.sdk,
    onDrainRequest: options.onDrainRequest ?? (() => process.kill(process.pid, 'SIGTERM')),
  };
}
