/**
 * The call tracker: the call in flight and everything about it: its deadline, the outcome
 * policy (every rank succeeds -> rank 0's result; every rank throws the same error type -> rank
 * 0's error, healthy; anything else -> `RankDesyncError`, unusable), the divergence check, the
 * progress watch (during a call, and while idle) and cancellation. The runner owns the state;
 * the tracker asks it to change through {@link CallHost}.
 * @internal
 */
import type { Logger } from '@reactor/log';
import { CallAbortedError, DistributedErrorCode, RankDesyncError, RunnerStateError, WorkerStalledError, WorkerTimeoutError } from '../errors.js';
import type { CallOp, Payload, WireError } from '../protocol.js';
import { ProgressReader, type ProgressReading } from '../shm/progress.js';
import { fromPayload } from '../shm/segments.js';
import { type ErrorClass, reviveError } from '../worker/error-codec.js';
import type { ResolvedOptions } from './options.js';
import { callChannel, type RunnerCallTiming } from './runner-channels.js';
import type { RankGroup } from './rank-group.js';
import type { DistributedRunnerEvents, SharedResult, StallInfo } from './runner-types.js';

export type Outcome = { ok: true; value: Payload | null; inputHash?: string } | { ok: false; error: WireError; transport: boolean; inputHash?: string };

/** The progress watch of one rank during a call. */
interface Watch {
  reader: ProgressReader;
  counter: number | null;
  lastChange: number;
  stalled: boolean;
}

export interface InFlight {
  op: string;
  callOp: CallOp;
  /** generateView(): resolve with a SharedResult of views instead of an owned copy. */
  view: boolean;
  id: number;
  outcomes: (Outcome | undefined)[];
  done: number;
  timer: NodeJS.Timeout;
  progressTimer: NodeJS.Timeout | null;
  /** Set once a rank failed while peers still work: watches whether they wait for it in a collective the runner does not own. */
  abandonTimer: NodeJS.Timeout | null;
  /** Set once the caller cancelled: the reason and the acknowledgement deadline. */
  cancel: { reason: unknown; timer: NodeJS.Timeout } | null;
  detachSignal: () => void;
  /** Where the call's time goes, when someone listens ({@link callChannel}); null otherwise. */
  timing: RunnerCallTiming | null;
  /** When the call was sent to the ranks (performance.now()), when timed. */
  sentAt: number;
  resolve(value: unknown): void;
  reject(err: unknown): void;
}

/** What the tracker needs of the runner. */
export interface CallHost {
  readonly opts: ResolvedOptions;
  readonly logger: Logger;
  readonly group: RankGroup;
  readonly errorClasses: ReadonlyMap<string, ErrorClass>;
  /** The call in flight (the runner is `busy`), or null. */
  inFlight(): InFlight | null;
  /** `ready` -> `busy` with `call`. */
  enterBusy(call: InFlight): void;
  /** `busy` -> `ready`. */
  enterReady(): void;
  /** Makes the runner unusable, rejects the call in flight, and tears down. */
  failUnusable(err: Error, awaitTeardown: boolean): void;
  /** Fails `start()` with a desync when it is in flight; true when it did. */
  failStart(err: unknown): boolean;
  emit<K extends keyof DistributedRunnerEvents>(event: K, ...args: DistributedRunnerEvents[K]): void;
}

/** setTimeout holds at most 2^31-1 ms; longer (or Infinity) means "no deadline" in practice. */
export function clampTimer(ms: number): number {
  return Math.min(ms, 2 ** 31 - 1);
}

/** The one wording of "a rank finished while its peers wait for it in a collective". */
export function finishedWhileWaiting(finished: number[], phase: string, waiting: number[], op: string, seq: number): string {
  const plural = (n: number[]) => (n.length > 1 ? 's' : '');
  return (
    `rank${plural(finished)} ${finished.join(', ')} finished ${phase} while ` +
    `rank${plural(waiting)} ${waiting.join(', ')} wait${waiting.length > 1 ? '' : 's'} for ${finished.length > 1 ? 'them' : 'it'} in ${op}() (collective #${seq})`
  );
}

/**
 * How long every rank still in a call must sit in a collective (the `collective` phase of its
 * progress block: a `torch.distributed` one, which the runner does not own) after a peer raised,
 * before the call ends as a desync. Long enough for a rank to leave a collective its peer did
 * join before raising (milliseconds even on a loaded machine), short enough for "within 1 s".
 */
