/**
 * Decodes inbound JPEG frames to RGB24, once each, off the event loop: sharp runs the decode on
 * libuv's thread pool. The frame's size is read from the JPEG's own header first (synchronously,
 * a few bytes), so a header that lies or a picture beyond the track's limits is refused before
 * any pixel is decoded; sharp's `limitInputPixels` stands behind that check.
 */
import sharp from 'sharp';
import type { ServerMetrics } from '../base/metrics.js';

/** A decoded video frame: RGB24, `height * width * 3` bytes. */
export interface DecodedPicture {
  readonly data: Uint8Array;
  readonly width: number;
  readonly height: number;
}

/** Decodes inbound JPEG frames (see the module comment). */
export class FrameDecoder {
  readonly #metrics: ServerMetrics;

  constructor(metrics: ServerMetrics) {
    this.#metrics = metrics;
  }

  /**
   * Decodes a JPEG to RGB24 (grey and CMYK pictures converted to sRGB, any alpha removed).
   * Rejects on data sharp cannot decode, a truncated file included, or a picture of more than
   * `maxPixels` pixels.
   */
  async decodeJpeg(jpeg: Uint8Array, maxPixels: number): Promise<DecodedPicture> {
    const start = performance.now();
    const { data, info } = await sharp(jpeg, { limitInputPixels: maxPixels, failOn: 'truncated', sequentialRead: true })
      .toColourspace('srgb')
      .removeAlpha()
      .raw()
      .toBuffer({ resolveWithObject: true });
    this.#metrics.inputDecodeSeconds.observe((performance.now() - start) / 1000);
    if (info.channels !== 3) throw new Error(`decoded to ${info.channels} channels, not 3`);
    return { data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength), width: info.width, height: info.height };
  }
}

/** JPEG start-of-frame markers (baseline, progressive, lossless, arithmetic): C0-CF but C4 (DHT), C8 (JPG), CC (DAC). */
function isStartOfFrame(marker: number): boolean {
  return marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc;
}

/**
 * The picture size a JPEG declares in its start-of-frame segment, read by walking the marker
 * segments from the start of the file; `undefined` when the bytes are not a JPEG or end before
 * the frame header.
 */
export function jpegSize(bytes: Uint8Array): { width: number; height: number } | undefined {
  if (bytes.byteLength < 4 || bytes[0] !== 0xff || bytes[1] !== 0xd8) return undefined;
  let i = 2;
  while (i + 4 <= bytes.byteLength) {
    if (bytes[i] !== 0xff) return undefined;
    const marker = bytes[i + 1]!;
    // Fill bytes before a marker.
    if (marker === 0xff) {
      i++;
      continue;
    }
    // Markers without a length: TEM, RSTn; SOS or EOI before any frame header: not a picture.
    if (marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {
      i += 2;
      continue;
    }
    if (marker === 0xda || marker === 0xd9) return undefined;
    const length = (bytes[i + 2]! << 8) | bytes[i + 3]!;
    if (length < 2) return undefined;
    if (isStartOfFrame(marker)) {
      if (i + 9 > bytes.byteLength) return undefined;
      const height = (bytes[i + 5]! << 8) | bytes[i + 6]!;
      const width = (bytes[i + 7]! << 8) | bytes[i + 8]!;
      return { width, height };
    }
    i += 2 + length;
  }
  return undefined;
}
