/**
 * Fault injection for tests of applications built on the runner: make one rank crash, hang,
 * throw, stall or run out of shared memory at a chosen `generate()` call, without GPUs and
 * without a broken model. Set with `options.faults` or the `REACTOR_FAULTS` environment variable
 * (a JSON array of the same objects; read by every runner constructed in that process).
 *
 * | kind | what the rank does at that call | what the runner reports |
 * |---|---|---|
 * | `crash` | exits with code {@link FAULT_CRASH_EXIT_CODE} | `WorkerCrashedError`, unusable |
 * | `hang` | never answers (its event loop keeps running) | `WorkerTimeoutError` after `callTimeoutMs` |
 * | `throw` | throws `InjectedFaultError` from `generate()` | on every rank: rethrown, healthy; on some: `RankDesyncError` |
 * | `stall` | stops itself (SIGSTOP): no progress at all | a `stall` event after `stallMs`; `WorkerStalledError` after `stallTimeoutMs` |
 * | `shm_full` | every shared-memory write of that call fails as if /dev/shm were full | rank 0's result: `SharedMemoryCapacityError`, healthy |
 * | `diverge` | runs `generate()` on a different input (`{ injectedDivergence: rank, input }`) | with `verifyInputs`: `RankDesyncError` naming the rank |
 * | `slow` | sleeps `ms` (default {@link DEFAULT_SLOW_FAULT_MS}) before `generate()`, at that call and every later one | nothing: the calls succeed, late (a model too slow for its fps; below `stallMs`, no stall) |
 */

/** Every fault kind. */
export const FAULT_KINDS = ['crash', 'hang', 'throw', 'stall', 'shm_full', 'diverge', 'slow'] as const;
/** One of {@link FAULT_KINDS}. */
export type FaultKind = (typeof FAULT_KINDS)[number];

/** One injected fault: `kind` on rank `rank` at its `call`-th `generate()` (counted from 1). */
export interface FaultSpec {
  rank: number;
  call: number;
  kind: FaultKind;
  /** `slow` only: how long each `generate()` from `call` on sleeps first, ms (1..600000, default {@link DEFAULT_SLOW_FAULT_MS}). */
  ms?: number;
}

/** How long a `slow` fault sleeps before each `generate()` when it names no `ms`. */
export const DEFAULT_SLOW_FAULT_MS = 500;
/** The longest `slow` fault, ms. */
const MAX_SLOW_FAULT_MS = 600_000;

/** Exit code of a rank that crashes by injection (`kind: 'crash'`). */
export const FAULT_CRASH_EXIT_CODE = 86;

/** The environment variable read for faults (a JSON array of {@link FaultSpec}). */
export const FAULTS_ENV = 'REACTOR_FAULTS';

/**
 * Checks a fault list.
 * @throws RangeError naming `source` and the bad entry
 */
export function parseFaults(value: unknown, source: string, worldSize: number): FaultSpec[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new RangeError(`${source} must be an array of { rank, call, kind }, got ${JSON.stringify(value)}.`);
  return value.map((f: unknown, i) => {
    const o = (typeof f === 'object' && f !== null ? f : {}) as Record<string, unknown>;
    const { rank, call, kind, ms } = o;
    if (typeof rank !== 'number' || !Number.isInteger(rank) || rank < 0 || rank >= worldSize) {
      throw new RangeError(`${source}[${i}].rank must be a rank between 0 and ${worldSize - 1}, got ${JSON.stringify(rank)}.`);
    }
    if (typeof call !== 'number' || !Number.isInteger(call) || call < 1) {
      throw new RangeError(`${source}[${i}].call must be a positive integer (the n-th generate() call, from 1), got ${JSON.stringify(call)}.`);
    }
    if (!(FAULT_KINDS as readonly unknown[]).includes(kind)) {
      throw new RangeError(`${source}[${i}].kind must be one of ${FAULT_KINDS.join(', ')}, got ${JSON.stringify(kind)}.`);
    }
    if (ms !== undefined && kind !== 'slow') throw new RangeError(`${source}[${i}].ms is only for kind slow, got kind ${JSON.stringify(kind)}.`);
    if (ms !== undefined && (typeof ms !== 'number' || !Number.isInteger(ms) || ms < 1 || ms > MAX_SLOW_FAULT_MS)) {
      throw new RangeError(`${source}[${i}].ms must be a whole number of ms from 1 to ${MAX_SLOW_FAULT_MS}, got ${JSON.stringify(ms)}.`);
    }
    return { rank, call, kind: kind as FaultKind, ...(kind === 'slow' && { ms: typeof ms === 'number' ? ms : DEFAULT_SLOW_FAULT_MS }) };
  });
}

/** Faults from `REACTOR_FAULTS` (none when unset). @throws RangeError when it is not valid JSON of the right shape */
export function faultsFromEnv(env: NodeJS.ProcessEnv, worldSize: number): FaultSpec[] {
  const text = env[FAULTS_ENV];
  if (text === undefined || text.trim() === '') return [];
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new RangeError(`${FAULTS_ENV} must be a JSON array like [{"rank":1,"call":3,"kind":"crash"}], got ${JSON.stringify(text)}.`);
  }
  return parseFaults(value, FAULTS_ENV, worldSize);
}
