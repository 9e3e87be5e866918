#!/usr/bin/env node
// One frame through each media path, counted in instructions (issue 36): a server streams a small
// H.264 video (128x72, so the encoder's share is small) to one viewer in this same process, on
// the WebSocket media path (`ws`: select_video, binary frames) or the WebRTC one (`webrtc`: a
// werift peer, RTP), and the process exits as soon as the viewer has received <frames> frames.
// Run under callgrind, the slope between two frame counts is the instructions of one frame (the
// app's step, playout, the shared encoder, the path's send and the viewer's receive). Start-up
// and the handshake are not counted (see MEDIA_CALLGRIND below); the ladder has one tier, so that
// neither path's tier control changes the encoder's work mid-run; and the count does not depend
// on the machine's load:
//
//   MEDIA_CALLGRIND=1 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/dev/null \
//     node --jitless bench/media-path-frames.mjs ws 50
//
// (`--jitless` so the count does not depend on when V8's tiers kick in). MEDIA_ROOT: another
// checkout, built, whose packages serve (a before/after comparison runs this same script against
// each). Not a *.bench.mjs (pnpm bench does not run it): it is meant for callgrind. Prints one
// JSON line: the path, the frames asked for and the frames received.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { viewerPeerConnection } from './lib/werift-viewer.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(process.env.MEDIA_ROOT ?? join(here, '..'));
const { Frames, Output, ReactorApp, Video, reactorApp } = await import(pathToFileURL(join(root, 'packages/runtime/dist/index.js')).href);
const { serve } = await import(pathToFileURL(join(root, 'packages/server/dist/index.js')).href);
const serverRequire = createRequire(join(root, 'packages/server/package.json'));
const { WebSocket } = serverRequire('ws');

const [path = 'ws', framesArg = '50'] = process.argv.slice(2);
if (path !== 'ws' && path !== 'webrtc') throw new Error(`path must be ws or webrtc, not ${path}`);
const WANT = Number(framesArg);
const W = 128;
const H = 72;
const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const FRAMES = Array.from({ length: 8 }, (_, k) => {
  const rgb = new Uint8Array(W * H * 3);
  for (let i = 0; i < rgb.length; i++) rgb[i] = (i * 7 + k * 31) & 255;
  return rgb;
});

class PathOutput extends Output {}
Video({ width: W, height: H })(PathOutput.prototype, 'mainVideo');
class PathApp extends ReactorApp {
  i = 0;
  generate() {
    return new PathOutput({ mainVideo: new Frames(FRAMES[this.i++ % FRAMES.length], [1, H, W, 3]) });
  }
}
// 30 fps: under callgrind a frame takes longer than its period, so the loop runs flat out and the
// playout never waits; without callgrind the run is paced.
reactorApp({ output: PathOutput, fps: 30, bufferSize: 4, name: 'media-path-frames' })(PathApp);

const server = await serve(PathApp, {
  port: 0,
  logger: quiet,
  gracePeriodMs: 0,
  video: { codec: 'h264', tiers: [{ name: 'only', scale: 1, bitrate: 300_000 }] },
});
await server.loaded;
// Under callgrind started with --instr-atstart=no (MEDIA_CALLGRIND=1), the count starts at the
// first frame the viewer receives: the handshake (slow under instrumentation, and WebRTC's own
// timers would fail it) runs uninstrumented, and <frames> more frames are counted from there.
const TOGGLE = process.env.MEDIA_CALLGRIND === '1';
let received = 0;
let counting = !TOGGLE;
const frame = () => {
  if (!counting) {
    execFileSync('callgrind_control', ['--instr=on', String(process.pid)], { stdio: 'ignore' });
    counting = true;
    return;
  }
  if (++received >= WANT) {
    process.stdout.write(`${JSON.stringify({ path, root, viewers: EXTRA + 1, want: WANT, received })}\n`);
    process.exit(0);
  }
};
// MEDIA_VIEWERS (ws only, default 1): as many WebSocket viewers, the others connected and on the
// H.264 tier before the counted one joins, so the slope shows what each added viewer costs.
const EXTRA = path === 'ws' ? Math.max(0, Number(process.env.MEDIA_VIEWERS ?? 1) - 1) : 0;
await Promise.all(
  Array.from(
    { length: EXTRA },
    () =>
      new Promise((selected) => {
        const other = new WebSocket(server.wsUrl);
        other.on('message', (data, isBinary) => {
          if (isBinary) return;
          const m = JSON.parse(String(data));
          if (m.type === 'welcome') other.send(JSON.stringify({ type: 'select_video', id: 'v', codec: 'h264', tier: 'only' }));
          else if (m.type === 'reply') selected();
        });
      }),
  ),
);
const ws = new WebSocket(server.wsUrl);
const send = (m) => ws.send(JSON.stringify(m));

if (path === 'ws') {
  ws.on('message', (data, isBinary) => {
    if (isBinary) {
      frame();
      return;
    }
    const m = JSON.parse(String(data));
    if (m.type === 'welcome') send({ type: 'select_video', id: 'v', codec: 'h264', tier: 'only' });
  });
} else {
  const pc = viewerPeerConnection(serverRequire('werift'));
  pc.onIceCandidate.subscribe((c) => {
    if (!c) return;
    const j = c.toJSON();
    send({ type: 'rtc_candidate', candidate: j.candidate ?? '', sdpMid: j.sdpMid ?? undefined, sdpMLineIndex: j.sdpMLineIndex ?? undefined });
  });
  pc.addTransceiver('video', { direction: 'recvonly' }).onTrack.subscribe((track) => {
    track.onReceiveRtp.subscribe((rtp) => {
      if (rtp.header.marker) frame();
    });
  });
  ws.on('message', async (data, isBinary) => {
    if (isBinary) return;
    const m = JSON.parse(String(data));
    if (m.type === 'welcome') {
      const offer = await pc.createOffer();
      // werift's agents fall back to Google's STUN server when given none (a DNS lookup that a
      // host without egress waits out); the server does the same for its peers (rtc-peer.ts).
      for (const t of pc.iceTransports) t.connection.stunServer = undefined;
      await pc.setLocalDescription(offer);
      send({ type: 'rtc_offer', sdp: pc.localDescription.sdp });
    } else if (m.type === 'rtc_answer') {
      await pc.setRemoteDescription({ type: 'answer', sdp: m.sdp });
    } else if (m.type === 'rtc_candidate' && m.candidate) {
      await pc.addIceCandidate({ candidate: m.candidate, sdpMid: m.sdpMid, sdpMLineIndex: m.sdpMLineIndex });
    }
  });
}