export const ABANDONED_COLLECTIVE_MS = 400;
/** How often the phases are read while a rank that raised may have left its peers waiting. */
const ABANDONED_CHECK_MS = 25;

export class CallTracker {
  private watches: Watch[] = [];
  private callId = 0;
  /** Counts generate() calls: a SharedResult is valid while this equals its call's number. */
  private resultGeneration = 0;
  /** Reads every rank's progress block while no call runs, so a frozen idle rank shows in `stalledRanks` within `stallMs`. */
  private idleTimer: NodeJS.Timeout | null = null;

  constructor(private readonly host: CallHost) {}

  private get worldSize(): number {
    return this.host.opts.worldSize;
  }

  /** Opens every rank's progress block (once the ranks are spawned). */
  watchRanks(prefix: string): void {
    for (let rank = 0; rank < this.worldSize; rank++) {
      this.watches.push({ reader: new ProgressReader(prefix, rank), counter: null, lastChange: 0, stalled: false });
    }
  }

  /** Closes the progress blocks (in the teardown). */
  close(): void {
    for (const w of this.watches) w.reader.close();
  }

  /**
   * Sends the call to every rank; the promise settles by the outcome policy. `input` is already in
   * shared memory. `t0` (performance.now() when the call began, or -1: untimed) times the call.
   */
  begin(op: CallOp, ref: Payload | null, signal: AbortSignal | undefined, view: boolean, t0 = -1): Promise<unknown> {
    const name = `${op}()`;
    const id = ++this.callId;
    // A snapshot's answer takes rank 0's result block too: a generateView() result before it is stale.
    if (op === 'generate' || op === 'snapshot') this.resultGeneration++;
    return new Promise((resolve, reject) => {
      const onAbort = () => this.onCancel(flight, signal!.reason);
      const flight: InFlight = {
        op: name,
        callOp: op,
        view,
        id,
        outcomes: new Array<Outcome | undefined>(this.worldSize).fill(undefined),
        done: 0,
        // The call's deadline timer keeps the event loop alive while the call is in flight.
        timer: setTimeout(() => this.onCallTimeout(flight), clampTimer(this.host.opts.callTimeoutMs)),
        progressTimer: null,
        abandonTimer: null,
        cancel: null,
        detachSignal: () => signal?.removeEventListener('abort', onAbort),
        timing: null,
        sentAt: 0,
        resolve,
        reject,
      };
      this.host.enterBusy(flight);
      const hub = this.host.group.hub;
      hub?.reset();
      const collSeq = hub?.nextSeq ?? 0;
      this.startProgressWatch(flight);
      signal?.addEventListener('abort', onAbort, { once: true });
      for (const p of this.host.group.procs) {
        p.beginCall();
        p.send({ t: 'call', id, op, input: ref, collSeq });
      }
      if (t0 >= 0) {
        // Published here, synchronously, so the subscriber sees it in the caller's async context.
        flight.sentAt = performance.now();
        flight.timing = { op, startMs: t0, dispatchMs: flight.sentAt - t0, ranksMs: 0, handbackMs: 0, done: false };
        callChannel.publish(flight.timing);
      }
    });
  }

  /** The call in flight, if `f` is it. */
  private current(f: InFlight): boolean {
    return this.host.inFlight() === f;
  }

  /** Ends the call in flight (timers, signal, stall bookkeeping); the runner is ready again unless `next` says otherwise. */
  finishCall(): InFlight | null {
    const f = this.host.inFlight();
    if (!f) return null;
    clearTimeout(f.timer);
    if (f.progressTimer) clearInterval(f.progressTimer);
    if (f.abandonTimer) clearInterval(f.abandonTimer);
    if (f.cancel) clearTimeout(f.cancel.timer);
    f.detachSignal();
    for (const [rank, w] of this.watches.entries()) {
      if (w.stalled) {
        w.stalled = false;
        this.host.emit('stallCleared', rank);
      }
    }
    return f;
  }

  /** Ends the call in flight with the runner ready for the next one. */
  private settleCall(): InFlight | null {
    const f = this.finishCall();
    if (f) this.host.enterReady();
    return f;
  }

  /** Ranks that finished the call in flight. */
  finishedRanks(): number[] {
    return this.host.inFlight()?.outcomes.flatMap((o, r) => (o ? [r] : [])) ?? [];
  }

  // ---- idle watch: ranks without a call are checked too ----------------------------------------

