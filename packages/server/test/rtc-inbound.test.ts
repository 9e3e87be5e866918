/**
 * Inbound media over WebRTC through the real server: a werift peer publishes the input app's
 * camera and microphone (`publish` with `"transport":"webrtc"`, then `rtc_offer`), ffmpeg's
 * encoders feed its tracks, and the app's buffers get RGB of the declared size and PCM at the
 * declared rate. A track sent without `publish` is refused (`not_publisher`, counted); a peer
 * that goes leaves no intake, peer connection or UDP socket behind.
 */
import { describe, expect, it } from 'vitest';
import { ENCODE, ffmpegRtp } from './fixtures/ffmpeg-rtp.js';
import { MIC_RATE, WEBCAM } from './fixtures/input-app.js';
import { until } from '@reactor/test-kit';
import { openRtcPublisher } from './fixtures/rtc-publisher.js';
import { useInputServers } from './input-servers.js';

const { start, cleanups } = useInputServers();

/** The UDP sockets this process holds (werift binds one per ICE candidate). */
async function udpSockets(): Promise<number> {
  const { readdirSync, readlinkSync, readFileSync } = await import('node:fs');
  const inodes = new Set(
    readdirSync('/proc/self/fd')
      .map((fd) => {
        try {
          return /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/self/fd/${fd}`))?.[1];
        } catch {
          return undefined;
        }
      })
      .filter((x): x is string => x !== undefined),
  );
  let n = 0;
  for (const f of ['/proc/self/net/udp', '/proc/self/net/udp6']) {
    for (const line of readFileSync(f, 'utf8').split('\n').slice(1)) {
      const inode = line.trim().split(/\s+/)[9];
      if (inode && inodes.has(inode)) n++;
    }
  }
  return n;
}

describe('server: camera and microphone over WebRTC', () => {
  it("a published camera and microphone reach the app's buffers: RGB of the declared size, PCM at the declared rate", async () => {
    const { server, host, read } = await start({ webrtc: {} });
    const p = await openRtcPublisher(server.wsUrl, { cam: 'video', mic: 'audio' });
    cleanups.push(() => p.close());
    expect(await p.publish('pw', 'webcam', 'cam')).toEqual({ type: 'reply', id: 'pw' });
    expect(await p.publish('pm', 'mic', 'mic')).toEqual({ type: 'reply', id: 'pm' });
    const answer = await p.offer();
    const mids = Object.fromEntries(answer.tracks.filter((t) => t.direction === 'in').map((t) => [t.track, t.mid]));
    expect(mids).toEqual({ webcam: p.transceivers.get('cam')!.transceiver.mid, mic: p.transceivers.get('mic')!.transceiver.mid });
    await p.connected();
    await Promise.all([
      ffmpegRtp({
        input: ['-f', 'lavfi', '-i', `color=c=0xC81E28:size=${WEBCAM.width}x${WEBCAM.height}:rate=10`, '-frames:v', '15', '-g', '5'],
        encode: ENCODE.vp8,
        onPacket: (rtp) => p.write('cam', rtp),
      }),
      ffmpegRtp({
        input: ['-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=48000:duration=1'],
        encode: [...ENCODE.opus, '-ac', '1'],
        onPacket: (rtp) => p.write('mic', rtp),
      }),
    ]);
    // On this shared 2-core machine a few may be dropped (counted: a decode backlog), not more.
    await until(() => host.pushed.filter((f) => f.track === 'webcam' && f.accepted).length >= 10, 'camera frames in the app', 10_000);
    await until(() => host.pushed.filter((f) => f.track === 'mic' && f.accepted).length >= 40, 'microphone chunks in the app', 10_000);
    // The only errors a busy machine may bring are those drops, each told as a decode backlog
    // (ffmpeg sends as fast as it encodes); any other error is a failure.
    const errors = p.ws.texts.filter((m) => m.type === 'error') as unknown as { code: string; message: string }[];
    expect(errors.filter((e) => !(e.code === 'frame_rate_limited' && /the server is still decoding \d+ earlier/.test(e.message)))).toEqual([]);
    for (const f of host.pushed.filter((x) => x.track === 'webcam')) {
      expect(f.frame).toMatchObject({ width: WEBCAM.width, height: WEBCAM.height });
      expect(f.frame.data.length).toBe(WEBCAM.width * WEBCAM.height * 3);
    }
    const px = host.pushed.find((x) => x.track === 'webcam')!.frame.data.subarray(0, 3);
    expect(Math.abs(px[0]! - 200) + Math.abs(px[1]! - 30) + Math.abs(px[2]! - 40)).toBeLessThan(30);
    const mic = host.pushed.filter((x) => x.track === 'mic');
    for (const c of mic) expect(c.frame).toMatchObject({ sampleRate: MIC_RATE });
    const samples = mic.reduce((n, c) => n + c.frame.data.length, 0);
    expect(samples).toBeGreaterThan(MIC_RATE * 0.8);
    // The app reads them from this.input.webcam / this.input.mic.
    await until(() => read.webcam.length >= 10 && read.mic.length >= 40, 'the app to read them', 10_000);
    expect(server.connections()[0]?.webrtc?.state).toBe('connected');
    const text = await server.metrics.registry.metrics();
    expect(text).toMatch(/reactor_input_frames_accepted_total\{track="webcam"\} (1\d|[2-9]\d)/);
  }, 60_000);

  it('a track sent without publish: not_publisher, nothing reaches the app, the session streams on', async () => {
    const { server, host } = await start({ webrtc: {} });
    const p = await openRtcPublisher(server.wsUrl, { cam: 'video' });
    cleanups.push(() => p.close());
    await p.offer();
    await p.connected();
    await ffmpegRtp({
      input: ['-f', 'lavfi', '-i', `color=c=white:size=${WEBCAM.width}x${WEBCAM.height}:rate=10`, '-frames:v', '10'],
      encode: ENCODE.vp8,
      onPacket: (rtp) => p.write('cam', rtp),
    });
    const err = await p.ws.waitFor((m) => m.type === 'error' && (m as { code: string }).code === 'not_publisher', 10_000);
    expect((err as { message: string }).message).toContain('"transport":"webrtc"');
    expect(host.pushed).toEqual([]);
    expect(server.host.status.state).toBe('streaming');
  }, 60_000);

  it('a peer connection that goes without rtc_close (the socket stays): the server drops the peer, its intakes and UDP sockets; the session streams on', async () => {
    const { server, host } = await start({ webrtc: {} });
    const before = await udpSockets();
    const p = await openRtcPublisher(server.wsUrl, { cam: 'video' });
    cleanups.push(() => p.close());
    expect(await p.publish('pw', 'webcam', 'cam')).toEqual({ type: 'reply', id: 'pw' });
    await p.offer();
    await p.connected();
    await ffmpegRtp({
      input: ['-f', 'lavfi', '-i', `color=c=white:size=${WEBCAM.width}x${WEBCAM.height}:rate=10`, '-frames:v', '5'],
      encode: ENCODE.vp8,
      onPacket: (rtp) => p.write('cam', rtp),
    });
    await until(() => host.pushed.length > 0, 'a frame in the app', 10_000);
    expect(server.connections()[0]?.webrtc?.inbound?.['webcam']?.accepted).toBeGreaterThan(0);
    // The client's peer connection goes (a tab's RTCPeerConnection closed, a crashed media stack); its WebSocket stays.
    await p.pc.close();
    const lost = await p.ws.waitFor((m) => m.type === 'rtc_state' && (m as { state: string }).state !== 'connected', 20_000);
    expect(lost).toMatchObject({ type: 'rtc_state' });
    await until(() => server.connections()[0]?.webrtc === undefined, 'the peer closed on the server', 15_000);
    await until(async () => (await udpSockets()) <= before, 'the UDP sockets closed', 10_000);
    await p.ws.waitFor(() => p.ws.binaries.length > 0, 10_000);
    expect(server.host.status.state).toBe('streaming');
  }, 60_000);

  it('a publish over WebRTC on a server without WebRTC: rtc_disabled, with its id', async () => {
    const { server } = await start({ webrtc: { enabled: false } });
    const p = await openRtcPublisher(server.wsUrl, { cam: 'video' });
    cleanups.push(() => p.close());
    const answer = await p.publish('pw', 'webcam', 'cam');
    expect(answer).toMatchObject({ type: 'error', id: 'pw', code: 'rtc_disabled' });
    expect((answer as { message: string }).message).toContain('publish without "transport":"webrtc"');
    expect(server.host.status.state).toBe('streaming');
  }, 30_000);

  it('a peer that goes (the client leaves) leaves no intake, peer connection or UDP socket behind', async () => {
    const { server, host } = await start({ webrtc: {} });
    const before = await udpSockets();
    const p = await openRtcPublisher(server.wsUrl, { cam: 'video' });
    expect(await p.publish('pw', 'webcam', 'cam')).toEqual({ type: 'reply', id: 'pw' });
    await p.offer();
    await p.connected();
    await ffmpegRtp({
      input: ['-f', 'lavfi', '-i', `color=c=white:size=${WEBCAM.width}x${WEBCAM.height}:rate=10`, '-frames:v', '5'],
      encode: ENCODE.vp8,
      onPacket: (rtp) => p.write('cam', rtp),
    });
    await until(() => host.pushed.length > 0, 'a frame in the app', 10_000);
    // The client's socket drops without rtc_close, its peer connection with it.
    p.ws.ws.terminate();
    await p.pc.close();
    await until(() => server.connections().length === 0, 'the connection gone', 10_000);
    await until(async () => (await udpSockets()) <= before, 'the UDP sockets closed', 10_000);
  }, 60_000);
});
