/** The options of an {@link AppHost}, their defaults and their checks. */
import { consoleLogger, type Logger } from '@reactor/log';
import { HostOptionError } from '../errors/errors.js';
import { RING_KEYS, ringValueProblem } from '../app/snapshot-spec.js';
import { isSessionAdmission, type SessionAdmission } from './admission.js';
import { type ResolvedUploadOptions, type UploadOptions, resolveUploadOptions } from '../upload/upload-options.js';

/** Default grace period before a session without clients ends (60 s). */
export const DEFAULT_GRACE_PERIOD_MS = 60_000;
/** Default wait before a refused step (`ApplicationError`) is retried when nothing changes. */
export const DEFAULT_REFUSAL_BACKOFF_MS = 50;
/** Default period of `stats` messages. */
export const DEFAULT_STATS_INTERVAL_MS = 1_000;

/** Options of {@link AppHost}. */
export interface AppHostOptions {
  /** How long a session outlives its last client, ms (default 60 000; 0 ends it at once). */
  gracePeriodMs?: number;
  /**
   * The weights folder (the CLI passes the manifest's `runtime.weights_path`, resolved against
   * the manifest's folder). `REACTOR_WEIGHTS_PATH` overrides it.
   */
  weightsPath?: string;
  /**
   * Where log lines go (default: `consoleLogger()` of `@reactor/log`). The app logs through
   * `this.logger`, a child of this one with the app's name (`{ app: 'VideoApp' }`).
   */
  logger?: Logger;
  /** Retry delay after a refused step when nothing changes, ms (default 50). */
  refusalBackoffMs?: number;
  /** Period of `stats` messages, ms (default 1000; 0 turns them off). */
  statsIntervalMs?: number;
  /** Upload limits, waits, folder and image decoder (see `UploadOptions`; a server sets them through `uploads.configure()`). */
  uploads?: UploadOptions;
  /**
   * One controller at a time (default `false`): the first `controller` client of a session steers;
   * other controllers are refused `not_controller` for what only a controller may do, until they
   * `requestControl()` and the holder releases control (or leaves).
   */
  singleController?: boolean;
  /**
   * The rewind ring's settings over the app's `@reactorApp({ snapshot })` (the CLI passes
   * `reactor.yaml`'s `snapshots:` section). Only for an app that takes snapshots.
   */
  snapshots?: SnapshotRingOptions;
  /**
   * Asked before each new session starts (issue 42: `gpu.sessions_per_gpu`'s GPU slot lease). A
   * refusal keeps the host not ready (its code in `readiness()`) while no session runs, and a
   * client that arrives then gets an `error` with that code and is closed. Default: every
   * session is admitted.
   */
  admission?: SessionAdmission;
}

/** The ring settings a deployment may change (docs/snapshots.md); each absent key keeps the app's. */
export interface SnapshotRingOptions {
  /** A snapshot before every Nth step that made output. */
  everySteps?: number;
  /** Bytes a session's ring may hold. */
  ringBytes?: number;
  /** The largest one snapshot may be. */
  maxBytes?: number;
  /** Sustained rewinds per session (bursts of 3). */
  rewindsPerSecond?: number;
}

/** {@link AppHostOptions} checked, with their defaults. */
export interface ResolvedHostOptions {
  gracePeriodMs: number;
  refusalBackoffMs: number;
  statsIntervalMs: number;
  singleController: boolean;
  weightsPath: string | undefined;
  logger: Logger;
  uploads: ResolvedUploadOptions;
  snapshots: SnapshotRingOptions | undefined;
  admission: SessionAdmission | undefined;
}

/**
 * Checks the options and fills in the defaults.
 * @throws HostOptionError (`invalid_host_option`) for a bad option.
 */
export function resolveHostOptions(options: AppHostOptions): ResolvedHostOptions {
  const gracePeriodMs = nonNegative(options.gracePeriodMs, DEFAULT_GRACE_PERIOD_MS, 'gracePeriodMs');
  const refusalBackoffMs = nonNegative(options.refusalBackoffMs, DEFAULT_REFUSAL_BACKOFF_MS, 'refusalBackoffMs');
  const statsIntervalMs = nonNegative(options.statsIntervalMs, DEFAULT_STATS_INTERVAL_MS, 'statsIntervalMs');
  if (options.singleController !== undefined && typeof options.singleController !== 'boolean') {
    throw new HostOptionError(`options.singleController must be a boolean, got ${JSON.stringify(options.singleController)}`);
  }
  if (options.weightsPath !== undefined && typeof options.weightsPath !== 'string') {
    throw new HostOptionError(`options.weightsPath must be a string, got ${typeof options.weightsPath}`);
  }
  if (options.logger !== undefined && !isLogger(options.logger)) {
    throw new HostOptionError(
      'options.logger must be a Logger of @reactor/log (debug, info, warn, error and child methods), e.g. consoleLogger() or silentLogger',
    );
  }
  if (options.admission !== undefined && !isSessionAdmission(options.admission)) {
    throw new HostOptionError('options.admission must be an object with a refusal() method (a SessionAdmission)');
  }
  return {
    gracePeriodMs,
    refusalBackoffMs,
    statsIntervalMs,
    singleController: options.singleController ?? false,
    weightsPath: options.weightsPath,
    logger: options.logger ?? consoleLogger(),
    uploads: resolveUploadOptions(options.uploads ?? {}),
    snapshots: ringOptions(options.snapshots),
    admission: options.admission,
  };
}

function ringOptions(o: SnapshotRingOptions | undefined): SnapshotRingOptions | undefined {
  if (o === undefined) return undefined;
  if (o === null || typeof o !== 'object') throw new HostOptionError(`options.snapshots must be an object (${RING_KEYS.join(', ')}), got ${JSON.stringify(o)}`);
  for (const [k, v] of Object.entries(o)) {
    if (!(RING_KEYS as readonly string[]).includes(k)) throw new HostOptionError(`options.snapshots.${k} is not a ring setting (${RING_KEYS.join(', ')})`);
    const problem = v === undefined ? undefined : ringValueProblem(k as (typeof RING_KEYS)[number], v);
    if (problem) throw new HostOptionError(`options.snapshots.${k} ${problem}`);
  }
  return { ...o };
}

function nonNegative(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0)
    throw new HostOptionError(`options.${name} must be a non-negative number of ms, got ${String(value)}`);
  return value;
}

function isLogger(value: unknown): value is Logger {
  if (value === null || typeof value !== 'object') return false;
  const v = value as Record<string, unknown>;
  return ['debug', 'info', 'warn', 'error', 'child'].every((m) => typeof v[m] === 'function');
}
