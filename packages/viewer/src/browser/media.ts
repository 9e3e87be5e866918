/**
 * The media panel: a camera or microphone toggle per inbound track (publishing the device while
 * on, with a preview for a camera) and a player with a mute toggle per outbound audio track.
 */
import { type ClientAudio, type Publication, type ReactorClient, type TrackSchema } from '@reactor/client';
import type { AudioPlayer } from '@reactor/client/browser';
import { $, el, errorText, richText } from './dom.js';
import { loadBrowser, viewer } from './hooks.js';

/** Undo functions of the current media controls (stop cameras, close players) for a rebuild. */
const mediaCleanups: (() => void)[] = [];

function mediaRow(t: TrackSchema, title: string, detail: string): { wrap: HTMLElement; toggle: HTMLInputElement; out: HTMLElement; row: HTMLElement } {
  const wrap = el('div', { className: 'control media' });
  wrap.dataset['track'] = t.name;
  const toggle = el('input', { type: 'checkbox', name: t.name });
  const row = el('div', { className: 'row' }, el('label', { className: 'toggle' }, toggle, el('span')), el('span', {}, title));
  const out = el('div', { className: 'result' });
  out.dataset['track'] = t.name;
  wrap.append(el('label', { className: 'name' }, el('span', {}, t.name), el('code', { className: 'wire' }, detail)), row, out);
  if (t.description) wrap.append(el('div', { className: 'desc' }, ...richText(t.description)));
  return { wrap, toggle, out, row };
}

/** A camera or microphone toggle for an inbound track: publishes the device while on, with a preview for a camera. */
function publishControl(client: ReactorClient, t: TrackSchema): HTMLElement {
  const video = t.kind === 'video';
  const { wrap, toggle, out } = mediaRow(
    t,
    video ? 'camera' : 'microphone',
    video ? `${t.width ?? '?'}x${t.height ?? '?'} @ ${t.fps ?? '?'} fps` : `${t.sampleRate ?? '?'} Hz`,
  );
  toggle.dataset['kind'] = video ? 'camera' : 'microphone';
  const preview = el('video', { muted: true, autoplay: true, playsInline: true, hidden: true });
  Object.assign(preview.style, { width: '100%', borderRadius: '6px', marginTop: '6px', background: '#000' });
  if (video) wrap.append(preview);
  let stream: MediaStream | undefined;
  let pub: Publication | undefined;
  let timer: ReturnType<typeof setInterval> | undefined;
  /** Set when the publication could not start or ended unasked: the line keeps the error. */
  let failed = false;
  /** The server's last refusal of a frame (rate limit, size): shown after the counters. */
  let lastFrameError = '';
  const release = (): void => {
    if (timer) clearInterval(timer);
    timer = undefined;
    for (const tr of stream?.getTracks() ?? []) tr.stop();
    stream = undefined;
    preview.srcObject = null;
    preview.hidden = true;
    if (pub && viewer.publications.get(t.name) === pub) viewer.publications.delete(t.name);
    pub = undefined;
  };
  const fail = (err: unknown): void => {
    failed = true;
    out.className = 'result err';
    out.textContent = errorText(err);
  };
  const start = async (): Promise<void> => {
    failed = false;
    lastFrameError = '';
    out.className = 'result';
    out.textContent = `starting the ${video ? 'camera' : 'microphone'}...`;
    try {
      stream = await navigator.mediaDevices.getUserMedia(
        video
          ? { video: { width: { ideal: t.width ?? 640 }, height: { ideal: t.height ?? 480 }, frameRate: { ideal: t.fps ?? 30 } } }
          : { audio: { channelCount: 1, sampleRate: t.sampleRate ?? 48_000 } },
      );
      if (!toggle.checked) return release();
      const track = video ? stream.getVideoTracks()[0]! : stream.getAudioTracks()[0]!;
      if (video) {
        preview.srcObject = stream;
        preview.hidden = false;
      }
      const p = await client.publish(t.name, track);
      pub = p;
      viewer.publications.set(t.name, p);
      if (!toggle.checked) {
        await p.stop();
        return release();
      }
      p.on('error', (err) => (lastFrameError = errorText(err)));
      p.on('ended', (end) => {
        if (pub !== p || end.reason === 'stopped') return;
        release();
        toggle.checked = false;
        fail({ code: end.reason, message: end.detail ?? `the ${video ? 'camera' : 'microphone'} stopped publishing` });
      });
      const counters = (): void => {
        if (failed) return;
        out.className = lastFrameError ? 'result err' : 'result ok';
        out.textContent = `publishing · sent ${p.framesSent} · dropped ${p.framesDropped}${lastFrameError ? ` · ${lastFrameError}` : ''}`;
      };
      counters();
      timer = setInterval(counters, 250);
    } catch (err) {
      release();
      toggle.checked = false;
      fail(err);
    }
  };
  toggle.addEventListener('change', () => {
    if (toggle.checked) {
      void start();
      return;
    }
    const p = pub;
    release();
    if (!failed) {
      out.className = 'result';
      out.textContent = 'off';
    }
    p?.stop().catch(fail);
  });
  mediaCleanups.push(() => {
    const p = pub;
    release();
    p?.stop().catch(() => undefined);
  });
  return wrap;
}

