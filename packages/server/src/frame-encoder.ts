/**
 * Encodes each played-out frame (and audio chunk) into its wire message exactly once, whatever
 * the number of clients: the first sink that sees an {@link OutputFrame} starts the encoding and
 * every other sink awaits the same promise (a WeakMap keyed by the frame object, so nothing is
 * retained).
 */
import { endianness } from 'node:os';
import sharp from 'sharp';
import { FrameEncoding, encodeFrameHeader } from '@reactor/protocol';
import type { OutputAudio, OutputFrame } from '@reactor/runtime';
import type { ServerMetrics } from './metrics.js';

/** Whether this machine stores an Int16Array's samples little-endian, as the wire wants them. */
const LITTLE_ENDIAN = endianness() === 'LE';

/** Encodes frames into complete binary wire messages (header + payload). */
export class FrameEncoder {
  readonly #cache = new WeakMap<OutputFrame, Promise<Buffer>>();
  readonly #audioCache = new WeakMap<OutputAudio, Promise<Buffer>>();
  readonly #encoding: 'jpeg' | 'rgb';
  readonly #quality: number;
  readonly #metrics: ServerMetrics;

  constructor(encoding: 'jpeg' | 'rgb', quality: number, metrics: ServerMetrics) {
    this.#encoding = encoding;
    this.#quality = quality;
    this.#metrics = metrics;
  }

  /** The wire message for a frame; the same promise (and buffer) for every caller. */
  encode(frame: OutputFrame): Promise<Buffer> {
    let p = this.#cache.get(frame);
    if (!p) {
      p = this.#encode(frame);
      // A frame dropped (flush, slow client) before anyone awaits it must not become an
      // unhandled rejection; the callers that do await still see the error.
      p.catch(() => undefined);
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
      payload = await sharp(frame.rgb, { raw: { width: frame.width, height: frame.height, channels: 3 } })
        // Huffman-table optimisation costs a second pass (~40 % of the encode time at 512x512)
        // for ~8 % smaller files: latency matters more here.
        .jpeg({ quality: this.#quality, optimiseCoding: false })
        .toBuffer();
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
