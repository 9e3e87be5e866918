/**
 * The clip ring of one outbound video track: its already-encoded H.264 access units and the
 * AAC packets of the session's audio, bounded by time (`seconds`) and by bytes (`maxBytes`),
 * never by frame count. Whole groups of pictures leave from the front, so the ring always
 * starts on a key frame and a clip of it decodes from its first frame.
 */

/** One encoded video frame (an H.264 access unit, length-prefixed: see `avc.ts`). */
export interface VideoUnit {
  readonly data: Uint8Array;
  readonly key: boolean;
  /** Presentation time, µs on the session clock. */
  readonly ptsUs: number;
  /** The stream parameters it was encoded with (a change starts on a key frame). */
  readonly config: VideoStreamConfig;
}

/** What a decoder needs to know of a video stream. */
export interface VideoStreamConfig {
  /** `avc1.PPCCLL`. */
  readonly codec: string;
  readonly width: number;
  readonly height: number;
  /** The `avcC` record the units decode with. */
  readonly description: Uint8Array;
}

/** Whether two stream configurations are the same (a clip never spans two). */
export function sameConfig(a: VideoStreamConfig, b: VideoStreamConfig): boolean {
  if (a === b) return true;
  if (a.codec !== b.codec || a.width !== b.width || a.height !== b.height || a.description.length !== b.description.length) return false;
  for (let i = 0; i < a.description.length; i++) if (a.description[i] !== b.description[i]) return false;
  return true;
}

/** One encoded audio packet (raw AAC). */
export interface AudioUnit {
  readonly data: Uint8Array;
  readonly ptsUs: number;
  readonly durationUs: number;
}

/** What a clip takes out of the ring. */
export interface RingSlice {
  video: VideoUnit[];
  audio: AudioUnit[];
  /** Nominal frame duration, µs (the last frame's duration in the file). */
  frameUs: number;
}

/** A FIFO with an O(1) shift (a head index, compacted now and then). */
class Fifo<T> {
  #items: T[] = [];
  #head = 0;
  get length(): number {
    return this.#items.length - this.#head;
  }
  at(i: number): T | undefined {
    return this.#items[this.#head + i];
  }
  push(x: T): void {
    this.#items.push(x);
  }
  shift(): T | undefined {
    if (this.length === 0) return undefined;
    const x = this.#items[this.#head++];
    if (this.#head > 1024 && this.#head * 2 > this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
    return x;
  }
  slice(from: number): T[] {
    return this.#items.slice(this.#head + from);
  }
  clear(): void {
    this.#items = [];
    this.#head = 0;
  }
}

/** Per-entry bookkeeping cost counted on top of the payload (object, array slot). */
const ENTRY_OVERHEAD = 64;

export class MediaRing {
  readonly #seconds: number;
  readonly #maxBytes: number;
  readonly #video = new Fifo<VideoUnit>();
  readonly #audio = new Fifo<AudioUnit>();
  #bytes = 0;
  #frameUs = 33_333;

  /**
   * @param seconds the longest clip it must be able to serve
   * @param maxBytes most bytes it holds (payloads plus a small per-entry overhead)
   */
  constructor(seconds: number, maxBytes: number) {
    this.#seconds = seconds;
    this.#maxBytes = maxBytes;
  }

  /** Bytes held now (payloads + per-entry overhead). */
  get bytes(): number {
    return this.#bytes;
  }

  get frames(): number {
    return this.#video.length;
  }

  /** Seconds of video held (first frame to the end of the last). */
  get durationS(): number {
    const first = this.#video.at(0);
    const last = this.#video.at(this.#video.length - 1);
    return first && last ? (last.ptsUs - first.ptsUs + this.#frameUs) / 1e6 : 0;
  }

  /** Adds a frame. A delta frame with no key frame before it in the ring is dropped (it could not be decoded). */
  pushVideo(u: VideoUnit): void {
    const last = this.#video.at(this.#video.length - 1);
    if (!last && !u.key) return;
    if (last && u.ptsUs > last.ptsUs) this.#frameUs = u.ptsUs - last.ptsUs;
    this.#video.push(u);
    this.#bytes += u.data.byteLength + ENTRY_OVERHEAD;
    this.#trim();
  }

  pushAudio(u: AudioUnit): void {
    this.#audio.push(u);
    this.#bytes += u.data.byteLength + ENTRY_OVERHEAD;
    this.#trim();
  }

  /** Drops everything (a new session, a new stream). */
  clear(): void {
    this.#video.clear();
    this.#audio.clear();
    this.#bytes = 0;
  }

  /** Index of the next key frame after position `from`, or -1. */
  #nextKey(from: number): number {
    for (let i = from + 1; i < this.#video.length; i++) if (this.#video.at(i)!.key) return i;
    return -1;
  }

  #dropVideo(count: number): void {
    for (let i = 0; i < count; i++) this.#bytes -= this.#video.shift()!.data.byteLength + ENTRY_OVERHEAD;
  }

