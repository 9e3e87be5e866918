/**
 * Publishing an inbound track: the {@link Publication} a `client.publish()` returns, and the
 * pump that turns a source (a Node async iterable, or a browser `MediaStreamTrack` through
 * `media-capture.ts`) into binary frames on the client's socket.
 */
import { TypedEmitter } from '../base/emitter.js';
import { ClientErrorCode, ReactorClientError } from '../base/errors.js';
import { FrameEncoding, encodeFrame, type TrackKind, type TrackSchema } from '../base/protocol.js';

/**
 * One video frame of a Node source: raw RGB24 (`height * width * 3` bytes) or a JPEG, never both.
 * `ptsMs` is the capture time on the sender's clock (default: when it is sent).
 */
export interface VideoSourceFrame {
  rgb?: Uint8Array;
  jpeg?: Uint8Array;
  width: number;
  height: number;
  ptsMs?: number;
  /** Any JSON value; the app sees it as the frame's `metadata`. */
  metadata?: unknown;
}

/** One audio chunk of a source: mono s16 PCM at the track's `sampleRate` (a bare `Int16Array` works too). */
export interface AudioSourceChunk {
  samples: Int16Array;
  ptsMs?: number;
  metadata?: unknown;
}

/**
 * The part of a browser `MediaStreamTrack` the SDK looks at: a camera (`kind: 'video'`) or a
 * microphone (`kind: 'audio'`) from `getUserMedia`. Typed structurally so the Node entry needs
 * no DOM types; pass the real track.
 */
export interface MediaStreamTrackLike {
  readonly kind: string;
  readonly id: string;
  readonly readyState: string;
  getSettings(): { width?: number; height?: number; frameRate?: number; sampleRate?: number };
}

/** A track on its way over WebRTC, as a publication sees it (`rtc-publish.ts` makes it). */
export interface RtcSending {
  stop(): Promise<void>;
  counters(): Promise<{ frames: number; bytes: number }>;
}

/** What `client.publish()` sends: a browser track, or (any platform) an async iterable of frames or sample chunks. */
export type PublishSource = MediaStreamTrackLike | AsyncIterable<VideoSourceFrame> | AsyncIterable<Int16Array | AudioSourceChunk>;

/** Options of `client.publish()`. */
export interface PublishOptions {
  /**
   * Camera frames are skipped (counted in `framesDropped`) while more than this many bytes wait
   * in the socket's send buffer (`WebSocket.bufferedAmount`), instead of queueing behind a slow
   * link; audio chunks only beyond four times it (default 262144: a few JPEG frames).
   */
  maxBufferedBytes?: number;
  /** Browser camera: the capture size and rate; default the track's `width`/`height`/`fps` in the schema. */
  width?: number;
  height?: number;
  fps?: number;
  /** Browser camera: JPEG quality, 0..1 (default 0.8). */
  jpegQuality?: number;
  /** Browser microphone: milliseconds of audio per chunk (default 20). */
  chunkMs?: number;
  /** Stops the publication (as {@link Publication.stop}). */
  signal?: AbortSignal;
  /**
   * How a browser track (`MediaStreamTrack`) goes: `auto` (default) over WebRTC while the
   * client's media runs over WebRTC (`connect(url, { transport })`), else over the WebSocket;
   * `webrtc` only over WebRTC (`rtc_not_connected` when it is not up); `websocket` as JPEG/PCM
   * frames on the socket. Async iterables always go over the WebSocket.
   */
  transport?: 'auto' | 'websocket' | 'webrtc';
}

/** Why a publication ended. */
export interface PublicationEnd {
  /** `stopped` (stop/unpublish), `source_ended`, `source_failed`, `released` (the server released it: `track_released`), `connection_lost`, `client_closed`. */
  reason: 'stopped' | 'source_ended' | 'source_failed' | 'released' | 'connection_lost' | 'client_closed';
  /** The server's reason (`released`) or the error (`source_failed`). */
  detail?: string;
}

/** Events of a {@link Publication}. */
export interface PublicationEvents {
  /** The server refused one of this track's frames (`frame_too_large`, `frame_rate_limited`, ...) or the source failed. */
  error: ReactorClientError;
  /** The publication ended; no more frames are sent. */
  ended: PublicationEnd;
}

/** What a publication needs from its client (implemented by `ReactorClient`). @internal */
export interface PublishTransport {
  /** Sends one binary frame; `false` when the socket is not open. */
  sendBinary(bytes: Uint8Array): boolean;
  bufferedAmount(): number;
  nextSeq(): number;
  /** Sends `unpublish` and waits for the answer. */
  unpublish(track: string): Promise<void>;
  /** The publication ended (the client forgets it). */
  forget(p: Publication): void;
}

