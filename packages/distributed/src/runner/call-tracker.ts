/**
 * The call tracker: the calls in flight (up to `maxInFlight`, settled in call order) and
 * everything about each: its deadline, its slot, the outcome policy (every rank succeeds -> the
 * output rank's result; every rank throws the same error type -> the output rank's error,
 * healthy; anything else -> `RankDesyncError`, unusable), the divergence check, the progress
 * watch (during calls, and while idle) and cancellation. The runner owns the state; the tracker
 * asks it to change through {@link CallHost}.
 * @internal
 */
import type { Logger } from '@reactor/log';
import { CallAbortedError, DistributedErrorCode, RankDesyncError, RunnerStateError, WorkerStalledError, WorkerTimeoutError } from '../errors.js';
import type { CallOp, Payload, WireError } from '../protocol.js';
import { fromPayload } from '../shm/segments.js';
import { type ErrorClass, reviveError } from '../worker/error-codec.js';
import type { ResolvedOptions } from './options.js';
import { callChannel, type RunnerCallTiming } from './runner-channels.js';
import type { RankGroup } from './rank-group.js';
import { ProgressWatch } from './progress-watch.js';
import type { DistributedRunnerEvents, SharedResult } from './runner-types.js';

export type Outcome = { ok: true; value: Payload | null; inputHash?: string } | { ok: false; error: WireError; transport: boolean; inputHash?: string };

export interface InFlight {
  op: string;
  callOp: CallOp;
  /** generateView(): resolve with a SharedResult of views instead of an owned copy. */
  view: boolean;
  id: number;
  /** The call slot (`(id - 1) % maxInFlight`): whose input and result blocks it uses. */
  slot: number;
  outcomes: (Outcome | undefined)[];
  done: number;
  timer: NodeJS.Timeout;
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
  /** `ready` -> `busy` (the first call in flight). */
  enterBusy(): void;
  /** `busy` -> `ready` (the last call in flight settled). */
  enterReady(): void;
  /** Makes the runner unusable, rejects every call in flight, and tears down. */
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
  /** Every rank's progress block, read during calls and while idle. */
  readonly watch: ProgressWatch;
  private callId = 0;
  /** The calls in flight, oldest first (every rank answers them in this order). */
  private flights: InFlight[] = [];
  /** Per rank, how many calls in flight it has not answered yet. */
  private owed: number[] = [];
  private progressTimer: NodeJS.Timeout | null = null;
  /** Per call slot, counts the generate() calls that used it: a SharedResult is valid while this equals its call's number. */
  private readonly slotGeneration: number[] = [];

  constructor(private readonly host: CallHost) {
    this.watch = new ProgressWatch(host);
  }

  private get worldSize(): number {
    return this.host.opts.worldSize;
  }

  /** The oldest call in flight, or null. */
  head(): InFlight | null {
    return this.flights[0] ?? null;
  }

  /** How many calls are in flight. */
  get inFlightCount(): number {
    return this.flights.length;
  }

  /** The slot the next call takes (its input is written there before {@link begin}). */
  nextSlot(): number {
    return this.callId % this.host.opts.maxInFlight;
  }

  /** True when the one call in flight was cancelled: a collective arriving now is released at once. */
  cancelledAlone(): boolean {
    return this.flights.length === 1 && this.flights[0]!.cancel !== null;
  }

