/**
 * The SDK's transport ladder in Node, through its documented door: `connect(url, { transport,
 * webrtc: { RTCPeerConnection } })` with werift's peer connection. `webrtc` brings the outbound
 * video over WebRTC (RTP on the client's track, no binary media on the socket); `auto` falls back
 * to the WebSocket by itself when the server takes no WebRTC, or when ICE cannot connect (UDP
 * blocked: a relay-only peer without a TURN server); `webrtc` then fails with `webrtc_failed`.
 * `client.publish()` of a track over the link reaches the app's buffer (RGB of the declared
 * size), and `transport: 'webrtc'` without a link is `rtc_not_connected`. The peer connection
 * takes the ICE servers and policy of `welcome.webrtc` (`clientIceServers`, TURN credentials
 * minted from `turnSecret`) unless the caller's `webrtc.iceServers` replace them.
 */
import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { MediaStreamTrack, RTCPeerConnection } from 'werift';
import { WebSocket } from 'ws';
import { WebRtcLink, connect } from '@reactor/client';
import { ENCODE, ffmpegRtp } from './fixtures/ffmpeg-rtp.js';
import { WEBCAM } from './fixtures/input-app.js';
import { until } from '@reactor/test-kit';
import { useInputServers } from './input-servers.js';

const { start, cleanups } = useInputServers();

type PeerCtor = NonNullable<NonNullable<Parameters<typeof connect>[1]>['webrtc']>['RTCPeerConnection'];
const Werift = RTCPeerConnection as unknown as PeerCtor;

/** A peer whose ICE can never connect: relay candidates only, and no TURN server (as when UDP is blocked). */
class RelayOnly extends RTCPeerConnection {
  constructor(config: object) {
    super({ ...config, iceTransportPolicy: 'relay' });
  }
}

/** A werift track the SDK can publish: its `MediaStreamTrack` plus what a browser track has. */
function nodeCamera(): MediaStreamTrack & { id: string; readyState: string; getSettings(): object } {
  return Object.assign(new MediaStreamTrack({ kind: 'video', id: 'node-camera' }), { id: 'node-camera', readyState: 'live', getSettings: () => ({}) });
}

