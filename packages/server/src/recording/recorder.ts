/**
 * One recording: a session's video (and audio) written to `<dir>/<name>.mp4` as fragmented MP4
 * while it streams, with a `<name>.json` beside it that describes it (rewritten when it stops).
 * It stops by itself at `maxBytes` or `maxDurationMs`, when a fragment would leave less than
 * `minFreeBytes` free on the disk (checked before each one is written) or a write fails; the
 * file then ends on its last whole fragment and plays. With `frameMetadata`, a
 * `<name>.frames.jsonl` beside it has one line per frame of the file, in the file's order.
 */
import { open, rm, writeFile, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { CodedError, WireErrorCode, type RecordingInfo } from '@reactor/protocol';
import type { Logger } from '@reactor/log';
import { freeBytes, isDiskFull } from './files.js';
import type { AudioUnit, VideoUnit } from './media-ring.js';
import { FragmentedMp4Writer, type AudioStreamConfig } from './mp4.js';

/** The limits a recording runs under. */
export interface RecorderLimits {
  maxBytes: number;
  maxDurationMs: number;
  minFreeBytes: number;
  retentionMs: number;
  /**
   * Room a recording needs above `minFreeBytes` to start: the largest fragment written so far
   * (0 before any), so that a start right after a `disk_full` stop is refused rather than
   * opening a file whose first fragment cannot fit.
   */
  startReserveBytes?: number;
  /** Write `<name>.frames.jsonl`: each frame's time in the file, seq and metadata (recording.frame_metadata). */
  frameMetadata?: boolean;
}

/** What the recording says of one frame in its `.frames.jsonl`. */
export interface RecordedFrame {
  readonly seq: number;
  readonly metadata?: unknown;
}

export class SessionRecorder {
  readonly name: string;
  readonly sessionId: string;
  readonly path: string;
  readonly startedAt: Date;
  state: RecordingInfo['state'] = 'recording';
  #bytes = 0;
  #lastPtsUs: number | undefined;
  readonly #dir: string;
  readonly #file: FileHandle;
  readonly #frames: FileHandle | undefined;
  readonly #writer: FragmentedMp4Writer;
  readonly #limits: RecorderLimits;
  readonly #log: Logger;
  readonly #onStop: (r: SessionRecorder) => void;
  #chain: Promise<void> = Promise.resolve();
  #largestWrite = 0;
  #stopping: Promise<void> | undefined;
  /** A write failed: nothing more is written. */
  #broken = false;

  private constructor(
    dir: string,
    name: string,
    sessionId: string,
    file: FileHandle,
    frames: FileHandle | undefined,
    withAudio: boolean,
    limits: RecorderLimits,
    log: Logger,
    onStop: (r: SessionRecorder) => void,
  ) {
    this.#dir = dir;
    this.name = name;
    this.sessionId = sessionId;
    this.path = join(dir, name);
    this.startedAt = new Date();
    this.#file = file;
    this.#frames = frames;
    this.#limits = limits;
    this.#log = log;
    this.#onStop = onStop;
    this.#writer = new FragmentedMp4Writer(file, withAudio, {
      onWrite: (size) => {
        this.#bytes = size;
      },
      beforeWrite: async (bytes) => {
        this.#largestWrite = Math.max(this.#largestWrite, bytes);
        const free = await freeBytes(dir);
        if (free - bytes < limits.minFreeBytes) {
          throw new RecorderDiskFullError(
            `its next fragment (${bytes} bytes) would leave ${Math.max(0, free - bytes)} of the ${free} bytes free on the disk of ${dir}, below recording.min_free_bytes (${limits.minFreeBytes})`,
          );
        }
      },
      onError: (err) => this.#fail(err),
    });
  }

  /**
   * Opens a new recording file after checking the free space.
   * @throws RecorderDiskFullError when the disk has less than `minFreeBytes` free.
   */
  static async open(
    dir: string,
    sessionId: string,
    withAudio: boolean,
    limits: RecorderLimits,
    log: Logger,
    onStop: (r: SessionRecorder) => void,
  ): Promise<SessionRecorder> {
    const free = await freeBytes(dir);
    const reserve = limits.startReserveBytes ?? 0;
    if (free < limits.minFreeBytes + reserve) {
      const room = reserve > 0 ? ` plus room for one fragment (${reserve} bytes, the largest written)` : '';
      throw new RecorderDiskFullError(
        `the disk of ${dir} has ${free} bytes free, below recording.min_free_bytes (${limits.minFreeBytes})${room}; free some space or lower the setting`,
      );
    }
    const stamp = new Date().toISOString().replace(/[:.]/g, '-');
    const name = `${stamp}_${sessionId.replace(/[^\w-]/g, '_').slice(0, 64)}.mp4`;
    const path = join(dir, name);
    let file: FileHandle | undefined;
    let frames: FileHandle | undefined;
    try {
      file = await open(path, 'wx');
      if (limits.frameMetadata) frames = await open(framesPath(path), 'wx');
      const r = new SessionRecorder(dir, name, sessionId, file, frames, withAudio, limits, log, onStop);
      await r.#writeInfo();
      return r;
    } catch (err) {
      // Nothing of a recording that could not start stays behind: no open handle, no empty file listed as stopped.
      await file?.close().catch(() => undefined);
      await frames?.close().catch(() => undefined);
      await rm(path, { force: true });
      await rm(framesPath(path), { force: true });
      await rm(path.replace(/\.mp4$/, '.json'), { force: true });
      if (isDiskFull(err)) throw new RecorderDiskFullError(`the disk of ${dir} is full (${(err as Error).message})`);
      throw err;
    }
  }

  /** The largest single write (a fragment) asked for so far, bytes. */
  get largestWrite(): number {
    return this.#largestWrite;
  }

  get bytes(): number {
    return this.#bytes;
  }

  get durationS(): number {
    const t0 = this.#writer.startUs;
    return t0 === undefined || this.#lastPtsUs === undefined ? 0 : (this.#lastPtsUs - t0) / 1e6;
  }

  info(): RecordingInfo {
    return {
      name: this.name,
      sessionId: this.sessionId,
      state: this.state,
      startedAt: this.startedAt.toISOString(),
      bytes: this.#bytes,
      durationS: Math.round(this.durationS * 1000) / 1000,
      deleteAt: new Date(this.startedAt.getTime() + this.#limits.retentionMs).toISOString(),
      ...(this.#frames && { frames: framesPath(this.name) }),
    };
  }

  video(u: VideoUnit, frame?: RecordedFrame): void {
    if (this.state !== 'recording') return;
    const t0 = this.#writer.startUs;
    if (t0 !== undefined && (u.ptsUs - t0) / 1000 >= this.#limits.maxDurationMs) return void this.stop('max_duration');
    if (this.#bytes >= this.#limits.maxBytes) return void this.stop('max_bytes');
    this.#lastPtsUs = u.ptsUs;
    this.#enqueue(async () => {
      const inFile = await this.#writer.addVideo(u);
      const frames = this.#frames;
      if (!inFile || !frames) return;
      const line = { t: (u.ptsUs - this.#writer.startUs!) / 1e6, seq: frame?.seq ?? null, metadata: frame?.metadata ?? null };
      await frames.appendFile(JSON.stringify(line) + '\n');
    });
  }

  audio(a: AudioUnit, config: AudioStreamConfig): void {
    if (this.state !== 'recording') return;
    this.#enqueue(() => this.#writer.addAudio(a, config));
  }

  /** No more sound comes this session (its encoder failed): the rest is recorded as picture alone. */
  endAudio(): void {
    if (this.state === 'recording') this.#enqueue(() => this.#writer.endAudio());
  }

  #enqueue(fn: () => Promise<void>): void {
    this.#chain = this.#chain.then(async () => {
      if (this.#broken) return;
      try {
        await fn();
      } catch (err) {
        this.#fail(err);
      }
    });
  }

  #fail(err: unknown): void {
    if (this.#broken) return;
    this.#broken = true;
    if (this.state === 'recording') this.state = err instanceof RecorderDiskFullError || isDiskFull(err) ? 'disk_full' : 'write_failed';
    this.#log.error(
      `recording ${this.name} stopped (${this.state}): ${(err as Error)?.message ?? String(err)}; it ends on its last whole fragment, which plays`,
    );
    this.#stopping ??= this.#close(false);
  }

  /** Stops: writes the last fragment, closes the file, rewrites the description. Idempotent. */
  stop(reason: Exclude<RecordingInfo['state'], 'recording'> = 'stopped'): Promise<void> {
    if (this.#stopping) return this.#stopping;
    this.state = reason;
    this.#stopping = this.#close(true);
    return this.#stopping;
  }

  async #close(finish: boolean): Promise<void> {
    // Writes queued before the stop go first.
    await this.#chain;
    try {
      if (finish && !this.#broken) await this.#writer.finish();
      else await this.#writer.abort();
    } catch (err) {
      this.state = err instanceof RecorderDiskFullError || isDiskFull(err) ? 'disk_full' : 'write_failed';
      this.#log.error(`recording ${this.name}: its last fragment could not be written: ${(err as Error)?.message ?? String(err)}`);
    }
    await this.#file.close().catch(() => undefined);
    await this.#frames?.close().catch(() => undefined);
    await this.#writeInfo().catch(() => undefined);
    this.#onStop(this);
  }

  async #writeInfo(): Promise<void> {
    await writeFile(join(this.#dir, this.name.replace(/\.mp4$/, '.json')), JSON.stringify(this.info()) + '\n');
  }
}

/** The disk lacks the free space a recording needs. */
export class RecorderDiskFullError extends CodedError {
  constructor(message: string) {
    super(WireErrorCode.DiskFull, message);
  }
}

/** The `.frames.jsonl` beside a recording's `.mp4`. */
export function framesPath(mp4: string): string {
  return mp4.replace(/\.mp4$/, '.frames.jsonl');
}
