#!/usr/bin/env node
// The viewer over an impaired network (issue 24): `reactor run --manifest` serving a 1280x720
// 30 fps moving picture (scripts/net/pattern-app.mjs, H.264) in one network namespace, the
// viewer in Debian's Chromium in another, a router namespace between them
// (scripts/net/impaired-link.mjs: 80 ms round trip through a userspace hop, a 4 Mbit/s tbf cap
// each way, random loss with iptables). Per case, the frames the page presented over the
// measured window (the viewer's canvas; a WebRTC <video> through requestVideoFrameCallback):
// fps, freezes (a gap over 200 ms) and their seconds per minute. Cases: first each transport on the
// same namespaces unimpaired (the control: what this machine's CPU allows), then each transport the
// server offers ({websocket, webrtc}), at 2 % loss (target for WebRTC: >= 28 fps, <= 1 s of freeze
// a minute) and at 5 % (reported). One JSON line per case:
//
//   {"bench":"net.playback","transport":"websocket","lossPct":2,"rttMs":80,"rateKbit":4000,"fps":..,"freezeSecondsPerMinute":..,..}
//
// Needs root (network namespaces), python3, iptables, tc. Run after `pnpm build`:
//   node bench/webrtc-network.bench.mjs          (NET_BENCH_MS: measured window per case, default 30000;
//                                                 NET_BENCH_TRANSPORTS=websocket,webrtc; NET_BENCH_LOSS=2,5;
//                                                 NET_BENCH_CLEAN=0 skips the control)
import { chromium } from '../test/node_modules/playwright-core/index.mjs';
import { createImpairedLink, impairedLinkUnavailable, probeLink } from '../scripts/net/impaired-link.mjs';
import { chromiumOnLink, measure, serveOnLinkWith, startMeter, startRtcClient } from '../scripts/net/playback.mjs';

const MEASURE_MS = Number(process.env.NET_BENCH_MS ?? 30_000);
const WARMUP_MS = Number(process.env.NET_BENCH_WARMUP_MS ?? 5000);
const RTT_MS = 80;
const RATE_KBIT = 4000;
const LOSSES = (process.env.NET_BENCH_LOSS ?? '2,5').split(',').map(Number);
const TRANSPORTS = (process.env.NET_BENCH_TRANSPORTS ?? 'websocket,webrtc').split(',');
// One ladder for both transports: the full tier fits under the cap with room for overhead and repair.
const VIDEO = {
  codec: 'h264',
  framerate: 30,
  tiers: [
    { name: 'full', scale: 1, bitrate: 2_500_000 },
    { name: 'half', scale: 0.5, bitrate: 1_000_000 },
    { name: 'low', scale: 0.5, bitrate: 400_000 },
  ],
};
('video: { codec: h264, framerate: 30, tiers: [{ name: full, scale: 1, bitrate: 2500000 }, { name: half, scale: 0.5, bitrate: 1000000 }, { name: low, scale: 0.5, bitrate: 400000 }] }');

const why = impairedLinkUnavailable();
if (why) {
  console.error(`webrtc-network bench: ${why}`);
  process.exit(1);
}
const r2 = (x) => Math.round(x * 100) / 100;

/** What the page plays: the viewer's codec and tier, or the WebRTC client's state and selected candidate pair. */
async function viewerState(page) {
  return page.evaluate(async () => {
    const v = window.reactorViewer;
    if (v) return { codec: v.video?.codec, tier: v.video?.tier, bitrate: document.getElementById('bitrate')?.textContent ?? undefined };
    const t = window.__rtc;
    let pair;
    let nacks;
    let plis;
    const stats = await t.pc.getStats();
    stats.forEach((s) => {
      if (s.type === 'candidate-pair' && s.nominated && s.state === 'succeeded')
        pair = `${stats.get(s.localCandidateId)?.candidateType}/${stats.get(s.remoteCandidateId)?.candidateType}`;
      if (s.type === 'inbound-rtp' && s.kind === 'video') {
        nacks = s.nackCount;
        plis = s.pliCount;
      }
    });
    return { rtcState: t.state, pair, nacks, plis, errors: t.errors.length ? t.errors : undefined };
  });
}

/** Video bytes the WebRTC client received so far (undefined for the viewer). */
function videoBytes(page) {
  return page.evaluate(async () => {
    if (!window.__rtc) return undefined;
    let bytes = 0;
    (await window.__rtc.pc.getStats()).forEach((s) => s.type === 'inbound-rtp' && s.kind === 'video' && (bytes = s.bytesReceived));
    return bytes;
  });
}

async function runCase(transport, lossPct, impaired = true) {
  const link = await createImpairedLink(impaired ? { rttMs: RTT_MS, rateKbit: RATE_KBIT, loss: lossPct / 100 } : {});
  let server;
  let browser;
  try {
    const probe = await probeLink(link, { pings: 50 });
    server = await serveOnLinkWith(link, { video: VIDEO });
    const url = new URL(server.url);
    browser = await chromium.launch(chromiumOnLink(link, url.origin, ['--autoplay-policy=no-user-gesture-required']));
    const page = await browser.newPage();
    page.on('crash', () => console.error('page crashed'));
    // websocket: the viewer (WebCodecs H.264 on its canvas); webrtc: a raw page client of the
    // signalling (the browser's RTCPeerConnection, a <video>), until the viewer's ladder lands.
    if (transport === 'webrtc') await startRtcClient(page, url.href);
    else await page.goto(url.href);
    await startMeter(page);
    await page.waitForFunction(() => window.__netMeter.canvasFrames + window.__netMeter.videoFrames > 0, null, { timeout: 60_000 });
    await new Promise((r) => setTimeout(r, WARMUP_MS));
    const bytesBefore = await videoBytes(page);
    const m = await measure(page, MEASURE_MS);
    const state = await viewerState(page);
    const bytesAfter = await videoBytes(page);
    const line = {
      bench: 'net.playback',
      transport,
      source: m.source,
      width: 1280,
      height: 720,
      link: impaired ? 'impaired' : 'clean',
      lossPct,
      rttMs: impaired ? RTT_MS : 0,
      rateKbit: impaired ? RATE_KBIT : null,
      linkRttP50Ms: r2(probe.rttP50Ms),
      seconds: r2(m.seconds),
      frames: m.frames,
      fps: r2(m.fps),
      freezes: m.freezes,
      freezeSecondsPerMinute: r2(m.freezeSecondsPerMinute),
      maxGapMs: r2(m.maxGapMs),
      ...state,
      ...(bytesBefore !== undefined && { receivedKbit: r2(((bytesAfter - bytesBefore) * 8) / m.seconds / 1000) }),
    };
    if (impaired && transport === 'webrtc' && lossPct === 2) Object.assign(line, { targetFps: 28, targetFreezeSecondsPerMinute: 1 });
    console.log(JSON.stringify(line));
  } finally {
    await browser?.close();
    await server?.stop();
    await link.close();
  }
}

// The control: the same namespaces and router, nothing impaired (what this machine's CPU allows).
if (process.env.NET_BENCH_CLEAN !== '0') for (const transport of TRANSPORTS) await runCase(transport, 0, false);
for (const lossPct of LOSSES) {
  for (const transport of TRANSPORTS) await runCase(transport, lossPct);
}