  /**
   * Sends the call to every rank (queued behind the calls it has not answered yet); the promise
   * settles by the outcome policy, in call order. `input` is already in shared memory, in slot
   * {@link nextSlot}. `t0` (performance.now() when the call began, or -1: untimed) times the call.
   */
  begin(op: CallOp, ref: Payload | null, signal: AbortSignal | undefined, view: boolean, t0 = -1): Promise<unknown> {
    const name = `${op}()`;
    const slot = this.nextSlot();
    const id = ++this.callId;
    // A snapshot's answer takes the output rank's result block of its slot too: a generateView() result of that slot before it is stale.
    if (op === 'generate' || op === 'snapshot') this.slotGeneration[slot] = (this.slotGeneration[slot] ?? 0) + 1;
    return new Promise((resolve, reject) => {
      const onAbort = () => this.onCancel(flight, signal!.reason);
      const flight: InFlight = {
        op: name,
        callOp: op,
        view,
        id,
        slot,
        outcomes: new Array<Outcome | undefined>(this.worldSize).fill(undefined),
        done: 0,
        // The call's deadline timer keeps the event loop alive while the call is in flight.
        timer: setTimeout(() => this.onCallTimeout(flight), clampTimer(this.host.opts.callTimeoutMs)),
        abandonTimer: null,
        cancel: null,
        detachSignal: () => signal?.removeEventListener('abort', onAbort),
        timing: null,
        sentAt: 0,
        resolve,
        reject,
      };
      const first = this.flights.length === 0;
      this.flights.push(flight);
      let collSeq = -1;
      if (first) {
        this.host.enterBusy();
        const hub = this.host.group.hub;
        hub?.reset();
        collSeq = hub?.nextSeq ?? 0;
        this.startProgressWatch();
      }
      signal?.addEventListener('abort', onAbort, { once: true });
      for (const [rank, p] of this.host.group.procs.entries()) {
        this.owed[rank] = (this.owed[rank] ?? 0) + 1;
        if (this.owed[rank] === 1) p.beginCall();
        p.send({ t: 'call', id, op, input: ref, collSeq, slot });
      }
      if (t0 >= 0) {
        // Published here, synchronously, so the subscriber sees it in the caller's async context.
        flight.sentAt = performance.now();
        flight.timing = { op, startMs: t0, dispatchMs: flight.sentAt - t0, ranksMs: 0, handbackMs: 0, done: false };
        callChannel.publish(flight.timing);
      }
    });
  }

  /** `f` is still in flight. */
  private current(f: InFlight): boolean {
    return this.flights.includes(f);
  }

  /** One call's timers and signal. */
  private static release(f: InFlight): void {
    clearTimeout(f.timer);
    if (f.abandonTimer) clearInterval(f.abandonTimer);
    if (f.cancel) clearTimeout(f.cancel.timer);
    f.detachSignal();
  }

  /** No call is in flight any more: the progress watch stops and reported stalls clear. */
  private quiesce(): void {
    if (this.progressTimer) clearInterval(this.progressTimer);
    this.progressTimer = null;
    this.owed = [];
    this.watch.clearStalls();
  }

  /** Ends every call in flight (timers, signals, stall bookkeeping) and returns them, oldest first, for the caller to reject. */
  finishAll(): InFlight[] {
    const all = this.flights;
    if (all.length === 0) return [];
    this.flights = [];
    for (const f of all) CallTracker.release(f);
    this.quiesce();
    return all;
  }

  /** Ends call `f` (settled by the outcome policy); the runner is ready again when it was the last in flight. */
  private settle(f: InFlight): void {
    const at = this.flights.indexOf(f);
    if (at < 0) return;
    this.flights.splice(at, 1);
    CallTracker.release(f);
    if (this.flights.length === 0) {
      this.quiesce();
      this.host.enterReady();
    }
  }

  /** Ranks that answered every call in flight (the newest one: they answer in order). */
  finishedRanks(): number[] {
    return this.flights.at(-1)?.outcomes.flatMap((o, r) => (o ? [r] : [])) ?? [];
  }

  // ---- progress watch ------------------------------------------------------------------------

  private startProgressWatch(): void {
    this.watch.restart();
    const every = Math.max(10, Math.min(250, this.host.opts.stallMs / 4));
    this.progressTimer = setInterval(() => this.checkProgress(), every);
  }

