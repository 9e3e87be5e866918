/**
 * The one shape of every lifecycle in this package: a closed set of states, a table of the
 * edges between them, and one function that moves along an edge or throws
 * `IllegalTransitionError`: `@reactor/protocol`'s one transition helper, which the app host's
 * lifecycles use too. The runner, `WorkerProcess` and the rank's loop each own one.
 * @internal
 */
export { canTransition, transition, type TransitionTable } from '@reactor/protocol';