/** An outbound audio track: played through the SDK's AudioWorklet player, with a mute toggle. */
function audioOutControl(t: TrackSchema): HTMLElement {
  const { wrap, toggle, out } = mediaRow(t, 'mute', `${t.sampleRate ?? 48_000} Hz`);
  toggle.name = 'mute';
  let player: AudioPlayer | undefined;
  let closed = false;
  const status = (): void => {
    if (!player) return;
    if (player.suspended) {
      out.className = 'result err';
      out.textContent = 'the browser holds audio back: click anywhere on the page to hear it';
    } else {
      out.className = 'result ok';
      out.textContent = player.muted ? 'muted' : 'playing';
    }
  };
  loadBrowser()
    .then(async ({ AudioPlayer }) => {
      if (closed) return;
      const p = new AudioPlayer({ sampleRate: t.sampleRate ?? 48_000, muted: toggle.checked });
      player = p;
      viewer.audioPlayers.set(t.name, p);
      p.context.addEventListener('statechange', status);
      await p.start();
      status();
      // Browsers without autoplay permission start suspended: the first click anywhere resumes.
      if (p.suspended) document.addEventListener('click', () => void p.resume().then(status), { once: true });
    })
    .catch((err: unknown) => {
      out.className = 'result err';
      out.textContent = `cannot play audio: ${errorText(err)}`;
    });
  toggle.addEventListener('change', () => {
    if (player) player.muted = toggle.checked;
    status();
  });
  mediaCleanups.push(() => {
    closed = true;
    if (player && viewer.audioPlayers.get(t.name) === player) viewer.audioPlayers.delete(t.name);
    void player?.close();
  });
  return wrap;
}

export function onAudio(a: ClientAudio): void {
  viewer.audioChunks++;
  viewer.audioPlayers.get(a.trackName)?.push(a);
}

/** The media panel: one control per inbound track and per outbound audio track; none when the app has neither. */
export function buildMedia(client: ReactorClient): void {
  for (const undo of mediaCleanups.splice(0)) undo();
  const rows: HTMLElement[] = [];
  for (const t of client.schema.tracks) {
    if (t.direction === 'in') rows.push(publishControl(client, t));
    else if (t.kind === 'audio') rows.push(audioOutControl(t));
  }
  let panel = document.getElementById('media');
  if (rows.length === 0) {
    panel?.remove();
    return;
  }
  if (!panel) {
    panel = el('section', { className: 'panel', id: 'media' });
    $('controls').closest('section')!.before(panel);
  }
  panel.replaceChildren(el('h2', {}, 'Media'), ...rows);
}
