/**
 * The rank group: the rank processes of one runner and what they share: the spawns (from a
 * launch plan), the input and result blocks, the collective hub, the kills, the exit hooks and
 * the teardown. It keeps no lifecycle of its own: the runner says when to start and to stop.
 * @internal
 */
import type { Logger } from '@reactor/log';
import { CollectiveHub } from '../collectives/collective-hub.js';
import { type ExitInfo, WorkerProcess } from '../process/worker-process.js';
import type { ParentMessage, Payload } from '../protocol.js';
import { INITIAL_SEGMENT_BYTES, SegmentReader, SegmentWriter, checkFits, shmFreeBytes, unlinkSegments } from '../shm/segments.js';
import { registerExitHook, unregisterExitHook } from './exit-hooks.js';
import type { LaunchPlan } from './launch-plan.js';

/** Where the group's processes report. */
export interface RankGroupHandlers {
  onMessage(rank: number, raw: unknown): void;
  onExit(info: ExitInfo): void;
  /** The collective hub found the ranks in different collectives. */
  onDesync(detail: string): void;
}

export class RankGroup {
  readonly procs: WorkerProcess[] = [];
  hub: CollectiveHub | null = null;
  /** The runner's input blocks, one per call slot (`maxInFlight`); slot 0's also carries loadArgs. */
  inputs: SegmentWriter[] = [];
  /** Reads the ranks' results. */
  reader: SegmentReader | null = null;
  private teardownPromise: Promise<void> | null = null;
  private readonly hook: { killNow: () => void; terminate: () => Promise<void> };

  /**
   * @param prefix the runner's segment prefix
   * @param terminate the runner's teardown without asking the ranks (what a signal runs)
   */
  constructor(
    readonly prefix: string,
    readonly worldSize: number,
    terminate: () => Promise<void>,
  ) {
    this.hook = { killNow: () => this.killNow(), terminate };
  }

  /**
   * Creates the input and result blocks and registers the exit hooks (from here on, process exit
   * and SIGINT/SIGTERM/SIGHUP clean up).
   * @throws {@link SharedMemoryCapacityError} (`shm_capacity`) when /dev/shm is too small for the initial blocks
   */
  openSegments(plan: Pick<LaunchPlan, 'backend'>, maxShmBytes: number | null, slots = 1): void {
    const env = { backend: plan.backend, maxShmBytes };
    // Up front: per call slot an input block and the output rank's result block, and each rank's collective block.
    const upFront = INITIAL_SEGMENT_BYTES * (2 * slots + this.worldSize);
    const fits = checkFits(`${this.worldSize} ranks' initial blocks`, upFront, shmFreeBytes(), null);
    if (fits) throw fits;
    this.inputs = Array.from(
      { length: slots },
      (_, s) => new SegmentWriter(env, `${this.prefix}-in${s === 0 ? '' : s}`, slots > 1 ? `the runner input (call slot ${s})` : 'the runner input'),
    );
    this.reader = new SegmentReader(env);
    registerExitHook(this.hook);
  }

  /** Starts every rank of `plan` and sends each its `init` (with `args`, the loadArgs in shared memory). */
  spawn(plan: LaunchPlan, args: Payload, logger: Logger, handlers: RankGroupHandlers): void {
    this.hub = new CollectiveHub(
      this.worldSize,
      (rank, msg) => this.procs[rank]?.send(msg),
      (detail) => handlers.onDesync(detail),
    );
    for (const r of plan.ranks) {
      const rankLog = logger.child({ rank: r.rank });
      const proc = new WorkerProcess({
        rank: r.rank,
        childMain: r.childMain,
        prefix: this.prefix,
        env: r.env,
        ...(r.command && { command: r.command }),
        ...(r.pipeAllStdout && { pipeAllStdout: true }),
        onLine: (stream, line) => (stream === 'stdout' ? rankLog.info(line) : rankLog.warn(line)),
        onMessage: (msg) => handlers.onMessage(r.rank, msg),
        onExit: (info) => handlers.onExit(info),
      });
      this.procs.push(proc);
      proc.send({ ...r.init, args });
    }
  }

  send(rank: number, msg: ParentMessage): void {
    this.procs[rank]?.send(msg);
  }

  /** Process ids of the ranks, by rank (empty before the spawn). */
  get pids(): number[] {
    return this.procs.map((p) => p.pid);
  }

  /** True once the teardown began. */
  get tearingDown(): boolean {
    return this.teardownPromise !== null;
  }

  /**
   * Stops every rank (asking first when `ask`), runs `closeReaders` (the progress blocks), and
   * unlinks every segment. Idempotent: a second call returns the first's promise.
   */
  teardown(ask: boolean, graceMs: number, closeReaders: () => void): Promise<void> {
    if (!this.teardownPromise) {
      this.teardownPromise = (async () => {
        await Promise.all(this.procs.map((p) => p.stop(ask, graceMs)));
        closeReaders();
        this.reader?.close();
        for (const w of this.inputs) w.dispose();
        unlinkSegments(this.prefix);
        unregisterExitHook(this.hook);
      })();
    }
    return this.teardownPromise;
  }

  /** Synchronous: SIGKILL every rank group and unlink every segment (runs inside 'exit'). */
  killNow(): void {
    for (const p of this.procs) p.killNow();
    unlinkSegments(this.prefix);
  }
}
