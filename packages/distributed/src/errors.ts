/**
 * Errors of `@reactor/distributed`. Every error has a stable `code` (listed in `docs/errors.md`)
 * and a message that says what failed, where, and how to fix it.
 */

/** Base class of every error this package throws (construction-time `TypeError`/`RangeError` aside). */
export class DistributedError extends Error {
  /** Stable machine-readable code, e.g. `ERR_WORKER_CRASHED`. */
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
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
  /** What the runner was doing: `start`, `generate`, `reset`, or `idle`. */
  during: string;
}

/**
 * A rank process exited without being asked to (killed, crashed, called `process.exit`).
 * The runner is unusable afterwards.
 * @remarks code `ERR_WORKER_CRASHED`
 */
export class WorkerCrashedError extends DistributedError {
  readonly rank: number;
  readonly pid: number;
  readonly exitCode: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stderrTail: string[];

  constructor(info: CrashInfo) {
    const how = info.signal ? `was killed by ${info.signal}` : `exited with code ${info.exitCode}`;
    const tail = info.stderrTail.length
      ? `\nLast stderr lines of rank ${info.rank}:\n${info.stderrTail.map((l) => `  | ${l}`).join('\n')}`
      : `\nRank ${info.rank} wrote nothing to stderr.`;
    super(
      'ERR_WORKER_CRASHED',
      `Rank ${info.rank} (pid ${info.pid}) ${how} during ${info.during}. The runner is unusable: ` +
        `shut it down and construct a new DistributedRunner.${tail}`,
    );
    this.rank = info.rank;
    this.pid = info.pid;
    this.exitCode = info.exitCode;
    this.signal = info.signal;
    this.stderrTail = info.stderrTail;
  }
}

/**
 * One or more ranks did not answer within the deadline (`startTimeoutMs` for `start()`,
 * `callTimeoutMs` for `generate()`/`reset()`). The silent ranks are killed; the runner is unusable.
 * @remarks code `ERR_WORKER_TIMEOUT`
 */
export class WorkerTimeoutError extends DistributedError {
  readonly ranks: number[];
  readonly timeoutMs: number;
  readonly operation: string;

  constructor(operation: string, ranks: number[], timeoutMs: number, optionName: string) {
    super(
      'ERR_WORKER_TIMEOUT',
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
 * @remarks code `ERR_RANK_DESYNC`
 */
export class RankDesyncError extends DistributedError {
  readonly operation: string;
  /** One line per rank describing its outcome. */
  readonly outcomes: string[];

  constructor(operation: string, detail: string, outcomes: string[], cause: unknown) {
    super(
      'ERR_RANK_DESYNC',
      `Ranks disagreed in ${operation}: ${detail}.\n${outcomes.map((o) => `  ${o}`).join('\n')}\n` +
        `Every rank must run the same calls (and the same collectives) and fail the same way. ` +
        `The runner is unusable: shut it down and construct a new DistributedRunner.`,
      { cause },
    );
    this.operation = operation;
    this.outcomes = outcomes;
  }
}

/**
 * A shared-memory block does not fit: `/dev/shm` has less free space than the block needs, or
 * the runner's `maxShmBytes` would be exceeded.
 * @remarks code `ERR_SHM_CAPACITY`
 */
export class SharedMemoryCapacityError extends DistributedError {
  readonly neededBytes: number;
  readonly availableBytes: number;

  constructor(what: string, neededBytes: number, availableBytes: number, limitName: string) {
    super(
      'ERR_SHM_CAPACITY',
      `Shared memory for ${what} needs ${formatBytes(neededBytes)} but only ${formatBytes(availableBytes)} ` +
        `${limitName}. Raise the limit: give the container more shared memory (docker run --shm-size=2g; ` +
        `containers default to 64 MB), free space in /dev/shm, or raise options.maxShmBytes.`,
    );
    this.neededBytes = neededBytes;
    this.availableBytes = availableBytes;
  }
}

/**
 * A call on a runner that a crash, timeout, desync or shutdown left unusable.
 * @remarks code `ERR_RUNNER_UNUSABLE`
 */
export class RunnerUnusableError extends DistributedError {
  constructor(operation: string, reason: string, cause?: unknown) {
    super(
      'ERR_RUNNER_UNUSABLE',
      `Cannot ${operation}: the runner is unusable (${reason}). Shut it down and construct a new DistributedRunner.`,
      { cause },
    );
  }
}

/**
 * A call made in the wrong state: `start()` twice, `generate()` before `start()`, or a second
 * call while one is in flight.
 * @remarks code `ERR_RUNNER_STATE` (wrong state) and `ERR_RUNNER_BUSY` (concurrent call)
 */
export class RunnerStateError extends DistributedError {}

/**
 * A collective was used wrongly (bad root, receive array of the wrong type or length) or ranks
 * called different collectives at the same point.
 * @remarks code `ERR_COLLECTIVE`
 */
export class CollectiveError extends DistributedError {
  constructor(message: string) {
    super('ERR_COLLECTIVE', message);
  }
}

/**
 * A message on the parent/rank channel that the protocol does not know: a version mismatch
 * between the parent's and the ranks' copies of this package, or a bug.
 * @remarks code `ERR_PROTOCOL`
 */
export class ProtocolError extends DistributedError {
  constructor(message: string) {
    super('ERR_PROTOCOL', message);
  }
}

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
  ['DistributedError', DistributedError],
]);
