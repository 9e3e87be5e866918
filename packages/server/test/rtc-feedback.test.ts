/**
 * The WebRTC transport with werift as the viewer (a Node RTCPeerConnection over a raw WebSocket,
 * the pattern app in H.264). Fan-out: two viewers of one encoder get, for every frame, the RTP
 * payloads of its access unit (packetized once on the server, for both), each under its own SSRC
 * and its own unbroken sequence numbers. Against a misbehaving peer: a flood of PLIs and NACKs
 * is cut at the viewer's rate and counted, key frames stay rate-limited, the stream goes on; a
 * peer that vanishes without `rtc_close` is found out (`rtc_state failed`, `rtc_peer_lost`) and
 * its media is back on the WebSocket; nothing of it stays open.
 */
import { describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import {
  GenericNack,
  PictureLossIndication,
  ReceiverEstimatedMaxBitrate,
  RTCPeerConnection,
  RTCRtpCodecParameters,
  RtcpPayloadSpecificFeedback,
  RtcpTransportLayerFeedback,
  useNACK,
  usePLI,
  useREMB,
  type RTCRtpTransceiver,
} from 'werift';
import { webCodecsEncoderFactory, type ReactorServer, type VideoEncoderFactory } from '../src/index.js';
import { packetizeH264 } from '../src/webrtc/rtp-packetize.js';
import { usePatternServers } from './pattern-servers.js';

const { start, cleanups } = usePatternServers();

/** One RTP packet as a viewer received it. */
interface RtpRecord {
  ssrc: number;
  seq: number;
  ts: number;
  marker: boolean;
  payload: Buffer;
}

interface Viewer {
  ws: WebSocket;
  pc: RTCPeerConnection;
  transceiver: RTCRtpTransceiver;
  rtp: { packets: number; ssrc: number | undefined; log: RtpRecord[] };
  /** Binary frames on the WebSocket; `whileConnected`: those after rtc_state connected and before it ended. */
  binary: { n: number; whileConnected: number };
  states: { state: string; reason?: string }[];
  /** Codes of the `error` messages the server sent. */
  errors: string[];
}

async function view(server: ReactorServer): Promise<Viewer> {
  const ws = new WebSocket(server.wsUrl);
  const h264 = new RTCRtpCodecParameters({
    mimeType: 'video/H264',
    clockRate: 90000,
    rtcpFeedback: [useNACK(), usePLI(), useREMB()],
    parameters: 'level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f',
  });
  const pc = new RTCPeerConnection({ codecs: { video: [h264] } });
  cleanups.push(() => {
    ws.terminate();
    return pc.close();
  });
  const v: Viewer = {
    ws,
    pc,
    transceiver: pc.addTransceiver('video', { direction: 'recvonly' }),
    rtp: { packets: 0, ssrc: undefined, log: [] },
    binary: { n: 0, whileConnected: 0 },
    states: [],
    errors: [],
  };
  v.transceiver.onTrack.subscribe((track) => {
    track.onReceiveRtp.subscribe((p) => {
      v.rtp.packets++;
      v.rtp.ssrc = p.header.ssrc;
      const h = p.header;
      if (v.rtp.log.length < 5000) v.rtp.log.push({ ssrc: h.ssrc, seq: h.sequenceNumber, ts: h.timestamp, marker: h.marker, payload: Buffer.from(p.payload) });
    });
  });
  pc.onIceCandidate.subscribe((c) => {
    if (c?.candidate) ws.send(JSON.stringify({ type: 'rtc_candidate', candidate: c.candidate, sdpMid: c.sdpMid, sdpMLineIndex: c.sdpMLineIndex }));
  });
  await new Promise<void>((res, rej) => {
    ws.once('error', rej);
    ws.on('message', (data, binary) => {
      if (binary) {
        v.binary.n++;
        if (v.states.at(-1)?.state === 'connected') v.binary.whileConnected++;
        return;
      }
      const msg = JSON.parse(data.toString()) as Record<string, any>;
      if (msg['type'] === 'welcome') res();
      if (msg['type'] === 'rtc_answer') void pc.setRemoteDescription({ type: 'answer', sdp: msg['sdp'] });
      if (msg['type'] === 'rtc_candidate' && msg['candidate'])
        void pc.addIceCandidate({ candidate: msg['candidate'], sdpMid: msg['sdpMid'], sdpMLineIndex: msg['sdpMLineIndex'] });
      if (msg['type'] === 'error') v.errors.push(msg['code']);
      if (msg['type'] === 'rtc_state') v.states.push({ state: msg['state'], ...(msg['reason'] ? { reason: msg['reason'] } : {}) });
    });
  });
  await pc.setLocalDescription(await pc.createOffer());
  ws.send(JSON.stringify({ type: 'rtc_offer', sdp: pc.localDescription!.sdp }));
  await expect.poll(() => v.states.at(-1)?.state, { timeout: 15_000 }).toBe('connected');
  await expect.poll(() => v.rtp.packets, { timeout: 10_000 }).toBeGreaterThan(10);
  return v;
}

const metric = async (server: ReactorServer, line: RegExp): Promise<number> => {
  const text = await server.metrics.registry.metrics();
  const m = new RegExp(`^${line.source} (\\d+(?:\\.\\d+)?)$`, 'm').exec(text);
  return m ? Number(m[1]) : NaN;
};

/**
 * A viewer's frames received whole, in arrival order: a frame counts when its first packet
 * carries on from the previous frame's marker packet (the next sequence number) and every packet
 * to its own marker follows the one before it with the same timestamp.
 */
function wholeFrames(log: readonly RtpRecord[]): { ts: number; payloads: Buffer[] }[] {
  const frames = [];
  let cur: RtpRecord[] | undefined;
  for (const [i, p] of log.entries()) {
    const prev = log[i - 1];
    const follows = prev !== undefined && p.seq === ((prev.seq + 1) & 0xffff);
    if (prev?.marker) cur = follows ? [p] : undefined;
    else if (cur && follows && p.ts === cur[0]!.ts) cur.push(p);
    else cur = undefined;
    if (p.marker && cur) frames.push({ ts: cur[0]!.ts, payloads: cur.map((x) => x.payload) });
  }
  return frames;
}

describe('WebRTC fan-out', () => {
  it("sends each viewer of one encoder the RTP payloads of every frame's access unit, each under its own SSRC and its own unbroken sequence numbers", async () => {
    // The access units the shared encoder made, by RTP timestamp (90 kHz, from the encoder's µs).
    const units = new Map<number, Uint8Array>();
    let calls = 0;
    const recording: VideoEncoderFactory = async (config) => {
      const e = await webCodecsEncoderFactory(config);
      return {
        encode: async (rgb, ts, key) => {
          calls++;
          const chunk = await e.encode(rgb, ts, key);
          if (chunk) units.set(Math.round(ts * 0.09) >>> 0, chunk.data);
          return chunk;
        },
        get codecString() {
          return e.codecString;
        },
        close: () => e.close(),
      };
    };
    // 640x360: key frames are larger than one packet, so FU-A fragments are among the payloads.
    const server = await start({ video: { codec: 'h264', encoderFactory: recording, keyFrameInterval: 10 } }, { width: 640, height: 360 });
    const a = await view(server);
    const b = await view(server);
    const framesOf = (v: Viewer) => wholeFrames(v.rtp.log);
    await expect.poll(() => Math.min(framesOf(a).length, framesOf(b).length), { timeout: 15_000 }).toBeGreaterThan(30);
    expect(server.videoEncoders()).toHaveLength(1);
    const unitAt = (ts: number): Uint8Array | undefined => units.get(ts) ?? units.get((ts - 1) >>> 0) ?? units.get((ts + 1) >>> 0);
    let fragments = 0;
    const seen = new Map<number, Buffer[]>();
    for (const v of [a, b]) {
      // One SSRC per viewer.
      expect(new Set(v.rtp.log.map((p) => p.ssrc))).toEqual(new Set([v.rtp.ssrc]));
      let matched = 0;
      for (const f of framesOf(v)) {
        const au = unitAt(f.ts);
        if (!au) continue;
        matched++;
        // The payloads of the frame's access unit, in order (the marker was on the last one): what packetizing it for this viewer alone gives.
        expect(f.payloads).toEqual(packetizeH264(au));
        fragments += f.payloads.filter((p) => (p[0]! & 0x1f) === 28).length;
        const other = seen.get(f.ts);
        if (other) expect(f.payloads).toEqual(other);
        else seen.set(f.ts, f.payloads);
      }
      // Whole frames chain by sequence number from one frame's marker to the next frame: this viewer's own counter, a packet per number.
      expect(matched).toBeGreaterThan(20);
    }
    expect(a.rtp.ssrc).not.toBe(b.rtp.ssrc);
    expect(fragments).toBeGreaterThan(0);
    // Each frame went through the encoder once for both viewers.
    expect(calls).toBeLessThanOrEqual(units.size + 2);
  }, 40_000);
});

describe('WebRTC: a misbehaving peer', () => {
  it('cuts a flood of PLIs and NACKs at the viewer rate, counts it, keeps key frames rate-limited and streams on', async () => {
    const server = await start({ video: { codec: 'h264' } });
    const v = await view(server);
    const before = server.videoEncoders()[0]!.keyFramesForced;
    const t0 = performance.now();
    const ssrc = v.rtp.ssrc!;
    const dtls = v.transceiver.receiver.dtlsTransport;
    for (let i = 0; i < 300; i++) {
      // Built by hand: werift's receiver sends a PLI only when it decided to itself.
      await dtls.sendRtcp([new RtcpPayloadSpecificFeedback({ feedback: new PictureLossIndication({ senderSsrc: 1, mediaSsrc: ssrc }) })]);
      const nack = new GenericNack({ senderSsrc: 1, mediaSourceSsrc: ssrc, lost: [1, 2, 3, 4, 5, 6, 7, 8] });
      await dtls.sendRtcp([new RtcpTransportLayerFeedback({ feedback: nack })]);
      // Paced a little: a burst of hundreds of datagrams overflows the kernel's receive buffer (the server shares this process).
      if (i % 10 === 9) await new Promise((r) => setTimeout(r, 5));
    }
    await expect.poll(() => metric(server, /reactor_webrtc_feedback_total\{kind="pli"\}/), { timeout: 5000 }).toBeGreaterThanOrEqual(300);
    await expect.poll(() => metric(server, /reactor_webrtc_feedback_total\{kind="nack"\}/), { timeout: 5000 }).toBeGreaterThanOrEqual(300);
    const elapsedS = (performance.now() - t0) / 1000;
    // At most 50 of each a second get through; the rest are dropped and counted.
    expect(await metric(server, /reactor_webrtc_feedback_dropped_total\{kind="pli"\}/)).toBeGreaterThanOrEqual(300 - 50 * Math.ceil(elapsedS + 1));
    expect(await metric(server, /reactor_webrtc_feedback_dropped_total\{kind="nack"\}/)).toBeGreaterThanOrEqual(300 - 50 * Math.ceil(elapsedS + 1));
    expect(server.connections()[0]!.webrtc!.media!.feedbackDropped).toBeGreaterThan(0);
    // Key frames forced by those PLIs: one per 500 ms at most (plus the one in flight).
    const forced = server.videoEncoders()[0]!.keyFramesForced - before;
    expect(forced).toBeLessThanOrEqual(Math.ceil((performance.now() - t0) / 500) + 1);
    // The stream goes on.
    const packets = v.rtp.packets;
    await expect.poll(() => v.rtp.packets, { timeout: 5000 }).toBeGreaterThan(packets + 10);
    expect(v.binary.whileConnected).toBe(0);
  }, 40_000);

  it('finds out a peer that vanished without rtc_close: rtc_state failed (rtc_peer_lost), media back on the WebSocket, the peer closed', async () => {
    const server = await start({ video: { codec: 'h264' } });
    const v = await view(server);
    expect(await metric(server, /reactor_webrtc_peers/)).toBe(1);
    const binary = v.binary.n;
    // The peer goes away (its process, its network) while the WebSocket stays.
    await v.pc.close();
    await expect.poll(() => v.states.at(-1)?.state, { timeout: 15_000 }).toBe('failed');
    expect(v.states.at(-1)!.reason).toMatch(/^rtc_peer_lost: /);
    await expect.poll(() => v.binary.n, { timeout: 5000 }).toBeGreaterThan(binary + 5);
    expect(server.connections()[0]!.webrtc).toBeUndefined();
    expect(await metric(server, /reactor_webrtc_peers/)).toBe(0);
    expect(await metric(server, /reactor_webrtc_peer_outcomes_total\{outcome="failed"\}/)).toBe(1);
    // Candidates still trickling in after the failure are stale, not "before rtc_offer": dropped. (A bad offer after them is answered, in order.)
    // (The helper trickles its own candidates before it sends its offer: those were answered rtc_bad_candidate, rightly.)
    const earlier = v.errors.length;
    v.ws.send(JSON.stringify({ type: 'rtc_candidate', candidate: 'candidate:1 1 udp 2122260223 127.0.0.1 50000 typ host', sdpMid: '0', sdpMLineIndex: 0 }));
    v.ws.send(JSON.stringify({ type: 'rtc_offer', sdp: 'hello' }));
    await expect.poll(() => v.errors.slice(earlier), { timeout: 5000 }).toEqual(['rtc_bad_offer']);
  }, 40_000);
});

describe('WebRTC: congestion feedback', () => {
  it('counts only the sequence numbers a NACK names when a REMB follows it in one compound packet, starts a new viewer on the lowest tier and steps it up on REMB headroom', async () => {
    const server = await start({ video: { codec: 'h264' } });
    const v = await view(server);
    const tiers = [...server.options.video.tiers].sort((a, b) => b.bitrate - a.bitrate);
    const media = () => server.connections()[0]!.webrtc!.media!;
    // Conservative first: the lowest tier, whatever the path (no estimate yet).
    expect(media().tier).toBe(tiers.at(-1)!.name);
    const ssrc = v.rtp.ssrc!;
    const dtls = v.transceiver.receiver.dtlsTransport;
    // 20 Mbit/s: mantissa 156250, exponent 7.
    const remb = (): RtcpPayloadSpecificFeedback =>
      new RtcpPayloadSpecificFeedback({
        feedback: new ReceiverEstimatedMaxBitrate({ senderSsrc: 1, mediaSsrc: 0, brExp: 7, brMantissa: 156_250, ssrcNum: 1, ssrcFeedbacks: [ssrc] }),
      });
    // One compound datagram, NACK then REMB, as Chromium sends them: three numbers asked for, not the REMB's bytes read as more.
    const before = await metric(server, /reactor_webrtc_nack_packets_total/);
    const nack = new GenericNack({ senderSsrc: 1, mediaSourceSsrc: ssrc, lost: [100, 101, 105] });
    await dtls.sendRtcp([new RtcpTransportLayerFeedback({ feedback: nack }), remb()]);
    await expect.poll(() => metric(server, /reactor_webrtc_feedback_total\{kind="remb"\}/), { timeout: 5000 }).toBeGreaterThanOrEqual(1);
    expect(await metric(server, /reactor_webrtc_feedback_total\{kind="nack"\}/)).toBe(1);
    expect((await metric(server, /reactor_webrtc_nack_packets_total/)) - (Number.isNaN(before) ? 0 : before)).toBe(3);
    // Headroom (an estimate far above what is sent): up one tier at a time to the top.
    const feed = setInterval(() => void dtls.sendRtcp([remb()]), 200);
    cleanups.push(() => clearInterval(feed));
    await expect.poll(() => media().tier, { timeout: 20_000, interval: 200 }).toBe(tiers[0]!.name);
    clearInterval(feed);
    // The dashboard lists it as what it is: a WebRTC viewer, its codec and its own tier.
    const dash = (await (await fetch(`${server.url}/dashboard/data`)).json()) as {
      now: { clients: Array<{ transport: string; codec: string; tier: string }> };
    };
    expect(dash.now.clients).toEqual([expect.objectContaining({ transport: 'webrtc', codec: 'h264', tier: media().tier })]);
  }, 40_000);
});
