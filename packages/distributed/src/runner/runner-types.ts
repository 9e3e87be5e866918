/**
 * The runner's public types: its states and their edges, its events, a zero-copy result and
 * the options of one call.
 */
import type { CrashPhase } from '../errors.js';
import type { PeerWait, ProgressPhase } from '../shm/progress.js';
import type { TransitionTable } from '../state-machine.js';
import type { RunnerLoadProgress } from './runner-channels.js';

/** Where the runner is in its life. */
export type RunnerStateName = 'new' | 'starting' | 'ready' | 'busy' | 'unusable' | 'shutdown';

/**
 * Every edge of the runner's lifecycle:
 * ```
 * new --start()--> starting --every rank loaded--> ready <--call / answer--> busy
 *                     |                              |                         |
 *                     | start() failed               | crash, desync, timeout, stall, failed cancel
 *                     v                              v                         v
 *                  shutdown <----shutdown()------ unusable <-------------------'
 * ```
 * (`shutdown()` reaches `shutdown` from every state.)
 */
export const RUNNER_TRANSITIONS: TransitionTable<RunnerStateName> = {
  new: ['starting', 'shutdown'],
  starting: ['ready', 'shutdown'],
  ready: ['busy', 'unusable', 'shutdown'],
  busy: ['ready', 'unusable', 'shutdown'],
  unusable: ['shutdown'],
  shutdown: [],
};

/** A rank that made no progress for `stallMs` during a call (the `stall` event, `stalledRanks`). */
export interface StallInfo {
  rank: number;
  /** What the rank was doing when it stopped advancing: `generate`, `reset`, ... */
  phase: ProgressPhase;
  /** Milliseconds since its last progress, when reported. */
  sinceMs: number;
  /** A rank stalled in a pipeline's point-to-point `send`/`recv` (Python ranks): the peer it waits on. */
  waitsOn?: PeerWait;
}

/** A rank process that exited without being asked (the `rankExit` event). */
export interface RankExitInfo {
  rank: number;
  pid: number;
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** What the runner was doing. */
  during: CrashPhase;
}

/**
 * The runner's events (it is an `EventEmitter`; there is no `error` event, so an unhandled
 * event never throws):
 * - `unhealthy` (error): the runner became unusable: a rank crashed (also between calls), a
 *   desync, a timeout, a stall past `stallTimeoutMs`, a cancel not acknowledged. Emitted once,
 *   at once; the teardown follows. Not emitted by `shutdown()`.
 * - `rankExit` (info): a rank process exited without being asked, whatever the runner was doing.
 * - `stall` (info): a rank made no progress for `stallMs` during a call.
 * - `stallCleared` (rank): a stalled rank advanced again (or its call ended).
 * - `progress` (info): while it starts, its load progress: the ranks' `reportProgress()` averaged
 *   (`starting ranks` at 0 first, `loaded` at 1 last).
 */
export interface DistributedRunnerEvents {
  unhealthy: [error: Error];
  progress: [progress: RunnerLoadProgress];
  rankExit: [info: RankExitInfo];
  stall: [info: StallInfo];
  stallCleared: [rank: number];
}

/**
 * A zero-copy result from {@link DistributedRunner.generateView}: the typed arrays in `value`
 * are views into rank 0's shared-memory block, which the runner's next `generate()` or
 * `generateView()` overwrites. Use `value` while `valid` is true; `copy()` gives a result the
 * caller owns (what `generate()` returns).
 */
export interface SharedResult<T> {
  /** The result; its typed arrays are valid only while {@link SharedResult.valid} is true. */
  readonly value: T;
  /** False once a later `generate()`/`generateView()` has started: the memory holds another result now. */
  readonly valid: boolean;
  /**
   * The result with every typed array copied out of shared memory (one copy).
   * @throws {@link RunnerStateError} (`runner_state`) once `valid` is false
   */
  copy(): T;
}

/** Options of one `generate()` call. */
export interface CallOptions {
  /** Cancels the call: the ranks see `this.signal` aborted; the call rejects with `CallAbortedError` (`name` `AbortError`). */
  signal?: AbortSignal;
}
