/**
 * The WebRTC transport's pure parts: RTP payloads of H.264 (RFC 6184: single NAL units, FU-A
 * fragments that rebuild the NAL unit; made once per coded frame for every viewer) and VP8
 * (RFC 7741 descriptor), the tier controller that moves a viewer from its own feedback with
 * hysteresis, and the RGB -> RGBX copy every coded frame goes through before the encoder.
 */
import { describe, expect, it } from 'vitest';
import { annexBNalUnits, packetizeH264, packetizeVp8, sharedH264Payloads } from '../src/webrtc/rtp-packetize.js';
import { PlayoutDelayPolicy, playoutDelayPayload } from '../src/webrtc/rtc-playout-delay.js';
import { RtcTierController } from '../src/webrtc/rtc-tier.js';
import { rgbToRgbx } from '../src/video/video-encoder.js';
import { IllegalTransitionError, transition, type ServerMessage } from '@reactor/protocol';
import { silentLogger } from '@reactor/log';
import { ServerErrorCode } from '../src/base/errors.js';
import { loadWerift, RTC_PEER_TRANSITIONS, RtcPeer } from '../src/webrtc/rtc-peer.js';
import { resolveWebRtcOptions } from '../src/webrtc/rtc-options.js';

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
    const frame = { data: au };
    const first = sharedH264Payloads(frame);
    expect(first).toEqual(packetizeH264(au));
    // A second viewer of the frame: the same array of the same buffers, nothing made again.
    expect(sharedH264Payloads({ ...frame })).toBe(first);
    // Another frame (its own access unit, even with equal content) is packetized on its own.
    const other = sharedH264Payloads({ data: Uint8Array.from(au) });
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
  /**
   * Feeds one second: `sentBits` sent, a REMB of `remb`, and `packets` packets of which `lost`
   * stay lost, told by `reports` receiver reports spread over the second (cumulative counters).
   */
  function feeder(c: RtcTierController, clock: { t: number }) {
    const rr = { packetsLost: 0, highestSequence: 1000 };
    let seq = 0;
    return (
      sentBits: number,
      remb: number,
      o: { packets?: number; lost?: number; reports?: number; nacked?: number } = {},
    ): ReturnType<RtcTierController['tick']> => {
      const { packets = 300, lost = 0, reports = 10, nacked = 0 } = o;
      c.sent(sentBits / 8, packets);
      // Distinct sequence numbers, each asked for twice (Chromium asks again every round trip): counted once.
      const asked = Array.from({ length: nacked }, () => seq++ & 0xffff);
      c.nacked(asked);
      c.nacked(asked);
      c.remb(remb);
      for (let i = 1; i <= reports; i++) {
        c.report({ packetsLost: rr.packetsLost + Math.round((lost * i) / reports), highestSequence: rr.highestSequence + Math.round((packets * i) / reports) });
      }
      rr.packetsLost += lost;
      rr.highestSequence += packets;
      clock.t += 1000;
      return c.tick();
    };
  }

  it('goes down after 2 bad seconds (estimate under what is sent, or loss NACK did not repair), never before it settled, and up only after a stable hold', () => {
    const clock = { t: 0 };
    const c = new RtcTierController(tiers, tiers[0]!, () => clock.t);
    const second = feeder(c, clock);
    // Settling (2 s): nothing judged.
    expect(second(3e6, 1e6)).toBeUndefined();
    expect(second(3e6, 1e6)).toBeUndefined();
    // One bad window is not enough; the second moves down.
    expect(second(3e6, 1e6)).toBeUndefined();
    expect(second(3e6, 1e6)).toMatchObject({ direction: 'down', tier: { name: 'half' } });
    // A small picture that sends far under the tier's bitrate is not "bad".
    for (let i = 0; i < 8; i++) expect(second(200_000, 300_000)).toBeUndefined();
    // Loss over 10 % is bad whatever the estimate.
    expect(second(1e6, 5e6, { lost: 60 })).toBeUndefined();
    expect(second(1e6, 5e6, { lost: 60 })).toMatchObject({ direction: 'down', tier: { name: 'low' }, reason: '20% loss not repaired' });
    // Headroom: up only after 10 s good on the tier.
    let up;
    let s = 0;
    while (!up && s < 30) {
      up = second(400_000, 2e6);
      s++;
    }
    expect(up).toMatchObject({ direction: 'up', tier: { name: 'half' } });
    expect(s).toBeGreaterThanOrEqual(10);
  });

  it('stays on its tier under 2 % random loss that NACK repairs, though each receiver report a few packets apart says 50 %', () => {
    const clock = { t: 0 };
    const c = new RtcTierController(tiers, tiers[0]!, () => clock.t);
    const second = feeder(c, clock);
    // 2.5 Mbit/s on a path whose estimate is 3.2 Mbit/s; 6 of 300 packets lost, all repaired
    // but one now and then; Chromium reports with every NACK (60 reports a second).
    for (let i = 0; i < 30; i++) expect(second(2.5e6, 3.2e6, { lost: i % 5 === 0 ? 1 : 0, reports: 60, nacked: 6 })).toBeUndefined();
    expect(c.tier.name).toBe('full');
  });

  it('goes down when its NACKs ask for over 6 % of the packets sent, though the repair hides the loss and the estimate holds (a queue dropping bursts)', () => {
    const clock = { t: 0 };
    const c = new RtcTierController(tiers, tiers[0]!, () => clock.t);
    const second = feeder(c, clock);
    for (let i = 0; i < 2; i++) expect(second(3e6, 3.2e6, { nacked: 30 })).toBeUndefined(); // settling
    expect(second(3e6, 3.2e6, { nacked: 30 })).toBeUndefined(); // 10 %: one bad window
    expect(second(3e6, 3.2e6, { nacked: 30 })).toMatchObject({ direction: 'down', tier: { name: 'half' }, reason: '10% of packets asked for again (NACK)' });
    // 5 % asked for (under the line), everything repaired: it stays.
    for (let i = 0; i < 8; i++) expect(second(1e6, 3.2e6, { nacked: 15 })).toBeUndefined();
    expect(c.tier.name).toBe('half');
  });

  it('does not step up while the estimate is not above what is sent, however long it is stable', () => {
    const clock = { t: 0 };
    const c = new RtcTierController(tiers, tiers[1]!, () => clock.t);
    const second = feeder(c, clock);
    for (let i = 0; i < 40; i++) expect(second(1e6, 1.1e6)).toBeUndefined();
    // No step down yet: the start-up ramp steps up after RAMP_UP_MS (2 s) of headroom.
    expect(second(1e6, 1.3e6)).toBeUndefined();
    expect(second(1e6, 1.3e6)).toMatchObject({ direction: 'up', tier: { name: 'full' } });
  });

  it('starts on the lowest tier and ramps up one tier per 2 s of headroom, as GCC starts low; after its first step down it holds 10 s before a try', () => {
    const clock = { t: 0 };
    const c = new RtcTierController(tiers, undefined, () => clock.t);
    expect(c.tier.name).toBe('low');
    const second = feeder(c, clock);
    // Settling, then 2 s of an estimate 1.5 x what is sent (what Chromium's estimate does on a path that carries more).
    const seen: string[] = [];
    for (let i = 0; i < 12 && c.tier.name !== 'full'; i++) {
      const sent = c.tier.bitrate * 0.9;
      const d = second(sent, sent * 1.5);
      if (d) seen.push(`${d.direction}:${d.tier.name}`);
    }
    expect(seen).toEqual(['up:half', 'up:full']);
    // On the top tier the path gives out: down after 2 bad windows, and then the ramp is over.
    for (let i = 0; i < 3; i++) second(3e6, 2e6); // settling after the switch, then one bad window
    expect(second(3e6, 2e6)).toMatchObject({ direction: 'down', tier: { name: 'half' } });
    let s = 0;
    let up;
    while (!up && s < 30) {
      up = second(1e6, 2e6);
      s++;
    }
    expect(up).toMatchObject({ direction: 'up', tier: { name: 'full' } });
    expect(s).toBeGreaterThanOrEqual(10);
  });
});

