/**
 * Errors of `@reactor/distributed`. Every error has a stable `code` (listed in `docs/errors.md`)
 * and a message that says what failed, where, and how to fix it.
 */
import { CodedError, IllegalTransitionError } from '@reactor/protocol';

/**
 * Every error code of this package (`snake_case`, stable; each listed in `docs/errors.md`).
 * @example
 * ```ts
 * if (err instanceof DistributedError && err.code === DistributedErrorCode.WorkerCrashed) rebuildRunner();
 * ```
 */
export const DistributedErrorCode = {
  /** A rank process exited without being asked ({@link WorkerCrashedError}). */
  WorkerCrashed: 'worker_crashed',
  /** A rank did not answer within `startTimeoutMs`/`callTimeoutMs` ({@link WorkerTimeoutError}). */
  WorkerTimeout: 'worker_timeout',
  /** A rank made no progress for `stallTimeoutMs` during a call ({@link WorkerStalledError}). */
  WorkerStalled: 'worker_stalled',
  /** Ranks disagreed ({@link RankDesyncError}). */
  RankDesync: 'rank_desync',
  /** A shared-memory block does not fit ({@link SharedMemoryCapacityError}). */
  ShmCapacity: 'shm_capacity',
  /** `shm: 'native'` asked for but the binding cannot load. */
  ShmNativeUnavailable: 'shm_native_unavailable',
  /** The rank entry point is not built. */
  NotBuilt: 'not_built',
  /** A call on a runner that is no longer usable ({@link RunnerUnusableError}). */
  RunnerUnusable: 'runner_unusable',
  /** A call while another is in flight ({@link RunnerStateError}): `maxInFlight` calls are. */
  RunnerBusy: 'runner_busy',
  /** A runner option out of its range: `maxInFlight`, `outputRank` ({@link RunnerOptionError}). */
  RunnerOption: 'runner_option',
  /** A call in the wrong state: `start()` twice, a call before `start()` ({@link RunnerStateError}). */
  RunnerState: 'runner_state',
  /** A collective used wrongly ({@link CollectiveError}). */
  Collective: 'collective_misuse',
  /** An unknown message on the parent/rank channel ({@link ProtocolError}). */
  Protocol: 'ipc_protocol',
  /** A lifecycle moved along an edge its state machine does not have: a bug ({@link IllegalTransitionError}). */
  IllegalTransition: 'illegal_transition',
  /** A call cancelled through its `signal` ({@link CallAbortedError}, `name` `AbortError`). */
  CallAborted: 'call_aborted',
  /** A fault injected on purpose with `options.faults` / `REACTOR_FAULTS` ({@link InjectedFaultError}). */
  InjectedFault: 'injected_fault',
  /** The Python interpreter of a Python worker cannot be found ({@link PythonWorkerError}). */
  PythonNotFound: 'python_not_found',
  /** The Python interpreter lacks what the worker needs: NumPy, torch, another package ({@link PythonWorkerError}). */
  PythonEnvironment: 'python_environment',
  /** A Python worker's module or class does not exist ({@link PythonWorkerError}). */
  PythonWorkerNotFound: 'python_worker_not_found',
  /** A Python worker's class is not a `DistributedWorker`, or cannot be constructed ({@link PythonWorkerError}). */
  PythonWorkerInvalid: 'python_worker_invalid',
  /** A value that cannot travel between TypeScript and a Python rank ({@link PythonWorkerError}). */
  PythonValue: 'python_value',
  /** Two stages of a pipeline of Python ranks disagree on an activation's shape or dtype (`reactor_worker.pipeline`; {@link PythonWorkerError}). */
  PipelineShape: 'pipeline_shape',
  /** `runner.snapshot()` / `runner.restore()` on a worker without `snapshot()` / `restore()` (`SnapshotUnsupportedError`). */
  SnapshotUnsupported: 'snapshot_unsupported',
  /** `gpu.sessions_per_gpu`'s slot folder cannot be created or written (`GpuSlotError`). */
  GpuSlotDir: 'gpu_slot_dir',
  /** `gpu.sessions_per_gpu` needs util-linux's `flock` to hold a slot, and it cannot be run (`GpuSlotError`). */
  GpuSlotUnavailable: 'gpu_slot_unavailable',
} as const;
/** One of {@link DistributedErrorCode}'s values. */
export type DistributedErrorCode = (typeof DistributedErrorCode)[keyof typeof DistributedErrorCode];

