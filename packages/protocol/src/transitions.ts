/**
 * The one shape of every lifecycle in Reactor: a closed set of states, a table of the edges
 * between them, and one function that moves along an edge or throws
 * {@link IllegalTransitionError}. The app host's lifecycles (host, session, client) and the
 * runner's (the runner, a rank process, the rank's loop) all go through it.
 */
import { CodedError } from './coded-error.js';
import { ProtocolErrorCode } from './codes.js';

/** For each state, the states it may move to (an empty list: a final state). */
export type TransitionTable<S extends string> = { readonly [K in S]: readonly S[] };

/** True when `table` has the edge `from -> to`. */
export function canTransition<S extends string>(table: TransitionTable<S>, from: S, to: S): boolean {
  return table[from].includes(to);
}

/**
 * Checks the edge `from -> to` and returns `to`.
 * @param machine the lifecycle's name in the error (`DistributedRunner`, `session`)
 * @param describe the error's message, when the caller words it its own way (default:
 *   `<machine>: illegal state transition <from> -> <to>.`)
 * @throws {@link IllegalTransitionError} (`illegal_transition`) when `table` has no such edge
 */
export function transition<S extends string>(
  machine: string,
  table: TransitionTable<S>,
  from: S,
  to: S,
  describe?: (machine: string, from: S, to: S) => string,
): S {
  if (!canTransition(table, from, to)) throw new IllegalTransitionError(machine, from, to, describe?.(machine, from, to));
  return to;
}

/**
 * A lifecycle was asked to move along an edge its table does not have. Always a bug (or a
 * message out of order); the message names the lifecycle and both states.
 * @remarks code `illegal_transition`
 */
export class IllegalTransitionError extends CodedError {
  /** The lifecycle (`DistributedRunner`, `WorkerProcess(rank 3)`, `host`, `session`, `client`). */
  readonly machine: string;
  readonly from: string;
  readonly to: string;

  constructor(machine: string, from: string, to: string, message = `${machine}: illegal state transition ${from} -> ${to}.`) {
    super(ProtocolErrorCode.IllegalTransition, message);
    this.machine = machine;
    this.from = from;
    this.to = to;
  }

  /** The lifecycle, under the name the app host's errors gave it: the same as {@link machine}. */
  get lifecycle(): string {
    return this.machine;
  }
}
