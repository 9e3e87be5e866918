/**
 * MP4 files from already-encoded packets, through `mediabunny` (a pure-TypeScript muxer): a
 * clip as one progressive MP4 (`moov` first), and a recording as fragmented MP4 written as it
 * streams, so a killed server leaves a file that plays up to its last complete fragment.
 */
import type { FileHandle } from 'node:fs/promises';
import type * as MediabunnyModule from 'mediabunny';
import type { EncodedAudioPacketSource, EncodedVideoPacketSource, Output } from 'mediabunny';
import type { AudioUnit, RingSlice, VideoStreamConfig, VideoUnit } from './media-ring.js';

type Mediabunny = typeof MediabunnyModule;
let loading: Promise<Mediabunny> | undefined;
/** The muxer's module, loaded with the first clip or recording (a server that makes none never loads it). */
function mediabunny(): Promise<Mediabunny> {
  loading ??= import('mediabunny');
  return loading;
}

/** What a decoder needs to know of an AAC stream (the encoder's `decoderConfig`). */
export interface AudioStreamConfig {
  readonly codec: string;
  readonly sampleRate: number;
  readonly numberOfChannels: number;
  /** AudioSpecificConfig. */
  readonly description: Uint8Array;
}

/** With a `description` (avcC), mediabunny takes the packets as length-prefixed, as the ring holds them. */
function videoMeta(c: VideoStreamConfig): { decoderConfig: { codec: string; codedWidth: number; codedHeight: number; description: Uint8Array } } {
  return { decoderConfig: { codec: c.codec, codedWidth: c.width, codedHeight: c.height, description: c.description } };
}

function audioMeta(c: AudioStreamConfig): { decoderConfig: { codec: string; sampleRate: number; numberOfChannels: number; description: Uint8Array } } {
  return { decoderConfig: { codec: c.codec, sampleRate: c.sampleRate, numberOfChannels: c.numberOfChannels, description: c.description } };
}

/**
 * A progressive MP4 of a ring slice, timestamps rebased to its first frame. `moov` first
 * (`fastStart: 'in-memory'`): a browser knows the duration and can seek before the last byte.
 */
export async function muxClip(slice: RingSlice, audio: AudioStreamConfig | undefined): Promise<Uint8Array> {
  const mb = await mediabunny();
  const { BufferTarget, EncodedAudioPacketSource, EncodedPacket, EncodedVideoPacketSource, Mp4OutputFormat, Output } = mb;
  const target = new BufferTarget();
  const output = new Output({ format: new Mp4OutputFormat({ fastStart: 'in-memory' }), target });
  const vs = new EncodedVideoPacketSource('avc');
  output.addVideoTrack(vs, { frameRate: Math.max(1, Math.round(1e6 / slice.frameUs)) });
  const as = audio && slice.audio.length > 0 ? new EncodedAudioPacketSource('aac') : undefined;
  if (as) output.addAudioTrack(as);
  await output.start();
  const t0 = slice.video[0]!.ptsUs;
  const v = slice.video;
  let ai = 0;
  for (let i = 0; i < v.length; i++) {
    const u = v[i]!;
    const dur = i + 1 < v.length ? v[i + 1]!.ptsUs - u.ptsUs : slice.frameUs;
    // Audio is interleaved by time (the muxer wants packets in order within each track; interleaving keeps its buffers small).
    while (as && ai < slice.audio.length && slice.audio[ai]!.ptsUs <= u.ptsUs) await addAudio(mb, as, slice.audio[ai]!, t0, ai++ === 0 ? audio : undefined);
    await vs.add(new EncodedPacket(u.data, u.key ? 'key' : 'delta', (u.ptsUs - t0) / 1e6, dur / 1e6), i === 0 ? videoMeta(u.config) : undefined);
  }
  while (as && ai < slice.audio.length) await addAudio(mb, as, slice.audio[ai]!, t0, ai++ === 0 ? audio : undefined);
  await output.finalize();
  return new Uint8Array(target.buffer!);
}

function addAudio(mb: Mediabunny, as: EncodedAudioPacketSource, a: AudioUnit, t0: number, first: AudioStreamConfig | undefined): Promise<void> {
  return as.add(new mb.EncodedPacket(a.data, 'key', (a.ptsUs - t0) / 1e6, a.durationUs / 1e6), first ? audioMeta(first) : undefined);
}

/** What a {@link FragmentedMp4Writer} is told and asked while it writes. */
export interface FragmentedMp4WriterOptions {
  /** Called with the file's size after each write completed. */
  onWrite(size: number): void;
  /**
   * Asked before each write (one fragment, or the header), with its size: throws to refuse it
   * (a disk that would fall under its free-space margin). Nothing more is written after a refusal.
   */
  beforeWrite?(bytes: number): Promise<void>;
  /** A write was refused or failed: the file was cut back to its last whole fragment. */
  onError(err: unknown): void;
  /** The shortest fragment, seconds. Default 1. */
  fragmentS?: number;
}

/**
 * A fragmented MP4 written to an open file as packets arrive: `ftyp`+`moov`, then one
 * `moof`+`mdat` per group of pictures (mediabunny starts each fragment on a key frame, at
 * least `fragmentS` long, and hands each one over as one write). A write that fails (no space
 * left, part of it written) or that `beforeWrite` refuses cuts the file back to where it was
 * before it, so the file ends on a whole fragment; it is reported to `onError` at once, and
 * rejects a later `addVideo`/`addAudio`/`finish`.
 */
