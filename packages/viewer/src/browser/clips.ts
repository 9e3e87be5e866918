/**
 * Clips and recordings: the clip button (an MP4 of the last seconds, with a download link and a
 * preview), the record button and the recordings list (`GET /recordings`, polled). What the
 * token does not grant (`welcome.recording`, its `rec` claim) is disabled, with a tooltip that
 * says why, and the list is not polled without the `record` grant.
 */
import { type ReactorClient, type RecordingInfo, type WelcomeMessage } from '@reactor/client';
import { $, config, el, errorText, formatBytes } from './dom.js';
import { viewer } from './hooks.js';

/** A duration as `m:ss`. */
function clock(s: number): string {
  return `${Math.floor(s / 60)}:${String(Math.floor(s % 60)).padStart(2, '0')}`;
}

/** Fills the recordings list from `GET /recordings` (the viewer's cookie carries the token). */
async function refreshRecordings(): Promise<void> {
  const list = $('recordings');
  let recordings: RecordingInfo[];
  try {
    const res = await fetch(`${config.basePath ?? ''}/recordings`, { cache: 'no-store' });
    if (res.status === 404) {
      list.replaceChildren(el('li', { className: 'empty' }, 'This server keeps no recordings (no recording: section).'));
      return;
    }
    recordings = ((await res.json()) as { recordings: RecordingInfo[] }).recordings;
  } catch {
    return;
  }
  viewer.recordings = recordings;
  const recording = recordings.some((r) => r.state === 'recording');
  $('record-button').textContent = recording ? 'Stop recording' : 'Start recording';
  if (recordings.length === 0) return void list.replaceChildren(el('li', { className: 'empty' }, 'No recordings.'));
  list.replaceChildren(
    ...recordings.map((r) =>
      el(
        'li',
        {},
        el('a', { href: `${config.basePath ?? ''}/recordings/${encodeURIComponent(r.name)}`, target: '_blank', rel: 'noopener' }, r.name),
        ` · ${r.state} · ${clock(r.durationS)} · ${formatBytes(r.bytes)}`,
      ),
    ),
  );
}

/** What this client may do: `welcome.recording` (absent, from an older server: both, and the server answers). */
let granted: NonNullable<WelcomeMessage['recording']> = { clip: true, record: true };
let polling: ReturnType<typeof setInterval> | undefined;

function refusal(button: string, what: 'clip' | 'record', allowed: boolean, title: string): void {
  const b = $<HTMLButtonElement>(button);
  b.disabled = !allowed;
  b.title = allowed ? title : `your token does not grant ${what === 'clip' ? 'clips' : 'recordings'} (ask for one minted with reactor token --rec ${what})`;
}

/** A welcome said what this client's token grants: the buttons and the list follow it. */
export function clipGrants(recording: WelcomeMessage['recording']): void {
  granted = recording ?? { clip: true, record: true };
  refusal('clip-button', 'clip', granted.clip, 'an MP4 of the last seconds of the stream');
  $<HTMLSelectElement>('clip-seconds').disabled = !granted.clip;
  refusal('record-button', 'record', granted.record, 'start or stop recording the session');
  if (!config.recording) return;
  if (!granted.record) {
    if (polling) clearInterval(polling);
    polling = undefined;
    viewer.recordings = [];
    $('recordings').replaceChildren(el('li', { className: 'empty' }, 'Your token does not grant recordings: none listed.'));
  } else if (!polling) {
    void refreshRecordings();
    polling = setInterval(() => void refreshRecordings(), 5000);
  }
}

/** The clip button, the record button and the recordings list; `recording`: the first welcome's grants. */
export function buildClips(client: ReactorClient, recording: WelcomeMessage['recording']): void {
  const out = $('clip-out');
  $('clip-button').addEventListener('click', () => {
    const seconds = Number($<HTMLSelectElement>('clip-seconds').value);
    out.className = 'result';
    out.textContent = 'making the clip...';
    client.clip({ seconds }).then(
      (c) => {
        viewer.clips.push(c);
        out.className = 'result ok';
        const expires = new Date(c.expiresAt).toLocaleString();
        out.replaceChildren(
          el('a', { href: c.url, download: `clip-${Date.now()}.mp4` }, `Download clip (${c.durationS.toFixed(1)} s, ${formatBytes(c.bytes)})`),
          ` · until ${expires}`,
          el('video', { id: 'clip-preview', src: c.url, controls: true, muted: true }),
        );
      },
      (err: unknown) => {
        out.className = 'result err';
        out.textContent = errorText(err);
      },
    );
  });
  $('record-button').addEventListener('click', () => {
    const stop = viewer.recordings.some((r) => r.state === 'recording');
    client.recording(stop ? 'stop' : 'start').then(
      () => refreshRecordings(),
      (err: unknown) => {
        out.className = 'result err';
        out.textContent = errorText(err);
      },
    );
  });
  if (!config.recording) {
    // The server keeps no recordings: nothing to list or poll.
    $('recordings').replaceChildren(el('li', { className: 'empty' }, 'This server keeps no recordings (no recording: section).'));
  }
  clipGrants(recording);
  client.on('welcome', (w) => clipGrants(w.recording));
}
