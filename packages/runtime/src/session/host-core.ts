/**
 * What the parts of an {@link AppHost} share: the app and its definition, the step lock and the
 * tasks queued for it, the current session and the clients, the change signal that wakes a
 * refused step loop, the counters, and the guard around calls into sinks and listeners.
 *
 * The host (`host.ts`) is a facade over its parts: the step loop (`step-loop.ts`), command
 * dispatch (`command-dispatch.ts`), uploads (`host-uploads.ts`), input tracks
 * (`input-tracks.ts`), control (`control.ts`) and broadcast (`broadcast.ts`); each gets this core.
 */
import type { Logger } from '@reactor/log';
import type { ReactorApp } from '../app/reactor-app.js';
import type { AppDefinition } from '../app/registry.js';
import type { AppSchema } from '@reactor/protocol';
import { hostContext, type HostContext } from '../app/weights.js';
import { ApplicationError } from '../errors/errors.js';
import type { HookKind } from '../metadata/keys.js';
import type { HostClient, HostSession } from './host-client.js';
import { StepLock } from './step-lock.js';

/** Cumulative counters of a host, for metrics. */
export interface HostCounters {
  sessions: number;
  steps: number;
  refusedSteps: number;
  modelErrors: number;
  framesPlayed: number;
  /** Audio chunks played out (one per audio track per frame that carries audio). */
  audioChunksPlayed: number;
  commands: number;
  commandErrors: number;
  /** Frames dropped by transports for slow clients (sum of `reportDropped`). */
  framesDropped: number;
  /** Inbound frames (video frames, audio chunks) that entered a track's `InputBuffer`, every track together. */
  inputFramesAccepted: number;
  /** Inbound frames evicted unread because their buffer was full (the app reads slower than the publisher sends). */
  inputFramesEvicted: number;
  /** Steps cancelled and run again because an urgent change superseded them (`@InputField({ urgent })`). */
  urgentRestarts: number;
  /** Urgent changes that came while the chunk had been restarted already: applied as ordinary changes. */
  urgentRateLimited: number;
  /** Session snapshots taken for the rewind rings. */
  snapshots: number;
  /** Snapshots that failed (each stops its session's ring). */
  snapshotFailures: number;
  /** Bytes the rewind rings hold now (a gauge). */
  snapshotBytes: number;
  /** Rewinds made. */
  rewinds: number;
}

/**
 * What a task does with the steps in flight (an app with `inFlight` > 1) before it runs:
 * `drain` (they finish, their frames are pushed: an event, a rewind, a hook), `cancel` (their
 * calls are cancelled and nothing of them shows: a session's end), `none` (a setter: they go on).
 */
export type BetweenCalls = 'drain' | 'cancel' | 'none';

/** The state and plumbing every part of a host shares (one per host). */
export class HostCore {
  /** Cumulative counters (for `/metrics`). */
  readonly counters: HostCounters = {
    sessions: 0,
    steps: 0,
    refusedSteps: 0,
    modelErrors: 0,
    framesPlayed: 0,
    audioChunksPlayed: 0,
    commands: 0,
    commandErrors: 0,
    framesDropped: 0,
    inputFramesAccepted: 0,
    inputFramesEvicted: 0,
    urgentRestarts: 0,
    urgentRateLimited: 0,
    snapshots: 0,
    snapshotFailures: 0,
    snapshotBytes: 0,
    rewinds: 0,
  };
  readonly lock = new StepLock();
  readonly clients = new Map<string, HostClient>();
  /** The current session (at most one). */
  session: HostSession | undefined;
  /** Tasks (commands, hooks, session ends) queued for the step lock and not started yet. */
  tasksWaiting = 0;
  #changeVersion = 0;
  #changeWaiters: Array<() => void> = [];
  readonly #warned = new WeakSet<object>();

  constructor(
    readonly def: AppDefinition,
    readonly app: ReactorApp<any, any, any, any>,
    readonly ctx: HostContext,
    readonly logger: Logger,
    /** One controller at a time (`AppHostOptions.singleController`). */
    readonly singleController: boolean,
  ) {}

  #withoutUrgent: AppSchema | undefined;