  startIdleWatch(): void {
    if (this.idleTimer) return;
    const now = performance.now();
    for (const w of this.watches) {
      w.counter = w.reader.read()?.counter ?? w.counter;
      w.lastChange = now;
    }
    this.idleTimer = setInterval(() => this.checkIdle(), Math.max(10, Math.min(250, this.host.opts.stallMs / 4)));
    this.idleTimer.unref();
  }

  stopIdleWatch(): void {
    if (this.idleTimer) clearInterval(this.idleTimer);
    this.idleTimer = null;
  }

  /** The idle counterpart of {@link checkProgress}: a rank's event loop advances its block every 100 ms even with nothing to do. */
  private checkIdle(): void {
    if (!this.idleTimer) return;
    const now = performance.now();
    for (const [rank, w] of this.watches.entries()) {
      const reading = w.reader.read();
      if (reading !== null) this.observeProgress(rank, w, reading, now, undefined);
    }
  }

  /**
   * One look at a rank's progress block, idle (`op` undefined) or during a call: a change clears
   * a reported stall; standing still for `stallMs` reports one (log line, `stall` event).
   * Returns the ms since the counter last changed (0 when it just did).
   */
  private observeProgress(rank: number, w: Watch, reading: ProgressReading, now: number, op: string | undefined): number {
    if (reading.counter !== w.counter) {
      w.counter = reading.counter;
      w.lastChange = now;
      if (w.stalled) {
        w.stalled = false;
        this.host.logger.info(`Rank ${rank} makes progress again after a stall${op === undefined ? ' (idle)' : ''}.`);
        this.host.emit('stallCleared', rank);
      }
      return 0;
    }
    const since = now - w.lastChange;
    if (!w.stalled && since >= this.host.opts.stallMs) {
      w.stalled = true;
      const info: StallInfo = { rank, phase: reading.phase, sinceMs: Math.round(since) };
      const where = op === undefined ? 'while idle' : `in ${reading.phase} during ${op}`;
      this.host.logger
        .child({ rank })
        .warn(
          `Rank ${rank} (pid ${this.host.group.procs[rank]?.pid}) made no progress for ${info.sinceMs} ms ${where}: stopped, blocked in synchronous code, or deadlocked.`,
        );
      this.host.emit('stall', info);
    }
    return since;
  }

  /** Ranks that made no progress for `stallMs` (see `DistributedRunner.stalledRanks`). */
  stalledRanks(): StallInfo[] {
    const now = performance.now();
    return this.watches.flatMap((w, rank) => (w.stalled ? [{ rank, phase: w.reader.read()?.phase ?? 'idle', sinceMs: Math.round(now - w.lastChange) }] : []));
  }

  // ---- progress watch ------------------------------------------------------------------------

  private startProgressWatch(f: InFlight): void {
    const now = performance.now();
    for (const w of this.watches) {
      w.counter = w.reader.read()?.counter ?? null;
      w.lastChange = now;
      w.stalled = false;
    }
    const every = Math.max(10, Math.min(250, this.host.opts.stallMs / 4));
    f.progressTimer = setInterval(() => this.checkProgress(f), every);
  }

  private checkProgress(f: InFlight): void {
    if (!this.current(f)) return;
    const now = performance.now();
    const overdue: number[] = [];
    const { stallTimeoutMs } = this.host.opts;
    for (const [rank, w] of this.watches.entries()) {
      const reading = w.reader.read();
      if (reading === null || f.outcomes[rank]) continue;
      const since = this.observeProgress(rank, w, reading, now, f.op);
      if (stallTimeoutMs !== null && since >= stallTimeoutMs) overdue.push(rank);
    }
    if (overdue.length > 0) {
      const phases = overdue.map((r) => this.watches[r]!.reader.read()?.phase ?? 'idle');
      for (const r of overdue) this.host.group.procs[r]?.killNow();
      this.host.failUnusable(new WorkerStalledError(f.op, overdue, phases, stallTimeoutMs!), true);
    }
  }

  // ---- a rank that raised while its peers wait for it in a collective --------------------------