const DEFAULT_MAX_BUFFERED = 256 * 1024;

/**
 * A track this client publishes: frames flow from the source until {@link stop}, the source's
 * end, or the server's release. Counters: `framesSent`, `framesDropped` (skipped under
 * back-pressure or while disconnected), `bytesSent`, `errors`.
 */
export class Publication extends TypedEmitter<PublicationEvents> {
  /** Track wire name. */
  readonly track: string;
  /** Index of the track in `schema.tracks` (the frames' `track` field). */
  readonly trackIndex: number;
  readonly kind: TrackKind;
  framesSent = 0;
  framesDropped = 0;
  bytesSent = 0;
  /** Server errors about this track's frames, and source failures. */
  errors = 0;
  lastError: ReactorClientError | undefined;
  /** Resolves when the publication ends, with why. */
  readonly ended: Promise<PublicationEnd>;
  /** How the frames go: binary frames on the socket, or RTP on the peer connection (counters from its stats, once a second). */
  transport: 'websocket' | 'webrtc' = 'websocket';
  #rtc: RtcSending | undefined;
  #rtcPoll: ReturnType<typeof setInterval> | undefined;

  readonly #transport: PublishTransport;
  readonly #maxBuffered: number;
  readonly #abort = new AbortController();
  #end: PublicationEnd | undefined;
  #resolveEnded!: (e: PublicationEnd) => void;