  /**
   * The schema clients get: the app's, without the `urgent` marks while the app's urgency is off
   * (`ReactorApp.urgent = false`, which an app may set in `load()`): then no command supersedes
   * the work in flight, and the schema says so.
   */
  get servedSchema(): AppSchema {
    const schema = this.def.schema;
    if (this.app.urgent !== false || !schema.commands.some((c) => c.urgent)) return schema;
    this.#withoutUrgent ??= { ...schema, commands: schema.commands.map(({ urgent: _, ...c }) => c) };
    return this.#withoutUrgent;
  }

  /** Counts changes (commands, clients, flushes): a refused loop waits for the next one. */
  get changeVersion(): number {
    return this.#changeVersion;
  }

  /**
   * Finishes (`drain`: processed, frames pushed) or cancels (`cancel`: nothing of them processed)
   * the steps in flight of an app with `inFlight` > 1 (`step-pipeline.ts`), under the lock: a
   * task that may use the model between calls runs after it. Unset at depth 1.
   */
  drainSteps: ((mode: BetweenCalls) => Promise<void>) | undefined;

  /**
   * Runs `fn` under the step lock, inside this host's context.
   * @param betweenCalls what the steps in flight (`inFlight` > 1) do first ({@link BetweenCalls}).
   */
  task<T>(fn: () => Promise<T>, betweenCalls: BetweenCalls = 'drain'): Promise<T> {
    return this.behindStep(() => hostContext.run(this.ctx, fn), betweenCalls);
  }

  /**
   * Runs `fn` under the step lock as a task that a step must not hold up: a step waiting in an
   * `InputBuffer` read (now, or one that starts before this task's turn) gives way: the read
   * rejects, the step is refused and retried after the task. Commands and hooks never wait for a frame.
   */
  behindStep<T>(fn: () => Promise<T>, betweenCalls: BetweenCalls = 'drain'): Promise<T> {
    this.tasksWaiting++;
    if (this.lock.holder === 'step') this.session?.stepInterrupt?.abort(stepGaveWay());
    return this.lock.run(() => {
      this.tasksWaiting--;
      if (betweenCalls !== 'none' && this.drainSteps && this.session && this.session.inFlight > 0) return this.drainSteps(betweenCalls).then(fn);
      return fn();
    });
  }

  /** Runs the app's `kind` hooks in order, with `client` (or, for track hooks, `track, client`); a throw is logged and ignored. */
  async runHooks(kind: HookKind, client?: HostClient, ...trackArgs: [string, HostClient] | []): Promise<void> {
    const args: unknown[] = trackArgs.length > 0 ? trackArgs : [client];
    for (const method of this.def.hooks[kind]) {
      try {
        await (this.app as unknown as Record<string, (...a: unknown[]) => unknown>)[method]!.apply(this.app, args);
      } catch (err) {
        this.logger.error({ err }, `@${kind} hook ${this.def.appClass.name}.${method} threw (ignored)`);
      }
    }
  }

  /** Calls into a sink or listener, which must not throw; one that does is logged and must not break the host. */
  safe(owner: object, fn: () => void): void {
    try {
      fn();
    } catch (err) {
      // Once per sink: a broken one would otherwise log every frame.
      if (this.#warned.has(owner)) return;
      this.#warned.add(owner);
      this.logger.warn({ err }, 'a client sink or status listener threw (ignored)');
    }
  }

  /** Resolves on the next change (command, client, flush) after `version`, or after `ms`. */
  waitForChange(version: number, ms: number): Promise<void> {
    if (this.#changeVersion !== version) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        this.#changeWaiters = this.#changeWaiters.filter((w) => w !== done);
        resolve();
      }, ms);
      this.#changeWaiters.push(done);
    });
  }

  notifyChange(): void {
    this.#changeVersion++;
    const waiters = this.#changeWaiters;
    if (waiters.length === 0) return;
    this.#changeWaiters = [];
    for (const w of waiters) w();
  }
}

/** Why a step's read gave way (a refusal: the step is retried). */
export function stepGaveWay(): ApplicationError {
  return new ApplicationError('a read of an input track gave way to a command or hook queued behind the step; the step is retried');
}

export function errorText(err: unknown): string {
  if (err instanceof Error) return `${err.name}: ${err.message}`;
  return String(err);
}