  /**
   * A rank raised and left the call; its peers may sit in a `torch.distributed` collective it
   * never joined, where they would wait out `callTimeoutMs` (gloo's and NCCL's own timeouts are
   * longer still). Once every rank still working has been in the `collective` phase for
   * {@link ABANDONED_COLLECTIVE_MS}, they wait for the one that left: the call ends at once as a
   * desync whose cause is the raising rank's error (with its traceback), and the waiting ranks
   * are killed, since nothing can take them out of a collective the runner does not own.
   */
  private watchAbandoned(f: InFlight): void {
    let since: number | null = null;
    f.abandonTimer = setInterval(() => {
      if (!this.current(f)) return;
      const waiting = f.outcomes.flatMap((o, r) => (o ? [] : [r]));
      const inCollective = waiting.length > 0 && waiting.every((r) => this.watches[r]?.reader.read()?.phase === 'collective');
      const now = performance.now();
      if (!inCollective) {
        since = null;
        return;
      }
      since ??= now;
      if (now - since < ABANDONED_COLLECTIVE_MS) return;
      const failed = f.outcomes.flatMap((o, r) => (o && !o.ok ? [{ r, error: o.error }] : []));
      const first = failed[0]!;
      const plural = (n: unknown[]) => (n.length > 1 ? 's' : '');
      for (const r of waiting) this.host.group.procs[r]?.killNow();
      this.failDesync(
        `rank${plural(failed)} ${failed.map((x) => x.r).join(', ')} raised ${first.error.type}: ${first.error.message.split('\n')[0]} ` +
          `while rank${plural(waiting)} ${waiting.join(', ')} waited for ${failed.length > 1 ? 'them' : 'it'} in a torch.distributed collective ` +
          `(${Math.round(now - since)} ms; killed, as nothing else takes a rank out of one)`,
        [],
        waiting,
      );
    }, ABANDONED_CHECK_MS);
  }

  // ---- cancellation --------------------------------------------------------------------------

  private onCancel(f: InFlight, reason: unknown): void {
    if (!this.current(f) || f.cancel) return;
    f.cancel = {
      reason,
      timer: setTimeout(() => this.onCancelTimeout(f), clampTimer(this.host.opts.cancelTimeoutMs)),
    };
    for (const [rank, p] of this.host.group.procs.entries()) if (!f.outcomes[rank]) p.send({ t: 'cancel', id: f.id });
    // Ranks waiting in a collective for a peer that stops early would wait forever: release them.
    this.host.group.hub?.cancelAll();
  }

  private onCancelTimeout(f: InFlight): void {
    if (!this.current(f)) return;
    const silent = f.outcomes.map((o, r) => (o ? -1 : r)).filter((r) => r >= 0);
    for (const r of silent) this.host.group.procs[r]?.killNow();
    const err = new CallAbortedError(
      f.op,
      false,
      `rank${silent.length > 1 ? 's' : ''} ${silent.join(', ')} did not stop within ${this.host.opts.cancelTimeoutMs} ms (options.cancelTimeoutMs) and ` +
        `${silent.length > 1 ? 'were' : 'was'} killed. The runner is unusable: shut it down and construct a new DistributedRunner.`,
      f.cancel?.reason,
    );
    this.host.failUnusable(err, true);
  }

  private onCallTimeout(f: InFlight): void {
    if (!this.current(f)) return;
    const silent = f.outcomes.map((o, r) => (o ? -1 : r)).filter((r) => r >= 0);
    for (const r of silent) this.host.group.procs[r]?.killNow();
    this.host.failUnusable(new WorkerTimeoutError(f.op, silent, this.host.opts.callTimeoutMs, 'callTimeoutMs'), true);
  }

  // ---- the outcome policy ----------------------------------------------------------------------

