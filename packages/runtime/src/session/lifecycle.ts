/**
 * The three lifecycles of the app host — the host itself, a session, a client — each a closed
 * set of states with the transitions allowed between them. Every state change goes through
 * {@link Lifecycle.to}; a transition the table does not list throws
 * `IllegalTransitionError` (through `@reactor/protocol`'s one transition helper), so a wrong order of events is a loud bug, never a silent one.
 */
import { transition, type TransitionTable } from '@reactor/protocol';

/** A closed set of states and the one function that changes them. */
export class Lifecycle<S extends string> {
  #state: S;

  /**
   * @param name  the lifecycle's name in errors (`host`, `session`, `client`)
   * @param initial the state it starts in
   * @param transitions for each state, the states it may go to
   */
  constructor(
    readonly name: string,
    initial: S,
    private readonly transitions: TransitionTable<S>,
  ) {
    this.#state = initial;
  }

  /** The current state. */
  get state(): S {
    return this.#state;
  }

  /** Whether the current state is one of `states`. */
  is(...states: S[]): boolean {
    return states.includes(this.#state);
  }

  /**
   * Moves to `next`.
   * @throws IllegalTransitionError (`illegal_transition`) when the current state does not allow it.
   */
  to(next: S): void {
    this.#state = transition(this.name, this.transitions, this.#state, next, describeTransition);
  }
}

/** The host's wording of a refused transition: `illegal session transition streaming -> starting`. */
function describeTransition(lifecycle: string, from: string, to: string): string {
  return `illegal ${lifecycle} transition ${from} -> ${to}`;
}

/**
 * The host: `created` -> `loading` -> `ready` | `failed`; from any of these `closing` -> `closed`.
 * A `load()` that finishes after `close()` began leaves the host `closing`.
 */
export type HostState = 'created' | 'loading' | 'ready' | 'failed' | 'closing' | 'closed';

export const HOST_TRANSITIONS: { readonly [K in HostState]: readonly HostState[] } = {
  created: ['loading', 'closing'],
  loading: ['ready', 'failed', 'closing'],
  ready: ['closing'],
  failed: ['closing'],
  closing: ['closed'],
  closed: [],
};

/**
 * A session: `starting` (its `@sessionStarted` hooks are queued) -> `waiting` (they ran; no
 * client has settled yet) -> `streaming` (has clients, the step loop runs) <-> `orphaned` (no
 * client; the grace timer runs) -> `closing` (the end's hooks run) -> `ended`. Any state but
 * `ended` may go to `closing` (a failed step, host shutdown, the grace period over).
 */
export type SessionState = 'starting' | 'waiting' | 'streaming' | 'orphaned' | 'closing' | 'ended';

export const SESSION_TRANSITIONS: { readonly [K in SessionState]: readonly SessionState[] } = {
  starting: ['waiting', 'closing'],
  waiting: ['streaming', 'orphaned', 'closing'],
  streaming: ['orphaned', 'closing'],
  orphaned: ['streaming', 'closing'],
  closing: ['ended'],
  ended: [],
};

/**
 * A client: `waiting` (registered; no session could take it yet: the app is loading or a session
 * is closing) -> `joining` (a member of the session; its `@connected` hooks are queued) ->
 * `joined` (they ran: app messages reach it, `@disconnected` is owed) -> `leaving` (it left or
 * the session ended; `@disconnected` is queued) -> `gone`. A client that leaves before its
 * `@connected` hooks ran goes straight to `gone`: the app never sees it, neither hook runs.
 */
export type ClientState = 'waiting' | 'joining' | 'joined' | 'leaving' | 'gone';

export const CLIENT_TRANSITIONS: { readonly [K in ClientState]: readonly ClientState[] } = {
  waiting: ['joining', 'gone'],
  joining: ['joined', 'gone'],
  joined: ['leaving'],
  leaving: ['gone'],
  gone: [],
};
