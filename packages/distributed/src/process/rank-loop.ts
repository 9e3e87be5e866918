/**
 * The rank's message loop. It takes its I/O as a parameter so it can be driven in-process by
 * tests; `child-main.ts` wires it to the real IPC channel.
 *
 * Its own lifecycle, changed only by {@link RankLoop.transition}:
 * ```
 * new --init--> loading --loaded--> ready --call--> busy --answer--> ready
 *                  `--load failed--> failed
 * any state --exit request, fatal error, orphaned--> exiting
 * ```
 * A message that would need another edge (a call before `init`, a second `init`, a call while
 * one runs) is a fatal {@link IllegalTransitionError}: the parent never sends one.
 * @internal
 */
import { RankCollectives } from '../collectives/rank-collectives.js';
import { InjectedFaultError, ProtocolError, SharedMemoryCapacityError } from '../errors.js';
import { DEFAULT_SLOW_FAULT_MS, FAULT_CRASH_EXIT_CODE, type FaultKind } from '../faults.js';
import { type CallMessage, type ChildMessage, type InitMessage, PROTOCOL_VERSION, expectParentMessage } from '../protocol.js';
import { digestValue, encodeValue } from '../shm/codec.js';
import { ProgressPublisher } from '../shm/progress.js';
import { type SegmentEnv, SegmentReader, SegmentWriter, fromPayload, toPayload, unlinkSegments } from '../shm/segments.js';
import { type TransitionTable, transition } from '../state-machine.js';
import type { DistributedWorker } from '../worker/distributed-worker.js';
import { serializeError } from '../worker/error-codec.js';
import { restoreInto, snapshotOf } from '../worker/snapshot-calls.js';
import { ProgressThrottle } from '../worker/progress-report.js';

/** How often a worker's `gpuBusy()` is asked, ms. */
export const GPU_SAMPLE_MS = 1000;

/** How a rank talks to its parent and its own process. */
export interface ChildIo {
  send(msg: ChildMessage): void;
  /** Ends the process (in tests: records the code). */
  exit(code: number): void;
  /** A line for the rank's stderr (the parent logs it with the rank). */
  warn(line: string): void;
  /** Fault injection (`stall`): stop this process (SIGSTOP) as an operator or a debugger would. */
  stopSelf(): void;
}

/** Where a rank's loop is in its life. */
export type RankLoopState = 'new' | 'loading' | 'ready' | 'busy' | 'failed' | 'exiting';

/** Every edge of the rank's lifecycle. */
export const RANK_LOOP_TRANSITIONS: TransitionTable<RankLoopState> = {
  new: ['loading', 'exiting'],
  loading: ['ready', 'failed', 'exiting'],
  ready: ['busy', 'exiting'],
  busy: ['ready', 'exiting'],
  failed: ['exiting'],
  exiting: [],
};

/** The loop of one rank; feed it every message from the parent with {@link RankLoop.handle}. */
export class RankLoop {
  private current: RankLoopState = 'new';
  private worker: DistributedWorker | null = null;
  private comm: RankCollectives | null = null;
  private reader: SegmentReader | null = null;
  private out: SegmentWriter | null = null;
  private env: SegmentEnv | null = null;
  private progress: ProgressPublisher | null = null;
  private init: InitMessage | null = null;
  private generateCalls = 0;
  private gpuTimer: NodeJS.Timeout | null = null;
  private readonly faults = new Map<number, FaultKind>();
  /** A `slow` fault: from generate() call `from` on, each sleeps `ms` first. */
  private slow: { from: number; ms: number } | null = null;
  /** The call in flight and its cancel switch. */
  private running: { id: number; controller: AbortController } | null = null;
  /** With `maxInFlight` > 1: calls sent while one runs, run next in order. */
  private readonly queue: CallMessage[] = [];
  /** Queued calls cancelled before they began: their signal starts aborted. */
  private readonly cancelled = new Set<number>();
  /** The output rank's result blocks, one per call slot (created on first use). */
  private readonly outs: SegmentWriter[] = [];

  constructor(private readonly io: ChildIo) {}

  /** Where the loop is now. */
  get state(): RankLoopState {
    return this.current;
  }

  /** The one place the state changes. @throws IllegalTransitionError on an edge the lifecycle does not have */
  private transition(next: RankLoopState): void {
    this.current = transition(`RankLoop(rank ${this.init?.rank ?? '?'})`, RANK_LOOP_TRANSITIONS, this.current, next);
  }