  onOutcome(rank: number, id: number, outcome: Outcome): void {
    const f = this.host.inFlight();
    if (!f) return;
    if (f.id !== id || f.outcomes[rank]) return;
    f.outcomes[rank] = outcome;
    f.done++;
    const { group } = this.host;
    group.procs[rank]?.endCall();
    if (f.cancel) {
      // Every answer after a cancel is that rank's acknowledgement, whatever it says.
      group.hub?.cancelAll();
      if (f.done < this.worldSize) return;
      this.settleCall();
      f.reject(new CallAbortedError(f.op, true, 'every rank stopped; the runner is ready for the next call.', f.cancel.reason));
      return;
    }
    const stuck = group.hub?.waitingWithout(rank);
    if (stuck) {
      this.failDesync(finishedWhileWaiting([rank], f.op, stuck.waiting, stuck.op, stuck.seq));
      return;
    }
    if (f.done < this.worldSize) {
      if (!outcome.ok && !f.abandonTimer) this.watchAbandoned(f);
      return;
    }
    const outcomes = f.outcomes as Outcome[];
    if (this.host.opts.verifyInputs && this.checkInputs(f, outcomes)) return;
    const failures = outcomes.map((o, r) => ({ o, r })).filter((x): x is { o: Extract<Outcome, { ok: false }>; r: number } => !x.o.ok);
    if (failures.length === 0) {
      const answered = f.timing ? performance.now() : 0;
      this.settleCall();
      const ref = (outcomes[0] as Extract<Outcome, { ok: true }>).value;
      let value: unknown;
      try {
        value = ref ? fromPayload(ref, group.reader!, !f.view) : undefined;
      } catch (err) {
        f.reject(err);
        return;
      }
      if (f.timing) {
        f.timing.ranksMs = answered - f.sentAt;
        f.timing.handbackMs = performance.now() - answered;
        f.timing.done = true;
      }
      f.resolve(f.view ? this.sharedResult(value, ref) : value);
      return;
    }
    const first = failures[0]!;
    // Rank 0's model succeeded everywhere but its result could not be delivered: not a desync.
    if (failures.length === 1 && first.r === 0 && first.o.transport) {
      this.settleCall();
      f.reject(reviveError(first.o.error, 0, this.host.errorClasses));
      return;
    }
    const sameType = failures.length === this.worldSize && failures.every((x) => x.o.error.type === first.o.error.type);
    if (sameType) {
      this.settleCall();
      f.reject(reviveError(outcomes[0]!.ok ? first.o.error : (outcomes[0] as Extract<Outcome, { ok: false }>).error, 0, this.host.errorClasses));
      return;
    }
    const detail = failures.length < this.worldSize ? `${failures.length} of ${this.worldSize} ranks failed` : `ranks failed with different error types`;
    this.failDesync(detail);
  }

  /** Wraps a result of views with its lifetime (see {@link SharedResult}). */
  private sharedResult(value: unknown, ref: Payload | null): SharedResult<unknown> {
    const generation = this.resultGeneration;
    const isValid = () => this.resultGeneration === generation;
    const reader = this.host.group.reader!;
    return {
      value,
      get valid() {
        return isValid();
      },
      copy: () => {
        if (!isValid()) {
          throw new RunnerStateError(
            DistributedErrorCode.RunnerState,
            'copy() of a generateView() result after a later generate() started: its shared memory holds another result now. Copy (or use) a result before the next call.',
          );
        }
        return ref ? fromPayload(ref, reader, true) : undefined;
      },
    };
  }

  /** Divergence check: true (and the runner failed) when the ranks decoded different inputs. */
  private checkInputs(f: InFlight, outcomes: Outcome[]): boolean {
    if (f.callOp !== 'generate') return false;
    const groups = new Map<string, number[]>();
    for (const [r, o] of outcomes.entries()) {
      const h = o.inputHash ?? 'none';
      groups.set(h, [...(groups.get(h) ?? []), r]);
    }
    if (groups.size <= 1) return false;
    const reference = outcomes[0]!.inputHash ?? 'none';
    const diverging = outcomes.flatMap((o, r) => ((o.inputHash ?? 'none') === reference ? [] : [r]));
    const detail =
      `rank${diverging.length > 1 ? 's' : ''} ${diverging.join(', ')} decoded a different input than rank 0 (` +
      [...groups].map(([h, ranks]) => `rank${ranks.length > 1 ? 's' : ''} ${ranks.join(', ')}: ${h}`).join('; ') +
      ')';
    this.failDesync(detail, diverging);
    return true;
  }

  private describeOutcomes(f: InFlight, waiting: number[] = []): string[] {
    return f.outcomes.map((o, r) => {
      if (!o) return waiting.includes(r) ? `rank ${r}: waiting in a collective, killed` : `rank ${r}: no answer yet`;
      if (o.ok) return `rank ${r}: ok`;
      return `rank ${r}: threw ${o.error.type}: ${o.error.message.split('\n')[0]}`;
    });
  }

  /** A desync: fails `start()` when it is in flight, else the call in flight (unusable). */
  failDesync(detail: string, ranks: number[] = [], waiting: number[] = []): void {
    if (this.host.failStart(new RankDesyncError('start()', detail, [], undefined, ranks))) return;
    const f = this.host.inFlight();
    if (!f) return;
    const outcomes = this.describeOutcomes(f, waiting);
    const firstFailure = f.outcomes.map((o, r) => ({ o, r })).find((x) => x.o && !x.o.ok);
    const cause = firstFailure && firstFailure.o && !firstFailure.o.ok ? reviveError(firstFailure.o.error, firstFailure.r, this.host.errorClasses) : undefined;
    this.host.failUnusable(new RankDesyncError(f.op, detail, outcomes, cause, ranks), true);
  }
}
