/**
 * Clips and recordings of a server's sessions (`ServerOptions.recording`, reactor.yaml
 * `recording:`). It taps the host's playout (`AppHost.onMedia`): each outbound video track is
 * encoded to H.264 by the server's shared encoder of that track at the ladder's first tier (the
 * same encoder H.264 viewers of that tier use, so with such viewers the ring costs no extra
 * encoding; with JPEG viewers it is one more encode per frame: docs/benchmarks.md), and the
 * first outbound audio track to AAC, once. Each video track keeps a {@link MediaRing}; a clip
 * muxes a slice of it into an MP4 file served at an unguessable, expiring URL; a recording
 * writes the same units to a fragmented MP4 file as they come.
 */
import { mkdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join } from 'node:path';
import { Gauge, type Registry } from 'prom-client';
import type { ClipMessage, ClipResult, ErrorMessage, RecordingInfo, RecordingMessage, ReplyMessage, SessionStatus } from '@reactor/protocol';
import type { Logger } from '@reactor/log';
import { ReactorError, type ClipOptions, type MediaListener, type OutputAudio, type OutputFrame } from '@reactor/runtime';
import { ServerErrorCode } from '../base/errors.js';
import { makeClip } from './recording-clip.js';
import { fail } from './recording-errors.js';
import { serveRecordingFiles } from './recording-http.js';
import { listRecordings } from './recording-list.js';
import { loadWebCodecs } from '../video/video-encoder.js';
import type { TrackEncoder, VideoStreams, VideoSubscriber } from '../video/video-streams.js';
import { AacEncoder } from './audio-encoder.js';
import { ClipStore } from './clip-store.js';
import { annexBToAvcc, avcDecoderConfigurationRecord } from './avc.js';
import { MediaRing, sameConfig, type AudioUnit, type VideoStreamConfig, type VideoUnit } from './media-ring.js';
import type { AudioStreamConfig } from './mp4.js';
import { framesPath, RecorderDiskFullError, SessionRecorder } from './recorder.js';
import type { ResolvedRecordingOptions } from './recording-options.js';

/** What the service needs of the host: the schema, its status, and the playout tap. */
export interface RecordableHost {
  readonly schema: { readonly tracks: readonly { name: string; kind: string; direction: string; sampleRate?: number }[] };
  readonly status: SessionStatus;
  onMedia?(listener: MediaListener): () => void;
  onStatus?(listener: (status: SessionStatus) => void): (() => void) | void;
  setClipper?(clipper: ((options: ClipOptions) => Promise<ClipResult>) | undefined): void;
  /** An app with session snapshots: its session log, saved beside each recording (`<name>.session.json`, `reactor replay` reads it). */
  readonly snapshots?: { log(): object | undefined };
}

/** How far the sound may fall behind the picture before silence is played to keep it up, µs. */
const AUDIO_PAD_SLACK_US = 1_000_000;

/** Largest number of retention sweeps' worth of time between two sweeps, ms. */
const MAX_SWEEP_INTERVAL_MS = 60_000;

interface VideoTrackState {
  readonly index: number;
  readonly name: string;
  readonly ring: MediaRing;
  encoder: TrackEncoder | undefined;
  /** The stream parameters of the last key frame (its avcC). */
  config: VideoStreamConfig | undefined;
  /** The encoder failed in this session: no more tries until the next. */
  failed: boolean;
}

export class RecordingService implements VideoSubscriber {
  readonly options: ResolvedRecordingOptions;
  readonly #host: RecordableHost;
  readonly #video: VideoStreams;
  readonly #log: Logger;
  readonly #store: ClipStore;
  readonly #tracks = new Map<number, VideoTrackState>();
  readonly #audioIndex: number;
  #audio: AacEncoder | undefined;
  #audioFailed = false;
  #wc: unknown;
  #unavailable: string | undefined;
  #session: string | undefined;
  /** Bumped at every session change: units of an older generation arriving late are dropped. */
  #generation = 0;
  /** The generation `record: true` started a recording for. */
  #autoRecorded = -1;
  #recorder: SessionRecorder | undefined;
  /** The largest fragment a recording of this server wrote (or was refused): what a new one must have room for. */
  #fragmentBytes = 0;
  #opening: Promise<SessionRecorder> | undefined;
  readonly #stops = new Set<Promise<void>>();
  /** Stopped recordings of this process, by file name. */
  readonly #done = new Map<string, RecordingInfo>();
  readonly #busy = new WeakSet<object>();
  #clipQueue: Promise<unknown> = Promise.resolve();
  #offMedia: (() => void) | undefined;
  #offStatus: (() => void) | undefined;
  #sweeper: ReturnType<typeof setInterval> | undefined;
  #closed = false;

