import { randomUUID } from 'node:crypto';
import type { ErrorBody } from '@reactor/protocol';
import type { AppliedAcks } from './applied.js';
import type { FrameTimes } from './frame-health.js';
import type { Playout } from './playout.js';
import type { InputState } from '../state/input-state.js';
import type { UploadStore } from '../upload/upload-store.js';
import { Lifecycle, SESSION_TRANSITIONS, type SessionState } from './lifecycle.js';

/**
 * One session of the host: its state, its clients, its playout and its timers. `C` is the
 * host's client type (`HostClient`): this module does not import it, so the two files do not
 * import each other.
 */
export class Session<C = unknown> {
  readonly id: string;
  readonly startedAt = performance.now();
  readonly lifecycle = new Lifecycle<SessionState>('session', 'starting', SESSION_TRANSITIONS);
  /** Why it ended, when it ended with an error. */
  error: ErrorBody | undefined;
  /** Clients in the session (`joining` or `joined`), in join order. */
  readonly members = new Set<C>();
  /** Clients that left and whose `@disconnected` hooks are queued (`leaving`), in the order they left. */
  readonly leaving = new Set<C>();
  /** The step loop's handle while it runs. */
  loop: object | undefined;
  graceTimer: NodeJS.Timeout | undefined;
  statsTimer: NodeJS.Timeout | undefined;
  steps = 0;
  windowSteps = 0;
  windowModelMs = 0;
  /** Who publishes each inbound track (wire name -> client); the first publisher holds it for the session. */
  readonly publishers = new Map<string, C>();
  /** Tracks whose `@trackPublished` hook ran, and for which client (each gets one `@trackUnpublished`). */
  readonly announced = new Map<string, C>();
  /** Aborts when a command or hook queues behind the running step: a read the step waits in gives way. */
  stepInterrupt: AbortController | undefined;
  /** The running step's restart switch (`ReactorApp.restartSignal`): aborted by an urgent change. */
  urgentRestart: AbortController | undefined;
  /** False from an urgent change until a step completes: at most one urgent change (restart) per chunk. */
  urgentReady = true;
  /** Granted urgent changes still queued for the lock: a step that starts before they run is restarted at once. */
  urgentPending = 0;
  /** Flushes of its queued frames (`this.output.flush()`, an urgent change): an urgent event whose handler flushed is not flushed again. */
  flushes = 0;
  /**
   * Steps whose `generate()` was dispatched and whose outcome is not processed yet (an app with
   * `inFlight` > 1, `step-pipeline.ts`); always 0 at depth 1. A change made now is read by step
   * `steps + inFlight + 1`.
   */
  inFlight = 0;
  /** The session's uploads (created by the first announcement; closed, files and folder deleted, when the session ends). */
  uploads: UploadStore | undefined;
  /** The reason of the last refused step, logged once until it changes. */
  lastRefusal: string | undefined;
  /** Single-controller mode: the client that steers, and those waiting for control (first first). */
  controller: C | undefined;
  readonly controlQueue: C[] = [];
  /** When each frame of the clock track was played (the frame-time p99 the session admission reads). */
  frameTimes: FrameTimes | undefined;

  /** `id`: the session's id, when someone outside chose it (a session router's); a new UUID otherwise. */
  constructor(
    readonly state: InputState,
    readonly playout: Playout,
    /** Which frame first reflects each command that changed state (`applied` messages). */
    readonly acks: AppliedAcks<C>,
    id?: string,
  ) {
    this.id = id ?? randomUUID();
  }

  /** Whether it is past its start and before its end: `streaming` or `orphaned` or `waiting`. */
  get live(): boolean {
    return this.lifecycle.is('waiting', 'streaming', 'orphaned');
  }

  /** Whether it is ending or ended. */
  get over(): boolean {
    return this.lifecycle.is('closing', 'ended');
  }

  /** Stops its timers (the end of the session). */
  clearTimers(): void {
    if (this.graceTimer) clearTimeout(this.graceTimer);
    if (this.statsTimer) clearInterval(this.statsTimer);
    this.graceTimer = undefined;
    this.statsTimer = undefined;
  }
}
