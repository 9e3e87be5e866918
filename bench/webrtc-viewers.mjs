#!/usr/bin/env node
// The viewers of bench/webrtc-fanout.bench.mjs, in a process of their own (so the server's CPU
// is measured apart from theirs): N Node clients, each a WebSocket for signalling plus a werift
// RTCPeerConnection with one recvonly video transceiver, signalled as docs/protocol.md says
// (rtc_offer -> rtc_answer, rtc_candidate both ways, rtc_state). Each counts the video frames it
// receives complete (every packet from the first of a frame to its marker, no sequence gap),
// per second of the measure window, which starts when the parent writes "measure\n" on stdin and
// ends with "stop\n"; the counts go to stdout as one JSON line. With them, for the frames that
// broke in the window: the sequence gaps (packets missing where the next one came), the late
// packets (older than one already seen: a NACK's retransmission or a reordering), and the
// datagrams the kernel dropped at this process's UDP sockets (receive buffer full: /proc/net/udp).
//
// With FANOUT_TRANSPORT=ws the viewers take the WebSocket media path instead: each sends
// select_video (H.264, the first tier) after its welcome and counts the binary frames it gets (a
// WebSocket frame arrives whole, so none is broken).
//
//   node bench/webrtc-viewers.mjs <wsUrl> <viewers>
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createInterface } from 'node:readline';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { viewerPeerConnection } from './lib/werift-viewer.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const serverRequire = createRequire(join(here, '..', 'packages', 'server', 'package.json'));
const { WebSocket } = serverRequire('ws');
const werift = serverRequire('werift');

const [wsUrl, countArg] = process.argv.slice(2);
const N = Number(countArg ?? 20);
const WS_ONLY = process.env.FANOUT_TRANSPORT === 'ws';

const viewers = [];
let measuring = false;
let measureStart = 0;

/** A viewer on the WebSocket media path: select_video, then every binary message is a frame. */
function wsViewer(i) {
  const v = { i, state: 'new', frames: 0, measured: 0, broken: 0, gaps: 0, late: 0, bytes: 0, firstFrameAt: undefined, errors: [] };
  const ws = new WebSocket(wsUrl);
  v.close = () => ws.close();
  ws.on('message', (data, isBinary) => {
    if (isBinary) {
      v.frames++;
      v.firstFrameAt ??= performance.now();
      if (measuring) {
        v.measured++;
        v.bytes += data.length;
      }
      return;
    }
    const m = JSON.parse(String(data));
    if (m.type === 'welcome') ws.send(JSON.stringify({ type: 'select_video', id: 'v', codec: 'h264', tier: m.video?.tiers?.[0]?.name }));
    else if (m.type === 'reply' && m.id === 'v') v.state = 'connected';
    else if (m.type === 'error') v.errors.push(`${m.code}: ${m.message}`.slice(0, 200));
  });
  ws.on('error', (err) => v.errors.push(`ws: ${err.message}`));
  return v;
}

