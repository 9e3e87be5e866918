import { Buffer } from 'node:buffer';
import { describe, expect, it } from 'vitest';
import { decodeValue, encodeValue, writeMessage } from '../src/shm/codec.js';

function roundTrip(value: unknown) {
  const enc = encodeValue(value);
  const bytes = new Uint8Array(new ArrayBuffer(Math.max(enc.totalBytes, 8)));
  writeMessage(bytes, enc);
  return { enc, bytes, out: decodeValue(enc.json, enc.meta, enc.totalBytes ? bytes.subarray(0, enc.totalBytes) : null) };
}

describe('codec', () => {
  it('sends plain data as inline JSON and typed arrays as placeholders whose bytes go to shared memory', () => {
    const frames = new Uint8Array(1 << 20).fill(7);
    const { enc, out, bytes } = roundTrip({ prompt: 'forest', n: 3, frames, list: [true, null, { x: 1.5 }] });
    expect(enc.json).not.toBeNull();
    // The megabyte is not in the IPC text.
    expect(enc.json!.length).toBeLessThan(200);
    expect(enc.totalBytes).toBe(1 << 20);
    const o = out as { frames: Uint8Array; prompt: string };
    expect(o.prompt).toBe('forest');
    // Zero-copy: the decoded array is a view into the shared bytes.
    expect(o.frames.buffer).toBe(bytes.buffer);
    expect(o.frames[12345]).toBe(7);
  });

  it('decodes a value whose typed arrays are all empty without shared-memory bytes (none were sent)', () => {
    const enc = encodeValue({ frames: new Uint8Array(0), n: 0, f: new Float32Array(0) });
    expect(enc.totalBytes).toBe(0);
    const back = decodeValue(enc.json, enc.meta, null) as { frames: Uint8Array; n: number; f: Float32Array };
    expect(back.frames).toBeInstanceOf(Uint8Array);
    expect([back.frames.length, back.n, back.f.length]).toEqual([0, 0, 0]);
    expect(back.f).toBeInstanceOf(Float32Array);
    // Arrays with bytes still need them.
    const full = encodeValue({ a: new Uint8Array(4) });
    expect(() => decodeValue(full.json, full.meta, null)).toThrow('arrived without its shared-memory bytes');
  });

  it('aligns every array to 64 bytes so any element type can be viewed in place', () => {
    const { enc, out } = roundTrip({ a: new Uint8Array(3), b: new Float64Array([1.25, -2]), c: new Int16Array([-5]) });
    expect(enc.meta.filter((_, i) => i % 3 === 1)).toEqual([0, 64, 128]);
    expect(out).toEqual({ a: new Uint8Array(3), b: new Float64Array([1.25, -2]), c: new Int16Array([-5]) });
  });

  it('keeps Buffers as Buffers and subarray views as their own bytes', () => {
    const base = new Float32Array([0, 1, 2, 3, 4]);
    const { out } = roundTrip({ buf: Buffer.from('hi'), sub: base.subarray(2, 4) });
    const o = out as { buf: Buffer; sub: Float32Array };
    expect(Buffer.isBuffer(o.buf)).toBe(true);
    expect(o.buf.toString()).toBe('hi');
    expect(o.sub).toEqual(new Float32Array([2, 3]));
  });

  it('falls back to the v8 format for what JSON cannot carry', () => {
    const value = { m: new Map([['k', new Uint16Array([9])]]), d: new Date(0), u: undefined, nan: Number.NaN, big: 10n, neg0: -0, s: new Set([1]) };
    const { enc, out } = roundTrip(value);
    expect(enc.json).toBeNull();
    expect(out).toEqual(value);
    expect(Object.is((out as { neg0: number }).neg0, -0)).toBe(true);
  });

  it('carries cycles (v8 format)', () => {
    const a: Record<string, unknown> = { name: 'a' };
    a.self = a;
    const { out } = roundTrip(a);
    expect((out as { self: unknown }).self).toBe(out);
  });

  it('refuses what structured clone refuses', () => {
    expect(() => encodeValue({ f: () => 1 })).toThrow(/could not be cloned/);
    expect(() => encodeValue(Symbol('x'))).toThrow();
  });
});
