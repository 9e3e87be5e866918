/**
 * Encodes each played-out frame (and audio chunk) into its wire message exactly once, whatever
 * the number of clients: the first sink that sees an {@link OutputFrame} starts the encoding and
 * every other sink awaits the same promise (a WeakMap keyed by the frame object, so nothing is
 * retained).
 *
 * JPEG encodes run in parallel off the event loop: sharp hands each to libuv's threadpool
 * (`UV_THREADPOOL_SIZE` threads, read when the process starts: `reactor run` from the bundle and
 * the chart's pods set it to the cores), one libvips thread per image (a JPEG encode does not
 * spread over threads, and several images do: bench/jpeg.bench.mjs). At most
 * {@link ENCODE_QUEUE_FACTOR} x threads encodes are in flight (at least 8); a frame that comes when the
 * encoder is that far behind is not encoded, for any client, and counted once as
 * `reactor_frames_dropped_total{reason="encoder_busy"}` (the encoder's drop, not a client's).
 * Callers send in play order whatever order encodes finish in.
 */
import { endianness } from 'node:os';
import sharp from 'sharp';
import { FrameEncoding, encodeFrameHeader } from '@reactor/protocol';
import type { OutputAudio, OutputFrame } from '@reactor/runtime';
import type { ServerMetrics } from '../base/metrics.js';

/**
 * Encodes in flight per threadpool thread before a new frame is the encoder's drop: one running,
 * the rest waiting (a step's frames come together, and a busy event loop learns late that an
 * encode finished). At least {@link MIN_ENCODES_IN_FLIGHT}.
 */
export const ENCODE_QUEUE_FACTOR = 4;
/** The fewest encodes in flight before the encoder drops a frame, whatever the pool. */
export const MIN_ENCODES_IN_FLIGHT = 8;

/** Threads of libuv's pool (what runs sharp's encodes): `UV_THREADPOOL_SIZE` when the process started, else libuv's 4. */
export function encodeThreads(env: NodeJS.ProcessEnv = process.env): number {
  const n = Number(env.UV_THREADPOOL_SIZE);
  return Number.isInteger(n) && n >= 1 ? Math.min(n, 1024) : 4;
}

/** Whether this machine stores an Int16Array's samples little-endian, as the wire wants them. */
const LITTLE_ENDIAN = endianness() === 'LE';

/** Encodes frames into complete binary wire messages (header + payload). */
export class FrameEncoder {
  readonly #cache = new WeakMap<OutputFrame, Promise<Buffer> | null>();
  readonly #audioCache = new WeakMap<OutputAudio, Promise<Buffer>>();
  readonly #encoding: 'jpeg' | 'rgb';
  readonly #quality: number;
  readonly #metrics: ServerMetrics;
  /** JPEG encodes started and not finished. */
  #inFlight = 0;
  /** Encodes in flight beyond which a new frame is the encoder's drop. */
  readonly maxInFlight: number;

  constructor(encoding: 'jpeg' | 'rgb', quality: number, metrics: ServerMetrics, threads = encodeThreads()) {
    this.#encoding = encoding;
    this.#quality = quality;
    this.#metrics = metrics;
    this.maxInFlight = Math.max(MIN_ENCODES_IN_FLIGHT, ENCODE_QUEUE_FACTOR * threads);
    // One libvips thread per image: the pool's threads run several images at once instead.
    if (encoding === 'jpeg') sharp.concurrency(1);
  }

  /** JPEG encodes in flight now. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /**
   * The wire message for a frame; the same promise (and buffer) for every caller. `null`: the
   * encoder was too far behind to take the frame (counted once as `encoder_busy`); skip it.
   */
  encode(frame: OutputFrame): Promise<Buffer> | null {
    let p = this.#cache.get(frame);
    if (p === undefined) {
      if (this.#encoding === 'jpeg' && this.#inFlight >= this.maxInFlight) {
        this.#metrics.framesDropped.inc({ reason: 'encoder_busy' });
        p = null;
      } else {
        p = this.#encode(frame);
        // A frame dropped (flush, slow client) before anyone awaits it must not become an
        // unhandled rejection; the callers that do await still see the error.
        p.catch(() => undefined);
      }
      this.#cache.set(frame, p);
    }
    return p;
  }

  /**
   * The wire message for an audio chunk (`FrameEncoding.PcmS16le`: header `width` = sample count,
   * `height` = 1, then the samples little-endian); the same promise (and buffer) for every caller.
   */
  encodeAudio(chunk: OutputAudio): Promise<Buffer> {
    let p = this.#audioCache.get(chunk);
    if (!p) {
      p = Promise.resolve(encodeAudioMessage(chunk));
      this.#audioCache.set(chunk, p);
      this.#metrics.audioChunksEmitted.inc({ track: chunk.track });
    }
    return p;
  }

  async #encode(frame: OutputFrame): Promise<Buffer> {
    const expected = frame.width * frame.height * 3;
    if (frame.rgb.byteLength !== expected) {
      throw new RangeError(
        `frame ${frame.seq} of track "${frame.track}" has ${frame.rgb.byteLength} bytes; ${frame.width}x${frame.height} RGB needs ${expected}`,
      );
    }
    const start = performance.now();
    const header = encodeFrameHeader({
      encoding: this.#encoding === 'jpeg' ? FrameEncoding.Jpeg : FrameEncoding.Rgb,
      track: frame.trackIndex,
      seq: frame.seq,
      ptsMs: frame.ptsMs,
      width: frame.width,
      height: frame.height,
      metadata: frame.metadata,
    });
    let payload: Uint8Array;
    if (this.#encoding === 'jpeg') {
      this.#inFlight++;
      try {
        payload = await sharp(frame.rgb, { raw: { width: frame.width, height: frame.height, channels: 3 } })
          // Huffman-table optimisation costs a second pass (~40 % of the encode time at 512x512)
          // for ~8 % smaller files: latency matters more here.
          .jpeg({ quality: this.#quality, optimiseCoding: false })
          .toBuffer();
      } finally {
        this.#inFlight--;
      }
    } else {
      payload = frame.rgb;
    }
    const out = Buffer.allocUnsafe(header.byteLength + payload.byteLength);
    out.set(header, 0);
    out.set(payload, header.byteLength);
    const seconds = (performance.now() - start) / 1000;
    this.#metrics.encodeSeconds.observe(seconds);
    this.#metrics.stage.encode.observe(seconds);
    return out;
  }
}

/** One audio chunk as a complete binary wire message (header + s16le samples). */
export function encodeAudioMessage(chunk: OutputAudio): Buffer {
  const header = encodeFrameHeader({
    encoding: FrameEncoding.PcmS16le,
    track: chunk.trackIndex,
    seq: chunk.seq,
    ptsMs: chunk.ptsMs,
    width: chunk.pcm.length,
    height: 1,
  });
  const out = Buffer.allocUnsafe(header.byteLength + chunk.pcm.byteLength);
  out.set(header, 0);
  const pcm = chunk.pcm;
  if (LITTLE_ENDIAN) {
    out.set(new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength), header.byteLength);
  } else {
    for (let i = 0; i < pcm.length; i++) out.writeInt16LE(pcm[i]!, header.byteLength + 2 * i);
  }
  return out;
}