function viewer(i) {
  if (WS_ONLY) return wsViewer(i);
  const v = { i, state: 'new', frames: 0, measured: 0, broken: 0, gaps: 0, late: 0, bytes: 0, firstFrameAt: undefined, errors: [] };
  const ws = new WebSocket(wsUrl);
  const pc = viewerPeerConnection(werift);
  v.close = () => {
    ws.close();
    return pc.close();
  };
  const send = (m) => ws.readyState === 1 && ws.send(JSON.stringify(m));
  // Candidates found before the offer went out follow it.
  let early = [];
  pc.onIceCandidate.subscribe((c) => {
    if (!c) return;
    const j = c.toJSON();
    const m = {
      type: 'rtc_candidate',
      candidate: j.candidate ?? '',
      ...(j.sdpMid != null ? { sdpMid: j.sdpMid } : {}),
      ...(j.sdpMLineIndex != null ? { sdpMLineIndex: j.sdpMLineIndex } : {}),
    };
    if (early) early.push(m);
    else send(m);
  });
  const transceiver = pc.addTransceiver('video', { direction: 'recvonly' });
  transceiver.onTrack.subscribe((track) => {
    let ts;
    let nextSeq;
    let complete = true;
    track.onReceiveRtp.subscribe((rtp) => {
      const h = rtp.header;
      if (measuring) v.bytes += rtp.payload.length;
      if (nextSeq !== undefined && h.sequenceNumber !== nextSeq && measuring) {
        // Behind the expected one by less than half the sequence space: late; else packets were skipped.
        if (((nextSeq - h.sequenceNumber) & 0xffff) < 0x8000) v.late++;
        else v.gaps++;
      }
      if (ts !== h.timestamp) {
        ts = h.timestamp;
        // A gap where a frame starts: its head (or the last one's tail) was lost; count it broken.
        complete = nextSeq === undefined || h.sequenceNumber === nextSeq;
      } else if (nextSeq !== undefined && h.sequenceNumber !== nextSeq) {
        complete = false;
      }
      nextSeq = (h.sequenceNumber + 1) & 0xffff;
      if (h.marker) {
        if (complete) {
          v.frames++;
          v.firstFrameAt ??= performance.now();
          if (measuring) v.measured++;
        } else if (measuring) {
          v.broken++;
        }
        complete = true;
      }
    });
  });
  ws.on('message', async (data, isBinary) => {
    if (isBinary) return;
    const m = JSON.parse(String(data));
    try {
      if (m.type === 'welcome') {
        const offer = await pc.createOffer();
        await pc.setLocalDescription(offer);
        send({ type: 'rtc_offer', sdp: pc.localDescription.sdp });
        for (const c of early) send(c);
        early = undefined;
      } else if (m.type === 'rtc_answer') {
        await pc.setRemoteDescription({ type: 'answer', sdp: m.sdp });
      } else if (m.type === 'rtc_candidate' && m.candidate) {
        await pc.addIceCandidate({ candidate: m.candidate, sdpMid: m.sdpMid, sdpMLineIndex: m.sdpMLineIndex });
      } else if (m.type === 'rtc_state') {
        v.state = m.state;
        if (m.reason) v.errors.push(m.reason);
      } else if (m.type === 'error') {
        v.errors.push(`${m.code}: ${m.message}`.slice(0, 200));
      }
    } catch (err) {
      v.errors.push(String(err?.message ?? err).slice(0, 200));
    }
  });
  ws.on('error', (err) => v.errors.push(`ws: ${err.message}`));
  return v;
}

for (let i = 0; i < N; i++) {
  viewers.push(viewer(i));
  // Spread the handshakes a little (DTLS on 2 cores).
  await new Promise((r) => setTimeout(r, 50));
}
process.stdout.write(`${JSON.stringify({ started: N })}\n`);

/** Datagrams the kernel dropped at this process's UDP sockets (the `drops` column of /proc/net/udp, by socket inode). */
function udpDrops() {
  const mine = new Set();
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/self/fd/${fd}`));
      if (m) mine.add(m[1]);
    } catch {
      // Closed meanwhile.
    }
  }
  let drops = 0;
  for (const file of ['/proc/net/udp', '/proc/net/udp6']) {
    let text = '';
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length > 12 && mine.has(f[9])) drops += Number(f[f.length - 1]);
    }
  }
  return drops;
}
let drops0 = 0;

const rl = createInterface({ input: process.stdin });
rl.on('line', async (line) => {
  if (line === 'status') {
    process.stdout.write(`${JSON.stringify({ status: viewers.map((v) => ({ state: v.state, frames: v.frames })) })}\n`);
  } else if (line === 'measure') {
    for (const v of viewers) {
      v.measured = 0;
      v.bytes = 0;
    }
    drops0 = udpDrops();
    measuring = true;
    measureStart = performance.now();
  } else if (line === 'stop') {
    measuring = false;
    const seconds = (performance.now() - measureStart) / 1000;
    const cpu = process.cpuUsage();
    process.stdout.write(
      `${JSON.stringify({
        seconds,
        viewers: viewers.map((v) => ({
          state: v.state,
          fps: v.measured / seconds,
          frames: v.frames,
          broken: v.broken,
          gaps: v.gaps,
          late: v.late,
          kbps: (v.bytes * 8) / 1000 / seconds,
          errors: v.errors.slice(0, 3),
        })),
        cpuSeconds: (cpu.user + cpu.system) / 1e6,
        udpDrops: udpDrops() - drops0,
      })}\n`,
    );
    await Promise.allSettled(viewers.map((v) => v.close()));
    process.exit(0);
  }
});
