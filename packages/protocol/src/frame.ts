/**
 * The binary frame codec: a fixed 32-byte header (see {@link encodeFrameHeader}), optional
 * metadata JSON, then the payload. The same codec on both sides of the wire.
 */
import { CodedError } from './coded-error.js';
import { WireErrorCode } from './codes.js';
import { PROTOCOL_VERSION } from './schema.js';

/** Payload encoding of a binary frame. */
export const FrameEncoding = {
  /** Video: a JPEG image. */
  Jpeg: 0,
  /** Video: raw RGB24, `height * width * 3` bytes. */
  Rgb: 1,
  /** Audio: mono signed 16-bit little-endian PCM; `width` is the sample count, `height` is 1, the rate is the track's `sampleRate`. */
  PcmS16le: 2,
  /** Video: one H.264 access unit (Annex B unless `video_config` carried a `description`); `key` marks an IDR frame. Server to client only. */
  H264: 3,
  /** Video: one VP8 frame; `key` marks a key frame. Server to client only. */
  Vp8: 4,
} as const;
export type FrameEncoding = (typeof FrameEncoding)[keyof typeof FrameEncoding];

/** Byte size of the fixed binary frame header. */
export const FRAME_HEADER_BYTES = 32;
const FRAME_MAGIC = 0x52; // 'R'
const FRAME_FLAG_METADATA = 1;
const FRAME_FLAG_KEY = 2;

/** The decoded fixed header of a binary frame (metadata decoded from its JSON). */
export interface FrameHeader {
  encoding: FrameEncoding;
  /** Index into `schema.tracks` (inbound tracks first, then outbound). */
  track: number;
  /**
   * Frame number in the session: one counter across every track, strictly increasing within a
   * session (a track's frames are therefore increasing, not consecutive).
   */
  seq: number;
  /**
   * Presentation time in ms since the session started (server to client); for a client's
   * frame, its capture time in ms on the client's own clock.
   */
  ptsMs: number;
  /** Video: pixels. Audio: the number of samples in the payload. */
  width: number;
  /** Video: pixels. Audio: the channel count (1). */
  height: number;
  /**
   * Coded video (`H264`, `Vp8`): true on a key frame, which decodes without any earlier frame
   * (header flag bit 1). Always false for JPEG, RGB and PCM frames, which need no reference.
   */
  key?: boolean;
  metadata?: unknown;
}

/*
 * Layout (little-endian):
 *   0 u8  magic 0x52        1 u8  protocol version   2 u8 encoding   3 u8 flags (bit0: metadata, bit1: key frame)
 *   4 u16 track index       6 u16 reserved           8 u32 seq
 *  12 u32 width            16 u32 height            20 u32 metadata byte length
 *  24 f64 pts (ms)         32 metadata (UTF-8 JSON), then the payload
 */

/** Encodes a frame header (+ optional metadata JSON); the payload follows it on the wire. */
export function encodeFrameHeader(h: FrameHeader): Uint8Array {
  const meta = h.metadata === undefined ? undefined : new TextEncoder().encode(JSON.stringify(h.metadata));
  const out = new Uint8Array(FRAME_HEADER_BYTES + (meta?.byteLength ?? 0));
  const v = new DataView(out.buffer);
  v.setUint8(0, FRAME_MAGIC);
  v.setUint8(1, PROTOCOL_VERSION);
  v.setUint8(2, h.encoding);
  v.setUint8(3, (meta ? FRAME_FLAG_METADATA : 0) | (h.key ? FRAME_FLAG_KEY : 0));
  v.setUint16(4, h.track, true);
  v.setUint32(8, h.seq >>> 0, true);
  v.setUint32(12, h.width, true);
  v.setUint32(16, h.height, true);
  v.setUint32(20, meta?.byteLength ?? 0, true);
  v.setFloat64(24, h.ptsMs, true);
  if (meta) out.set(meta, FRAME_HEADER_BYTES);
  return out;
}

/**
 * Encodes a whole binary frame: the header (see {@link encodeFrameHeader}) followed by the
 * payload, in one buffer ready for `WebSocket.send`.
 * @example ws.send(encodeFrame({ encoding: FrameEncoding.PcmS16le, track: 1, seq, ptsMs, width: samples.length, height: 1 }, new Uint8Array(samples.buffer)));
 */
export function encodeFrame(h: FrameHeader, payload: Uint8Array): Uint8Array<ArrayBuffer> {
  const header = encodeFrameHeader(h);
  const out = new Uint8Array(header.byteLength + payload.byteLength);
  out.set(header);
  out.set(payload, header.byteLength);
  return out;
}

/** A decoded binary frame: header plus a view of the payload (no copy). */
export interface DecodedFrame extends FrameHeader {
  payload: Uint8Array;
}

/** Thrown by {@link decodeFrame} on bytes that are not a frame of this protocol version (code `undecodable_frame`). */
export class FrameDecodeError extends CodedError {
  constructor(message: string) {
    super(WireErrorCode.UndecodableFrame, message);
  }
}

/** Decodes a binary frame; the payload is a view into `bytes`. */
export function decodeFrame(bytes: Uint8Array): DecodedFrame {
  if (bytes.byteLength < FRAME_HEADER_BYTES)
    throw new FrameDecodeError(`binary frame of ${bytes.byteLength} bytes is shorter than its ${FRAME_HEADER_BYTES}-byte header`);
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (v.getUint8(0) !== FRAME_MAGIC) throw new FrameDecodeError('binary message is not a Reactor frame (bad magic byte)');
  const version = v.getUint8(1);
  if (version !== PROTOCOL_VERSION) throw new FrameDecodeError(`frame is protocol version ${version}; this client speaks ${PROTOCOL_VERSION}`);
  const metaLen = v.getUint32(20, true);
  const start = FRAME_HEADER_BYTES + metaLen;
  if (start > bytes.byteLength) throw new FrameDecodeError('frame metadata runs past the end of the message');
  const frame: DecodedFrame = {
    encoding: v.getUint8(2) as FrameEncoding,
    track: v.getUint16(4, true),
    seq: v.getUint32(8, true),
    width: v.getUint32(12, true),
    height: v.getUint32(16, true),
    ptsMs: v.getFloat64(24, true),
    key: (v.getUint8(3) & FRAME_FLAG_KEY) !== 0,
    payload: bytes.subarray(start),
  };
  if (metaLen > 0) frame.metadata = JSON.parse(new TextDecoder().decode(bytes.subarray(FRAME_HEADER_BYTES, start)));
  return frame;
}
