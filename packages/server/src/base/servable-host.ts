/** What the server serves: the host contract it needs, and the health it reports. */
import type { ClipResult, ErrorBody, SessionStatus } from '@reactor/protocol';
import type { AppHostApi, ClipOptions, MediaListener, NotReadyReason } from '@reactor/runtime';

/** One model step, as a host that reports steps describes it (feeds `/metrics`; `AppHost`'s `StepSample`). */
export interface StepSample {
  /** Model time (generate) of the step, ms. */
  elapsedMs: number;
  /** `processInput`, ms. */
  processInputMs?: number;
  /** `processOutput`, ms (undefined when the step ended before it). */
  processOutputMs?: number | undefined;
  /** The runner calls inside `generate` (an app on a `DistributedRunner`), summed, ms. */
  runner?: { dispatchMs: number; ranksMs: number; handbackMs: number } | undefined;
}

/** `reactor_load_progress_ratio` from a status: the reported ratio while loading (0 before any report), 1 once loaded, none when loading failed. */
export function loadProgressOf(status: SessionStatus): number | undefined {
  if (status.state === 'failed') return undefined;
  if (status.state === 'loading') return status.progress?.ratio ?? 0;
  return 1;
}

/**
 * A host the server can serve: the transport contract plus, optionally, `close()` (called by
 * {@link ReactorServer.close}; it shuts the app's runner down through the app's hooks) and
 * `onStep()` (a step listener, for the step metrics).
 */
export interface ServableHost extends AppHostApi {
  close?(): Promise<void> | void;
  onStep?(listener: (step: StepSample) => void): (() => void) | void;
  /** A status listener (`AppHost.onStatus`): scale-out integrations follow sessions through it. */
  onStatus?(listener: (status: SessionStatus) => void): (() => void) | void;
  /**
   * Ends the running session now (`AppHost.endCurrentSession`): with a text, a release by the
   * session router or a drain's deadline; with an error, a session limit.
   */
  endCurrentSession?(reason: string | ErrorBody): Promise<boolean>;
  /** Each rank's GPU busy ratio where known (`AppHost.rankGpuBusy`): feeds `reactor_rank_gpu_busy_ratio`. */
  rankGpuBusy?(): readonly { rank: number; ratio: number }[];
  /** Cumulative counters (`AppHost.counters`): `steps` feeds `reactor_steps_total`. */
  readonly counters?: HostCounterView;
  /** An app with session snapshots (`AppHost.snapshots`): its session log is saved beside each recording. */
  readonly snapshots?: {
    log(): object | undefined;
    /** The current session's snapshot as bytes (`GET /snapshot`: a fork or a move through the router); `freeze` holds its commands (a move). */
    take?(options?: { freeze?: boolean }): Promise<Uint8Array>;
    /** Ends a move's freeze (`POST /snapshot/thaw`): the held commands apply; how many there were. */
    thaw?(): number;
    /** Keeps a snapshot for the session that starts next with that id (`PUT /snapshot`). */
    seed?(sessionId: string, bytes: Uint8Array): { bytes: number; step: number };
    /** The largest snapshot the app takes or reads (`snapshot.maxBytes`). */
    readonly maxBytes?: number;
  };
  /** A status listener (`AppHost.onStatus`): the server closes its video encoders when a session ends. */
  onStatus?(listener: (status: SessionStatus) => void): (() => void) | void;
  /** The playout tap (`AppHost.onMedia`): the clip ring and recordings read it. */
  onMedia?(listener: MediaListener): () => void;
  /** Where `this.output.clip()` goes (`AppHost.setClipper`). */
  setClipper?(clipper: ((options: ClipOptions) => Promise<ClipResult>) | undefined): void;
}

/** Health as `GET /health` reports it. */
export interface HealthReport {
  /** `ready` exactly when {@link HealthReport.ready}; `not_ready` for a loaded app that cannot take users now. */
  status: 'loading' | 'ready' | 'failed' | 'not_ready';
  /** Whether a new user would get a stream now (`AppHostApi.readiness()`); `/health/ready` answers 200 exactly then. */
  ready: boolean;
  /** Why not, one entry per cause (empty when ready). */
  reasons: readonly NotReadyReason[];
  /** Why loading failed. */
  reason?: string;
  session: string;
  clients: number;
  /** The current session's id, while one exists. */
  sessionId?: string;
  /** The instance name ({@link ReactorServer.instance}), when set. */
  instance?: string;
}

/** The host's cumulative counters the server's metrics read (`AppHost.counters`). */
export interface HostCounterView {
  readonly steps: number;
  /** Session snapshots taken, failed, the bytes the rewind rings hold, rewinds made (an app with snapshots). */
  readonly snapshots?: number;
  readonly snapshotFailures?: number;
  readonly snapshotBytes?: number;
  readonly rewinds?: number;
  /** Steps an urgent command superseded (restarted), and urgent commands the rate limit made ordinary (issue 39). */
  readonly urgentRestarts?: number;
  readonly urgentRateLimited?: number;
}
