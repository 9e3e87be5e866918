import { describe, expect, it } from 'vitest';
import {
  CodedError,
  FRAME_HEADER_BYTES,
  FrameDecodeError,
  FrameEncoding,
  PROTOCOL_VERSION,
  WireErrorCode,
  decodeFrame,
  encodeFrame,
  encodeFrameHeader,
  type FrameHeader,
} from '../src/index.js';

const header: FrameHeader = { encoding: FrameEncoding.H264, track: 3, seq: 4_000_000_001, ptsMs: 1234.5, width: 640, height: 360, key: true };

describe('frame codec', () => {
  it('writes the documented 32-byte little-endian header', () => {
    const h = encodeFrameHeader(header);
    expect(h.byteLength).toBe(FRAME_HEADER_BYTES);
    const v = new DataView(h.buffer);
    expect([v.getUint8(0), v.getUint8(1), v.getUint8(2), v.getUint8(3)]).toEqual([0x52, PROTOCOL_VERSION, FrameEncoding.H264, 2]);
    expect([v.getUint16(4, true), v.getUint16(6, true), v.getUint32(8, true)]).toEqual([3, 0, 4_000_000_001]);
    expect([v.getUint32(12, true), v.getUint32(16, true), v.getUint32(20, true), v.getFloat64(24, true)]).toEqual([640, 360, 0, 1234.5]);
  });

  it('round-trips a header, its metadata and the payload', () => {
    const payload = new Uint8Array([1, 2, 3, 250]);
    const metadata = { prompt: 'a beach', step: 7 };
    const bytes = encodeFrame({ ...header, metadata }, payload);
    const meta = new TextEncoder().encode(JSON.stringify(metadata));
    expect(bytes.byteLength).toBe(FRAME_HEADER_BYTES + meta.byteLength + payload.byteLength);
    const f = decodeFrame(bytes);
    expect(f).toMatchObject({ ...header, metadata });
    expect([...f.payload]).toEqual([...payload]);
  });

  it('decodes from a view into a larger buffer, and a frame without the key flag as key: false', () => {
    const inner = encodeFrame({ encoding: FrameEncoding.PcmS16le, track: 0, seq: 1, ptsMs: 0, width: 2, height: 1 }, new Uint8Array([9, 8, 7, 6]));
    const outer = new Uint8Array(inner.byteLength + 10);
    outer.set(inner, 5);
    const f = decodeFrame(outer.subarray(5, 5 + inner.byteLength));
    expect(f.key).toBe(false);
    expect(f.metadata).toBeUndefined();
    expect([...f.payload]).toEqual([9, 8, 7, 6]);
  });

  it.each([
    ['shorter than the header', () => new Uint8Array(10), 'binary frame of 10 bytes is shorter than its 32-byte header'],
    [
      'a bad magic byte',
      () => {
        const b = encodeFrame(header, new Uint8Array(1));
        b[0] = 0x00;
        return b;
      },
      'binary message is not a Reactor frame (bad magic byte)',
    ],
    [
      'another protocol version',
      () => {
        const b = encodeFrame(header, new Uint8Array(1));
        b[1] = 9;
        return b;
      },
      `frame is protocol version 9; this client speaks ${PROTOCOL_VERSION}`,
    ],
    [
      'metadata past the end',
      () => {
        const b = encodeFrame(header, new Uint8Array(1));
        new DataView(b.buffer).setUint32(20, 100, true);
        return b;
      },
      'frame metadata runs past the end of the message',
    ],
  ])('refuses %s with a FrameDecodeError (undecodable_frame)', (_what, bytes, message) => {
    let err: unknown;
    try {
      decodeFrame(bytes());
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(FrameDecodeError);
    expect(err).toBeInstanceOf(CodedError);
    expect(err).toMatchObject({ name: 'FrameDecodeError', code: WireErrorCode.UndecodableFrame, message });
  });
});