/** Base class of every error this package throws (construction-time `TypeError`/`RangeError` aside). */
export class DistributedError extends CodedError {
  /** Stable machine-readable code, one of {@link DistributedErrorCode}. */
  declare readonly code: DistributedErrorCode;

  constructor(code: DistributedErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

/** Facts about a rank process that exited without being asked to. */
export interface CrashInfo {
  rank: number;
  pid: number;
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** The last lines that rank wrote to stderr (oldest first). */
  stderrTail: string[];
  /** What the runner was doing when the rank exited. */
  during: CrashPhase;
}

/** What the runner was doing when a rank exited: `start()`, a call, or nothing (between calls). */
export type CrashPhase = 'start' | 'generate' | 'reset' | 'snapshot' | 'restore' | 'idle';

const CRASH_PHASE_TEXT: Record<CrashPhase, string> = {
  start: 'during start()',
  generate: 'during generate()',
  reset: 'during reset()',
  snapshot: 'during snapshot()',
  restore: 'during restore()',
  idle: 'during idle (between calls)',
};

/**
 * A rank process exited without being asked to (killed, crashed, called `process.exit`).
 * The runner is unusable afterwards.
 * @remarks code `worker_crashed`
 */
export class WorkerCrashedError extends DistributedError {
  readonly rank: number;
  readonly pid: number;
  readonly exitCode: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stderrTail: string[];
  /** What the runner was doing when the rank exited. */
  readonly during: CrashPhase;

  constructor(info: CrashInfo) {
    const how = info.signal ? `was killed by ${info.signal}` : `exited with code ${info.exitCode}`;
    const tail = info.stderrTail.length
      ? `\nLast stderr lines of rank ${info.rank}:\n${info.stderrTail.map((l) => `  | ${l}`).join('\n')}`
      : `\nRank ${info.rank} wrote nothing to stderr.`;
    super(
      DistributedErrorCode.WorkerCrashed,
      `Rank ${info.rank} (pid ${info.pid}) ${how} ${CRASH_PHASE_TEXT[info.during]}. The runner is unusable: ` +
        `shut it down and construct a new DistributedRunner.${tail}`,
    );
    this.rank = info.rank;
    this.pid = info.pid;
    this.exitCode = info.exitCode;
    this.signal = info.signal;
    this.stderrTail = info.stderrTail;
    this.during = info.during;
  }
}

/**
 * One or more ranks did not answer within the deadline (`startTimeoutMs` for `start()`,
 * `callTimeoutMs` for `generate()`/`reset()`). The silent ranks are killed; the runner is unusable.
 * @remarks code `worker_timeout`
 */
export class WorkerTimeoutError extends DistributedError {
  readonly ranks: number[];
  readonly timeoutMs: number;
  readonly operation: string;

  constructor(operation: string, ranks: number[], timeoutMs: number, optionName: string) {
    super(
      DistributedErrorCode.WorkerTimeout,
      `${operation} did not finish within ${timeoutMs} ms: rank${ranks.length > 1 ? 's' : ''} ${ranks.join(', ')} ` +
        `never answered and ${ranks.length > 1 ? 'were' : 'was'} killed. The runner is unusable: shut it down and ` +
        `construct a new DistributedRunner (raise options.${optionName} if the work is legitimately slower).`,
    );
    this.ranks = ranks;
    this.timeoutMs = timeoutMs;
    this.operation = operation;
  }
}

/**
 * Ranks disagreed: some failed and others did not, ranks failed with different error types, or a
 * rank finished while its peers waited for it in a collective. `cause` is the first failure.
 * The runner is unusable.
 * @remarks code `rank_desync`
 */
export class RankDesyncError extends DistributedError {
  readonly operation: string;
  /** One line per rank describing its outcome. */
  readonly outcomes: string[];
  /** The ranks that diverged from rank 0, where the check can name them (the divergence check does); else empty. */
  readonly ranks: number[];

  constructor(operation: string, detail: string, outcomes: string[], cause: unknown, ranks: number[] = []) {
    super(
      DistributedErrorCode.RankDesync,
      `Ranks disagreed in ${operation}: ${detail}.\n${outcomes.map((o) => `  ${o}`).join('\n')}\n` +
        `Every rank must run the same calls (and the same collectives) and fail the same way. ` +
        `The runner is unusable: shut it down and construct a new DistributedRunner.`,
      { cause },
    );
    this.operation = operation;
    this.outcomes = outcomes;
    this.ranks = ranks;
  }
}

/**
 * A shared-memory block does not fit: `/dev/shm` has less free space than the block needs, or
 * the runner's `maxShmBytes` would be exceeded.
 * @remarks code `shm_capacity`
 */
export class SharedMemoryCapacityError extends DistributedError {
  readonly neededBytes: number;
  readonly availableBytes: number;
  /** What bounds it: `are free in /dev/shm`, `are allowed by options.maxShmBytes`. */
  readonly limitName: string;
  /** What needed the memory. */
  readonly what: string;

  constructor(what: string, neededBytes: number, availableBytes: number, limitName: string) {
    super(
      DistributedErrorCode.ShmCapacity,
      `Shared memory for ${what} needs ${formatBytes(neededBytes)} but only ${formatBytes(availableBytes)} ` +
        `${limitName}. Raise the limit: give the container more shared memory (docker run --shm-size=2g; ` +
        `containers default to 64 MB), free space in /dev/shm, or raise options.maxShmBytes.`,
    );
    this.neededBytes = neededBytes;
    this.availableBytes = availableBytes;
    this.limitName = limitName;
    this.what = what;
  }
}

/**
 * A call on a runner that a crash, timeout, desync or shutdown left unusable.
 * @remarks code `runner_unusable`
 */
export class RunnerUnusableError extends DistributedError {
  constructor(operation: string, reason: string, cause?: unknown) {
    super(DistributedErrorCode.RunnerUnusable, `Cannot ${operation}: the runner is unusable (${reason}). Shut it down and construct a new DistributedRunner.`, {
      cause,
    });
  }
}

/**
 * A call made in the wrong state: `start()` twice, `generate()` before `start()`, or a second
 * call while one is in flight.
 * @remarks code `runner_state` (wrong state) and `runner_busy` (concurrent call)
 */
export class RunnerStateError extends DistributedError {}

/**
 * A runner option out of its range (`maxInFlight`, `outputRank`), thrown by the constructor
 * before any process exists; the message names the option, the range and the fix.
 */
export class RunnerOptionError extends DistributedError {
  /** The option's name, `maxInFlight` or `outputRank`. */
  readonly option: string;
  constructor(option: string, message: string) {
    super(DistributedErrorCode.RunnerOption, message);
    this.option = option;
  }
}

/**
 * A collective was used wrongly (bad root, receive array of the wrong type or length) or ranks
 * called different collectives at the same point.
 * @remarks code `collective_misuse`
 */
export class CollectiveError extends DistributedError {
  constructor(message: string) {
    super(DistributedErrorCode.Collective, message);
  }
}

/**
 * A message on the parent/rank channel that the protocol does not know: a version mismatch
 * between the parent's and the ranks' copies of this package, or a bug.
 * @remarks code `ipc_protocol`
 */
export class ProtocolError extends DistributedError {
  constructor(message: string) {
    super(DistributedErrorCode.Protocol, message);
  }
}

/**
 * One or more ranks made no progress (their progress counter in shared memory stood still) for
 * `stallTimeoutMs` during a call: stopped (SIGSTOP), blocked in synchronous code, or deadlocked.
 * The stalled ranks are killed; the runner is unusable.
 * @remarks code `worker_stalled`
 */
export class WorkerStalledError extends DistributedError {
  readonly ranks: number[];
  /** What each stalled rank was doing, by rank (`generate`, `reset`, `collective`, ...). */
  readonly phases: string[];
  readonly stallTimeoutMs: number;
  readonly operation: string;

  /** @param next what happens now and how to avoid it (default: the runner is unusable, raise `stallTimeoutMs`). */
  constructor(operation: string, ranks: number[], phases: string[], stallTimeoutMs: number, next?: string) {
    const list = ranks.map((r, i) => `rank ${r} (in ${phases[i]})`).join(', ');
    super(
      DistributedErrorCode.WorkerStalled,
      next !== undefined
        ? `${operation} stalled: ${list} made no progress for ${stallTimeoutMs} ms (a stopped process, or synchronous code that blocks its event loop). ${next}`
        : `${operation} stalled: ${list} made no progress for ${stallTimeoutMs} ms and ${ranks.length > 1 ? 'were' : 'was'} killed ` +
            `(a stopped process, or synchronous code that blocks its event loop). The runner is unusable: shut it down and construct ` +
            `a new DistributedRunner (raise options.stallTimeoutMs if a step legitimately blocks that long).`,
    );
    this.ranks = ranks;
    this.phases = phases;
    this.stallTimeoutMs = stallTimeoutMs;
    this.operation = operation;
  }
}

/**
 * A call cancelled through its `signal` before every rank finished. `name` is `AbortError`, as
 * for `fetch()`. `runnerUsable` says whether every rank acknowledged the cancel in time (the
 * runner stays healthy) or not (the silent ranks were killed; the runner is unusable).
 * @remarks code `call_aborted`
 */
export class CallAbortedError extends DistributedError {
  readonly operation: string;
  readonly runnerUsable: boolean;

  constructor(operation: string, runnerUsable: boolean, detail: string, reason?: unknown) {
    super(DistributedErrorCode.CallAborted, `${operation} was cancelled${detail ? `: ${detail}` : '.'}`, { cause: reason });
    this.name = 'AbortError';
    this.operation = operation;
    this.runnerUsable = runnerUsable;
  }
}

/**
 * A fault injected on purpose (`options.faults` or `REACTOR_FAULTS`, kind `throw`): lets an
 * application test its failure paths without a broken model.
 * @remarks code `injected_fault`
 */
export class InjectedFaultError extends DistributedError {
  constructor(message: string) {
    super(DistributedErrorCode.InjectedFault, message);
  }
}

/**
 * A lifecycle (the runner, a rank process as the parent sees it, the rank's own loop) was asked
 * to move along an edge its state machine does not have. Always a bug in this package or a
 * message out of order; the message names the machine and both states.
 * @remarks code `illegal_transition`
 */
export { IllegalTransitionError };

/**
 * A Python worker's environment, class or values are wrong: the interpreter is missing
 * (`python_not_found`), lacks NumPy/torch (`python_environment`), the module or class does not
 * exist (`python_worker_not_found`) or is not a `DistributedWorker` (`python_worker_invalid`), or
 * a value cannot travel (`python_value`). The message names what and the fix.
 * @remarks codes `python_not_found`, `python_environment`, `python_worker_not_found`, `python_worker_invalid`, `python_value`
 */
export class PythonWorkerError extends DistributedError {}

/** `1.5 MiB`-style rendering used in messages. */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = -1;
  do {
    v /= 1024;
    u++;
  } while (v >= 1024 && u < units.length - 1);
  return `${v.toFixed(v >= 100 ? 0 : 1)} ${units[u]}`;
}

/** This package's error classes by name: a rank's error of one of these types is rebuilt as one. */
export const OWN_ERROR_CLASSES: ReadonlyMap<string, abstract new (...args: never[]) => Error> = new Map<string, abstract new (...args: never[]) => Error>([
  ['SharedMemoryCapacityError', SharedMemoryCapacityError],
  ['CollectiveError', CollectiveError],
  ['ProtocolError', ProtocolError],
  ['InjectedFaultError', InjectedFaultError],
  ['IllegalTransitionError', IllegalTransitionError],
  ['CallAbortedError', CallAbortedError],
  ['DistributedError', DistributedError],
  ['PythonWorkerError', PythonWorkerError],
  // A Python rank's codec error (reactor_worker.UnsendableValueError, code python_value).
  ['UnsendableValueError', PythonWorkerError],
  // reactor_worker.pipeline's shape check (code pipeline_shape).
  ['PipelineShapeError', PythonWorkerError],
]);