  /** Handles one message; resolves when the work it started is done. */
  async handle(raw: unknown): Promise<void> {
    try {
      const msg = expectParentMessage(raw);
      switch (msg.t) {
        case 'init':
          this.transition('loading');
          return await this.load(msg);
        case 'call':
          if (this.current === 'busy' && (this.init?.slots ?? 1) > 1) {
            this.queue.push(msg);
            return;
          }
          this.transition('busy');
          await this.call(msg);
          // The calls that queued meanwhile, in order (an exit or a crash leaves the state).
          for (let next = this.queue.shift(); next && this.current === 'ready'; next = this.queue.shift()) {
            this.transition('busy');
            await this.call(next);
          }
          return;
        case 'cancel':
          // A cancel that crossed the rank's answer on the way is simply late.
          if (this.running?.id === msg.id) this.running.controller.abort();
          else if (this.queue.some((q) => q.id === msg.id)) this.cancelled.add(msg.id);
          return;
        case 'collGo':
          this.comm?.onGo(msg);
          return;
        case 'exit':
          if (this.current === 'exiting') return;
          this.transition('exiting');
          this.dispose();
          this.io.exit(0);
          return;
      }
    } catch (err) {
      this.fatal(err);
    }
  }

  private fatal(err: unknown): void {
    this.io.send({ t: 'fatal', error: serializeError(err) });
    if (this.current !== 'exiting') this.transition('exiting');
    this.dispose();
    this.io.exit(1);
  }

  private async load(msg: InitMessage): Promise<void> {
    if (msg.version !== PROTOCOL_VERSION) {
      this.fatal(
        new ProtocolError(
          `Parent speaks protocol ${msg.version}, this rank ${PROTOCOL_VERSION}: the parent and the ranks run different builds of @reactor/distributed. Rebuild it.`,
        ),
      );
      return;
    }
    this.init = msg;
    for (const f of msg.faults) {
      if (f.rank !== msg.rank) continue;
      if (f.kind === 'slow') this.slow = { from: f.call, ms: f.ms ?? DEFAULT_SLOW_FAULT_MS };
      else this.faults.set(f.call, f.kind);
    }
    const env: SegmentEnv = { backend: msg.backend, maxShmBytes: msg.maxShmBytes };
    this.env = env;
    this.reader = new SegmentReader(env);
    try {
      this.progress = new ProgressPublisher(msg.prefix, msg.rank);
      this.progress.setPhase('loading');
      // Load arguments are kept by the worker: copy them out of the input block, which the
      // next call overwrites.
      const args = structuredClone(fromPayload(msg.args, this.reader));
      const mod = (await import(msg.moduleUrl)) as Record<string, unknown>;
      const Cls = mod[msg.exportName] as (new () => DistributedWorker) | undefined;
      if (typeof Cls !== 'function') {
        throw new TypeError(`${msg.moduleUrl} does not export ${msg.exportName} (the compiled module may be stale: rebuild it).`);
      }
      const worker = new Cls();
      worker.rank = msg.rank;
      worker.worldSize = msg.worldSize;
      worker.device = msg.device;
      this.comm = new RankCollectives(msg.rank, msg.worldSize, env, msg.prefix, (m) => this.io.send(m), msg.slots);
      worker.comm = this.comm;
      if (msg.rank === msg.outputRank) {
        this.out = this.outFor(0);
        // A block that cannot grow enough: resultArray() falls back to a heap array, and the
        // result path then reports the capacity error as undeliverable (the runner stays healthy)
        // instead of a throw in the output rank's generate() alone (a desync).
        worker.resultAllocator = (bytes) => {
          try {
            return this.out!.allocate(bytes);
          } catch (err) {
            if (err instanceof SharedMemoryCapacityError) return null;
            throw err;
          }
        };
      }
      this.worker = worker;
      const throttle = new ProgressThrottle();
      worker.progressReporter = (ratio, stage) => {
        if (this.current === 'loading' && throttle.take(ratio, stage)) this.io.send({ t: 'progress', ratio, stage });
      };
      await worker.load(args);
      this.transition('ready');
      this.progress.setPhase('idle');
      this.io.send({ t: 'loaded' });
      this.sampleGpu(worker);
    } catch (err) {
      if (this.current === 'loading') this.transition('failed');
      this.io.send({ t: 'loadFailed', error: serializeError(err) });
    }
  }

  /** A worker that knows its GPU busy ratio (`gpuBusy()`) is asked once a second; a throw or a bad value stops it. */
  private sampleGpu(worker: DistributedWorker): void {
    if (typeof worker.gpuBusy !== 'function') return;
    this.gpuTimer = setInterval(() => {
      let ratio: unknown;
      try {
        ratio = worker.gpuBusy!();
      } catch (err) {
        this.io.warn(`gpuBusy() threw, GPU busy is unknown from now on: ${(err as Error)?.message ?? String(err)}`);
        this.stopGpuSampling();
        return;
      }
      if (ratio === undefined) return;
      if (typeof ratio !== 'number' || !(ratio >= 0 && ratio <= 1)) {
        this.io.warn(`gpuBusy() returned ${JSON.stringify(ratio)}, not a number from 0 to 1 or undefined; GPU busy is unknown from now on`);
        this.stopGpuSampling();
        return;
      }
      this.io.send({ t: 'gpu', ratio });
    }, GPU_SAMPLE_MS).unref();
  }

