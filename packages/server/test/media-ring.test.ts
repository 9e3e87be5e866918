/**
 * The clip ring's bounds over a long session, simulated: 10 minutes of 720p30 H.264 (real access
 * units from the server's encoder, replayed with advancing timestamps, each a fresh copy as
 * the encoder hands them out) and its AAC-sized audio, pushed as fast as the loop runs rather
 * than in 10 real minutes.
 */
import { describe, expect, it } from 'vitest';
import { webCodecsEncoderFactory } from '../src/index.js';
import { MediaRing, type VideoUnit } from '../src/recording/media-ring.js';

const W = 1280;
const H = 720;
const FPS = 30;
const GOP = 60;

/** One group of pictures of 720p H.264 at 3 Mbit/s: a key frame and 59 delta frames of a moving picture. */
async function encodeGop(): Promise<Array<{ data: Uint8Array; key: boolean }>> {
  const enc = await webCodecsEncoderFactory({ codec: 'h264', width: W, height: H, bitrate: 3_000_000, framerate: FPS });
  const rgb = new Uint8Array(W * H * 3);
  const out: Array<{ data: Uint8Array; key: boolean }> = [];
  for (let i = 0; i < GOP; i++) {
    for (let p = 0; p < rgb.length; p += 3) rgb[p] = (p / 3 + i * 7) % 256;
    const c = await enc.encode(rgb, Math.round((i * 1e6) / FPS), i === 0);
    out.push(c!);
  }
  enc.close();
  return out;
}

describe('MediaRing', () => {
  it('holds 30 s of 720p30 over a simulated 10-minute session: bounded by time, flat in bytes, starting on a key frame', async () => {
    const gop = await encodeGop();
    expect(gop[0]!.key).toBe(true);
    const ring = new MediaRing(30, 64 * 1024 * 1024);
    const config = { codec: 'avc1.42c01f', width: W, height: H, description: new Uint8Array(0) };
    const samples: number[] = [];
    const frames = 10 * 60 * FPS;
    const aacUs = (1024 * 1e6) / 48_000;
    let audioUs = 0;
    for (let i = 0; i < frames; i++) {
      const src = gop[i % GOP]!;
      const ptsUs = Math.round((i * 1e6) / FPS);
      ring.pushVideo({ data: src.data.slice(), key: src.key, ptsUs, config } satisfies VideoUnit);
      while (audioUs < ptsUs + 1e6 / FPS) {
        ring.pushAudio({ data: new Uint8Array(300), ptsUs: Math.round(audioUs), durationUs: Math.round(aacUs) });
        audioUs += aacUs;
      }
      if (i % (10 * FPS) === 0 && i >= 60 * FPS) samples.push(ring.bytes);
    }
    // Time-bounded: at least 30 s, at most 30 s plus one group of pictures.
    expect(ring.durationS).toBeGreaterThanOrEqual(30);
    expect(ring.durationS).toBeLessThanOrEqual(30 + GOP / FPS);
    // Flat: from minute 1 to minute 10 the bytes move within one group of pictures' worth.
    const gopBytes = gop.reduce((n, u) => n + u.data.byteLength + 64, 0) + (GOP / FPS) * (1e6 / aacUs) * (300 + 64);
    expect(Math.max(...samples) - Math.min(...samples)).toBeLessThanOrEqual(gopBytes * 1.05);
    const slice = ring.slice(10)!;
    expect(slice.video[0]!.key).toBe(true);
    const dur = (slice.video.at(-1)!.ptsUs - slice.video[0]!.ptsUs + slice.frameUs) / 1e6;
    expect(dur).toBeGreaterThanOrEqual(10);
    expect(dur).toBeLessThan(10 + GOP / FPS);
    expect(slice.audio[0]!.ptsUs).toBeGreaterThanOrEqual(slice.video[0]!.ptsUs);
    expect(slice.audio[0]!.ptsUs - slice.video[0]!.ptsUs).toBeLessThan(aacUs);
  }, 60_000);

  it('is bounded by bytes when the byte cap is reached before the time span', async () => {
    const gop = await encodeGop();
    const cap = 2 * 1024 * 1024;
    const ring = new MediaRing(300, cap);
    const config = { codec: 'avc1.42c01f', width: W, height: H, description: new Uint8Array(0) };
    let max = 0;
    for (let i = 0; i < 5 * 60 * FPS; i++) {
      const src = gop[i % GOP]!;
      ring.pushVideo({ data: src.data.slice(), key: src.key, ptsUs: Math.round((i * 1e6) / FPS), config });
      max = Math.max(max, ring.bytes);
    }
    expect(max).toBeLessThanOrEqual(cap);
    expect(ring.durationS).toBeLessThan(300);
    expect(ring.slice(300)!.video[0]!.key).toBe(true);
  }, 60_000);

  it('starts a clip at a change of stream size, and drops delta frames that no key frame precedes', () => {
    const ring = new MediaRing(30, 1 << 20);
    const a = { codec: 'avc1.42c01f', width: 64, height: 48, description: new Uint8Array(0) };
    const b = { codec: 'avc1.42c01f', width: 128, height: 96, description: new Uint8Array(0) };
    ring.pushVideo({ data: new Uint8Array(10), key: false, ptsUs: 0, config: a });
    expect(ring.frames).toBe(0);
    for (let i = 0; i < 10; i++) ring.pushVideo({ data: new Uint8Array(10), key: i % 5 === 0, ptsUs: i * 33_333, config: i < 5 ? a : b });
    const s = ring.slice(30)!;
    expect(s.video).toHaveLength(5);
    expect(s.video[0]!.config).toBe(b);
  });
});