  #trim(): void {
    const horizon = this.#seconds * 1e6;
    const last = this.#video.at(this.#video.length - 1);
    if (last) {
      // Drop the first group of pictures while the next one alone still covers `seconds`.
      for (;;) {
        const k = this.#nextKey(0);
        if (k < 0) break;
        const end = last.ptsUs + this.#frameUs;
        if (end - this.#video.at(k)!.ptsUs >= horizon || this.#bytes > this.#maxBytes) this.#dropVideo(k);
        else break;
      }
      // A single group larger than the byte bound: nothing of it can be kept.
      if (this.#bytes > this.#maxBytes && this.#nextKey(0) < 0) this.#dropVideo(this.#video.length);
    }
    // Audio older than the first frame kept (or than `seconds` without video) is of no clip.
    const first = this.#video.at(0);
    const lastAudio = this.#audio.at(this.#audio.length - 1);
    const floor = first ? first.ptsUs : lastAudio ? lastAudio.ptsUs - horizon : 0;
    while (this.#audio.length > 0 && (this.#audio.at(0)!.ptsUs + this.#audio.at(0)!.durationUs <= floor || this.#bytes > this.#maxBytes)) {
      this.#bytes -= this.#audio.shift()!.data.byteLength + ENTRY_OVERHEAD;
    }
  }

  /**
   * The last `seconds` of the ring, from the latest key frame at or before `end - seconds` (the
   * earliest one when the ring is shorter), all of one stream configuration; the audio that
   * plays with it. `undefined` when the ring holds no frame.
   *
   * Gaps in the stream (no frame for longer than {@link GAP_US}: a session left without a client,
   * a stall) are cut out: `seconds` counts what was played, and the slice's timestamps run on
   * across a gap as if the frame before it lasted as long as the one before that, its sound
   * likewise (the silence the encoder was fed for the gap is left out). So a clip asked for right
   * after a gap is at most one key-frame interval longer than asked, with no frozen frame in it.
   */
  slice(seconds: number): RingSlice | undefined {
    let n = this.#video.length;
    if (n === 0) return undefined;
    // The audio encoder hands its packets out a little later than the video's: a clip ends where
    // both have arrived (when the audio is live, i.e. within a second of the video), so its sound lasts to its end.
    const lastAudio = this.#audio.at(this.#audio.length - 1);
    const videoEnd = this.#video.at(n - 1)!.ptsUs + this.#frameUs;
    const audioEnd = lastAudio ? lastAudio.ptsUs + lastAudio.durationUs : undefined;
    if (audioEnd !== undefined && audioEnd < videoEnd && videoEnd - audioEnd < 1e6) {
      while (n > 1 && this.#video.at(n - 1)!.ptsUs + this.#frameUs > audioEnd + this.#frameUs / 2) n--;
    }
    const last = this.#video.at(n - 1)!;
    const same = (c: VideoStreamConfig): boolean => sameConfig(c, last.config);
    // Walking back from the end, `played` is the play time from frame i to the end, gaps cut out.
    let played = this.#frameUs;
    let start = -1;
    const cuts: Cut[] = [];
    for (let i = n - 1; i >= 0; i--) {
      const u = this.#video.at(i)!;
      // A configuration change (a new size) starts on a key frame: the clip starts at the change at the earliest.
      if (!same(u.config)) break;
      if (i < n - 1) {
        const next = this.#video.at(i + 1)!;
        const gap = next.ptsUs - u.ptsUs;
        const before = i > 0 ? u.ptsUs - this.#video.at(i - 1)!.ptsUs : this.#frameUs;
        const normal = before > 0 && before <= GAP_US ? before : this.#frameUs;
        if (gap > GAP_US && gap > 2 * normal) {
          cuts.push({ fromUs: u.ptsUs + normal, toUs: next.ptsUs });
          played += normal;
        } else {
          played += gap;
        }
      }
      if (u.key) {
        start = i;
        if (played >= seconds * 1e6) break;
      }
    }
    if (start < 0) return undefined;
    const from = this.#video.at(start)!.ptsUs;
    cuts.reverse();
    // Only the cuts inside the slice (the walk may have gone past its start to a key frame before it).
    while (cuts.length > 0 && cuts[0]!.fromUs <= from) cuts.shift();
    const shift = (t: number): number | undefined => {
      let removed = 0;
      for (const c of cuts) {
        if (t >= c.toUs) removed += c.toUs - c.fromUs;
        else if (t >= c.fromUs) return undefined;
        else break;
      }
      return t - removed;
    };
    const video: VideoUnit[] = [];
    for (let i = start; i < n; i++) {
      const u = this.#video.at(i)!;
      video.push(cuts.length === 0 ? u : { ...u, ptsUs: shift(u.ptsUs)! });
    }
    const to = last.ptsUs + this.#frameUs;
    const audio: AudioUnit[] = [];
    for (let i = 0; i < this.#audio.length; i++) {
      const a = this.#audio.at(i)!;
      if (a.ptsUs < from || a.ptsUs >= to) continue;
      const t = cuts.length === 0 ? a.ptsUs : shift(a.ptsUs);
      if (t !== undefined) audio.push(t === a.ptsUs ? a : { ...a, ptsUs: t });
    }
    return { video, audio, frameUs: this.#frameUs };
  }
}

/** A stretch of a slice's timeline with no frame in it, cut out of the clip: `[fromUs, toUs)`. */
interface Cut {
  readonly fromUs: number;
  readonly toUs: number;
}

/** A pause between two frames longer than this (and than two frames) is a gap in the stream, not a slow frame, µs. */
export const GAP_US = 250_000;
