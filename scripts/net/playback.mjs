// The viewer end of the network tests and benchmarks: `reactor run --manifest` in the link's
// server namespace, Debian's Chromium in its viewer namespace (playwright's executablePath is
// scripts/net/in-netns.sh), and a meter in the page that records when each frame is presented.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '..', '..');
const cli = join(repo, 'packages/cli/dist/main.js');

/** A token for the server (a non-loopback bind needs one). */
export const NET_TOKEN = 'net-test-token-0123456789';

/**
 * Writes a manifest serving scripts/net/pattern-app.mjs on the link's server address (port 0)
 * with `server:` keys from `serverYaml` (lines, indented under `server:`), and runs
 * `reactor run --manifest` in the server namespace. Resolves with the viewer URL (token included).
 */
export async function serveOnLink(link, { serverYaml = [], env = {} } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'reactor-net-'));
  const manifest = join(dir, 'reactor.yaml');
  writeFileSync(
    manifest,
    [
      'model: { name: net-pattern, version: 0.0.1 }',
      'runtime:',
      `  import: ${join(here, 'pattern-app.mjs')}:PatternApp`,
      'server:',
      `  host: ${link.server.ip}`,
      '  port: 0',
      `  token: ${NET_TOKEN}`,
      ...serverYaml.map((l) => `  ${l}`),
      '',
    ].join('\n'),
  );
  const child = link.spawn('server', process.execPath, [cli, 'run', '--manifest', manifest], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  });
  return viewerUrlOf(child, () => rmSync(dir, { recursive: true, force: true }));
}

/**
 * The same server through `serve()` (scripts/net/serve-pattern.mjs) with ServerOptions as JSON
 * (`options`: video, webrtc, ...), for what the manifest cannot say yet. Resolves like serveOnLink.
 */
export async function serveOnLinkWith(link, options = {}, env = {}) {
  const child = link.spawn('server', process.execPath, [join(here, 'serve-pattern.mjs')], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env, REACTOR_NET_SERVE: JSON.stringify({ host: link.server.ip, token: NET_TOKEN, ...options }) },
  });
  return viewerUrlOf(child, () => undefined);
}