describe('PlayoutDelayPolicy', () => {
  it('asks for 0..0 on a clean path, one repair (round trip + margin) once NACKs show loss, and 0..0 again after a quiet spell', () => {
    const clock = { t: 0 };
    const p = new PlayoutDelayPolicy(() => clock.t);
    expect(p.delay).toEqual({ minMs: 0, maxMs: 0 });
    expect([...p.payload()]).toEqual([0, 0, 0]);
    // One NACK is a blip, not a lossy path.
    p.nack();
    clock.t += 6000;
    p.nack();
    expect(p.delay.maxMs).toBe(0);
    // A second within the window: raised to cover a repair at the measured round trip.
    p.rtt(83);
    clock.t += 1000;
    p.nack();
    expect(p.delay).toEqual({ minMs: 140, maxMs: 140 });
    expect(p.raises).toBe(1);
    // 140 ms = 14 units in both 12-bit fields.
    expect([...p.payload()]).toEqual([0x00, 0xe0, 0x0e]);
    expect(p.payload()).toBe(p.payload());
    // It stays while NACKs keep coming, and grows with the round trip, never shrinks while lossy.
    p.rtt(300);
    clock.t += 9000;
    p.nack();
    expect(p.delay.maxMs).toBe(350);
    p.rtt(20);
    expect(p.delay.maxMs).toBe(350);
    // 10 s without a NACK: back to rendering at once.
    clock.t += 9999;
    expect(p.delay.maxMs).toBe(350);
    clock.t += 2;
    expect(p.delay).toEqual({ minMs: 0, maxMs: 0 });
    // A new lossy spell counts as a new raise, bounded below at 60 ms.
    p.rtt(1);
    p.nack();
    p.nack();
    expect(p.delay.maxMs).toBe(60);
    expect(p.raises).toBe(2);
  });

  it('encodes the 12-bit fields and saturates at 40950 ms', () => {
    expect([...playoutDelayPayload({ minMs: 0, maxMs: 100 })]).toEqual([0, 0, 10]);
    expect([...playoutDelayPayload({ minMs: 2560, maxMs: 50_000 })]).toEqual([0x10, 0x0f, 0xff]);
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

describe("RtcPeer's lifecycle on the transition table", () => {
  it('a renegotiation keeps a connected peer connected, and failed and closed are final', () => {
    expect(() => transition('RtcPeer', RTC_PEER_TRANSITIONS, 'connected', 'connecting')).toThrow(IllegalTransitionError);
    expect(RTC_PEER_TRANSITIONS.failed).toEqual([]);
    expect(RTC_PEER_TRANSITIONS.closed).toEqual([]);
  });

  it('fails from new (its window ended before any answer): one rtc_state failed, and a later close says nothing', async () => {
    const sent: ServerMessage[] = [];
    const states: string[] = [];
    const peer = new RtcPeer(await loadWerift(), {
      options: resolveWebRtcOptions({}),
      tracks: [],
      codec: 'vp8',
      log: silentLogger,
      send: (m) => sent.push(m),
      error: () => undefined,
      negotiated: () => undefined,
      state: (s) => states.push(s),
    });
    expect(peer.state).toBeUndefined();
    peer.fail(ServerErrorCode.RtcIceTimeout, 'no answer yet');
    peer.close('the client asked');
    expect(peer.state).toBe('failed');
    expect(states).toEqual(['failed']);
    expect(sent).toEqual([{ type: 'rtc_state', state: 'failed', reason: 'rtc_ice_timeout: no answer yet' }]);
  });
});
