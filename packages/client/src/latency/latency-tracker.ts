/**
 * What the user of a client sees, measured where it happens: for each command whose `applied`
 * acknowledgement names a frame, the time from sending it to presenting that frame (or the first
 * later one of its track: a dropped frame is shown by the next); the time from opening the socket
 * to the first frame presented; freezes (gaps over {@link FREEZE_THRESHOLD_MS} between presented
 * frames of a track while the session streams and the track is not paused); frames received and
 * never presented. Browser-safe and clock-injected; the reporter (`latency-reporter.ts`) drains
 * it into `client_stats` messages, and `summary()` feeds a status display.
 */
import type { ClientStatsMessage, ClientStatsSample } from '../base/protocol.js';
import { MAX_CLIENT_STATS_MS, MAX_CLIENT_STATS_SAMPLES, MAX_FIRST_FRAME_MS } from '../base/protocol.js';

/** A gap between two presented frames longer than this is a freeze, ms. */
export const FREEZE_THRESHOLD_MS = 200;
/** Presentations remembered per track, for `applied` acknowledgements that arrive after their frame was shown. */
const HISTORY = 128;
/** Samples kept for the status display's median. */
const SUMMARY_WINDOW = 100;
/** Samples waiting to be reported at most (the oldest go first beyond it). */
const MAX_QUEUED = 4 * MAX_CLIENT_STATS_SAMPLES;

/** What the server said of a command's effect, as `command().applied` resolves (only `applied` carries a frame). */
export interface AppliedFrame {
  outcome: string;
  seq?: number;
  track?: string;
  /** The frame's RTP timestamp on the WebRTC video (the server names it while a peer exists). */
  rtpTimestamp?: number;
}

/** The figures a status display shows. */
export interface LatencySummary {
  /** Median command-to-pixel of the last 100 samples, ms (undefined: none yet). */
  p50Ms: number | undefined;
  /** The last sample, ms. */
  lastMs: number | undefined;
  /** Samples measured on this client so far. */
  samples: number;
  /** Socket opened -> first frame presented, ms, for the current connection (undefined: no frame yet). */
  firstFrameMs: number | undefined;
  /** Freezes since the client started, and how long they lasted, ms. */
  freezes: number;
  freezeMs: number;
  /** Frames received and never presented since the client started. */
  dropped: number;
}

interface Waiting {
  command: string;
  sentAt: number;
  seq: number;
  /** The frame's RTP timestamp, when the server named one: a WebRTC frame at or after it shows the command. */
  rtp?: number;
}

/** Whether RTP timestamp `a` is at or after `b` (32 bits, wrapping: within half the range). */
function rtpAtOrAfter(a: number, b: number): boolean {
  return ((a - b) | 0) >= 0;
}

/** Measures one client's command-to-pixel latency, time to first frame, freezes and drops (see the module comment). */
export class LatencyTracker {
  /** How this client receives its video (`client_stats.transport`); a WebRTC path sets `webrtc`. */
  transport: 'websocket' | 'webrtc' = 'websocket';
  readonly #now: () => number;
  /** Commands applied at a frame not yet presented, by track. */
  readonly #waiting = new Map<string, Waiting[]>();
  /** Recent presentations by track: [seq, at], oldest first. */
  readonly #shown = new Map<string, [number, number][]>();
  /** Recent WebRTC presentations by track: [RTP timestamp, at], oldest first. */
  readonly #shownRtp = new Map<string, [number, number][]>();
  /** When the last frame of each track was presented (absent: no freeze can start from there). */
  readonly #lastAt = new Map<string, number>();
  readonly #paused = new Set<string>();
  #streaming = true;
  #openedAt: number | undefined;
  #firstFrameMs: number | undefined;
  #firstFrameReported = true;
  #queued: ClientStatsSample[] = [];
  #freezes = 0;
  #freezeMs = 0;
  #dropped = 0;
  readonly #total = { freezes: 0, freezeMs: 0, dropped: 0, samples: 0 };
  readonly #recent: number[] = [];
  /** Frames presented per track since the last report, and when that window began. */
  readonly #presentedInWindow = new Map<string, number>();
  #windowStart: number;

  constructor(options: { now?: () => number } = {}) {
    this.#now = options.now ?? (() => performance.now());
    this.#windowStart = this.#now();
  }

  /** A socket is being opened: the time to first frame counts from here. */
  connecting(at = this.#now()): void {
    this.#openedAt = at;
    this.#firstFrameMs = undefined;
    this.#firstFrameReported = false;
  }

  /**
   * A welcome arrived (a new connection, or a re-join on the same socket): the server counts
   * samples per connection, so what this one has not reported yet, and what still waits for a
   * frame, is dropped; no gap across it is a freeze.
   */
  welcome(): void {
    this.#waiting.clear();
    this.#shown.clear();
    this.#shownRtp.clear();
    this.#lastAt.clear();
    this.#queued = [];
  }