describe('client SDK in Node: the WebRTC transport ladder with werift', () => {
  it("transport 'webrtc': the outbound video arrives as RTP on the link's track, none on the WebSocket", async () => {
    const { server } = await start({ webrtc: {} });
    const client = await connect(server.url, { WebSocket, transport: 'webrtc', webrtc: { RTCPeerConnection: Werift, timeoutMs: 10_000 } });
    cleanups.push(() => client.close());
    expect(client.rtc?.state).toBe('connected');
    expect(client.rtc?.transport).toBe('webrtc');
    expect(client.transport).toBe('webrtc');
    await until(() => (client.rtc?.tracks.size ?? 0) > 0, 'the video track', 10_000);
    const track = [...client.rtc!.tracks.values()].find((t) => t.kind === 'video')!.track as MediaStreamTrack;
    let packets = 0;
    track.onReceiveRtp.subscribe(() => packets++);
    let frames = 0;
    client.on('frame', () => frames++);
    await until(() => packets > 20, 'RTP of the video', 10_000);
    expect(frames).toBe(0);
    expect(server.connections()[0]?.webrtc?.state).toBe('connected');
  }, 60_000);

  it('a track paused on the WebSocket stays paused when WebRTC takes over, and resumes over WebRTC; paused again, it stays so when the peer goes', async () => {
    const { server } = await start({ webrtc: {} });
    const client = await connect(server.url, { WebSocket, transport: 'websocket' });
    cleanups.push(() => client.close());
    const video = client.schema.tracks.find((t) => t.direction === 'out' && t.kind === 'video')!.name;
    let wsFrames = 0;
    client.on('frame', () => wsFrames++);
    await until(() => wsFrames > 3, 'frames on the WebSocket', 10_000);
    await client.pauseTrack(video);
    expect(server.connections()[0]?.pausedTracks).toEqual([video]);
    // The peer connects while the track is paused: the WebRTC media knows it from the one state.
    const link = await WebRtcLink.open(client, { RTCPeerConnection: Werift, timeoutMs: 10_000 });
    cleanups.push(() => link.close());
    await until(() => link.tracks.size > 0, 'the video track', 10_000);
    const track = [...link.tracks.values()].find((t) => t.kind === 'video')!.track as MediaStreamTrack;
    let packets = 0;
    track.onReceiveRtp.subscribe(() => packets++);
    const wsAtLink = wsFrames;
    // A second of the stream (30 fps): nothing of the paused track on either path.
    await new Promise((r) => setTimeout(r, 1000));
    expect(server.connections()[0]?.webrtc?.state).toBe('connected');
    expect(packets).toBe(0);
    expect(wsFrames).toBe(wsAtLink);
    await client.resumeTrack(video);
    await until(() => packets > 20, 'RTP of the resumed track', 10_000);
    expect(wsFrames).toBe(wsAtLink);
    // Paused over WebRTC, then the peer goes: the WebSocket queue does not send the track either.
    await client.pauseTrack(video);
    link.close();
    await until(() => server.connections()[0]?.webrtc?.state !== 'connected', 'the server to see the peer go', 10_000);
    const wsAtClose = wsFrames;
    await new Promise((r) => setTimeout(r, 1000));
    expect(wsFrames).toBe(wsAtClose);
    expect(server.connections()[0]?.pausedTracks).toEqual([video]);
    await client.resumeTrack(video);
    await until(() => wsFrames > wsAtClose + 3, 'frames on the WebSocket after the resume', 10_000);
  }, 60_000);

  it("transport 'auto' on a server without WebRTC: falls back to the WebSocket by itself, frames arrive there", async () => {
    const { server } = await start({ webrtc: { enabled: false } });
    const client = await connect(server.url, { WebSocket, transport: 'auto', webrtc: { RTCPeerConnection: Werift, timeoutMs: 5000 } });
    cleanups.push(() => client.close());
    expect(client.transport).toBe('websocket');
    let frames = 0;
    client.on('frame', () => frames++);
    await until(() => frames > 3, 'frames on the WebSocket', 10_000);
  }, 60_000);

  it("ICE that cannot connect (UDP blocked): 'auto' falls back after its timeout, 'webrtc' fails with webrtc_failed", async () => {
    const { server } = await start({ webrtc: {} });
    const t0 = performance.now();
    const auto = await connect(server.url, { WebSocket, transport: 'auto', webrtc: { RTCPeerConnection: RelayOnly as unknown as PeerCtor, timeoutMs: 1500 } });
    cleanups.push(() => auto.close());
    expect(performance.now() - t0).toBeGreaterThanOrEqual(1400);
    expect(auto.transport).toBe('websocket');
    let frames = 0;
    auto.on('frame', () => frames++);
    await until(() => frames > 3, 'frames on the WebSocket after the fallback', 10_000);
    const refused = connect(server.url, { WebSocket, transport: 'webrtc', webrtc: { RTCPeerConnection: RelayOnly as unknown as PeerCtor, timeoutMs: 1500 } });
    await expect(refused).rejects.toMatchObject({ code: 'webrtc_failed' });
  }, 60_000);

  it("client.publish() of a track while the link is up goes over WebRTC and reaches the app's buffer", async () => {
    const { server, host } = await start({ webrtc: {} });
    const client = await connect(server.url, { WebSocket, transport: 'webrtc', webrtc: { RTCPeerConnection: Werift, timeoutMs: 10_000 } });
    cleanups.push(() => client.close());
    const cam = nodeCamera();
    const pub = await client.publish('webcam', cam);
    expect(pub.transport).toBe('webrtc');
    await ffmpegRtp({
      input: ['-f', 'lavfi', '-i', `color=c=0xC81E28:size=${WEBCAM.width}x${WEBCAM.height}:rate=10`, '-frames:v', '15', '-g', '5'],
      encode: ENCODE.vp8,
      onPacket: (rtp) => cam.writeRtp(rtp),
    });
    await until(() => host.pushed.filter((p) => p.track === 'webcam' && p.accepted).length >= 5, 'camera frames in the app', 10_000);
    const f = host.pushed.find((p) => p.track === 'webcam')!.frame;
    expect(f).toMatchObject({ width: WEBCAM.width, height: WEBCAM.height });
    // Nothing came as binary frames on the socket: the intake of the WebSocket saw none.
    expect(server.connections()[0]?.inbound?.received ?? 0).toBe(0);
    await pub.stop();
    expect(server.host.status.state).toBe('streaming');
  }, 60_000);

  it("configures the peer connection from welcome.webrtc (minted TURN credentials), and the caller's iceServers replace them", async () => {
    const configs: { iceServers?: { urls: string | string[]; username?: string; credential?: string }[]; iceTransportPolicy?: string }[] = [];
    // Records what the link asks for; connects over host candidates (no STUN/TURN is reachable here).
    class Recording extends RTCPeerConnection {
      constructor(config: (typeof configs)[number]) {
        configs.push(config);
        super({});
      }
    }
    const { server } = await start({
      webrtc: {
        clientIceServers: [{ urls: 'stun:stun.example.com:3478' }, { urls: 'turn:turn.example.com:3478' }],
        turnSecret: 'shared-with-coturn',
        turnCredentialTtlS: 600,
        connectTimeoutMs: 4000,
      },
    });
    const client = await connect(server.url, { WebSocket, transport: 'webrtc', webrtc: { RTCPeerConnection: Recording as unknown as PeerCtor } });
    cleanups.push(() => client.close());
    const setup = client.webrtcSetup!;
    expect(setup.iceTransportPolicy).toBe('all');
    expect(setup.connectTimeoutMs).toBe(4000);
    expect(setup.iceServers[0]).toEqual({ urls: 'stun:stun.example.com:3478' });
    const turn = setup.iceServers[1]!;
    expect(turn.urls).toBe('turn:turn.example.com:3478');
    const [expiry, id] = turn.username!.split(':');
    expect(id).toBe(client.clientId);
    expect(Math.abs(Number(expiry) - (Date.now() / 1000 + 600))).toBeLessThan(60);
    expect(turn.credential).toBe(createHmac('sha1', 'shared-with-coturn').update(turn.username!).digest('base64'));
    expect(configs).toEqual([{ iceServers: setup.iceServers }]);

    const own = [{ urls: 'stun:127.0.0.1:9' }];
    const mine = await connect(server.url, {
      WebSocket,
      transport: 'webrtc',
      webrtc: { RTCPeerConnection: Recording as unknown as PeerCtor, iceServers: own },
    });
    cleanups.push(() => mine.close());
    expect(configs[1]).toEqual({ iceServers: own });
  }, 60_000);

  it("publish with transport 'webrtc' and no link: rtc_not_connected, nothing sent", async () => {
    const { server, host } = await start({ webrtc: {} });
    const client = await connect(server.url, { WebSocket });
    cleanups.push(() => client.close());
    await expect(client.publish('webcam', nodeCamera(), { transport: 'webrtc' })).rejects.toMatchObject({ code: 'rtc_not_connected' });
    expect(client.publications.size).toBe(0);
    expect(host.pushed).toEqual([]);
  }, 30_000);
});
