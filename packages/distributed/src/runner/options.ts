/**
 * The runner's options and their eager checks: every check runs in the constructor, before
 * any process exists, and names the option and the fix.
 * @internal
 */
import type { Logger } from '@reactor/log';
import { consoleLogger } from '@reactor/log';
import { type FaultSpec, faultsFromEnv, parseFaults } from '../faults.js';
import { EXIT_REQUEST_GRACE_MS } from '../process/worker-process.js';
import type { ShmBackendKind } from '../protocol.js';
import { RunnerOptionError } from '../errors.js';
import type { DeviceRequest } from './devices.js';

/** Default `callTimeoutMs` (the original's 30 s). */
export const DEFAULT_CALL_TIMEOUT_MS = 30_000;
/** Default `startTimeoutMs` (the original's 3600 s: loading weights can be slow). */
export const DEFAULT_START_TIMEOUT_MS = 3_600_000;
/** Default `stallMs`: a rank without progress this long during a call is reported. */
export const DEFAULT_STALL_MS = 5_000;
/** Default `cancelTimeoutMs`: how long every rank has to acknowledge a cancel. */
export const DEFAULT_CANCEL_TIMEOUT_MS = 5_000;

/** The most calls a runner keeps in flight (`maxInFlight`): each slot holds an input and a result block. */
export const MAX_IN_FLIGHT = 8;

/** Options of `DistributedRunner`. */
export interface DistributedRunnerOptions<TArgs = unknown> {
  /** Number of rank processes (a positive integer; never read from the machine). */
  worldSize: number;
  /** Passed to every rank's `load()`; structured-clone data (typed arrays travel through shared memory). */
  loadArgs?: TArgs;
  /** Deadline of each `generate()`/`reset()`, in ms (default 30 000). */
  callTimeoutMs?: number;
  /** Deadline of `start()` (spawn + every `load()`), in ms (default 3 600 000). */
  startTimeoutMs?: number;
  /**
   * A rank whose progress counter stands still this long during a call is reported: a `stall`
   * event, a log line, and `runner.stalledRanks` (default 5000 ms).
   */
  stallMs?: number;
  /** When set, a rank stalled this long fails the call with `WorkerStalledError` (unusable). Default: no such deadline. */
  stallTimeoutMs?: number;
  /** How long every rank has to acknowledge a cancelled call before the runner gives up on them (default 5000 ms). */
  cancelTimeoutMs?: number;
  /** `'auto'` (default): one GPU per rank, or CPU ranks on a machine without GPUs. `'cpu'`: CPU ranks. An array: each rank's GPU index. */
  devices?: DeviceRequest;
  /**
   * Shared-memory implementation: `'native'` (POSIX shm via `shm-typed-array`), `'file'` (pure
   * Node, files in /dev/shm), or `'auto'` (default: native, falling back to files with a notice).
   * The `REACTOR_SHM_BACKEND` environment variable sets the default.
   */
  shm?: 'auto' | ShmBackendKind;
  /** Largest shared-memory block the runner may create, in bytes (default: no cap beyond /dev/shm's free space). */
  maxShmBytes?: number;
  /** How long `shutdown()` waits for ranks to exit after asking, before SIGTERM (default 5000 ms). */
  shutdownGraceMs?: number;
  /** Extra environment variables for every rank. */
  env?: Record<string, string>;
  /** Where runner notices and rank output go; rank lines through `logger.child({ rank })` (default: a console logger). */
  logger?: Logger;
  /** Faults to inject, for tests of the application's failure paths (see `FaultSpec`; also `REACTOR_FAULTS`). */
  faults?: FaultSpec[];
  /** Divergence check: every rank hashes the input it decoded; a mismatch is a `RankDesyncError` naming the ranks (default false). */
  verifyInputs?: boolean;
  /**
   * How many calls may be in flight at once (default 1, at most {@link MAX_IN_FLIGHT}): with more,
   * `generate()` may be called again before the previous call returned (a pipeline's next chunk
   * enters stage 0 while the previous one is in stage 1). Results come back in call order.
   */
  maxInFlight?: number;
  /** The rank whose result is the call's answer (default 0): a pipeline's last stage. */
  outputRank?: number;
}

/** The options after their checks, with defaults filled in. */
export interface ResolvedOptions {
  worldSize: number;
  callTimeoutMs: number;
  startTimeoutMs: number;
  stallMs: number;
  stallTimeoutMs: number | null;
  cancelTimeoutMs: number;
  shutdownGraceMs: number;
  maxShmBytes: number | null;
  shm: 'auto' | ShmBackendKind;
  devices: DeviceRequest;
  env: Record<string, string>;
  logger: Logger;
  faults: FaultSpec[];
  verifyInputs: boolean;
  maxInFlight: number;
  outputRank: number;
}

