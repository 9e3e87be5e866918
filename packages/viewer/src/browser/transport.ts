/**
 * The viewer's transport ladder: `?transport=auto` (WebRTC when it connects within the server's
 * window, `welcome.webrtc.connectTimeoutMs` + 1 s, else the WebSocket with WebCodecs, else JPEG),
 * `webrtc`, or `websocket` (the default). The peer connection takes the ICE servers and policy the
 * server gives in `welcome.webrtc` (reactor.yaml `server.webrtc`); the page has no override of its
 * own (TURN credentials do not belong in a URL). A badge says
 * which transport carries the media and why it fell back; a line under it shows the WebRTC
 * link's round-trip time, bitrate, fps and freezes (from `getStats()`); the status line's
 * bitrate, tier (`stats.webrtc`), codec and frame number follow the link while it carries the media. When the link fails later
 * (`rtc_state failed`), media is back on the WebSocket by itself and the badge says so.
 */
import { WebRtcLink, type ReactorClient, type RtcTrack } from '@reactor/client';
import { drawRtcVideo } from './canvas.js';
import { $, el, logMessage } from './dom.js';
import { viewer } from './hooks.js';

/** What `window.reactorViewer.transport` shows tests and debugging. */
export const transportInfo = {
  mode: 'websocket' as 'auto' | 'webrtc' | 'websocket',
  /** Where media comes now. */
  current: 'websocket' as 'webrtc' | 'websocket',
  /** Why it is not WebRTC (when it was asked for). */
  reason: undefined as string | undefined,
  link: undefined as WebRtcLink | undefined,
  stats: undefined as Awaited<ReturnType<WebRtcLink['stats']>> | undefined,
};

function badge(text: string, tone: '' | 'ok' | 'warn' | 'err', title = text): void {
  let b = document.getElementById('transport');
  if (!b) {
    b = el('span', { className: 'badge', id: 'transport' });
    $('connection').after(b);
  }
  b.textContent = text;
  b.title = title;
  b.className = `badge ${tone}`;
}

function statsLine(text: string): void {
  let line = document.getElementById('rtc-stats');
  if (!line) {
    line = el('span', { className: 'badge', id: 'rtc-stats' });
    $('transport').after(line);
  }
  line.textContent = text;
}

function play(t: RtcTrack): void {
  const stream = new MediaStream([t.track as MediaStreamTrack]);
  if (t.kind === 'audio') {
    const a = document.createElement('audio');
    a.autoplay = true;
    a.srcObject = stream;
    a.hidden = true;
    document.body.appendChild(a);
    a.play().catch(() => logMessage('audio', 'the browser held WebRTC audio until a click (autoplay policy)'));
    return;
  }
  const v = document.createElement('video');
  v.dataset['rtcTrack'] = t.name;
  v.muted = true;
  v.autoplay = true;
  v.playsInline = true;
  v.hidden = true;
  v.srcObject = stream;
  document.body.appendChild(v);
  // The frame's RTP timestamp (Chromium gives it for WebRTC video) pairs it with the `applied` message that named it: command-to-pixel over WebRTC.
  const onFrame = (_now: number, frame: VideoFrameCallbackMetadata): void => {
    drawRtcVideo(v, t.name, frame);
    v.requestVideoFrameCallback(onFrame);
  };
  v.requestVideoFrameCallback(onFrame);
  void v.play().catch(() => undefined);
}

/** How the selected candidate pair carries the media, in words: `UDP`, `TCP`, `TURN over UDP`, `TURN over TLS`. */
export function pathName(c: { local: string; remote: string; protocol: string }): string {
  const p = c.protocol.toUpperCase();
  return c.local === 'relay' || c.remote === 'relay' ? `TURN over ${p}` : p;
}

/**
 * A WebRTC viewer's tier: its name (the server picks it from this viewer's own feedback and names
 * it in `stats.webrtc`) and the picture size it decodes.
 */
function rtcTier(client: ReactorClient): string {
  const v = document.querySelector<HTMLVideoElement>('video[data-rtc-track]');
  const picture = v && v.videoWidth > 0 ? `${v.videoWidth}x${v.videoHeight}` : undefined;
  const tier = client.stats?.webrtc?.tier;
  return tier === undefined ? (picture ?? '-') : picture === undefined ? tier : `${tier} (${picture})`;
}

/** Starts the transport the page's `?transport=` asks for. */
export async function startTransport(client: ReactorClient): Promise<void> {
  const asked = new URLSearchParams(location.search).get('transport');
  const mode = asked === 'auto' || asked === 'webrtc' ? asked : 'websocket';
  transportInfo.mode = mode;
  if (mode === 'websocket') {
    badge('websocket', '', 'media over the WebSocket (add ?transport=auto for WebRTC)');
    return;
  }
  badge('webrtc: connecting', 'warn');
  const link = WebRtcLink.start(client);
  client.rtc = link;
  transportInfo.link = link;
  link.on('track', play);
  // The link says it failed twice (its state, then `ready` rejecting with the same reason): told once.
  let told: string | undefined;
  const fellBack = (reason: string): void => {
    const why = reason.replace(/^(WebRTC failed: )+/, '');
    if (told === why) return;
    told = why;
    transportInfo.current = 'websocket';
    transportInfo.reason = why;
    badge('websocket (WebRTC failed)', mode === 'webrtc' ? 'err' : 'warn', `WebRTC failed, media is on the WebSocket: ${why}`);
    logMessage('transport', `WebRTC failed, media on the WebSocket: ${why}`);
  };
  link.on('state', (s) => {
    viewer.media = s.state === 'connected' ? 'webrtc' : 'websocket';
    if (s.state === 'connected') {
      told = undefined;
      transportInfo.current = 'webrtc';
      transportInfo.reason = undefined;
      badge('webrtc', 'ok', 'media over WebRTC');
      // The path, once the browser names it: UDP direct, or TCP, or through TURN.
      void link.stats().then((st) => {
        if (link.state === 'connected' && st.candidates) badge('webrtc', 'ok', `media over WebRTC (${pathName(st.candidates)})`);
      });
    } else if (s.state === 'failed') {
      fellBack(s.reason ?? 'failed');
    }
  });
  try {
    await link.ready;
  } catch (err) {
    fellBack((err as Error).message);
    return;
  }
  setInterval(() => {
    if (link.state !== 'connected') return;
    void link.stats().then((s) => {
      transportInfo.stats = s;
      const rtt = s.rttMs === undefined ? '-' : `${s.rttMs.toFixed(0)} ms`;
      const rate = s.bitrate === undefined ? '-' : `${(s.bitrate / 1e6).toFixed(2)} Mbit/s`;
      const via = s.candidates ? ` · ${s.candidates.local}/${s.candidates.remote}` : '';
      if (s.candidates) badge('webrtc', 'ok', `media over WebRTC (${pathName(s.candidates)})`);
      // The status line, from the link: what the browser decodes, not the WebSocket receiver's last figures.
      $('bitrate').textContent = s.bitrate === undefined ? '-' : `${(s.bitrate / 1e6).toFixed(2)} Mbit/s`;
      $('tier').textContent = rtcTier(client);
      const codec = client.stats?.webrtc?.codec;
      if (codec) $('codec').textContent = codec;
      statsLine(`rtt ${rtt} · ${rate} · ${s.fps ?? '-'} fps · ${s.freezes} freezes (${(s.freezeMs / 1000).toFixed(1)} s)${via}`);
    });
  }, 1000);
}
