import type { TrackSpec } from '../app/track-specs.js';
import type { AppliedAcks, PendingApplied } from './applied.js';
import type { OutputAudio, OutputFrame } from './transport.js';
import { type Chunk, type QueuedSlot, clockTrack } from './normalize.js';

/**
 * Longest stall of playout itself (its timer fired late: a blocked event loop, a loaded machine)
 * that is caught up rather than skipped, ms. Frames that were queued in time play at once with
 * their own due time and pts, so the stream's timeline (and the sound counted in samples along
 * it) has no jump; a longer stall is a gap, and the clock restarts after it.
 */
export const MAX_CATCH_UP_MS = 1000;

/**
 * Paces one session's frames out to the clients, track by track, and applies back-pressure:
 * {@link Playout.push} waits until every track has room, so the model is never more than
 * `bufferSize` frames (or one batch, if a batch is larger) ahead of playout.
 *
 * Audio rides on the clock track's slots (see `normalize.ts`): each piece is emitted right
 * after the frame it belongs to, with the same due time and pts, so picture and sound share one
 * clock; audio without a frame holds its slot for its own duration.
 */
export class Playout {
  private readonly queues: QueuedSlot[][];
  /** When each queued slot was queued (`performance.now()`), in step with {@link queues}. */
  private readonly queuedAt: number[][];
  private readonly nextDue: number[];
  private seq = 0;
  private timer: NodeJS.Timeout | undefined;
  private immediate: NodeJS.Immediate | undefined;
  private timerAt = Infinity;
  private waiter: { chunk: Chunk; resolve: (accepted: boolean) => void } | undefined;
  /** A step loop waiting to start its next step ({@link untilNeeded}). */
  private starter: { resolve: () => void; timer: NodeJS.Timeout | undefined } | undefined;
  private closed = false;
  /** The clock track's index: the one whose queue {@link untilNeeded} watches. */
  private readonly clock: number;
  /** Slots (frames, or audio alone) played out since the last {@link takeWindow}, summed over tracks. */
  private windowFrames = 0;
  /** Tracks that have slots of their own: the video tracks, or the one audio clock track. */
  private readonly clockTracks: number;

  /**
   * @param emit called with each frame at its due time.
   * @param emitAudio called with each audio piece right after the frame it plays with (same due time).
   * @param acks told when a slot that carries commands plays (its first seq) or is dropped unplayed (flush, close).
   */
  constructor(
    private readonly tracks: readonly TrackSpec[],
    private readonly bufferSize: number,
    private readonly startedAt: number,
    private readonly emit: (frame: OutputFrame) => void,
    private readonly emitAudio: (chunk: OutputAudio) => void = () => undefined,
    private readonly acks?: Pick<AppliedAcks<unknown>, 'played' | 'returned'>,
  ) {
    this.queues = tracks.map(() => []);
    this.queuedAt = tracks.map(() => []);
    this.nextDue = tracks.map(() => -Infinity);
    const video = tracks.filter((t) => t.kind === 'video').length;
    this.clockTracks = video > 0 ? video : clockTrack(tracks) >= 0 ? 1 : 0;
    this.clock = clockTrack(tracks);
  }

  /** Frames queued (not yet played) on the fullest track. */
  get queued(): number {
    let max = 0;
    for (const q of this.queues) max = Math.max(max, q.length);
    return max;
  }

  /** The sequence number the next played frame will get (session-wide, across tracks). */
  get nextSeq(): number {
    return this.seq;
  }

  /**
   * Queues one step's frames; resolves `true` once they are queued, after waiting for room
   * (back-pressure), or `false` when a flush or the session's end dropped them while waiting.
   */
  push(chunk: Chunk): Promise<boolean> {
    if (this.closed) return Promise.resolve(false);
    if (this.hasRoom(chunk)) {
      this.enqueue(chunk);
      return Promise.resolve(true);
    }
    if (this.waiter) throw new Error('Playout.push: one producer at a time');
    return new Promise<boolean>((resolve) => {
      this.waiter = { chunk, resolve };
    });
  }

  /**
   * When the frames queued on the clock track will have played: the due time of a frame pushed
   * now (`performance.now()` when nothing is queued and the clock is idle or behind).
   */
  drainsAt(now = performance.now()): number {
    if (this.clock < 0) return now;
    return Math.max(now, this.nextDue[this.clock]!) + this.queuedMs();
  }

  /** How long past its due time a frame pushed now would be, ms (0 when on time or when the clock is idle). */
  lateBy(now = performance.now()): number {
    if (this.clock < 0) return 0;
    const due = this.nextDue[this.clock]!;
    if (due === -Infinity) return 0;
    return Math.max(0, now - (due + this.queuedMs()));
  }

  /** The play time of the slots queued on the clock track, ms. */
  private queuedMs(): number {
    let ms = 0;
    for (const slot of this.queues[this.clock]!) ms += slot.intervalMs;
    return ms;
  }

  /**
   * Resolves once the next step should start so that its frames arrive just before they are
   * due: when the clock track's queue plays out within `leadMs` (at once if it already does), or
   * at a flush or close. Just-in-time steps read the newest commands and input, so a model faster
   * than its fps keeps about one frame queued instead of `bufferSize` (see docs/decisions.md).
   */
  untilNeeded(leadMs: number): Promise<void> {
    if (this.closed) return Promise.resolve();
    const wait = this.drainsAt() - leadMs - performance.now();
    if (wait <= 0.5) return Promise.resolve();
    if (this.starter) throw new Error('Playout.untilNeeded: one step loop at a time');
    return new Promise<void>((resolve) => {
      const starter = { resolve, timer: undefined as NodeJS.Timeout | undefined };
      starter.timer = setTimeout(() => this.releaseStarter(), wait);
      this.starter = starter;
    });
  }