/**
 * The one numeric check: `options.<name>` is a positive number (an integer where asked;
 * Infinity where a deadline may be switched off).
 */
function positive(value: unknown, name: string, what: 'ms' | 'integer' | 'bytes'): number {
  const ok = typeof value === 'number' && !Number.isNaN(value) && value > 0 && (what === 'ms' || Number.isInteger(value));
  if (!ok) {
    const expected = { ms: 'a positive number of milliseconds (or Infinity)', integer: 'a positive integer', bytes: 'a positive integer number of bytes' }[
      what
    ];
    throw new RangeError(`options.${name} must be ${expected}, got ${String(value)}.`);
  }
  return value;
}

/** {@link positive}, or `dflt` when the option is not set. */
function optional<T>(value: unknown, name: string, what: 'ms' | 'integer' | 'bytes', dflt: T): number | T {
  return value === undefined ? dflt : positive(value, name, what);
}

/**
 * Checks every option.
 * @throws TypeError when `options` is not an object
 * @throws RangeError naming the option that is out of range
 */
export function resolveOptions(options: DistributedRunnerOptions<unknown>, env: NodeJS.ProcessEnv = process.env): ResolvedOptions {
  if (typeof options !== 'object' || options === null) throw new TypeError('DistributedRunner needs an options object with worldSize.');
  const worldSize = positive(options.worldSize, 'worldSize', 'integer');
  const shm = options.shm ?? (env.REACTOR_SHM_BACKEND as 'auto' | ShmBackendKind | undefined) ?? 'auto';
  if (shm !== 'auto' && shm !== 'native' && shm !== 'file') {
    throw new RangeError(`options.shm (or REACTOR_SHM_BACKEND) must be 'auto', 'native' or 'file', got ${JSON.stringify(shm)}.`);
  }
  const stallMs = optional(options.stallMs, 'stallMs', 'ms', DEFAULT_STALL_MS);
  const stallTimeoutMs = optional(options.stallTimeoutMs, 'stallTimeoutMs', 'ms', null);
  if (stallTimeoutMs !== null && stallTimeoutMs < stallMs) {
    throw new RangeError(
      `options.stallTimeoutMs (${stallTimeoutMs}) must be at least options.stallMs (${stallMs}): a stall is reported before it fails the call.`,
    );
  }
  return {
    worldSize,
    callTimeoutMs: optional(options.callTimeoutMs, 'callTimeoutMs', 'ms', DEFAULT_CALL_TIMEOUT_MS),
    startTimeoutMs: optional(options.startTimeoutMs, 'startTimeoutMs', 'ms', DEFAULT_START_TIMEOUT_MS),
    stallMs,
    stallTimeoutMs,
    cancelTimeoutMs: optional(options.cancelTimeoutMs, 'cancelTimeoutMs', 'ms', DEFAULT_CANCEL_TIMEOUT_MS),
    shutdownGraceMs: optional(options.shutdownGraceMs, 'shutdownGraceMs', 'ms', EXIT_REQUEST_GRACE_MS),
    maxShmBytes: optional(options.maxShmBytes, 'maxShmBytes', 'bytes', null),
    shm,
    devices: options.devices ?? 'auto',
    env: { ...(options.env ?? {}) },
    logger: options.logger ?? consoleLogger({ name: 'reactor/distributed' }),
    faults: [...parseFaults(options.faults, 'options.faults', worldSize), ...faultsFromEnv(env, worldSize)],
    verifyInputs: options.verifyInputs === true,
    maxInFlight: inRange(options.maxInFlight, 'maxInFlight', 1, 1, MAX_IN_FLIGHT, 'an integer from 1 (one call at a time) to ' + MAX_IN_FLIGHT),
    outputRank: inRange(options.outputRank, 'outputRank', 0, 0, worldSize - 1, `a rank: an integer from 0 to ${worldSize - 1} (worldSize ${worldSize})`),
  };
}

/** An integer option in `[min, max]`, `dflt` when unset. @throws RunnerOptionError (`runner_option`) naming the range */
function inRange(value: unknown, name: string, dflt: number, min: number, max: number, what: string): number {
  if (value === undefined) return dflt;
  if (typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max) return value;
  throw new RunnerOptionError(name, `options.${name} must be ${what}, got ${typeof value === 'string' ? JSON.stringify(value) : String(value)}.`);
}