  private stopGpuSampling(): void {
    if (this.gpuTimer) clearInterval(this.gpuTimer);
    this.gpuTimer = null;
  }

  /** The output rank's result block of call slot `slot` (slot 0 keeps the one-slot name). */
  private outFor(slot: number): SegmentWriter {
    const { prefix, rank } = this.init!;
    this.outs[slot] ??= new SegmentWriter(
      this.env!,
      `${prefix}-r${rank}-out${slot === 0 ? '' : slot}`,
      `rank ${rank}'s results${slot ? ` (call slot ${slot})` : ''}`,
    );
    return this.outs[slot];
  }

  private async call(msg: CallMessage): Promise<void> {
    const worker = this.worker!;
    const rank = this.init!.rank;
    const controller = new AbortController();
    if (this.cancelled.delete(msg.id)) controller.abort();
    this.running = { id: msg.id, controller };
    worker.signal = controller.signal;
    if (this.out) this.out = this.outFor(msg.slot ?? 0);
    // A call sent while others were in flight goes on from this rank's own collective count.
    if (msg.collSeq >= 0) this.comm!.beginCall(msg.collSeq);
    this.progress!.setPhase(msg.op);
    let fault: FaultKind | undefined;
    if (msg.op === 'generate') {
      this.generateCalls++;
      fault = this.faults.get(this.generateCalls);
      if (fault) this.io.warn(`injected fault: ${fault} on rank ${rank} at generate() call ${this.generateCalls}`);
      if (this.slow?.from === this.generateCalls)
        this.io.warn(`injected fault: slow (${this.slow.ms} ms before each generate()) on rank ${rank} from generate() call ${this.generateCalls}`);
    }
    let result: unknown;
    let inputHash: string | undefined;
    try {
      switch (fault) {
        case 'crash':
          this.io.exit(FAULT_CRASH_EXIT_CODE);
          return;
        case 'stall':
          this.io.stopSelf();
          break;
        case 'shm_full':
          this.env!.injectedFull = true;
          break;
        default:
          break;
      }
      if (msg.op === 'generate') {
        this.out?.resetAllocations();
        let input = msg.input ? fromPayload(msg.input, this.reader!) : undefined;
        if (fault === 'diverge') input = { injectedDivergence: rank, input };
        if (this.init!.verifyInputs) inputHash = digestValue(input);
        if (fault === 'hang') await new Promise<never>(() => {});
        if (fault === 'throw') throw new InjectedFaultError(`injected fault: throw on rank ${rank} at generate() call ${this.generateCalls}`);
        if (this.slow && this.generateCalls >= this.slow.from) await new Promise((r) => setTimeout(r, this.slow!.ms));
        result = await worker.generate(input);
      } else if (msg.op === 'snapshot') {
        // Between calls only (one call at a time): rank 0's answer is the snapshot.
        this.out?.resetAllocations();
        result = await snapshotOf(worker);
      } else if (msg.op === 'restore') {
        await restoreInto(worker, msg.input ? fromPayload(msg.input, this.reader!, true) : undefined);
      } else {
        await worker.reset();
      }
    } catch (err) {
      this.answer({ t: 'failed', id: msg.id, error: serializeError(err), ...(inputHash !== undefined && { inputHash }) });
      return;
    }
    if ((msg.op !== 'generate' && msg.op !== 'snapshot') || rank !== this.init!.outputRank) {
      this.answer({ t: 'result', id: msg.id, value: null, ...(inputHash !== undefined && { inputHash }) });
      return;
    }
    try {
      this.answer({ t: 'result', id: msg.id, value: toPayload(encodeValue(result), this.out!), ...(inputHash !== undefined && { inputHash }) });
    } catch (err) {
      this.answer({ t: 'failed', id: msg.id, error: serializeError(err), transport: true, ...(inputHash !== undefined && { inputHash }) });
    }
  }

  /** Ends the call in flight with its answer. */
  private answer(msg: Extract<ChildMessage, { t: 'result' | 'failed' }>): void {
    this.env!.injectedFull = false;
    this.running = null;
    this.progress?.setPhase('idle');
    if (this.current === 'busy') this.transition('ready');
    this.io.send(msg);
  }

  /** Unlinks this rank's own blocks. */
  dispose(): void {
    this.stopGpuSampling();
    this.progress?.dispose();
    this.progress = null;
    this.comm?.dispose();
    for (const o of this.outs) o?.dispose();
    this.reader?.close();
  }

  /** The parent is gone: nobody will reclaim this runner's blocks, so the rank does. */
  orphaned(): void {
    if (this.current !== 'exiting') this.transition('exiting');
    this.dispose();
    if (this.init) unlinkSegments(this.init.prefix);
  }
}