  /** Whether the session streams frames now (`streaming` and no step refused); gaps while it does not are no freezes. */
  setStreaming(streaming: boolean): void {
    if (streaming !== this.#streaming) this.#lastAt.clear();
    this.#streaming = streaming;
  }

  /** This client paused (or resumed) an outbound track: gaps across the pause are no freezes. */
  setTrackPaused(track: string, paused: boolean): void {
    if (paused) this.#paused.add(track);
    else this.#paused.delete(track);
    this.#lastAt.delete(track);
  }

  /** Playout was cut (`flush`): the gap that follows is the app's doing, not a freeze. */
  flushed(): void {
    this.#lastAt.clear();
  }

  /**
   * A command sent at `sentAt` was acknowledged: with `outcome: 'applied'`, a sample is taken
   * when the frame `seq` of `track` (or a later one of it) is presented, or at once if it
   * already was; with an `rtpTimestamp` too, when a WebRTC frame of `track` with that RTP
   * timestamp or a later one is. Other outcomes never reach a frame and give no sample.
   */
  applied(command: string, sentAt: number, info: AppliedFrame): void {
    if (info.outcome !== 'applied' || info.seq === undefined || info.track === undefined) return;
    const rtp = info.rtpTimestamp;
    const hit =
      this.#shown.get(info.track)?.find(([seq]) => seq >= info.seq!) ??
      (rtp === undefined ? undefined : this.#shownRtp.get(info.track)?.find(([ts]) => rtpAtOrAfter(ts, rtp)));
    if (hit) return this.#sample(command, hit[1] - sentAt);
    let list = this.#waiting.get(info.track);
    if (!list) this.#waiting.set(info.track, (list = []));
    list.push({ command, sentAt, seq: info.seq, ...(rtp !== undefined && { rtp }) });
  }

  /**
   * A video frame of `track` was presented to the user at `at` (drawn, shown by a `<video>`, or
   * handed to the app). `seq` undefined: a frame whose number is not known here (WebRTC video,
   * which carries RTP timestamps, not the session's `seq`): it counts for the first frame,
   * freezes and the presentation rate, and, given its `rtpTimestamp` (`requestVideoFrameCallback`'s
   * metadata), for the command-to-pixel samples of `applied` messages that named one.
   */
  presented(track: string, seq: number | undefined, at = this.#now(), rtpTimestamp?: number): void {
    if (this.#openedAt !== undefined && this.#firstFrameMs === undefined) this.#firstFrameMs = Math.max(0, at - this.#openedAt);
    this.#presentedInWindow.set(track, (this.#presentedInWindow.get(track) ?? 0) + 1);
    const last = this.#lastAt.get(track);
    if (last !== undefined && at - last > FREEZE_THRESHOLD_MS) {
      this.#freezes++;
      this.#freezeMs += at - last;
    }
    if (this.#streaming && !this.#paused.has(track)) this.#lastAt.set(track, at);
    else this.#lastAt.delete(track);
    if (seq === undefined && rtpTimestamp === undefined) return;
    const history = seq !== undefined ? this.#shown : this.#shownRtp;
    let shown = history.get(track);
    if (!shown) history.set(track, (shown = []));
    shown.push([seq ?? rtpTimestamp!, at]);
    if (shown.length > HISTORY) shown.shift();
    const list = this.#waiting.get(track);
    if (!list) return;
    const still: Waiting[] = [];
    for (const w of list) {
      const reached = seq !== undefined ? w.seq <= seq : w.rtp !== undefined && rtpAtOrAfter(rtpTimestamp!, w.rtp);
      if (reached) this.#sample(w.command, at - w.sentAt);
      else if (at - w.sentAt <= MAX_CLIENT_STATS_MS) still.push(w);
    }
    this.#waiting.set(track, still);
  }

  /** Frames received and never presented (replaced by a newer one before they were drawn, undecodable). */
  dropped(count = 1): void {
    this.#dropped += count;
  }

  #sample(command: string, ms: number): void {
    if (!(ms >= 0) || ms > MAX_CLIENT_STATS_MS) return;
    this.#queued.push({ command, ms });
    if (this.#queued.length > MAX_QUEUED) this.#queued.shift();
    this.#total.samples++;
    this.#recent.push(ms);
    if (this.#recent.length > SUMMARY_WINDOW) this.#recent.shift();
  }

  /**
   * What to report since the last call (at most {@link MAX_CLIENT_STATS_SAMPLES} samples; the rest
   * wait for the next), or undefined when nothing new happened.
   */
  takeReport(): ClientStatsMessage | undefined {
    const now = this.#now();
    const firstFrame = !this.#firstFrameReported && this.#firstFrameMs !== undefined && this.#firstFrameMs <= MAX_FIRST_FRAME_MS;
    if (this.#queued.length === 0 && !firstFrame && this.#freezes === 0 && this.#dropped === 0) return undefined;
    const samples = this.#queued.splice(0, MAX_CLIENT_STATS_SAMPLES);
    const msg: ClientStatsMessage = {
      type: 'client_stats',
      transport: this.transport,
      samples,
      freezes: this.#freezes,
      freezeMs: Math.round(this.#freezeMs),
      dropped: this.#dropped,
    };
    if (firstFrame) {
      msg.firstFrameMs = Math.round(this.#firstFrameMs!);
      this.#firstFrameReported = true;
    }
    const seconds = (now - this.#windowStart) / 1000;
    if (seconds > 0) msg.fps = Math.min(1000, Math.round((Math.max(0, ...this.#presentedInWindow.values()) / seconds) * 10) / 10);
    this.#total.freezes += this.#freezes;
    this.#total.freezeMs += this.#freezeMs;
    this.#total.dropped += this.#dropped;
    this.#freezes = 0;
    this.#freezeMs = 0;
    this.#dropped = 0;
    this.#presentedInWindow.clear();
    this.#windowStart = now;
    return msg;
  }

  /** The figures of a status display (totals since the client started, freezes and drops not yet reported included). */
  summary(): LatencySummary {
    const sorted = [...this.#recent].sort((a, b) => a - b);
    return {
      p50Ms: sorted.length === 0 ? undefined : sorted[Math.floor((sorted.length - 1) / 2)],
      lastMs: this.#recent.at(-1),
      samples: this.#total.samples,
      firstFrameMs: this.#firstFrameMs,
      freezes: this.#total.freezes + this.#freezes,
      freezeMs: this.#total.freezeMs + this.#freezeMs,
      dropped: this.#total.dropped + this.#dropped,
    };
  }
}
