import { describe, expect, it } from 'vitest';
import { h264CodecString } from '../src/index.js';

describe('h264CodecString', () => {
  it('keeps a level of Table A-1', () => {
    for (const s of ['avc1.42E01F', 'avc1.64000a', 'avc1.4d4033', 'avc1.640034', 'avc3.64003e']) expect(h264CodecString(s)).toBe(s);
  });

  it('names 1b (level_idc 9) as 1.1, and another unlisted level as the next listed one', () => {
    expect(h264CodecString('avc1.640009')).toBe('avc1.64000b');
    expect(h264CodecString('avc1.64000e')).toBe('avc1.640014');
    expect(h264CodecString('avc1.640021')).toBe('avc1.640028');
    expect(h264CodecString('avc1.6400ff')).toBe('avc1.64003e');
    expect(h264CodecString('avc1.640000')).toBe('avc1.64000a');
  });

  it('returns any other string as it is', () => {
    for (const s of ['vp8', 'avc1', 'avc1.6400', 'avc1.64000g', 'hvc1.1.6.L93.B0', 'avc1.640009x']) expect(h264CodecString(s)).toBe(s);
  });
});
