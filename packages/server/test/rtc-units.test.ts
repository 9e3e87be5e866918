/**
 * The WebRTC transport's pure parts: RTP payloads of H.264 (RFC 6184: single NAL units, FU-A
 * fragments that rebuild the NAL unit; made once per coded frame for every viewer) and VP8
 * (RFC 7741 descriptor), the tier controller that moves a viewer from its own feedback with
 * hysteresis, and the RGB -> RGBX copy every coded frame goes through before the encoder.
 */
import { describe, expect, it } from 'vitest';
import { annexBNalUnits, packetizeH264, packetizeVp8, sharedH264Payloads } from '../src/rtp-packetize.js';
import { RtcTierController } from '../src/rtc-tier.js';
import { rgbToRgbx } from '../src/video-encoder.js';

const nal = (type: number, n: number, fill: number): Uint8Array => {
  const b = new Uint8Array(n).fill(fill);
  b[0] = 0x60 | type;
  return b;
};
const annexB = (...nals: Uint8Array[]): Uint8Array => {
  const parts = nals.flatMap((x, i) => [new Uint8Array(i === 0 ? [0, 0, 0, 1] : [0, 0, 1]), x]);
  const out = new Uint8Array(parts.reduce((a, p) => a + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
};

describe('RTP packetization', () => {
  it('H.264: small NAL units go whole, a large one as FU-A fragments that rebuild it, all under the MTU', () => {
    const sps = nal(7, 12, 1);
    const pps = nal(8, 5, 2);
    const idr = nal(5, 5000, 3);
    expect(annexBNalUnits(annexB(sps, pps, idr)).map((n) => n.length)).toEqual([12, 5, 5000]);
    const packets = packetizeH264(annexB(sps, pps, idr), 1100);
    expect(packets[0]).toEqual(Buffer.from(sps));
    expect(packets[1]).toEqual(Buffer.from(pps));
    const fus = packets.slice(2);
    expect(fus.length).toBe(Math.ceil(4999 / 1098));
    for (const p of packets) expect(p.length).toBeLessThanOrEqual(1100);
    for (const [i, p] of fus.entries()) {
      expect(p[0]! & 0x1f).toBe(28);
      expect(p[0]! & 0x60).toBe(0x60);
      expect(p[1]! & 0x1f).toBe(5);
      expect(Boolean(p[1]! & 0x80)).toBe(i === 0);
      expect(Boolean(p[1]! & 0x40)).toBe(i === fus.length - 1);
    }
    const rebuilt = Buffer.concat([Buffer.from([(fus[0]![0]! & 0xe0) | (fus[0]![1]! & 0x1f)]), ...fus.map((p) => p.subarray(2))]);
    expect(rebuilt).toEqual(Buffer.from(idr));
  });

  it('H.264: a coded frame is packetized once; every later call (every other viewer) gets the same buffers, equal to packetizeH264 of its access unit', () => {
    const au = annexB(nal(7, 12, 1), nal(8, 5, 2), nal(5, 3000, 3));
    const header = new Uint8Array([9, 9, 9, 9, 9, 9, 9]);
    const bytes = Buffer.concat([header, au]);
    const frame = { bytes, payloadOffset: header.length };
    const first = sharedH264Payloads(frame);
    expect(first).toEqual(packetizeH264(au));
    // A second viewer of the frame: the same array of the same buffers, nothing made again.
    expect(sharedH264Payloads({ ...frame })).toBe(first);
    // Another frame (its own wire bytes, even with equal content) is packetized on its own.
    const other = sharedH264Payloads({ bytes: Buffer.from(bytes), payloadOffset: header.length });
    expect(other).not.toBe(first);
    expect(other).toEqual(first);
  });

  it('VP8: a descriptor with S on the first packet and the 15-bit PictureID on every one', () => {
    const frame = new Uint8Array(3000).map((_, i) => i & 0xff);
    const packets = packetizeVp8(frame, 0x1234, 1100);
    expect(packets).toHaveLength(3);
    expect(packets.map((p) => p[0])).toEqual([0x90, 0x80, 0x80]);
    for (const p of packets) expect([p[1], p[2], p[3]]).toEqual([0x80, 0x80 | 0x12, 0x34]);
    expect(Buffer.concat(packets.map((p) => p.subarray(4)))).toEqual(Buffer.from(frame));
  });
});

describe('RtcTierController', () => {
  const tiers = [
    { name: 'full', scale: 1, bitrate: 4_000_000 },
    { name: 'half', scale: 0.5, bitrate: 1_500_000 },
    { name: 'low', scale: 0.5, bitrate: 500_000 },
  ];
  /** Feeds one second: `sentBits` sent, a REMB of `remb`, `loss` reported. */
  function second(c: RtcTierController, clock: { t: number }, sentBits: number, remb: number, loss = 0): ReturnType<RtcTierController['tick']> {
    c.sent(sentBits / 8);
    c.remb(remb);
    c.loss(loss);
    clock.t += 1000;
    return c.tick();
  }

  it('goes down after 2 bad seconds (estimate under what is sent, or loss), never before it settled, and up only after a stable hold', () => {
    const clock = { t: 0 };
    const c = new RtcTierController(tiers, tiers[0]!, () => clock.t);
    // Settling (2 s): nothing judged.
    expect(second(c, clock, 3e6, 1e6)).toBeUndefined();
    expect(second(c, clock, 3e6, 1e6)).toBeUndefined();
    // One bad window is not enough; the second moves down.
    expect(second(c, clock, 3e6, 1e6)).toBeUndefined();
    expect(second(c, clock, 3e6, 1e6)).toMatchObject({ direction: 'down', tier: { name: 'half' } });
    // A small picture that sends far under the tier's bitrate is not "bad".
    for (let i = 0; i < 8; i++) expect(second(c, clock, 200_000, 300_000)).toBeUndefined();
    // Loss over 10 % is bad whatever the estimate.
    expect(second(c, clock, 1e6, 5e6, 0.2)).toBeUndefined();
    expect(second(c, clock, 1e6, 5e6, 0.2)).toMatchObject({ direction: 'down', tier: { name: 'low' } });
    // Headroom: up only after 10 s good on the tier.
    let up;
    let s = 0;
    while (!up && s < 30) {
      up = second(c, clock, 400_000, 2e6);
      s++;
    }
    expect(up).toMatchObject({ direction: 'up', tier: { name: 'half' } });
    expect(s).toBeGreaterThanOrEqual(10);
  });
});

describe('rgbToRgbx', () => {
  /** The byte-by-byte copy, as the encoder did it before. */
  const reference = (rgb: Uint8Array): Uint8Array => {
    const out = new Uint8Array((rgb.length / 3) * 4);
    for (let i = 0, o = 0; i < rgb.length; i += 3, o += 4) out.set([rgb[i]!, rgb[i + 1]!, rgb[i + 2]!, 255], o);
    return out;
  };

  it('writes R, G, B and X = 255 for every pixel: aligned or not, a pixel count that is a multiple of 4 or not, over whatever the buffer held', () => {
    let seed = 1;
    const random = (): number => (seed = (seed * 1103515245 + 12345) >>> 0) >>> 24;
    for (const pixels of [1, 3, 4, 5, 7, 8, 1280 * 3 + 3]) {
      for (const offset of [0, 1, 4]) {
        const rgb = new Uint8Array(offset + pixels * 3).subarray(offset);
        for (let i = 0; i < rgb.length; i++) rgb[i] = random();
        expect(rgb.byteOffset).toBe(offset);
        // A staging buffer holding an older frame with X bytes not 255: every byte must be rewritten.
        const rgbx = new Uint8Array(pixels * 4).fill(7);
        rgbToRgbx(rgb, rgbx);
        expect(rgbx, `${pixels} pixels at byte offset ${offset}`).toEqual(reference(rgb));
      }
    }
  });
});
