/**
 * Inbound WebRTC media, from RTP to the app's frames: a real encoder and packetizer (ffmpeg's
 * libvpx, libx264, libopus and RTP muxer, over loopback UDP) feed the intakes of one camera and
 * one microphone track, and what reaches the host is checked: RGB of the declared size with the
 * source's colour, PCM at the declared rate with the source's pitch; and the refusals (not the
 * publisher, over the size limit, lost packets, a broken stream) are counted and explained.
 */
import { describe, expect, it } from 'vitest';
import type { TrackSchema } from '@reactor/protocol';
import type { ClientHandle, InboundFrame } from '@reactor/runtime';
import { silentLogger } from '@reactor/log';
import { ServerMetrics } from '../src/base/metrics.js';
import { RtcAudioIntake } from '../src/webrtc/rtc-audio-intake.js';
import { RTC_WALL_BURST_SECONDS, RtcIntakeReport, type RtcIntakeErrorCode, type RtcTrackIntakeContext } from '../src/webrtc/rtc-intake-report.js';
import { RtcVideoIntake } from '../src/webrtc/rtc-video-intake.js';
import { ENCODE, ffmpegRtp } from './fixtures/ffmpeg-rtp.js';

const CAMERA: TrackSchema = { name: 'webcam', kind: 'video', direction: 'in', width: 320, height: 240, fps: 30, maxWidth: 640, maxHeight: 480, maxFps: 60 };
const MIC = (sampleRate: number): TrackSchema => ({ name: 'mic', kind: 'audio', direction: 'in', sampleRate, maxFps: 100 });

/** What the intake gave the host, and said to the client. */
class Probe {
  publishing = true;
  readonly pushed: InboundFrame[] = [];
  readonly errors: { code: RtcIntakeErrorCode; message: string; at: number }[] = [];
  keyFrameRequests = 0;
  readonly metrics = new ServerMetrics();

  context(schema: TrackSchema): RtcTrackIntakeContext {
    const handle = { publishes: () => this.publishing, pushFrame: (_t: string, f: InboundFrame) => (this.pushed.push(f), true) } as unknown as ClientHandle;
    return {
      schema,
      handle,
      metrics: this.metrics,
      logger: silentLogger,
      sendError: (code, message) => this.errors.push({ code, message, at: performance.now() }),
      requestKeyFrame: () => this.keyFrameRequests++,
    };
  }

  async dropped(reason: string): Promise<number> {
    const m = await this.metrics.inputFramesDropped.get();
    return m.values.filter((v) => v.labels.reason === reason).reduce((n, v) => n + v.value, 0);
  }
}

/** A solid colour source of `size` for `frames` frames at 30 fps, a key frame every `gop` frames. */
function colour(size: string, frames: number, gop = 15): string[] {
  return ['-f', 'lavfi', '-i', `color=c=0xC81E28:size=${size}:rate=30`, '-frames:v', String(frames), '-g', String(gop)];
}

/** Settles after the decoders' last outputs. */
async function settle(ms = 300): Promise<void> {
  await new Promise((r) => setTimeout(r, ms));
}

function near(px: ArrayLike<number>, rgb: [number, number, number], tol = 24): boolean {
  return Math.abs(px[0]! - rgb[0]) + Math.abs(px[1]! - rgb[1]) + Math.abs(px[2]! - rgb[2]) < tol;
}

