#!/usr/bin/env node
// Loopback latency of the two transports, in one run: a served app makes one 1280x720 frame a
// step at 30 fps (playout buffer of 1), H.264 from the shared encoder; Debian's Chromium shows it
// (1) over WebRTC (the page's RTCPeerConnection, a <video> element; presentation = the frame's
// requestVideoFrameCallback metadata.presentationTime) and (2) over the WebSocket (the viewer,
// WebCodecs VideoDecoder; presentation = the picture drawn on its canvas). Latency = end of the
// step that made the frame (its generate() returned, in this process) -> presented in the page,
// both read as epoch ms (performance.timeOrigin + now(); the page's offset calibrated by round
// trips). Also due -> presented (playout's scheduled time), which leaves the step loop out.
//
//   {"bench":"webrtc.latency","transport":"webrtc","p50Ms":..,"p99Ms":..,"dueP50Ms":..,"fps":..}
//
// Target (issue 24): WebRTC p50 <= 60 ms at 720p30. Each transport runs with both pacings (WEBRTC_BENCH_PACING,
// default just-in-time,ahead): just-in-time steps (the default) and the model running ahead.
// Run after `pnpm build`: node bench/webrtc.bench.mjs
import { chromium } from '../test/node_modules/playwright-core/index.mjs';
import { Frames, Output, ReactorApp, TrackPayload, Video, reactorApp } from '../packages/runtime/dist/index.js';
import { serve } from '../packages/server/dist/index.js';

// WEBRTC_BENCH_SIZE=640x360 for a second figure where the 2-core machine's encoder is not the bottleneck.
const [W, H] = (process.env.WEBRTC_BENCH_SIZE ?? '1280x720').split('x').map(Number);
const FPS = 30;
const WARMUP_MS = 4000;
const MEASURE_MS = Number(process.env.WEBRTC_BENCH_MS ?? 10000);
const epoch = () => performance.timeOrigin + performance.now();

const FRAMES = Array.from({ length: 8 }, (_, k) => {
  const rgb = new Uint8Array(W * H * 3);
  for (let y = 0; y < H; y++) {
    for (let x = 0; x < W; x++) {
      const i = (y * W + x) * 3;
      const d = Math.hypot(x - W / 2 - k * 20, y - H / 2) < H / 4 ? 80 : 0;
      rgb[i] = (x / 5 + k * 8 + d) & 255;
      rgb[i + 1] = (y / 3) & 255;
      rgb[i + 2] = (128 + ((x + y) >> 4) - d) & 255;
    }
  }
  return rgb;
});

class BenchOutput extends Output {}
Video({ width: W, height: H })(BenchOutput.prototype, 'main');
// One app class per pacing (issue 24: just-in-time steps, the default, against the model running
// ahead as the Python original does), measured in the same run.
function benchApp(pacing) {
  class BenchApp extends ReactorApp {
    i = 0;
    generate() {
      // The frame carries the epoch ms at which its step's work was done (its metadata).
      const frames = new Frames(FRAMES[this.i++ % FRAMES.length], [1, H, W, 3]);
      return new BenchOutput({ main: new TrackPayload(frames, { metadata: epoch() }) });
    }
  }
  reactorApp({ output: BenchOutput, fps: FPS, bufferSize: 1, pacing, name: 'webrtc-latency-bench' })(BenchApp);
  return BenchApp;
}
const PACINGS = (process.env.WEBRTC_BENCH_PACING ?? 'just-in-time,ahead').split(',');

const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const pct = (sorted, p) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : NaN);
const r1 = (x) => Math.round(x * 10) / 10;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
});

// A raw client of the protocol for the WebRTC run: offer recvonly video, record each presented frame.
const RTC_PAGE = `
window.rtcBench = { frames: [], state: undefined };
const ws = new WebSocket(location.origin.replace(/^http/, 'ws') + '/ws');
const send = (m) => ws.send(JSON.stringify(m));
let pc;
ws.onmessage = async (ev) => {
  if (typeof ev.data !== 'string') return;
  const msg = JSON.parse(ev.data);
  if (msg.type === 'welcome') {
    pc = new RTCPeerConnection();
    pc.addTransceiver('video', { direction: 'recvonly' });
    pc.onicecandidate = (e) => e.candidate && send({ type: 'rtc_candidate', candidate: e.candidate.candidate, sdpMid: e.candidate.sdpMid, sdpMLineIndex: e.candidate.sdpMLineIndex });
    pc.ontrack = (e) => {
      const v = document.createElement('video');
      v.muted = true; v.autoplay = true; v.playsInline = true;
      document.body.appendChild(v);
      v.srcObject = new MediaStream([e.track]);
      const cb = (now, meta) => {
        window.rtcBench.frames.push({ rtp: meta.rtpTimestamp, at: meta.presentationTime });
        v.requestVideoFrameCallback(cb);
      };
      v.requestVideoFrameCallback(cb);
      v.play().catch(() => {});
    };
    await pc.setLocalDescription(await pc.createOffer());
    send({ type: 'rtc_offer', sdp: pc.localDescription.sdp });
  } else if (msg.type === 'rtc_answer') await pc.setRemoteDescription({ type: 'answer', sdp: msg.sdp });
  else if (msg.type === 'rtc_candidate' && msg.candidate) await pc.addIceCandidate({ candidate: msg.candidate, sdpMid: msg.sdpMid, sdpMLineIndex: msg.sdpMLineIndex });
  else if (msg.type === 'rtc_state') window.rtcBench.state = msg.state;
};`;

