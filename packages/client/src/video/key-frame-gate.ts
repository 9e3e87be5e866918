/**
 * The reference bookkeeping of one coded video track (H.264, VP8): which frames may go to the
 * decoder, and when to ask the server for a key frame. Pure logic, no DOM: the browser's
 * `VideoReceiver` drives it, and it is tested in Node.
 */
import { KEY_FRAME_MIN_INTERVAL_MS } from '../base/protocol.js';

/** Why a track's decoder has no usable reference. */
export type ReferenceLoss =
  /** A delta frame arrived before any key frame (joined mid-stream, new codec or tier). */
  | 'no_key_yet'
  /** A frame of the stream is missing before this delta (dropped on the way or skipped here). */
  | 'gap'
  /** The decoder rejected a frame or failed. */
  | 'decode_error'
  /** The decoder falls behind: frames are skipped until the next key frame. */
  | 'behind';

/** What to do with one offered frame. */
export interface GateDecision {
  /** Decode it, or discard it (a delta without its reference, a stale frame). */
  decode: boolean;
  /** Send `request_key_frame` for the track now. */
  requestKeyFrame: boolean;
  /** Set when the frame is discarded for a lost reference. */
  loss?: ReferenceLoss;
}

/** The part of a frame the gate reads. */
export interface GateFrame {
  seq: number;
  key?: boolean;
}

/** Options of a {@link KeyFrameGate}. */
export interface KeyFrameGateOptions {
  /**
   * Shortest time between two key-frame requests, ms (default {@link KEY_FRAME_MIN_INTERVAL_MS}:
   * the server forces no more often, so asking faster only adds messages).
   */
  minRequestIntervalMs?: number;
  /** Clock, ms (default `performance.now`). */
  now?: () => number;
}

/**
 * Lets a track's frames reach its decoder only while the decoder holds a valid reference: from a
 * key frame on, until a reference is lost (a gap, a decode error, falling behind). While it waits
 * for a key frame it discards deltas and asks for a key frame, at most once per
 * `minRequestIntervalMs`.
 *
 * @example
 * const gate = new KeyFrameGate();
 * const d = gate.offer(frame);
 * if (d.requestKeyFrame) client.requestKeyFrame(track);
 * if (d.decode) decoder.decode(chunk);
 */
export class KeyFrameGate {
  readonly #minIntervalMs: number;
  readonly #now: () => number;
  #waiting = true;
  /** Seq of the last frame offered (decoded or not); frames at or below it are stale. */
  #lastSeq = -1;
  /** Frames with a lower seq belong to playout cut by a flush. */
  #minSeq = 0;
  #lastRequestAt = -Infinity;
  #requests = 0;
  #discarded = 0;
  #lastLoss: ReferenceLoss | undefined;
  /** Why the gate waits now (cleared by a key frame). */
  #pending: ReferenceLoss = 'no_key_yet';

  constructor(options: KeyFrameGateOptions = {}) {
    const min = options.minRequestIntervalMs ?? KEY_FRAME_MIN_INTERVAL_MS;
    if (!(min >= 0)) throw new RangeError(`options.minRequestIntervalMs must be a number >= 0, got ${String(min)}`);
    this.#minIntervalMs = min;
    this.#now = options.now ?? (() => performance.now());
  }

  /** True while deltas are discarded until a key frame. */
  get waitingForKey(): boolean {
    return this.#waiting;
  }

  /** Key-frame requests this gate asked for so far. */
  get requests(): number {
    return this.#requests;
  }

  /** Frames discarded so far (deltas without a reference, stale frames). */
  get discarded(): number {
    return this.#discarded;
  }

  /** Why the reference was last lost, if it was. */
  get lastLoss(): ReferenceLoss | undefined {
    return this.#lastLoss;
  }

  /**
   * A new decoder configuration (`video_config`): the server's next frame is a key frame, so
   * wait for it without asking.
   */
  configure(): void {
    this.#waiting = true;
    this.#pending = 'no_key_yet';
  }

  /** Playout was cut (`flush`): frames below `nextSeq` are stale; the next frame is a key frame. */
  flush(nextSeq: number): void {
    this.#waiting = true;
    this.#pending = 'no_key_yet';
    this.#minSeq = Math.max(this.#minSeq, nextSeq);
  }

  /**
   * Decides for one frame of the track, in arrival order. `gap` says a frame of the stream may be
   * missing right before this one.
   */
  offer(frame: GateFrame, gap = false): GateDecision {
    // A key frame decodes on its own: only playout cut by a flush is stale. A delta must come
    // after the frame before it (a later session restarts seq, and starts with a key frame).
    if (frame.seq < this.#minSeq || (frame.key !== true && frame.seq <= this.#lastSeq)) {
      this.#discarded++;
      return { decode: false, requestKeyFrame: false };
    }
    this.#lastSeq = frame.seq;
    if (frame.key === true) {
      this.#waiting = false;
      return { decode: true, requestKeyFrame: false };
    }
    if (!this.#waiting && !gap) return { decode: true, requestKeyFrame: false };
    if (!this.#waiting) this.#pending = 'gap';
    const loss = this.#pending;
    this.#waiting = true;
    this.#lastLoss = loss;
    this.#discarded++;
    return { decode: false, requestKeyFrame: this.#askNow(), loss };
  }

  /**
   * The reference is gone (a decode error, frames skipped because the decoder is behind): discard
   * deltas until a key frame. Returns true when a key frame should be requested now.
   */
  lose(reason: ReferenceLoss): boolean {
    this.#waiting = true;
    this.#pending = reason;
    this.#lastLoss = reason;
    return this.#askNow();
  }

  /** Forgets everything (a new connection): waits for a key frame, any seq accepted. */
  reset(): void {
    this.#waiting = true;
    this.#lastSeq = -1;
    this.#minSeq = 0;
    this.#lastRequestAt = -Infinity;
    this.#lastLoss = undefined;
    this.#pending = 'no_key_yet';
  }

  #askNow(): boolean {
    const now = this.#now();
    if (now - this.#lastRequestAt < this.#minIntervalMs) return false;
    this.#lastRequestAt = now;
    this.#requests++;
    return true;
  }
}
