/** Annex B -> length-prefixed H.264, and the avcC record, as the clip ring stores access units. */
import { describe, expect, it } from 'vitest';
import { annexBToAvcc, avcDecoderConfigurationRecord } from '../src/recording/avc.js';

describe('annexBToAvcc', () => {
  it('length-prefixes every NAL unit (3- and 4-byte start codes), drops access unit delimiters and returns the SPS and PPS', () => {
    const sps = [0x67, 0x42, 0xc0, 0x1f, 0xda];
    const pps = [0x68, 0xce, 0x0f];
    const idr = [0x65, 0x88, 0x00, 0x00, 0x03, 0x01];
    const au = new Uint8Array([0, 0, 0, 1, 0x09, 0xf0, 0, 0, 0, 1, ...sps, 0, 0, 1, ...pps, 0, 0, 0, 1, ...idr]);
    const out = annexBToAvcc(au)!;
    expect([...out.data]).toEqual([0, 0, 0, 5, ...sps, 0, 0, 0, 3, ...pps, 0, 0, 0, 6, ...idr]);
    expect([...out.sps!]).toEqual(sps);
    expect([...out.pps!]).toEqual(pps);
    expect(annexBToAvcc(new Uint8Array([1, 2, 3, 4]))).toBeUndefined();
  });

  it('builds the avcC record: version, profile, compatibility, level, 4-byte lengths, one SPS, one PPS', () => {
    const sps = new Uint8Array([0x67, 0x42, 0xc0, 0x1f]);
    const pps = new Uint8Array([0x68, 0xce]);
    expect([...avcDecoderConfigurationRecord(sps, pps)]).toEqual([1, 0x42, 0xc0, 0x1f, 0xff, 0xe1, 0, 4, ...sps, 1, 0, 2, ...pps]);
    const high = new Uint8Array([0x67, 100, 0, 0x28]);
    expect([...avcDecoderConfigurationRecord(high, pps).slice(-4)]).toEqual([0xfd, 0xf8, 0xf8, 0x00]);
  });
});
