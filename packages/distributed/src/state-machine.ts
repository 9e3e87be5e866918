/**
 * The one shape of every lifecycle in this package: a closed set of states, a table of the
 * edges between them, and one function that moves along an edge or throws
 * {@link IllegalTransitionError}. The runner, `WorkerProcess` and the rank's loop each own one.
 * @internal
 */
import { IllegalTransitionError } from './errors.js';

/** For each state, the states it may move to (an empty list: a final state). */
export type TransitionTable<S extends string> = { readonly [K in S]: readonly S[] };

/** True when `table` has the edge `from -> to`. */
export function canTransition<S extends string>(table: TransitionTable<S>, from: S, to: S): boolean {
  return table[from].includes(to);
}

/**
 * Checks the edge `from -> to` and returns `to`.
 * @throws {@link IllegalTransitionError} (`illegal_transition`) when `table` has no such edge
 */
export function transition<S extends string>(machine: string, table: TransitionTable<S>, from: S, to: S): S {
  if (!canTransition(table, from, to)) throw new IllegalTransitionError(machine, from, to);
  return to;
}