  /** @internal Created by `client.publish()`. */
  constructor(transport: PublishTransport, schema: TrackSchema, trackIndex: number, options: PublishOptions) {
    super();
    this.#transport = transport;
    this.track = schema.name;
    this.trackIndex = trackIndex;
    this.kind = schema.kind;
    this.#maxBuffered = options.maxBufferedBytes ?? DEFAULT_MAX_BUFFERED;
    this.ended = new Promise((r) => (this.#resolveEnded = r));
    options.signal?.addEventListener('abort', () => void this.stop().catch(() => undefined), { once: true });
  }

  /** `true` until the publication ends. */
  get active(): boolean {
    return this.#end === undefined;
  }

  /** Aborted when the publication ends: sources stop on it. */
  get signal(): AbortSignal {
    return this.#abort.signal;
  }

  /**
   * Stops sending and unpublishes the track (its buffer in the app closes). Resolves once the
   * server answered; idempotent. The browser track itself is left running (it is the caller's).
   */
  async stop(): Promise<void> {
    if (!this.#finish({ reason: 'stopped' })) return;
    await this.#rtc?.stop();
    await this.#transport.unpublish(this.track);
  }

  /** @internal The track goes over WebRTC: no pump; counters follow the sender's stats. */
  attachRtc(rtc: RtcSending): void {
    this.transport = 'webrtc';
    this.#rtc = rtc;
    const poll = (): void =>
      void rtc.counters().then((c) => {
        this.framesSent = c.frames;
        this.bytesSent = c.bytes;
      });
    this.#rtcPoll = setInterval(poll, 1000);
    (this.#rtcPoll as { unref?: () => void }).unref?.();
  }

  /** @internal The server refused a frame of this track. */
  reportError(err: ReactorClientError): void {
    this.errors++;
    this.lastError = err;
    this.emit('error', err);
  }

  /** @internal Ends without asking the server (it released the track, or the socket is gone). */
  finish(end: PublicationEnd): void {
    this.#finish(end);
  }

  #finish(end: PublicationEnd): boolean {
    if (this.#end) return false;
    this.#end = end;
    this.#abort.abort();
    if (this.#rtcPoll !== undefined) clearInterval(this.#rtcPoll);
    void this.#rtc?.stop();
    this.#transport.forget(this);
    this.#resolveEnded(end);
    this.emit('ended', end);
    return true;
  }

  /** @internal Runs the source until the publication ends. */
  async pump(source: PublishSource, schema: TrackSchema, options: PublishOptions): Promise<void> {
    try {
      let iterable: AsyncIterable<VideoSourceFrame | Int16Array | AudioSourceChunk> = source as AsyncIterable<VideoSourceFrame>;
      if (isMediaTrack(source)) {
        const capture = await loadCapture();
        iterable =
          schema.kind === 'video'
            ? capture.cameraFrames(source, {
                width: options.width ?? schema.width ?? 640,
                height: options.height ?? schema.height ?? 480,
                fps: options.fps ?? schema.fps ?? 30,
                quality: options.jpegQuality ?? 0.8,
                signal: this.signal,
                skip: () => this.#congested(1),
                onSkip: () => this.framesDropped++,
              })
            : capture.microphoneChunks(source, { sampleRate: schema.sampleRate ?? 48_000, chunkMs: options.chunkMs ?? 20, signal: this.signal });
      }
      for await (const item of iterable) {
        if (!this.active) break;
        this.#send(item);
      }
      if (this.active && this.#finish({ reason: 'source_ended' })) await this.#transport.unpublish(this.track).catch(() => undefined);
    } catch (err) {
      if (!this.active) return;
      const e =
        err instanceof ReactorClientError
          ? err
          : new ReactorClientError(ClientErrorCode.SourceFailed, `the source of track "${this.track}" failed: ${(err as Error).message}`, { cause: err });
      this.reportError(e);
      if (this.#finish({ reason: 'source_failed', detail: e.message })) await this.#transport.unpublish(this.track).catch(() => undefined);
    }
  }

  #congested(factor: number): boolean {
    return this.#transport.bufferedAmount() > this.#maxBuffered * factor;
  }

  #send(item: VideoSourceFrame | Int16Array | AudioSourceChunk): void {
    let bytes: Uint8Array;
    if (this.kind === 'video') {
      const f = item as VideoSourceFrame;
      if (typeof f !== 'object' || f === null || (f.rgb === undefined) === (f.jpeg === undefined)) {
        throw new TypeError(`a frame of video track "${this.track}" needs exactly one of "rgb" (Uint8Array) or "jpeg" (Uint8Array), with width and height`);
      }
      if (this.#congested(1)) {
        this.framesDropped++;
        return;
      }
      const payload = f.rgb ?? f.jpeg!;
      const header = {
        encoding: f.rgb ? FrameEncoding.Rgb : FrameEncoding.Jpeg,
        track: this.trackIndex,
        seq: this.#transport.nextSeq(),
        ptsMs: f.ptsMs ?? now(),
        width: f.width,
        height: f.height,
        ...(f.metadata === undefined ? {} : { metadata: f.metadata }),
      };
      bytes = encodeFrame(header, payload);
    } else {
      const c: AudioSourceChunk = item instanceof Int16Array ? { samples: item } : (item as AudioSourceChunk);
      if (!(c?.samples instanceof Int16Array)) {
        throw new TypeError(`a chunk of audio track "${this.track}" must be an Int16Array (mono PCM) or { samples: Int16Array }`);
      }
      if (this.#congested(4)) {
        this.framesDropped++;
        return;
      }
      const s = c.samples;
      const header = {
        encoding: FrameEncoding.PcmS16le,
        track: this.trackIndex,
        seq: this.#transport.nextSeq(),
        ptsMs: c.ptsMs ?? now(),
        width: s.length,
        height: 1,
        ...(c.metadata === undefined ? {} : { metadata: c.metadata }),
      };
      bytes = encodeFrame(header, new Uint8Array(s.buffer, s.byteOffset, s.byteLength));
    }
    if (this.#transport.sendBinary(bytes)) {
      this.framesSent++;
      this.bytesSent += bytes.byteLength;
    } else {
      this.framesDropped++;
    }
  }
}

/** A browser `MediaStreamTrack` (or lookalike), as opposed to an async iterable. */
export function isMediaTrack(source: unknown): source is MediaStreamTrackLike {
  return (
    typeof source === 'object' &&
    source !== null &&
    typeof (source as MediaStreamTrackLike).kind === 'string' &&
    typeof (source as MediaStreamTrackLike).getSettings === 'function' &&
    !(Symbol.asyncIterator in source)
  );
}

/** What `media-capture.ts` offers, typed without the DOM. */
interface CaptureModule {
  cameraFrames(
    track: MediaStreamTrackLike,
    o: { width: number; height: number; fps: number; quality: number; signal?: AbortSignal; skip?: () => boolean; onSkip?: () => void },
  ): AsyncIterable<VideoSourceFrame>;
  microphoneChunks(track: MediaStreamTrackLike, o: { sampleRate: number; chunkMs?: number; signal?: AbortSignal }): AsyncIterable<AudioSourceChunk>;
}

/**
 * The browser capture module, loaded only when a `MediaStreamTrack` is published. The specifier
 * is a variable so TypeScript does not pull the DOM-typed module into the Node entry's program
 * (packages that compile this one's sources have no DOM library); bundlers that cannot follow it
 * can pass `cameraFrames()`/`microphoneChunks()` from `@reactor/client/browser` as the source.
 */
const CAPTURE_MODULE = './media-capture.js';
async function loadCapture(): Promise<CaptureModule> {
  return (await import(/* @vite-ignore */ CAPTURE_MODULE)) as CaptureModule;
}

function now(): number {
  return globalThis.performance ? performance.now() : Date.now();
}