export class FragmentedMp4Writer {
  /** The muxer, once its module is loaded (every method awaits {@link #started} first). */
  #m: { mb: Mediabunny; output: Output; video: EncodedVideoPacketSource; audio: EncodedAudioPacketSource | undefined } | undefined;
  #audioEnded = false;
  #videoConfig: VideoStreamConfig | undefined;
  #audioConfig: AudioStreamConfig | undefined;
  #t0: number | undefined;
  #pendingVideo: VideoUnit | undefined;
  #started: Promise<void>;
  #frameUs = 33_333;

  /**
   * @param file where the bytes go (at their positions)
   * @param withAudio whether an audio track is made (its config comes with its first packet)
   */
  constructor(file: FileHandle, withAudio: boolean, options: FragmentedMp4WriterOptions) {
    let size = 0;
    let failed: unknown;
    const writable = new WritableStream<{ type: 'write'; data: Uint8Array; position: number }>({
      write: async (chunk) => {
        if (failed !== undefined) throw failed as Error;
        try {
          await options.beforeWrite?.(chunk.data.byteLength);
          // A write may land only in part (the disk filled up under it): the rest is written, or its error thrown.
          for (let off = 0; off < chunk.data.byteLength;) {
            const { bytesWritten } = await file.write(chunk.data, off, chunk.data.byteLength - off, chunk.position + off);
            if (bytesWritten <= 0) throw Object.assign(new Error('no space left on device (a write wrote nothing)'), { code: 'ENOSPC' });
            off += bytesWritten;
          }
        } catch (err) {
          failed = err;
          // Each write is a whole fragment (the muxer flushes once per fragment): cutting the file back to its size
          // before this one leaves no torn fragment at its end.
          await file.truncate(size).catch(() => undefined);
          options.onError(err);
          throw err;
        }
        // The muxer writes each byte once, but may go back to patch a header: the size is the furthest end.
        size = Math.max(size, chunk.position + chunk.data.byteLength);
        options.onWrite(size);
      },
    });
    this.#started = mediabunny().then((mb) => {
      const output = new mb.Output({
        format: new mb.Mp4OutputFormat({ fastStart: 'fragmented', minimumFragmentDuration: options.fragmentS ?? 1 }),
        target: new mb.StreamTarget(writable),
      });
      const video = new mb.EncodedVideoPacketSource('avc');
      output.addVideoTrack(video);
      const audio = withAudio ? new mb.EncodedAudioPacketSource('aac') : undefined;
      if (audio) output.addAudioTrack(audio);
      this.#m = { mb, output, video, audio };
      return output.start();
    });
  }

  /** µs of the first frame (the file's zero), once one was added. */
  get startUs(): number | undefined {
    return this.#t0;
  }

  /**
   * Adds a frame (the first must be a key frame: earlier ones are skipped). Frames are held
   * one behind, so each gets its real duration. Resolves whether the frame is the file's (false:
   * skipped before the first key frame).
   */
  async addVideo(u: VideoUnit): Promise<boolean> {
    await this.#started;
    if (this.#t0 === undefined) {
      if (!u.key) return false;
      this.#t0 = u.ptsUs;
    }
    const prev = this.#pendingVideo;
    this.#pendingVideo = u;
    if (prev) {
      if (u.ptsUs > prev.ptsUs) this.#frameUs = u.ptsUs - prev.ptsUs;
      await this.#addVideoNow(prev, u.ptsUs - prev.ptsUs);
    }
    return true;
  }

  async #addVideoNow(u: VideoUnit, durUs: number): Promise<void> {
    const first = this.#videoConfig === undefined;
    this.#videoConfig ??= u.config;
    await this.#m!.video.add(
      new this.#m!.mb.EncodedPacket(u.data, u.key ? 'key' : 'delta', (u.ptsUs - this.#t0!) / 1e6, Math.max(1, durUs) / 1e6),
      first ? videoMeta(u.config) : undefined,
    );
  }

  /** Adds an audio packet (those before the first frame are skipped). */
  async addAudio(a: AudioUnit, config: AudioStreamConfig): Promise<void> {
    await this.#started;
    const audio = this.#m!.audio;
    if (!audio || this.#audioEnded || this.#t0 === undefined || a.ptsUs < this.#t0) return;
    const first = this.#audioConfig === undefined;
    this.#audioConfig ??= config;
    await audio.add(new this.#m!.mb.EncodedPacket(a.data, 'key', (a.ptsUs - this.#t0) / 1e6, a.durationUs / 1e6), first ? audioMeta(config) : undefined);
  }

  /**
   * No more sound comes (its encoder failed): the muxer, which interleaves the tracks by time,
   * stops waiting for it, and the rest is written as video alone.
   */
  async endAudio(): Promise<void> {
    await this.#started;
    const audio = this.#m!.audio;
    if (!audio || this.#audioEnded) return;
    this.#audioEnded = true;
    audio.close();
  }

  /** Writes the last frame and the last fragment (and the index). The file stays open: the caller closes it. */
  async finish(): Promise<void> {
    await this.#started;
    const last = this.#pendingVideo;
    this.#pendingVideo = undefined;
    if (last) await this.#addVideoNow(last, this.#frameUs);
    if (this.#t0 === undefined) {
      await this.#m!.output.cancel();
      return;
    }
    await this.#m!.output.finalize();
  }

  /** Gives up (after a write error): nothing more is written. */
  async abort(): Promise<void> {
    await this.#started.catch(() => undefined);
    await this.#m?.output.cancel().catch(() => undefined);
  }
}