  constructor(options: ResolvedRecordingOptions, host: RecordableHost, video: VideoStreams, log: Logger, registry: Registry) {
    this.options = options;
    this.#host = host;
    this.#video = video;
    this.#log = log.child ? log.child({ component: 'recording' }) : log;
    this.#store = new ClipStore(options.dir, options.clipExpiryMs, options.minFreeBytes);
    host.schema.tracks.forEach((t, index) => {
      if (t.direction === 'out' && t.kind === 'video') {
        this.#tracks.set(index, {
          index,
          name: t.name,
          ring: new MediaRing(options.clipSeconds, options.clipMaxBytes),
          encoder: undefined,
          config: undefined,
          failed: false,
        });
      }
    });
    this.#audioIndex = host.schema.tracks.findIndex((t) => t.direction === 'out' && t.kind === 'audio');
    const rings = (): number => this.ringBytes;
    new Gauge({
      name: 'reactor_clip_ring_bytes',
      help: 'Bytes held by the clip rings (encoded video and audio of the last recording.clip_seconds), all tracks together.',
      registers: [registry],
      collect() {
        this.set(rings());
      },
    });
  }

  /** Bytes held by every ring now. */
  get ringBytes(): number {
    let n = 0;
    for (const t of this.#tracks.values()) n += t.ring.bytes;
    return n;
  }

  /** Loads the codecs, makes the folder, taps the host, starts the retention sweeps. */
  async start(): Promise<void> {
    await mkdir(this.options.dir, { recursive: true });
    try {
      this.#wc = await loadWebCodecs();
    } catch (err) {
      this.#unavailable = (err as Error).message;
      this.#log.error(`clips and recordings are unavailable: ${this.#unavailable}`);
    }
    if (!this.#host.onMedia) {
      this.#unavailable ??= 'this host does not expose its playout (onMedia)';
    } else {
      this.#offMedia = this.#host.onMedia({ frame: (f) => this.#onFrame(f), audio: (a) => this.#onAudio(a) });
    }
    const off = this.#host.onStatus?.((s) => this.#onStatus(s));
    if (typeof off === 'function') this.#offStatus = off;
    this.#session = this.#host.status.sessionId;
    this.#host.setClipper?.((o) => this.clip(o, undefined));
    const every = Math.max(250, Math.min(MAX_SWEEP_INTERVAL_MS, Math.min(this.options.retentionMs, this.options.clipExpiryMs) / 4));
    this.#sweeper = setInterval(() => void this.sweep(), every);
    this.#sweeper.unref();
    await this.sweep();
  }

  // ---- the feed ---------------------------------------------------------------------------

  #onStatus(s: SessionStatus): void {
    if (s.sessionId === this.#session) return;
    this.#session = s.sessionId;
    this.#generation++;
    for (const t of this.#tracks.values()) {
      t.ring.clear();
      t.config = undefined;
      t.failed = false;
    }
    this.#audio?.close();
    this.#audio = undefined;
    this.#audioFailed = false;
    const r = this.#recorder;
    this.#recorder = undefined;
    if (r) this.#track(r.stop('stopped'));
  }

  /** Writes the session log of an app with snapshots beside a recording that ended (`<name>.session.json`). */
  async #saveSessionLog(name: string): Promise<void> {
    const log = this.#host.snapshots?.log();
    if (!log) return;
    // A recording that left no file (refused at its start: a full disk) gets no log beside it.
    if (
      !(await stat(join(this.options.dir, name)).then(
        () => true,
        () => false,
      ))
    )
      return;
    // Whole or not at all: written aside, then renamed into place; a write that fails (a full disk) leaves nothing.
    const path = join(this.options.dir, name.replace(/\.mp4$/, '.session.json'));
    try {
      await writeFile(`${path}.tmp`, `${JSON.stringify(log)}\n`);
      await rename(`${path}.tmp`, path);
    } catch (err) {
      await rm(`${path}.tmp`, { force: true }).catch(() => undefined);
      this.#log.warn({ err }, `the session log of recording ${name} could not be saved`);
    }
  }

  /** Keeps a recording's stop until it is done (close() waits for every one: SIGTERM loses no last fragment). */
  #track(p: Promise<void>): void {
    this.#stops.add(p);
    void p.finally(() => this.#stops.delete(p));
  }

  #onFrame(frame: OutputFrame): void {
    if (this.#closed || this.#unavailable) return;
    const t = this.#tracks.get(frame.trackIndex);
    if (!t || t.failed) return;
    if (!t.encoder || t.encoder.closed) {
      const tier = this.#video.options.tiers[0]!;
      t.encoder = this.#video.subscribe(t.index, 'h264', tier, this);
    }
    const gen = this.#generation;
    const ptsUs = Math.round(frame.ptsMs * 1000);
    // The sound keeps up with the picture through stretches where the app sends none (a
    // recording interleaves by time and would hold its fragments until the sound caught up).
    if (this.#audioIndex >= 0 && frame.trackIndex === this.#firstTrack()?.index) {
      const rate = this.#host.schema.tracks[this.#audioIndex]?.sampleRate;
      if (rate !== undefined) this.#audioEncoder(rate)?.padTo(ptsUs, AUDIO_PAD_SLACK_US);
    }
    // `record: true`: each session is recorded once from its first frame (a cap that stops it does not start another).
    if (this.options.record && this.#autoRecorded !== gen && frame.trackIndex === this.#firstTrack()?.index) {
      this.#autoRecorded = gen;
      void this.#startRecording().catch(() => undefined);
    }
    // null: the encoder was behind and did not take the frame (its stream has no gap).
    t.encoder.encode(frame)?.then(
      (cf) => {
        if (!cf || gen !== this.#generation) return;
        const avcc = annexBToAvcc(cf.data);
        if (!avcc) return;
        const codec = cf.config.codecString ?? 'avc1.42E01F';
        const { width, height } = cf.config;
        if (avcc.sps && avcc.pps) {
          const next = { codec, width, height, description: avcDecoderConfigurationRecord(avcc.sps, avcc.pps) };
          if (!t.config || !sameConfig(t.config, next)) t.config = next;
        }
        // A frame before the stream's first parameter sets cannot be decoded: skipped.
        if (!t.config || t.config.width !== width || t.config.height !== height) return;
        const u: VideoUnit = { data: avcc.data, key: cf.key, ptsUs, config: t.config };
        if (this.options.clips) t.ring.pushVideo(u);
        if (t === this.#firstTrack()) this.#recorder?.video(u, { seq: frame.seq, metadata: frame.metadata });
      },
      () => undefined,
    );
  }

  #onAudio(chunk: OutputAudio): void {
    if (this.#closed || this.#unavailable || chunk.trackIndex !== this.#audioIndex) return;
    this.#audioEncoder(chunk.sampleRate)?.encode(chunk.pcm, Math.round(chunk.ptsMs * 1000));
  }

  /** The session's AAC encoder (made at its first frame or sound), undefined once it failed. */
  #audioEncoder(sampleRate: number): AacEncoder | undefined {
    if (this.#audioFailed) return undefined;
    if (this.#audio) return this.#audio;
    const gen = this.#generation;
    const track = this.#host.schema.tracks[this.#audioIndex]?.name ?? 'audio';
    try {
      this.#audio = new AacEncoder(
        this.#wc,
        sampleRate,
        (u, config) => {
          if (gen === this.#generation) this.#audioUnit(u, config);
        },
        (err) => {
          this.#audioFailed = true;
          this.#recorder?.endAudio();
          this.#log.error(`the AAC encoder of track "${track}" failed: ${err.message}; clips and recordings of this session have no sound`);
        },
      );
    } catch (err) {
      this.#audioFailed = true;
      this.#recorder?.endAudio();
      this.#log.error(`no AAC encoder for track "${track}" (${sampleRate} Hz): ${(err as Error).message}; clips and recordings have no sound`);
      return undefined;
    }
    return this.#audio;
  }

  #audioUnit(u: AudioUnit, config: AudioStreamConfig): void {
    if (this.options.clips) for (const t of this.#tracks.values()) t.ring.pushAudio(u);
    this.#recorder?.audio(u, config);
  }

  #firstTrack(): VideoTrackState | undefined {
    return this.#tracks.values().next().value;
  }

  /** The shared encoder failed (its clients move to JPEG): the ring of that track stops until the next session. */
  encoderFailed(encoder: TrackEncoder, err: Error): void {
    for (const t of this.#tracks.values()) {
      if (t.encoder === encoder) {
        t.encoder = undefined;
        t.failed = true;
        this.#log.error(`the clip ring of track "${t.name}" stopped: its H.264 encoder failed (${err.message})`);
      }
    }
  }

  // ---- clips ------------------------------------------------------------------------------

  /**
   * A clip of the last `seconds` of a video track.
   * @param owner who asks (a connection): one clip at a time each (`clip_busy`)
   * @throws ReactorError `clips_disabled`, `invalid_params`, `clip_unavailable`, `clip_busy`, `disk_full`, `clip_failed`
   */
  async clip(options: ClipOptions, owner: object | undefined): Promise<ClipResult> {
    if (!this.options.clips)
      throw fail(ServerErrorCode.ClipsDisabled, 'this server keeps no clip ring (recording.clips is false); set it to true in reactor.yaml');
    if (this.#unavailable) throw fail(ServerErrorCode.ClipUnavailable, `clips are unavailable on this server: ${this.#unavailable}`);
    const max = this.options.clipSeconds;
    const seconds = options.seconds ?? max;
    if (typeof seconds !== 'number' || !Number.isFinite(seconds) || seconds <= 0 || seconds > max) {
      throw fail(
        ServerErrorCode.InvalidParams,
        `clip seconds must be a number above 0 and at most ${max} (recording.clip_seconds), got ${JSON.stringify(options.seconds)}`,
      );
    }
    if (this.#tracks.size === 0) {
      const tracks = this.#host.schema.tracks.filter((t) => t.direction === 'out').map((t) => `"${t.name}" (${t.kind})`);
      throw fail(ServerErrorCode.ClipUnavailable, `this app streams no video track to clip (its outbound tracks: ${tracks.join(', ') || 'none'})`);
    }
    const t = options.track === undefined ? this.#firstTrack()! : [...this.#tracks.values()].find((x) => x.name === options.track);
    if (!t) {
      throw fail(
        ServerErrorCode.UnknownTrack,
        `no outbound video track ${JSON.stringify(options.track)}; clip one of ${[...this.#tracks.values()].map((x) => `"${x.name}"`).join(', ')}`,
      );
    }
    if (owner && this.#busy.has(owner)) throw fail(ServerErrorCode.ClipBusy, 'your previous clip is still being made; ask again once it has answered');
    const slice = t.ring.slice(seconds);
    if (!slice) {
      throw fail(
        ServerErrorCode.ClipUnavailable,
        t.failed
          ? `the H.264 encoder of track "${t.name}" failed in this session, so its clip ring is empty`
          : `track "${t.name}" has no key frame in its clip ring yet (no session streams, or it just started); ask again in a moment`,
      );
    }
    if (owner) this.#busy.add(owner);
    // Clips are made one at a time (each takes a share of one core for a moment); others wait their turn.
    const made = this.#clipQueue.then(() => makeClip(slice, this.#audio?.config, this.#store));
    this.#clipQueue = made.catch(() => undefined);
    try {
      return await made;
    } finally {
      if (owner) this.#busy.delete(owner);
    }
  }

  // ---- recordings -------------------------------------------------------------------------

  /** Starts recording the current session. @throws ReactorError `recording_state`, `clip_unavailable`, `disk_full` */
  async startRecording(): Promise<RecordingInfo> {
    // One that stopped by itself (a limit, a full disk) is still writing its last fragment: it is done once that is.
    if (this.#recorder && this.#recorder.state !== 'recording') await this.#recorder.stop();
    if (this.#recorder || this.#opening)
      throw fail(ServerErrorCode.RecordingState, `this session is already being recorded (${this.#recorder?.name ?? 'starting'}); stop it first`);
    if (this.#unavailable) throw fail(ServerErrorCode.ClipUnavailable, `recording is unavailable on this server: ${this.#unavailable}`);
    if (this.#tracks.size === 0) throw fail(ServerErrorCode.ClipUnavailable, 'this app streams no video track to record');
    const session = this.#host.status.sessionId;
    if (session === undefined) throw fail(ServerErrorCode.NoSession, 'no session is running to record');
    return (await this.#startRecording()).info();
  }

  async #startRecording(): Promise<SessionRecorder> {
    const session = this.#host.status.sessionId ?? 'session';
    const gen = this.#generation;
    this.#opening = SessionRecorder.open(
      this.options.dir,
      session,
      this.#audioIndex >= 0 && this.#wc !== undefined && !this.#audioFailed,
      {
        maxBytes: this.options.maxBytes,
        maxDurationMs: this.options.maxDurationMs,
        minFreeBytes: this.options.minFreeBytes,
        retentionMs: this.options.retentionMs,
        startReserveBytes: this.#fragmentBytes,
        frameMetadata: this.options.frameMetadata,
      },
      this.#log,
      (r) => {
        this.#fragmentBytes = Math.max(this.#fragmentBytes, r.largestWrite);
        if (this.#recorder === r) this.#recorder = undefined;
        this.#done.set(r.name, r.info());
        this.#log.info(`recording ${r.name} ${r.state}: ${r.bytes} bytes, ${r.durationS.toFixed(1)} s`);
        this.#track(this.#saveSessionLog(r.name));
      },
    );
    try {
      const r = await this.#opening;
      if (gen !== this.#generation || this.#closed) {
        // The session changed while the file opened: that recording is of nothing.
        this.#track(r.stop('stopped'));
        throw fail(ServerErrorCode.NoSession, 'the session ended while its recording started');
      }
      this.#recorder = r;
      // It starts at the next key frame: ask for one now rather than wait for the interval.
      this.#firstTrack()?.encoder?.requestKeyFrame('request');
      this.#log.info(`recording session ${session} to ${r.path}`);
      return r;
    } catch (err) {
      if (err instanceof RecorderDiskFullError) {
        this.#log.error(`recording not started: ${err.message}`);
        throw fail(ServerErrorCode.DiskFull, err.message);
      }
      throw err;
    } finally {
      this.#opening = undefined;
    }
  }

  /** Stops the current recording. @throws ReactorError `recording_state` */
  async stopRecording(): Promise<RecordingInfo> {
    if (this.#opening) await this.#opening.catch(() => undefined);
    const r = this.#recorder;
    if (!r) throw fail(ServerErrorCode.RecordingState, 'this session is not being recorded; start a recording first');
    this.#recorder = undefined;
    await r.stop('stopped');
    return r.info();
  }

  /** Every recording in the folder, newest first: this process's (live ones included) and earlier runs' (`interrupted` when a run died while writing). */
  list(): Promise<RecordingInfo[]> {
    return listRecordings(this.options.dir, this.options.retentionMs, (name) => (this.#recorder?.name === name ? this.#recorder.info() : this.#done.get(name)));
  }

  /** Deletes expired clips and recordings past their retention. */
  async sweep(): Promise<void> {
    await this.#store.sweep().catch(() => undefined);
    const now = Date.now();
    for (const r of await this.list()) {
      if (r.state === 'recording' || Date.parse(r.deleteAt) > now) continue;
      await rm(join(this.options.dir, r.name), { force: true });
      await rm(join(this.options.dir, r.name.replace(/\.mp4$/, '.json')), { force: true });
      await rm(framesPath(join(this.options.dir, r.name)), { force: true });
      await rm(join(this.options.dir, r.name.replace(/\.mp4$/, '.session.json')), { force: true });
      this.#done.delete(r.name);
      this.#log.info(`recording ${r.name} deleted (older than recording.retention_s)`);
    }
  }

  // ---- the doors --------------------------------------------------------------------------

  /** The answer to a `clip` or `recording` message of a connection. */
  async answer(msg: ClipMessage | RecordingMessage, owner: object): Promise<ReplyMessage | ErrorMessage> {
    try {
      let result: unknown;
      if (msg.type === 'clip')
        result = await this.clip({ ...(msg.seconds !== undefined && { seconds: msg.seconds }), ...(msg.track !== undefined && { track: msg.track }) }, owner);
      else result = msg.action === 'start' ? await this.startRecording() : await this.stopRecording();
      return { type: 'reply', id: msg.id, result };
    } catch (err) {
      if (err instanceof ReactorError) return { type: 'error', id: msg.id, code: err.code, message: err.message };
      this.#log.error(`${msg.type} failed: ${(err as Error)?.stack ?? String(err)}`);
      return { type: 'error', id: msg.id, code: ServerErrorCode.ClipFailed, message: `the ${msg.type} failed: ${(err as Error)?.message ?? String(err)}` };
    }
  }

  /**
   * `GET /clips/<id>.mp4`, `GET /recordings` (the listing), `GET /recordings/<name>` (a file);
   * the caller has checked access. Returns false for any other path.
   */
  serve(req: IncomingMessage, res: ServerResponse, pathname: string): Promise<boolean> {
    return serveRecordingFiles(req, res, pathname, { store: this.#store, dir: this.options.dir, list: () => this.list() });
  }

  /** Stops the recording (its last fragment is written) and the taps. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#sweeper) clearInterval(this.#sweeper);
    this.#offMedia?.();
    this.#offStatus?.();
    this.#host.setClipper?.(undefined);
    for (const t of this.#tracks.values()) t.encoder?.remove(this);
    this.#audio?.close();
    if (this.#opening) await this.#opening.catch(() => undefined);
    if (this.#recorder) this.#track(this.#recorder.stop('stopped'));
    await Promise.all([...this.#stops]);
  }
}