/** Waits for the "Viewer: <url>" line of a server child; `stop()` ends it and runs `cleanup`. */
async function viewerUrlOf(child, cleanup) {
  let out = '';
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  const exited = new Promise((r) => child.once('exit', (code, signal) => r(code ?? signal)));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(t);
    }
    cleanup();
  };
  try {
    const url = await new Promise((res, rej) => {
      const timer = setTimeout(() => rej(new Error(`the server printed no viewer URL in 60 s:\n${err}`)), 60_000);
      child.stdout.on('data', (d) => {
        out += d;
        const m = /Viewer: (\S+)/.exec(out);
        if (m) {
          clearTimeout(timer);
          res(m[1]);
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        rej(new Error(`the server exited with ${code} before printing the viewer URL:\n${err}`));
      });
    });
    return { url, child, stderr: () => err, stdout: () => out, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

/**
 * playwright `launch()` options for Chromium inside the link's viewer namespace. The server's
 * origin is not a secure context (not loopback, no TLS); WebCodecs needs one, so it is marked as
 * one (`--unsafely-treat-insecure-origin-as-secure`), as a user would serve it over HTTPS.
 */
export function chromiumOnLink(link, origin, extraArgs = []) {
  return {
    executablePath: join(here, 'in-netns.sh'),
    env: { ...process.env, REACTOR_NETNS: link.viewer.ns, REACTOR_NETNS_EXEC: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium' },
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
      `--unsafely-treat-insecure-origin-as-secure=${origin}`,
      ...extraArgs,
    ],
  };
}

/**
 * Starts the page's playback meter: the time of every frame presented, from the viewer's canvas
 * (`reactorViewer.framesDrawn`, checked every animation frame) or, when a `<video>` plays a
 * MediaStream, from `requestVideoFrameCallback` (each presented frame).
 */
export async function startMeter(page) {
  await page.evaluate(() => {
    const m = { canvas: [], video: [], canvasFrames: 0, videoFrames: 0 };
    window.__netMeter = m;
    let drawn = window.reactorViewer?.framesDrawn ?? 0;
    const tick = (now) => {
      const d = window.reactorViewer?.framesDrawn ?? 0;
      if (d > drawn) {
        m.canvasFrames += d - drawn;
        m.canvas.push(now);
        drawn = d;
      }
      requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
    const watched = new WeakSet();
    const watch = () => {
      for (const v of document.querySelectorAll('video')) {
        if (watched.has(v) || !(v.srcObject instanceof MediaStream)) continue;
        watched.add(v);
        const onFrame = (now, meta) => {
          m.videoFrames += 1;
          m.video.push(meta.presentationTime ?? now);
          v.requestVideoFrameCallback(onFrame);
        };
        v.requestVideoFrameCallback(onFrame);
      }
    };
    watch();
    setInterval(watch, 250);
  });
}

/**
 * What the page presented over the next `ms`: frames, fps, freezes (gaps over 200 ms between
 * two presented frames, and the first frame's wait counts as one when none came for 200 ms) and
 * the seconds they lasted, per minute too; `source`: `video` when a `<video>` presented frames
 * (WebRTC), else `canvas`.
 */
export async function measure(page, ms) {
  const from = await page.evaluate(() => ({ t: performance.now(), c: window.__netMeter.canvas.length, v: window.__netMeter.video.length }));
  await new Promise((r) => setTimeout(r, ms));
  const got = await page.evaluate(
    (f) => ({ t: performance.now(), canvas: window.__netMeter.canvas.slice(f.c), video: window.__netMeter.video.slice(f.v) }),
    from,
  );
  const source = got.video.length > 0 ? 'video' : 'canvas';
  const times = source === 'video' ? got.video : got.canvas;
  const seconds = (got.t - from.t) / 1000;
  let freezes = 0;
  let freezeMs = 0;
  let maxGapMs = 0;
  let prev = from.t;
  for (const t of [...times, got.t]) {
    const gap = t - prev;
    if (gap > maxGapMs) maxGapMs = gap;
    if (gap > 200) {
      freezes++;
      freezeMs += gap;
    }
    prev = t;
  }
  return {
    source,
    seconds,
    frames: times.length,
    fps: times.length / seconds,
    freezes,
    freezeSeconds: freezeMs / 1000,
    freezeSecondsPerMinute: freezeMs / 1000 / (seconds / 60),
    maxGapMs,
  };
}

/**
 * A raw WebRTC client in the page (no SDK, no viewer): the browser's RTCPeerConnection with
 * `rtcConfig` (iceServers, iceTransportPolicy), a recvonly video transceiver, signalled over
 * the server's WebSocket as docs/protocol.md "WebRTC" says; the video plays in a `<video>` the
 * meter watches. Opens `${origin}/health?token=...` first (a same-origin page without the viewer).
 * `window.__rtc` keeps: state (the last rtc_state), reason, errors, candidates (the server's),
 * binaryWhileConnected (WebSocket media frames while WebRTC is connected), binaryAfterEnd (those
 * after `rtc_state` failed or closed: the media back on the WebSocket).
 */
export async function startRtcClient(page, url, rtcConfig = {}) {
  const u = new URL(url);
  await page.goto(`${u.origin}/health${u.search}`);
  await page.evaluate(async (config) => {
    const t = { state: undefined, reason: undefined, errors: [], candidates: [], binaryWhileConnected: 0, binaryAfterEnd: 0 };
    window.__rtc = t;
    const ws = new WebSocket(`${location.origin.replace(/^http/, 'ws')}/ws${location.search}`);
    ws.binaryType = 'arraybuffer';
    const send = (m) => ws.send(JSON.stringify(m));
    const pc = new RTCPeerConnection(config);
    t.pc = pc;
    pc.addTransceiver('video', { direction: 'recvonly' });
    pc.onicecandidate = (e) =>
      send({
        type: 'rtc_candidate',
        candidate: e.candidate ? e.candidate.candidate : '',
        ...(e.candidate ? { sdpMid: e.candidate.sdpMid, sdpMLineIndex: e.candidate.sdpMLineIndex } : {}),
      });
    pc.ontrack = (e) => {
      const v = document.createElement('video');
      v.muted = true;
      v.autoplay = true;
      v.playsInline = true;
      document.body.appendChild(v);
      v.srcObject = new MediaStream([e.track]);
      void v.play().catch(() => undefined);
    };
    ws.onmessage = async (ev) => {
      if (typeof ev.data !== 'string') {
        if (t.state === 'connected') t.binaryWhileConnected++;
        if (t.state === 'failed' || t.state === 'closed') t.binaryAfterEnd++;
        return;
      }
      const msg = JSON.parse(ev.data);
      if (msg.type === 'welcome') {
        await pc.setLocalDescription(await pc.createOffer());
        send({ type: 'rtc_offer', sdp: pc.localDescription.sdp });
      } else if (msg.type === 'rtc_answer') {
        for (const line of msg.sdp.split(/\r?\n/)) if (line.startsWith('a=candidate:')) t.candidates.push(line.slice(2));
        await pc.setRemoteDescription({ type: 'answer', sdp: msg.sdp });
      } else if (msg.type === 'rtc_candidate') {
        if (msg.candidate) {
          t.candidates.push(msg.candidate);
          await pc
            .addIceCandidate({ candidate: msg.candidate, sdpMid: msg.sdpMid, sdpMLineIndex: msg.sdpMLineIndex })
            .catch((e) => t.errors.push(`addIceCandidate: ${e.message}`));
        }
      } else if (msg.type === 'rtc_state') {
        t.state = msg.state;
        t.reason = msg.reason;
      } else if (msg.type === 'error') {
        t.errors.push(`${msg.code}: ${msg.message}`);
      }
    };
    await new Promise((res, rej) => {
      ws.onopen = res;
      ws.onerror = () => rej(new Error('websocket error'));
    });
  }, rtcConfig);
}