  private releaseStarter(): void {
    const s = this.starter;
    if (!s) return;
    this.starter = undefined;
    if (s.timer) clearTimeout(s.timer);
    s.resolve();
  }

  /** Drops every queued frame, releases a waiting producer (its batch dropped); returns the next seq. */
  flush(): number {
    const unplayed = this.acks ? this.unplayedAcks() : [];
    for (const q of this.queues) q.length = 0;
    for (const q of this.queuedAt) q.length = 0;
    // A cut: the next frame plays as soon as it arrives, not one interval after the dropped ones.
    this.nextDue.fill(-Infinity);
    this.releaseWaiter(false);
    this.releaseStarter();
    this.clearTimer();
    if (unplayed.length > 0) this.acks!.returned(unplayed);
    return this.seq;
  }

  /** The commands carried by the slots queued or waiting for room, oldest first. */
  private unplayedAcks(): Array<PendingApplied<unknown>> {
    const out: Array<PendingApplied<unknown>> = [];
    for (const slots of [...this.queues, ...(this.waiter?.chunk ?? [])]) for (const slot of slots ?? []) if (slot.acks) out.push(...slot.acks);
    return out;
  }

  /** Stops playout for good (session ended). */
  close(): void {
    this.closed = true;
    this.flush();
  }

  /** Frames played since the last call (summed over tracks, divided by the count of tracks that have frames of their own). */
  takeWindow(): number {
    const n = this.windowFrames;
    this.windowFrames = 0;
    return this.clockTracks > 0 ? n / this.clockTracks : 0;
  }

  private hasRoom(chunk: Chunk): boolean {
    for (let t = 0; t < chunk.length; t++) {
      const add = chunk[t]?.length ?? 0;
      if (add === 0) continue;
      const q = this.queues[t]!.length;
      if (q > 0 && q + add > this.bufferSize) return false;
    }
    return true;
  }

  private enqueue(chunk: Chunk): void {
    const now = performance.now();
    for (let t = 0; t < chunk.length; t++) {
      const frames = chunk[t];
      if (!frames) continue;
      const q = this.queues[t]!;
      const at = this.queuedAt[t]!;
      for (const f of frames) {
        q.push(f);
        at.push(now);
      }
    }
    this.schedule();
  }

  private releaseWaiter(accepted: boolean): void {
    const w = this.waiter;
    if (!w) return;
    this.waiter = undefined;
    if (accepted) this.enqueue(w.chunk);
    w.resolve(accepted);
  }

  private clearTimer(): void {
    if (this.timer) clearTimeout(this.timer);
    if (this.immediate) clearImmediate(this.immediate);
    this.timer = undefined;
    this.immediate = undefined;
    this.timerAt = Infinity;
  }

  /** Arms one timer for the earliest due frame over all tracks. */
  private schedule(): void {
    if (this.closed) return;
    const now = performance.now();
    let earliest = Infinity;
    for (let t = 0; t < this.queues.length; t++) {
      if (this.queues[t]!.length === 0) continue;
      earliest = Math.min(earliest, Math.max(now, this.nextDue[t]!));
    }
    if (earliest === Infinity || earliest >= this.timerAt) return;
    this.clearTimer();
    this.timerAt = earliest;
    const delay = earliest - now;
    if (delay <= 0.5) this.immediate = setImmediate(this.tick);
    else this.timer = setTimeout(this.tick, delay);
  }

  private readonly tick = (): void => {
    this.timer = undefined;
    this.immediate = undefined;
    this.timerAt = Infinity;
    const now = performance.now();
    for (let t = 0; t < this.queues.length; t++) {
      const q = this.queues[t]!;
      const track = this.tracks[t]!;
      while (q.length > 0) {
        let due = this.nextDue[t]!;
        const head = q[0]!;
        if (due < now - Math.max(head.intervalMs, 2)) {
          // Late by more than a frame. A slot queued in time is late because playout itself
          // stalled: it plays now with its own due time (a burst of what was queued), so pts,
          // and the sound counted along them, have no jump. A slot that came after its due time
          // (an underrun: the model was late) or a stall past MAX_CATCH_UP_MS restarts the clock.
          const queuedInTime = this.queuedAt[t]![0]! <= due + Math.max(head.intervalMs, 2);
          if (!queuedInTime || due < now - MAX_CATCH_UP_MS) due = now;
        }
        if (due > now + 0.5) break;
        q.shift();
        this.queuedAt[t]!.shift();
        this.nextDue[t] = due + head.intervalMs;
        const ptsMs = due - this.startedAt;
        const firstSeq = this.seq;
        if (head.rgb !== undefined) {
          const frame: OutputFrame = {
            track: track.name,
            trackIndex: track.index,
            seq: this.seq++,
            ptsMs,
            dueAt: due,
            width: head.width,
            height: head.height,
            rgb: head.rgb,
            ...(head.metadata !== undefined ? { metadata: head.metadata } : {}),
          };
          this.emit(frame);
        }
        this.windowFrames++;
        for (const a of head.audio ?? []) {
          this.emitAudio({
            track: a.track.name,
            trackIndex: a.track.index,
            seq: this.seq++,
            ptsMs,
            dueAt: due,
            sampleRate: a.track.sampleRate!,
            pcm: a.pcm,
          });
        }
        if (head.acks && this.seq > firstSeq) this.acks?.played(head.acks, firstSeq);
        if (head.played && this.seq > firstSeq) head.played(firstSeq, now);
      }
    }
    if (this.waiter && this.hasRoom(this.waiter.chunk)) this.releaseWaiter(true);
    this.schedule();
  };
}
