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
//                                                 NET_BENCH_CLEAN=0 skips the control; NET_BENCH_SERVER_LOG=1
//                                                 prints the server's WebRTC log lines: tier moves, playout delay)
import { chromium } from '../test/node_modules/playwright-core/index.mjs';
import { createImpairedLink, impairedLinkUnavailable, probeLink } from '../scripts/net/impaired-link.mjs';
import { chromiumOnLink, measure, serveOnLinkWith, startMeter } from '../scripts/net/playback.mjs';

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

/** What the viewer shows: codec and tier (WebSocket), transport, why it fell back, and the WebRTC link's getStats() figures. */
async function viewerState(page) {
  return page.evaluate(() => {
    const v = window.reactorViewer;
    const t = v.transport;
    const st = t?.stats;
    return {
      shown: document.getElementById('transport')?.textContent ?? undefined,
      current: t?.current,
      ...(t?.reason && { fellBackBecause: t.reason }),
      codec: v.video?.codec,
      tier: v.video?.tier,
      ...(st && {
        rtcRttMs: st.rttMs === undefined ? undefined : Math.round(st.rttMs),
        rtcBitrateKbit: st.bitrate === undefined ? undefined : Math.round(st.bitrate / 1000),
        rtcNacks: st.nacks,
        rtcPlis: st.plis,
        rtcPacketsLost: st.packetsLost,
        chromiumFreezes: st.freezes,
      }),
    };
  });
}

async function runCase(transport, lossPct, impaired = true) {
  // The loss starts once the viewer plays (the viewer gives WebRTC 5 s to connect, which DTLS
  // retransmissions under loss on a loaded machine can overrun); rate and delay from the start.
  const link = await createImpairedLink(impaired ? { rttMs: RTT_MS, rateKbit: RATE_KBIT } : {});
  let server;
  let browser;
  try {
    link.setLoss(lossPct / 100);
    const probe = await probeLink(link, { pings: 50 });
    link.setLoss(0);
    server = await serveOnLinkWith(link, { video: VIDEO });
    const url = new URL(server.url);
    browser = await chromium.launch(chromiumOnLink(link, url.origin, ['--autoplay-policy=no-user-gesture-required']));
    const page = await browser.newPage();
    page.on('crash', () => console.error('page crashed'));
    // The viewer with ?transport=: websocket (WebCodecs H.264 on its canvas) or webrtc (its
    // RTCPeerConnection; each frame drawn from a <video> the meter watches).
    url.searchParams.set('transport', transport);
    await page.goto(url.href);
    await startMeter(page);
    await page.waitForFunction(() => window.__netMeter.canvasFrames + window.__netMeter.videoFrames > 0, null, { timeout: 60_000 });
    if (transport === 'webrtc')
      await page.waitForFunction(() => window.reactorViewer.transport?.current === 'webrtc' || window.reactorViewer.transport?.reason, null, {
        timeout: 30_000,
      });
    link.setLoss(lossPct / 100);
    await new Promise((r) => setTimeout(r, WARMUP_MS));
    const m = await measure(page, MEASURE_MS);
    const state = await viewerState(page);
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
    };
    if (transport === 'webrtc' && state.current !== 'webrtc')
      throw new Error(`the viewer asked for WebRTC plays over ${state.current}: ${state.fellBackBecause}`);
    if (impaired && transport === 'webrtc' && lossPct === 2) Object.assign(line, { targetFps: 28, targetFreezeSecondsPerMinute: 1 });
    console.log(JSON.stringify(line));
    // NET_BENCH_SERVER_LOG=1: the server's WebRTC log lines (tier moves, playout delay) on stderr.
    if (process.env.NET_BENCH_SERVER_LOG === '1')
      for (const l of `${server.stdout()}${server.stderr()}`.split('\n')) if (/webrtc viewer/.test(l)) console.error(l);
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