describe('server: inbound WebRTC media (RTP to the app buffers)', () => {
  for (const codec of ['vp8', 'h264'] as const) {
    it(`${codec}: frames become RGB of the declared size, in order, with the source colour`, async () => {
      const probe = new Probe();
      const intake = await RtcVideoIntake.create(probe.context(CAMERA), codec);
      await ffmpegRtp({ input: colour('320x240', 30), encode: ENCODE[codec], onPacket: (p) => intake.receiveRtp(p) });
      await settle();
      const frames = probe.pushed;
      const m = await probe.metrics.inputFramesDropped.get();
      expect(frames.length, `dropped: ${JSON.stringify(m.values.filter((v) => v.value > 0))}`).toBeGreaterThanOrEqual(28);
      for (const f of frames) {
        expect(f).toMatchObject({ width: 320, height: 240 });
        expect(f.data).toBeInstanceOf(Uint8Array);
        expect(f.data.length).toBe(320 * 240 * 3);
      }
      const mid = frames[10]!.data as Uint8Array;
      const at = (120 * 320 + 160) * 3;
      expect(near(mid.subarray(at, at + 3), [200, 30, 40]), `pixel ${Array.from(mid.subarray(at, at + 3))}`).toBe(true);
      // Capture times follow the sender's 30 fps spacing (RTP timestamps), increasing.
      const gaps = frames.slice(1).map((f, i) => f.ptsMs - frames[i]!.ptsMs);
      for (const g of gaps) expect(Math.abs(g - Math.round(g / (1000 / 30)) * (1000 / 30)), `gap ${g}`).toBeLessThan(2);
      expect(Math.min(...gaps)).toBeGreaterThan(30);
      expect(probe.errors).toEqual([]);
      expect(intake.info()).toMatchObject({ accepted: frames.length, dropped: 0 });
      intake.close();
    });
  }

  it('scales a smaller sender picture up to the declared size (a browser adapting its resolution)', async () => {
    const probe = new Probe();
    const intake = await RtcVideoIntake.create(probe.context(CAMERA), 'vp8');
    await ffmpegRtp({ input: colour('160x120', 10), encode: ENCODE.vp8, onPacket: (p) => intake.receiveRtp(p) });
    await settle();
    expect(probe.pushed.length).toBeGreaterThanOrEqual(8);
    const f = probe.pushed.at(-1)!;
    expect(f).toMatchObject({ width: 320, height: 240 });
    expect(near((f.data as Uint8Array).subarray(0, 3), [200, 30, 40])).toBe(true);
    intake.close();
  });

  it('refuses frames beyond maxWidth x maxHeight with frame_too_large, counted, one error a second', async () => {
    const probe = new Probe();
    const intake = await RtcVideoIntake.create(probe.context(CAMERA), 'vp8');
    await ffmpegRtp({ input: colour('800x600', 10), encode: ENCODE.vp8, onPacket: (p) => intake.receiveRtp(p) });
    await settle();
    expect(probe.pushed).toEqual([]);
    expect(await probe.dropped('frame_too_large')).toBeGreaterThanOrEqual(8);
    expect(new Set(probe.errors.map((e) => e.code))).toEqual(new Set(['frame_too_large']));
    // At most one a second: the rest are counted, and the next error says how many.
    for (let i = 1; i < probe.errors.length; i++) expect(probe.errors[i]!.at - probe.errors[i - 1]!.at).toBeGreaterThanOrEqual(1000);
    expect(probe.errors.length).toBeLessThan(await probe.dropped('frame_too_large'));
    if (probe.errors.length > 1) expect(probe.errors[1]!.message).toMatch(/\d+ more frames? dropped for this cause/);
    expect(probe.errors[0]!.message).toContain('800x600');
    expect(probe.errors[0]!.message).toContain('640x480');
    intake.close();
  });

  it('a track not published: not_publisher, nothing reaches the app; once published, a key frame is asked for and frames flow', async () => {
    const probe = new Probe();
    probe.publishing = false;
    const intake = await RtcVideoIntake.create(probe.context(CAMERA), 'vp8');
    await ffmpegRtp({
      input: colour('320x240', 30, 10),
      encode: ENCODE.vp8,
      onPacket: (p, i) => {
        if (i === 12) probe.publishing = true;
        intake.receiveRtp(p);
      },
    });
    await settle();
    expect(probe.errors[0]?.code).toBe('not_publisher');
    expect(probe.errors[0]?.message).toContain('"transport":"webrtc"');
    expect(await probe.dropped('not_publisher')).toBeGreaterThan(0);
    // After publishing, delta frames wait for the next key frame (asked for at once), then flow.
    expect(probe.keyFrameRequests).toBeGreaterThanOrEqual(1);
    expect(probe.pushed.length).toBeGreaterThan(0);
    expect(probe.pushed.length).toBeLessThan(30);
    intake.close();
  });

  it('a lost packet drops its frame and the rest up to the next key frame (packet_loss), asks for a key frame, then decodes on', async () => {
    const probe = new Probe();
    const intake = await RtcVideoIntake.create(probe.context(CAMERA), 'h264');
    let sent = 0;
    sent = await ffmpegRtp({
      input: colour('320x240', 30, 10),
      encode: ENCODE.h264,
      // One packet of a delta frame near the start of the first group of pictures never arrives.
      onPacket: (p, i) => (i === 12 ? undefined : intake.receiveRtp(p)),
    });
    await settle();
    expect(sent).toBeGreaterThanOrEqual(30);
    expect(await probe.dropped('packet_loss')).toBeGreaterThanOrEqual(1);
    expect(probe.keyFrameRequests).toBeGreaterThanOrEqual(1);
    const info = intake.info();
    expect(info.accepted).toBe(probe.pushed.length);
    // The second and third groups of pictures decode in full.
    expect(probe.pushed.length).toBeGreaterThanOrEqual(20);
    expect(probe.pushed.length).toBeLessThan(30);
    expect(info.received).toBe(info.accepted + info.dropped + info.pending);
    intake.close();
  });

  it('a broken stream (corrupt key frames): undecodable_frame, counted; the next good key frame decodes again', async () => {
    const probe = new Probe();
    const intake = await RtcVideoIntake.create(probe.context(CAMERA), 'vp8');
    let corrupt = true;
    let acceptedWhileCorrupt = -1;
    await ffmpegRtp({
      input: colour('320x240', 30, 10),
      encode: ENCODE.vp8,
      onPacket: (p, i) => {
        if (i === 15) {
          corrupt = false;
          acceptedWhileCorrupt = probe.pushed.length;
        }
        // Past the 4-byte payload descriptor and the 10-byte key frame header: the compressed data.
        if (corrupt && p.payload.length > 40) p.payload.fill(0xa5, 24);
        intake.receiveRtp(p);
      },
    });
    await settle();
    expect(probe.errors[0]?.code).toBe('undecodable_frame');
    expect(probe.errors[0]?.message).toMatch(/a VP8 frame of track "webcam" cannot be decoded \(.+\); the server waits for the next key frame/);
    expect(probe.errors.length).toBeLessThanOrEqual(2);
    expect(await probe.dropped('undecodable_frame')).toBeGreaterThanOrEqual(1);
    // The good key frame at frame 20 starts a new decoder: its group of pictures reaches the app.
    expect(probe.pushed.length - acceptedWhileCorrupt).toBeGreaterThanOrEqual(9);
    expect(probe.keyFrameRequests).toBeGreaterThanOrEqual(1);
    const info = intake.info();
    expect(info.received).toBe(info.accepted + info.dropped + info.pending);
    intake.close();
  });

  for (const rate of [48_000, 16_000]) {
    it(`opus: PCM reaches the app at the declared ${rate} Hz, one chunk per packet, the source's pitch`, async () => {
      const probe = new Probe();
      const intake = await RtcAudioIntake.create(probe.context(MIC(rate)));
      await ffmpegRtp({
        input: ['-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=48000:duration=1'],
        encode: [...ENCODE.opus, '-ac', '1'],
        onPacket: (p) => intake.receiveRtp(p),
      });
      await settle();
      const chunks = probe.pushed;
      expect(chunks.length).toBeGreaterThanOrEqual(45);
      for (const c of chunks) expect(c).toMatchObject({ sampleRate: rate });
      const all = Int16Array.from(chunks.flatMap((c) => Array.from(c.data as Int16Array)));
      // One second of sound, give or take the codec's and the resampler's delay.
      expect(all.length).toBeGreaterThan(rate * 0.9);
      expect(all.length).toBeLessThan(rate * 1.1);
      // The pitch: zero crossings over the steady middle half second.
      const middle = all.subarray(Math.round(rate * 0.25), Math.round(rate * 0.75));
      let crossings = 0;
      for (let i = 1; i < middle.length; i++) if (middle[i - 1]! < 0 !== middle[i]! < 0) crossings++;
      expect(crossings / 2 / 0.5).toBeGreaterThan(420);
      expect(crossings / 2 / 0.5).toBeLessThan(460);
      expect(Math.max(...middle.map(Math.abs))).toBeGreaterThan(3000);
      expect(probe.errors.map((e) => e.message)).toEqual([]);
      intake.close();
    });
  }

  it('opus: a lost packet is counted (packet_loss) and the chunks after it still arrive', async () => {
    const probe = new Probe();
    const intake = await RtcAudioIntake.create(probe.context(MIC(48_000)));
    const sent = await ffmpegRtp({
      input: ['-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=48000:duration=1'],
      encode: [...ENCODE.opus, '-ac', '1'],
      onPacket: (p, i) => (i === 10 ? undefined : intake.receiveRtp(p)),
    });
    await settle();
    expect(await probe.dropped('packet_loss')).toBe(1);
    expect(probe.pushed.length).toBe(sent - 1);
    intake.close();
  });

  it('after close nothing reaches the app and nothing is left decoding', async () => {
    const probe = new Probe();
    const intake = await RtcVideoIntake.create(probe.context(CAMERA), 'vp8');
    let atClose: ReturnType<RtcVideoIntake['info']> | undefined;
    let pushedAtClose = 0;
    await ffmpegRtp({
      input: colour('320x240', 15),
      encode: ENCODE.vp8,
      onPacket: (p, i) => {
        if (i === 5) {
          intake.close();
          atClose = intake.info();
          pushedAtClose = probe.pushed.length;
        }
        intake.receiveRtp(p);
      },
    });
    await settle();
    expect(atClose).toBeDefined();
    expect(atClose!.pending).toBe(0);
    expect(probe.pushed.length).toBe(pushedAtClose);
    expect(intake.info()).toEqual(atClose);
    intake.close();
  });
});

describe("RtcIntakeReport: a track's rate on two clocks", () => {
  it("a stall in a publication's first second bunches its frames on arrival: all taken, up to the arrival burst, then refused", () => {
    const p = new Probe();
    const report = new RtcIntakeReport(p.context({ ...CAMERA, maxFps: 20 }));
    // 10 fps on the sender's clock, all arriving at one instant (the server's loop was busy).
    const at = 5000;
    const taken = Array.from({ length: 2 * 20 * RTC_WALL_BURST_SECONDS }, (_, i) => report.takeToken(at + i * 100, at));
    expect(taken.slice(0, 20 * RTC_WALL_BURST_SECONDS).every(Boolean)).toBe(true);
    // Past the arrival burst with no time passing on arrival: held to the rate.
    expect(taken.slice(20 * RTC_WALL_BURST_SECONDS).some((t) => !t)).toBe(true);
  });
});
