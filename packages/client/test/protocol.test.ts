import { describe, expect, it } from 'vitest';
import { FRAME_HEADER_BYTES, FrameDecodeError, FrameEncoding, TypedEmitter, decodeFrame, encodeFrameHeader, parseServerMessage } from '../src/index.js';

function frame(header: Uint8Array, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(header.byteLength + payload.byteLength);
  out.set(header);
  out.set(payload, header.byteLength);
  return out;
}

describe('binary frame codec', () => {
  it('round-trips every header field, metadata and the payload (as a view, no copy)', () => {
    const h = encodeFrameHeader({
      encoding: FrameEncoding.Jpeg,
      track: 3,
      seq: 4_000_000_001,
      ptsMs: 1234.5,
      width: 640,
      height: 360,
      metadata: { chunk: 7, note: 'é' },
    });
    const bytes = frame(h, new Uint8Array([0xff, 0xd8, 1, 2]));
    const f = decodeFrame(bytes);
    expect(f).toMatchObject({ encoding: 0, track: 3, seq: 4_000_000_001, ptsMs: 1234.5, width: 640, height: 360, metadata: { chunk: 7, note: 'é' } });
    expect([...f.payload]).toEqual([0xff, 0xd8, 1, 2]);
    expect(f.payload.buffer).toBe(bytes.buffer);
    expect(h[0]).toBe(0x52);
    expect(h[3]).toBe(1); // metadata flag
  });

  it('has a fixed 32-byte header without metadata', () => {
    const h = encodeFrameHeader({ encoding: FrameEncoding.Rgb, track: 0, seq: 1, ptsMs: 0, width: 1, height: 1 });
    expect(h.byteLength).toBe(FRAME_HEADER_BYTES);
    expect(decodeFrame(frame(h, new Uint8Array(3))).metadata).toBeUndefined();
  });

  it('carries the key-frame flag in bit 1 of the flags byte, beside the metadata flag', () => {
    const key = encodeFrameHeader({ encoding: FrameEncoding.H264, track: 2, seq: 9, ptsMs: 40, width: 1280, height: 720, key: true, metadata: { a: 1 } });
    expect(key[2]).toBe(3);
    expect(key[3]).toBe(0b11);
    expect(decodeFrame(frame(key, new Uint8Array([0, 0, 0, 1]))).key).toBe(true);
    const delta = encodeFrameHeader({ encoding: FrameEncoding.Vp8, track: 2, seq: 10, ptsMs: 80, width: 1280, height: 720 });
    expect(delta[3]).toBe(0);
    expect(decodeFrame(frame(delta, new Uint8Array(1))).key).toBe(false);
  });

  it('decodes from a view at an offset into a larger buffer', () => {
    const h = encodeFrameHeader({ encoding: FrameEncoding.Rgb, track: 1, seq: 9, ptsMs: 2, width: 1, height: 1 });
    const big = new Uint8Array(100);
    big.set(frame(h, new Uint8Array([7, 8, 9])), 10);
    expect([...decodeFrame(big.subarray(10, 10 + 35)).payload]).toEqual([7, 8, 9]);
  });

  it('rejects bytes that are not a frame of this version, saying why', () => {
    expect(() => decodeFrame(new Uint8Array(5))).toThrow(new FrameDecodeError('binary frame of 5 bytes is shorter than its 32-byte header'));
    const bad = encodeFrameHeader({ encoding: 0, track: 0, seq: 0, ptsMs: 0, width: 1, height: 1 });
    bad[0] = 0;
    expect(() => decodeFrame(bad)).toThrow('bad magic byte');
    const v2 = encodeFrameHeader({ encoding: 0, track: 0, seq: 0, ptsMs: 0, width: 1, height: 1 });
    v2[1] = 2;
    expect(() => decodeFrame(v2)).toThrow('frame is protocol version 2; this client speaks 1');
    const long = encodeFrameHeader({ encoding: 0, track: 0, seq: 0, ptsMs: 0, width: 1, height: 1 });
    new DataView(long.buffer).setUint32(20, 99, true);
    expect(() => decodeFrame(long)).toThrow('metadata runs past the end');
  });
});

describe('parseServerMessage', () => {
  it('accepts objects with a string type and rejects anything else', () => {
    expect(parseServerMessage('{"type":"flush","nextSeq":3}')).toEqual({ type: 'flush', nextSeq: 3 });
    expect(() => parseServerMessage('[1]')).toThrow('not a JSON object with a string "type"');
    expect(() => parseServerMessage('{oops')).toThrow(SyntaxError);
  });
});

describe('TypedEmitter', () => {
  class E extends TypedEmitter<{ n: number }> {
    fire(n: number): void {
      this.emit('n', n);
    }
  }
  it('delivers to listeners, supports once and unsubscribe, and isolates a throwing listener', async () => {
    const e = new E();
    const got: number[] = [];
    const off = e.on('n', (n) => got.push(n));
    e.once('n', (n) => got.push(n * 10));
    const thrown: unknown[] = [];
    const onUncaught = (err: unknown): void => void thrown.push(err);
    process.on('uncaughtException', onUncaught);
    e.on('n', () => {
      throw new Error('listener bug');
    });
    e.fire(1);
    off();
    e.fire(2);
    await new Promise((r) => setTimeout(r, 0));
    process.off('uncaughtException', onUncaught);
    expect(got).toEqual([1, 10]);
    expect(thrown).toHaveLength(2);
    expect(e.listenerCount('n')).toBe(1);
  });
});

describe('encodeFrame', () => {
  it('puts the header and the payload in one buffer that decodeFrame reads back', async () => {
    const { encodeFrame } = await import('../src/index.js');
    const samples = new Int16Array([1, -2, 32767, -32768]);
    const bytes = encodeFrame(
      { encoding: FrameEncoding.PcmS16le, track: 1, seq: 5, ptsMs: 20, width: samples.length, height: 1, metadata: { n: 1 } },
      new Uint8Array(samples.buffer),
    );
    const f = decodeFrame(bytes);
    expect(f).toMatchObject({ encoding: FrameEncoding.PcmS16le, track: 1, seq: 5, width: 4, height: 1, metadata: { n: 1 } });
    expect(Array.from(new Int16Array(f.payload.slice().buffer))).toEqual([1, -2, 32767, -32768]);
  });
});
