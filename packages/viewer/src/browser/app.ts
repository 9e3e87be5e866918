/**
 * The browser viewer (served as `/viewer/app.js`): draws the stream on a canvas and builds
 * controls from the app's schema. Runs in the browser only; built on `@reactor/client`.
 * This module is the entry: the connection and the status badges; the canvas (`canvas.ts`),
 * the form builder (`form.ts`), the media panel (`media.ts`) and clips (`clips.ts`) are loaded
 * beside it from the same folder (`/viewer/<module>.js`).
 */
import { ReactorClient, type WelcomeMessage } from '@reactor/client';
import { clearCanvas, onFrame, startVideo } from './canvas.js';
import { buildClips } from './clips.js';
import { $, config, el, errorText, logMessage } from './dom.js';
import { applyState, buildControls } from './form.js';
import { viewer } from './hooks.js';
import { LATENCY_OPTIONS, startLatencyOverlay } from './latency.js';
import { showLoading } from './loading.js';
import { onAudio } from './media.js';
import { startTransport, transportInfo } from './transport.js';

function badge(id: string, text: string, tone: '' | 'ok' | 'warn' | 'err', title = text): void {
  const b = $(id);
  b.textContent = text;
  b.title = title;
  b.className = `badge ${tone}`;
}

/**
 * The card over the stream: why no frame comes (the app refuses its steps: paused, a runner that
 * could not be rebuilt) or the session's error, in full (a badge is one short line). Hidden
 * while frames flow; the last frame drawn stays under it.
 */
function stageCard(text: string | undefined, tone: 'warn' | 'err' = 'warn'): void {
  const card = $('stage-card');
  card.hidden = text === undefined;
  card.textContent = text ?? '';
  card.className = `stage-card ${tone}`;
}

/** The app's standing notice (`status.notice`: e.g. generated weights), a badge beside the session's; none: no badge. */
function notice(text: string | undefined): void {
  let b = document.getElementById('notice');
  if (text === undefined) {
    b?.remove();
    return;
  }
  if (!b) {
    b = el('span', { className: 'badge warn', id: 'notice' });
    $('session').after(b);
  }
  b.textContent = text;
  b.title = text;
}

async function main(): Promise<void> {
  const token = new URLSearchParams(location.search).get('token') ?? undefined;
  const url = `${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}${config.wsPath}`;
  let client: ReactorClient;
  // The first welcome carries the video offer: listen before it can arrive.
  let welcome: WelcomeMessage | undefined;
  try {
    client = new ReactorClient(url, token === undefined ? { reconnect: true, ...LATENCY_OPTIONS } : { token, reconnect: true, ...LATENCY_OPTIONS });
    client.once('welcome', (w) => (welcome = w));
    await client.ready;
  } catch (err) {
    badge('connection', 'disconnected', 'err');
    $('controls').replaceChildren(el('p', { className: 'result err' }, (err as Error).message));
    return;
  }
  viewer.client = client;
  buildControls(client);
  applyState(client.state);
  badge('connection', 'connected', 'ok');
  const session = (): void => {
    const s = client.session;
    showLoading(s);
    notice(s.notice);
    const clients = `${s.clients} client${s.clients === 1 ? '' : 's'}`;
    if (s.error) {
      // The badge names the code; the card carries the whole message (a badge cuts long text off).
      badge('session', `session: ${s.state} · ${s.error.code}`, 'err', `${s.error.code}: ${s.error.message}`);
      stageCard(`${s.state === 'failed' ? 'The app failed to load' : 'The last session ended with an error'}: ${s.error.code}: ${s.error.message}`, 'err');
    } else if (s.state === 'streaming' && s.refused !== undefined) {
      // A session that streams no frame: the app refuses its steps (paused, a broken runner, ...).
      badge('session', `session: not stepping · ${clients}`, 'warn', `the app is not producing frames: ${s.refused}`);
      stageCard(`No frames: the app is not stepping (${s.refused}).`);
    } else {
      badge('session', `session: ${s.state} · ${clients}`, s.state === 'failed' ? 'err' : s.state === 'streaming' ? 'ok' : 'warn');
      stageCard(undefined);
    }
  };
  session();
  client.on('welcome', () => {
    viewer.lastSeq = -1; // a new connection may number its frames afresh
    buildControls(client);
    applyState(client.state);
  });
  client.on('frame', onFrame);
  client.on('state', applyState);
  client.on('session', session);
  client.on('flush', () => {
    clearCanvas();
    for (const p of viewer.audioPlayers.values()) p.clear();
  });
  client.on('audio', onAudio);
  client.on('message', (m) => logMessage(m.name, m.data));
  client.on('error', (e) => logMessage('error', e.message));
  client.on('stats', (s) => {
    $('dropped').textContent = String(s.dropped);
    $('step-ms').textContent = s.stepMs.toFixed(1);
    $('model-fps').textContent = s.fps.toFixed(1);
  });
  client.on('status', (s) => {
    if (s.state === 'open') badge('connection', 'connected', 'ok');
    else if (s.state === 'reconnecting') badge('connection', `reconnecting (attempt ${s.attempt}, ${((s.delayMs ?? 0) / 1000).toFixed(1)} s)`, 'warn');
    else if (s.state === 'closed') badge('connection', 'disconnected', 'err');
  });
  buildClips(client, welcome?.recording);
  startLatencyOverlay(client);
  (viewer as unknown as { transport: typeof transportInfo }).transport = transportInfo;
  startTransport(client).catch((err: unknown) => logMessage('transport', errorText(err)));
  startVideo(client, welcome?.video).catch((err: unknown) => logMessage('video', `coded video unavailable, JPEG instead: ${errorText(err)}`));
}

void main();