async function clockOffset(page) {
  let best = { rtt: Infinity, offset: 0 };
  for (let i = 0; i < 20; i++) {
    const t0 = epoch();
    const p = await page.evaluate(() => performance.timeOrigin + performance.now());
    const t1 = epoch();
    if (t1 - t0 < best.rtt) best = { rtt: t1 - t0, offset: p - (t0 + t1) / 2 };
  }
  return best;
}

async function run(transport, App) {
  const server = await serve(App, {
    port: 0,
    gracePeriodMs: 0,
    logger: quiet,
    video: { codec: 'h264', framerate: FPS, tiers: [{ name: 'full', scale: 1, bitrate: 3_000_000 }] },
  });
  await server.loaded;
  // seq -> { index, due } of each frame the client's sink was handed.
  const frames = new Map();
  const host = server.host;
  const original = host.connect.bind(host);
  // Every sink method goes through; frame() also notes what the measurement needs.
  host.connect = (sink, info) =>
    original(
      new Proxy(sink, {
        get(target, key) {
          if (key === 'frame') return (f) => (frames.set(f.seq, { end: f.metadata, due: performance.timeOrigin + f.dueAt, pts: f.ptsMs }), target.frame(f));
          const v = target[key];
          return typeof v === 'function' ? v.bind(target) : v;
        },
      }),
      info,
    );
  const page = await browser.newPage();
  const lat = [];
  const dueLat = [];
  let count = 0;
  if (transport === 'webrtc') {
    await page.goto(`${server.url}/health`);
    await page.addScriptTag({ content: RTC_PAGE });
    await page.waitForFunction(() => window.rtcBench.state === 'connected' && window.rtcBench.frames.length > 10, null, { timeout: 30_000 });
    await new Promise((r) => setTimeout(r, WARMUP_MS));
    const clock = await clockOffset(page);
    const from = await page.evaluate(() => window.rtcBench.frames.length);
    await new Promise((r) => setTimeout(r, MEASURE_MS));
    const got = await page.evaluate((n) => ({ origin: performance.timeOrigin, frames: window.rtcBench.frames.slice(n) }), from);
    const byPts = new Map([...frames.values()].map((f) => [Math.round(f.pts * 90), f]));
    for (const f of got.frames) {
      const src = byPts.get(f.rtp);
      const end = src?.end;
      if (end === undefined) continue;
      const shown = got.origin + f.at - clock.offset;
      lat.push(shown - end);
      dueLat.push(shown - src.due);
    }
    count = got.frames.length;
  } else {
    await page.goto(server.url);
    await page.waitForFunction(() => window.reactorViewer.framesDrawn > 10 && window.reactorViewer.video?.codec === 'h264', null, { timeout: 60_000 });
    await new Promise((r) => setTimeout(r, WARMUP_MS));
    const clock = await clockOffset(page);
    const from = await page.evaluate(() => window.reactorViewer.decodeLog.length);
    await new Promise((r) => setTimeout(r, MEASURE_MS));
    const got = await page.evaluate((n) => ({ origin: performance.timeOrigin, log: window.reactorViewer.decodeLog.slice(n) }), from);
    for (const e of got.log) {
      const src = frames.get(e.seq);
      const end = src?.end;
      if (end === undefined) continue;
      const shown = got.origin + e.decodedAt - clock.offset;
      lat.push(shown - end);
      dueLat.push(shown - src.due);
    }
    count = got.log.length;
  }
  const info = server.connections()[0];
  await page.close();
  await server.close();
  lat.sort((a, b) => a - b);
  dueLat.sort((a, b) => a - b);
  return { lat, dueLat, count, info };
}

for (const pacing of PACINGS)
  for (const transport of ['webrtc', 'websocket']) {
    const r = await run(transport, benchApp(pacing));
    const line = {
      bench: 'webrtc.latency',
      transport,
      pacing,
      codec: 'h264',
      to: transport === 'webrtc' ? 'presented (rVFC presentationTime)' : 'drawn (WebCodecs output on canvas)',
      width: W,
      height: H,
      frames: r.lat.length,
      fps: r1(r.count / (MEASURE_MS / 1000)),
      p50Ms: r1(pct(r.lat, 50)),
      p99Ms: r1(pct(r.lat, 99)),
      dueP50Ms: r1(pct(r.dueLat, 50)),
    };
    if (transport === 'webrtc' && pacing === 'just-in-time') line.targetP50Ms = 60;
    console.log(JSON.stringify(line));
  }
await browser.close();
