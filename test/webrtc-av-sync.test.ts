/**
 * A WebRTC viewer's sound and picture stay on one clock across a gap in the stream: the sample
 * app (picture and soundtrack) served in this process, werift as the viewer receiving H.264 and
 * Opus over a raw WebSocket; the server's event loop is blocked for 1.5 s (a stall past what
 * playout catches up, so its clock restarts and the pts jump over it). The audio RTP timestamps
 * must jump with the video's, or the receiver, which lines them up by those timestamps, plays
 * the sound that much off the picture.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { RTCPeerConnection, RTCRtpCodecParameters, useNACK, usePLI, useREMB } from 'werift';
import { serveVideoApp } from './fixtures/video-app-server.js';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe('WebRTC: sound and picture across a gap', () => {
  it("jumps the Opus RTP timestamps with the video's over a stall that restarts playout: the A/V offset holds within a frame", async () => {
    const app = await serveVideoApp('reactor-avsync-', 'width: 64\nheight: 48\nframesPerChunk: 4\nworldSize: 1\ndevices: cpu\nbackend: wasm\n', {
      video: { codec: 'h264' },
    });
    cleanups.push(() => app.close());
    const ws = new WebSocket(app.server.wsUrl);
    const h264 = new RTCRtpCodecParameters({
      mimeType: 'video/H264',
      clockRate: 90000,
      rtcpFeedback: [useNACK(), usePLI(), useREMB()],
      parameters: 'level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f',
    });
    const opus = new RTCRtpCodecParameters({ mimeType: 'audio/opus', clockRate: 48000, channels: 2 });
    const pc = new RTCPeerConnection({ codecs: { video: [h264], audio: [opus] } });
    cleanups.push(() => {
      ws.terminate();
      return pc.close();
    });
    const last = { video: undefined as number | undefined, audio: undefined as number | undefined, packets: { video: 0, audio: 0 } };
    for (const kind of ['video', 'audio'] as const) {
      pc.addTransceiver(kind, { direction: 'recvonly' }).onTrack.subscribe((track) => {
        track.onReceiveRtp.subscribe((p) => {
          last[kind] = p.header.timestamp;
          last.packets[kind]++;
        });
      });
    }
    let state = '';
    await new Promise<void>((res, rej) => {
      ws.once('error', rej);
      ws.on('message', (data, binary) => {
        if (binary) return;
        const msg = JSON.parse(data.toString()) as Record<string, string>;
        if (msg['type'] === 'welcome') res();
        if (msg['type'] === 'rtc_answer') void pc.setRemoteDescription({ type: 'answer', sdp: msg['sdp']! });
        if (msg['type'] === 'rtc_candidate' && msg['candidate'])
          void pc.addIceCandidate({ candidate: msg['candidate'], sdpMid: msg['sdpMid'], sdpMLineIndex: msg['sdpMLineIndex'] as unknown as number });
        if (msg['type'] === 'rtc_state') state = msg['state']!;
      });
    });
    await pc.setLocalDescription(await pc.createOffer());
    ws.send(JSON.stringify({ type: 'rtc_offer', sdp: pc.localDescription!.sdp }));
    await expect.poll(() => state, { timeout: 20_000 }).toBe('connected');
    await expect.poll(() => Math.min(last.packets.video, last.packets.audio), { timeout: 20_000 }).toBeGreaterThan(50);
    // Where the picture's clock stands against the sound's, s (each stream's newest packet; their RTP clocks have their own zero).
    const offset = (): number => last.video! / 90_000 - last.audio! / 48_000;
    const before = offset();
    // The stall: 1.5 s with this process's event loop blocked (the server runs in it).
    const until = performance.now() + 1500;
    while (performance.now() < until) {
      // blocked
    }
    const mark = { ...last.packets };
    await expect.poll(() => Math.min(last.packets.video - mark.video, last.packets.audio - mark.audio), { timeout: 20_000 }).toBeGreaterThan(50);
    // One frame of the sample app (24 fps) and one Opus packet (20 ms) of slack between the two newest packets.
    expect(Math.abs(offset() - before)).toBeLessThan(1 / 24 + 0.02 + 0.02);
  }, 60_000);
});