  /** Watches each rank that owes an answer to a call in flight (the oldest it owes names the call). */
  private checkProgress(): void {
    const f = this.head();
    if (!f) return;
    const now = performance.now();
    const overdue: number[] = [];
    const { stallTimeoutMs } = this.host.opts;
    for (let rank = 0; rank < this.worldSize; rank++) {
      const owing = this.flights.find((x) => !x.outcomes[rank]);
      if (!owing) continue;
      const since = this.watch.look(rank, now, owing.op);
      if (since !== null && stallTimeoutMs !== null && since >= stallTimeoutMs) overdue.push(rank);
    }
    if (overdue.length > 0) {
      const phases = overdue.map((r) => this.watch.phase(r));
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
      const inCollective = waiting.length > 0 && waiting.every((r) => this.watch.phase(r) === 'collective');
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
    // Ranks waiting in a collective for a peer that stops early would wait forever: release them
    // (only when no other call is in flight, whose collectives these may be).
    if (this.flights.length === 1) this.host.group.hub?.cancelAll();
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
    const f = this.flights.find((x) => x.id === id);
    if (!f || f.outcomes[rank]) return;
    f.outcomes[rank] = outcome;
    f.done++;
    const { group } = this.host;
    this.owed[rank] = (this.owed[rank] ?? 1) - 1;
    if (this.owed[rank] === 0) group.procs[rank]?.endCall();
    if (f.cancel) {
      // Every answer after a cancel is that rank's acknowledgement, whatever it says.
      if (this.flights.length === 1) group.hub?.cancelAll();
      if (f.done < this.worldSize) return;
    } else {
      // A rank with calls still queued will join the collectives its peers wait in.
      const stuck = this.owed[rank] === 0 ? group.hub?.waitingWithout(rank) : null;
      if (stuck) {
        this.failDesync(finishedWhileWaiting([rank], f.op, stuck.waiting, stuck.op, stuck.seq), [], [], f);
        return;
      }
      if (f.done < this.worldSize) {
        if (!outcome.ok && !f.abandonTimer) this.watchAbandoned(f);
        return;
      }
    }
    // Settled in call order: the ranks answer in order, so a call completes only after the ones before it.
    while (this.flights[0]?.done === this.worldSize) this.conclude(this.flights[0]);
  }

  /** The outcome policy for `f`, which every rank has answered. */
  private conclude(f: InFlight): void {
    const { group } = this.host;
    if (f.cancel) {
      this.settle(f);
      f.reject(new CallAbortedError(f.op, true, 'every rank stopped; the runner is ready for the next call.', f.cancel.reason));
      return;
    }
    const out = this.host.opts.outputRank;
    const outcomes = f.outcomes as Outcome[];
    if (this.host.opts.verifyInputs && this.checkInputs(f, outcomes)) return;
    const failures = outcomes.map((o, r) => ({ o, r })).filter((x): x is { o: Extract<Outcome, { ok: false }>; r: number } => !x.o.ok);
    if (failures.length === 0) {
      const answered = f.timing ? performance.now() : 0;
      this.settle(f);
      const ref = (outcomes[out] as Extract<Outcome, { ok: true }>).value;
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
      f.resolve(f.view ? this.sharedResult(value, ref, f.slot) : value);
      return;
    }
    const first = failures[0]!;
    // The output rank's model succeeded everywhere but its result could not be delivered: not a desync.
    if (failures.length === 1 && first.r === out && first.o.transport) {
      this.settle(f);
      f.reject(reviveError(first.o.error, out, this.host.errorClasses));
      return;
    }
    const sameType = failures.length === this.worldSize && failures.every((x) => x.o.error.type === first.o.error.type);
    if (sameType) {
      this.settle(f);
      f.reject(reviveError((outcomes[out] as Extract<Outcome, { ok: false }>).error, out, this.host.errorClasses));
      return;
    }
    const detail = failures.length < this.worldSize ? `${failures.length} of ${this.worldSize} ranks failed` : `ranks failed with different error types`;
    this.failDesync(detail, [], [], f);
  }

  /** Wraps a result of views with its lifetime (see {@link SharedResult}): until the next generate() of its slot begins. */
  private sharedResult(value: unknown, ref: Payload | null, slot: number): SharedResult<unknown> {
    const generation = this.slotGeneration[slot];
    const isValid = () => this.slotGeneration[slot] === generation;
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
    this.failDesync(detail, diverging, [], f);
    return true;
  }

  private describeOutcomes(f: InFlight, waiting: number[] = []): string[] {
    return f.outcomes.map((o, r) => {
      if (!o) return waiting.includes(r) ? `rank ${r}: waiting in a collective, killed` : `rank ${r}: no answer yet`;
      if (o.ok) return `rank ${r}: ok`;
      return `rank ${r}: threw ${o.error.type}: ${o.error.message.split('\n')[0]}`;
    });
  }

  /** A desync: fails `start()` when it is in flight, else every call in flight (unusable); `f` (default the oldest) is the one described. */
  failDesync(detail: string, ranks: number[] = [], waiting: number[] = [], f: InFlight | null = this.head()): void {
    if (this.host.failStart(new RankDesyncError('start()', detail, [], undefined, ranks))) return;
    if (!f) return;
    const outcomes = this.describeOutcomes(f, waiting);
    const firstFailure = f.outcomes.map((o, r) => ({ o, r })).find((x) => x.o && !x.o.ok);
    const cause = firstFailure && firstFailure.o && !firstFailure.o.ok ? reviveError(firstFailure.o.error, firstFailure.r, this.host.errorClasses) : undefined;
    this.host.failUnusable(new RankDesyncError(f.op, detail, outcomes, cause, ranks), true);
  }
}
