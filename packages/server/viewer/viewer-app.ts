/**
 * The browser viewer (served as `/viewer/app.js`): draws the stream on a canvas and builds
 * controls from the app's schema. Runs in the browser only; built on `@reactor/client`.
 */
import {
  CommandFailedError,
  FrameEncoding,
  ReactorClient,
  type ClientAudio,
  type ClipResult,
  type RecordingInfo,
  type ClientFrame,
  type CommandSchema,
  type JsonSchema,
  type Publication,
  type TrackSchema,
  type VideoOffer,
  type WelcomeMessage,
} from '@reactor/client';
import type * as ClientBrowser from '@reactor/client/browser';
import type { AudioPlayer, VideoReceiver, VideoReceiverClient } from '@reactor/client/browser';

const $ = <T extends HTMLElement>(id: string): T => document.getElementById(id) as T;

const config = JSON.parse($('reactor-config').textContent ?? '{}') as { wsPath: string; basePath?: string; recording?: boolean };
const canvas = $<HTMLCanvasElement>('stream');
const ctx = canvas.getContext('2d')!;
const trackSelect = $<HTMLSelectElement>('track');

/** Exposed for tests and debugging: the live client and counters. */
const viewer = {
  client: undefined as ReactorClient | undefined,
  framesDrawn: 0,
  lastSeq: -1,
  /** Live publications by inbound track name (camera, microphone). */
  publications: new Map<string, Publication>(),
  /** Audio players by outbound audio track name. */
  audioPlayers: new Map<string, AudioPlayer>(),
  /** Audio chunks received. */
  audioChunks: 0,
  /** Coded video (WebCodecs), when the server offers a codec this browser decodes; else undefined (JPEG as before). */
  video: undefined as VideoReceiver | undefined,
  /** `performance.now()` when the server answered the first `select_video`. */
  videoSelectedAt: undefined as number | undefined,
  /** Every decoded picture drawn: seq, `performance.now()` at arrival and at decode, its encoding. */
  decodeLog: [] as { seq: number; receivedAt: number; decodedAt: number; encoding: number; key: boolean }[],
  /** Clips this page took (`client.clip()` answers). */
  clips: [] as ClipResult[],
  /** The last `GET /recordings` listing. */
  recordings: [] as RecordingInfo[],
  /** Loads the SDK's browser entry (`AudioPlayer`, `cameraFrames`, `microphoneChunks`). */
  browser: (): Promise<BrowserModule> => loadBrowser(),
};
(window as unknown as { reactorViewer: typeof viewer }).reactorViewer = viewer;

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Partial<HTMLElementTagNameMap[K]> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const e = Object.assign(document.createElement(tag), props);
  e.append(...children);
  return e;
}

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

// ---- drawing -------------------------------------------------------------------------------

let pending: ClientFrame | undefined;
let decoding = false;
let selectedTrack = 0;
const drawTimes: number[] = [];

function onFrame(f: ClientFrame): void {
  if (f.track !== selectedTrack || viewer.video) return; // the receiver decodes and draws every frame then
  if (f.encoding === FrameEncoding.H264 || f.encoding === FrameEncoding.Vp8) return; // only the receiver decodes these
  pending = f; // newest wins: a frame that arrives while one is decoding replaces the waiting one
  if (!decoding) void drawLoop();
}

async function drawLoop(): Promise<void> {
  decoding = true;
  try {
    while (pending) {
      const f = pending;
      pending = undefined;
      if (f.seq <= viewer.lastSeq) continue;
      let decodedAt = 0;
      if (f.encoding === FrameEncoding.Jpeg) {
        const bitmap = await createImageBitmap(new Blob([f.payload as Uint8Array<ArrayBuffer>], { type: 'image/jpeg' }));
        decodedAt = performance.now();
        // The receiver may have drawn a newer picture while this one decoded.
        if (f.seq <= viewer.lastSeq) {
          bitmap.close();
          continue;
        }
        fitCanvas(f.width, f.height);
        ctx.drawImage(bitmap, 0, 0);
        bitmap.close();
      } else {
        fitCanvas(f.width, f.height);
        const rgba = new Uint8ClampedArray(f.width * f.height * 4);
        const src = f.payload;
        for (let i = 0, j = 0; i < src.length; i += 3, j += 4) {
          rgba[j] = src[i]!;
          rgba[j + 1] = src[i + 1]!;
          rgba[j + 2] = src[i + 2]!;
          rgba[j + 3] = 255;
        }
        decodedAt = performance.now();
        ctx.putImageData(new ImageData(rgba, f.width, f.height), 0, 0);
      }
      viewer.framesDrawn++;
      viewer.lastSeq = f.seq;
      $('seq').textContent = String(f.seq);
      drawTimes.push(performance.now());
      logDecoded({ seq: f.seq, receivedAt: f.receivedAt, decodedAt, encoding: f.encoding, key: true });
    }
  } catch (err) {
    console.error('cannot draw frame', err);
  } finally {
    decoding = false;
  }
}

/** Sizes the canvas to a frame of `w`x`h` (and says so), when it changed or nothing was drawn yet. */
function fitCanvas(w: number, h: number): void {
  if (canvas.width === w && canvas.height === h && viewer.framesDrawn > 0) return;
  canvas.width = w;
  canvas.height = h;
  $('size').textContent = `${w}x${h}`;
  canvas.parentElement!.style.aspectRatio = `${w} / ${h}`;
}

/** A picture from the coded-video receiver: drawn at once (the receiver closes it after this returns). */
function drawVideoFrame(frame: VideoFrame, info: ClientBrowser.DecodedVideoInfo): void {
  if (info.track !== viewer.client?.schema.tracks[selectedTrack]?.name) return;
  // Until the receiver's selection is answered both it and drawLoop draw JPEG frames: never go back.
  if (info.seq <= viewer.lastSeq) return;
  fitCanvas(frame.displayWidth, frame.displayHeight);
  ctx.drawImage(frame, 0, 0);
  viewer.framesDrawn++;
  viewer.lastSeq = info.seq;
  $('seq').textContent = String(info.seq);
  const now = performance.now();
  drawTimes.push(now);
  logDecoded({ seq: info.seq, receivedAt: info.receivedAt ?? now, decodedAt: info.decodedAt, encoding: info.encoding, key: info.key });
}

function logDecoded(entry: (typeof viewer.decodeLog)[number]): void {
  viewer.decodeLog.push(entry);
  if (viewer.decodeLog.length > 2000) viewer.decodeLog.splice(0, 1000);
}

function clearCanvas(): void {
  pending = undefined;
  ctx.fillStyle = '#000';
  ctx.fillRect(0, 0, canvas.width, canvas.height);
}

setInterval(() => {
  const now = performance.now();
  while (drawTimes.length && drawTimes[0]! < now - 1000) drawTimes.shift();
  $('fps').textContent = String(drawTimes.length);
}, 250);

// ---- controls ------------------------------------------------------------------------------

type Field = JsonSchema & {
  type?: string | string[];
  enum?: unknown[];
  minimum?: number;
  maximum?: number;
  multipleOf?: number;
  description?: string;
  default?: unknown;
};

/**
 * A description as text with `code` spans: the app writes Markdown-style backticks; the page
 * shows them as <code> (built as nodes, never as HTML).
 */
function richText(text: string): (Node | string)[] {
  return text.split(/`([^`]+)`/).map((part, i) => (i % 2 === 1 ? el('code', {}, part) : part));
}

/**
 * A slider step that lands on round values: the schema's `multipleOf`, else the largest power
 * of ten at most a hundredth of the range that keeps `min` and `value` on the grid (so a
 * default of 2 on 0.08..10 stays 2, not 1.92); `any` when no such step exists.
 */
function sliderStep(min: number, max: number, value: unknown, multipleOf: number | undefined): string {
  if (typeof multipleOf === 'number' && multipleOf > 0) return String(multipleOf);
  const onGrid = (x: number, step: number): boolean => Math.abs(x / step - Math.round(x / step)) < 1e-9;
  let step = 10 ** Math.floor(Math.log10((max - min) / 100));
  for (let i = 0; i < 6; i++, step /= 10) {
    if (onGrid(min, step) && (typeof value !== 'number' || onGrid(value, step))) return String(Number(step.toPrecision(1)));
  }
  return 'any';
}

/** A number as the slider shows it: no floating-point noise (0.30000000000000004 -> 0.3). */
function formatNumber(v: number): string {
  return String(Number(v.toPrecision(12)));
}

/** Updates a control's value from the state (skipped while the user is editing it). */
const stateUpdaters = new Map<string, (value: unknown) => void>();

function showResult(out: HTMLElement, p: Promise<unknown>): void {
  out.className = 'result';
  out.textContent = '...';
  p.then(
    (result) => {
      out.className = 'result ok';
      out.textContent = result === undefined ? 'ok' : `ok: ${JSON.stringify(result)}`;
    },
    (err: Error) => {
      out.className = 'result err';
      out.textContent = err instanceof CommandFailedError || typeof (err as { code?: unknown }).code === 'string' ? errorText(err) : err.message;
    },
  );
}

/**
 * An upload parameter: marked `x-reactor-upload` by the runtime, or shaped like an
 * `UploadRef` (`{ properties: { uploadId } }`).
 */
function isUpload(f: Field): boolean {
  const props = f['properties'] as Record<string, unknown> | undefined;
  return f['x-reactor-upload'] !== undefined || (props !== undefined && 'uploadId' in props);
}

/** The `accept` attribute of an upload's file picker, from the schema's allowed types, if it lists them. */
function uploadAccept(f: Field): string | undefined {
  const u = f['x-reactor-upload'] as { mimeTypes?: unknown } | undefined;
  return Array.isArray(u?.mimeTypes) && u.mimeTypes.every((m) => typeof m === 'string') ? u.mimeTypes.join(',') : undefined;
}

function formatBytes(n: number): string {
  return n < 1024 ? `${n} B` : n < 1024 * 1024 ? `${(n / 1024).toFixed(1)} KB` : `${(n / 1024 / 1024).toFixed(1)} MB`;
}

/** An error as one line: `code: message` for the SDK's errors, `Name: message` for the browser's. */
function errorText(err: unknown): string {
  if (err instanceof CommandFailedError) {
    const details = err.details?.map((d) => `${d.field}: ${d.message} (${d.constraint})`).join('; ');
    return `${err.code}: ${details || err.message}`;
  }
  const e = err as { code?: unknown; name?: string; message?: string };
  if (typeof e?.code === 'string') return `${e.code}: ${e.message ?? ''}`;
  return `${e?.name ?? 'Error'}: ${e?.message ?? String(err)}`;
}

/**
 * Sends a command whose parameters may hold files (upload fields): each file is uploaded first
 * (`client.upload`), and the command carries its `{ uploadId }`. The result line says what runs.
 */
async function sendWithUploads(client: ReactorClient, name: string, params: Record<string, unknown>, out: HTMLElement): Promise<unknown> {
  const resolved: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(params)) {
    if (v instanceof File) {
      out.textContent = `uploading ${v.name} (${formatBytes(v.size)})...`;
      resolved[k] = await client.upload(v, { command: name, field: k });
    } else {
      resolved[k] = v;
    }
  }
  out.textContent = '...';
  return client.send(name, resolved);
}

function fieldType(f: Field): string {
  const t = Array.isArray(f.type) ? f.type.find((x) => x !== 'null') : f.type;
  if (f.enum) return 'enum';
  return t ?? 'string';
}

/**
 * One input for a JSON Schema property; `read()` returns the value to send. `initial` is the
 * value it starts with; `undefined` (a required event parameter without a default) gives an
 * empty, required input instead of a control that would show a value nobody chose.
 */
function inputFor(
  name: string,
  f: Field,
  onCommit: () => void,
  initial: unknown,
): { node: HTMLElement; read(): unknown; write(v: unknown): void; focusEl: HTMLElement } {
  if (isUpload(f)) {
    // A file picker that also takes a dropped file; read() gives the File, uploaded when sent.
    const input = el('input', { type: 'file', name });
    const accept = uploadAccept(f);
    if (accept) input.accept = accept;
    const chosen = el('span', { className: 'file' }, 'drop a file here, or choose one');
    const show = (): void => {
      const file = input.files?.[0];
      chosen.textContent = file ? `${file.name} (${formatBytes(file.size)})` : 'drop a file here, or choose one';
    };
    input.addEventListener('change', () => {
      show();
      if (input.files?.[0]) onCommit();
    });
    const node = el('label', { className: 'drop' }, input, chosen);
    Object.assign(node.style, { display: 'flex', flexDirection: 'column', gap: '4px', padding: '8px', border: '1px dashed #3a4152', borderRadius: '6px' });
    node.addEventListener('dragover', (e) => {
      e.preventDefault();
      node.style.borderColor = '#6aa6ff';
    });
    node.addEventListener('dragleave', () => (node.style.borderColor = '#3a4152'));
    node.addEventListener('drop', (e) => {
      e.preventDefault();
      node.style.borderColor = '#3a4152';
      if (!e.dataTransfer?.files.length) return;
      input.files = e.dataTransfer.files;
      input.dispatchEvent(new Event('change'));
    });
    return { node, focusEl: input, read: () => input.files?.[0], write: () => undefined };
  }
  const t = fieldType(f);
  if (t === 'boolean') {
    const input = el('input', { type: 'checkbox', name });
    input.addEventListener('change', onCommit);
    const node = el('label', { className: 'toggle' }, input, el('span'));
    return { node, focusEl: input, read: () => input.checked, write: (v) => (input.checked = v === true) };
  }
  if (t === 'enum') {
    const select = el('select', { name });
    // No value yet: an empty choice, so nothing is sent that the user did not pick.
    if (initial === undefined) select.append(el('option', { value: '', disabled: true, selected: true }, 'choose...'));
    for (const v of f.enum ?? []) select.append(el('option', { value: JSON.stringify(v) }, String(v)));
    select.addEventListener('change', onCommit);
    return {
      node: select,
      focusEl: select,
      read: () => (select.value === '' ? undefined : (JSON.parse(select.value) as unknown)),
      write: (v) => {
        if (v !== undefined) select.value = JSON.stringify(v);
      },
    };
  }
  if ((t === 'number' || t === 'integer') && typeof f.minimum === 'number' && typeof f.maximum === 'number' && typeof initial === 'number') {
    const step = t === 'integer' ? '1' : sliderStep(f.minimum, f.maximum, initial, f.multipleOf);
    const input = el('input', { type: 'range', name, min: String(f.minimum), max: String(f.maximum), step });
    const value = el('span', { className: 'value' });
    input.addEventListener('input', () => (value.textContent = formatNumber(Number(input.value))));
    input.addEventListener('change', onCommit);
    const node = el('div', { className: 'row' }, input, value);
    return {
      node,
      focusEl: input,
      read: () => Number(input.value),
      write: (v) => {
        if (typeof v !== 'number') return;
        input.value = String(v);
        value.textContent = formatNumber(v);
      },
    };
  }
  if (t === 'number' || t === 'integer') {
    const input = el('input', { type: 'number', name, step: t === 'integer' ? '1' : 'any' });
    if (typeof f.minimum === 'number') input.min = String(f.minimum);
    if (typeof f.maximum === 'number') input.max = String(f.maximum);
    if (typeof f.minimum === 'number' && typeof f.maximum === 'number') input.placeholder = `${f.minimum} to ${f.maximum}`;
    input.addEventListener('keydown', (e) => e.key === 'Enter' && onCommit());
    return {
      node: input,
      focusEl: input,
      read: () => (input.value === '' ? undefined : Number(input.value)),
      write: (v) => (input.value = v === undefined || v === null ? '' : String(v)),
    };
  }
  if (t === 'string') {
    const input = el('input', { type: 'text', name, autocomplete: 'off' });
    input.addEventListener('keydown', (e) => e.key === 'Enter' && onCommit());
    return { node: input, focusEl: input, read: () => input.value, write: (v) => (input.value = typeof v === 'string' ? v : '') };
  }
  // Objects and arrays: edit as JSON.
  const input = el('input', { type: 'text', name, placeholder: 'JSON' });
  input.addEventListener('keydown', (e) => e.key === 'Enter' && onCommit());
  return {
    node: input,
    focusEl: input,
    read: () => {
      try {
        return JSON.parse(input.value) as unknown;
      } catch {
        return input.value;
      }
    },
    write: (v) => (input.value = v === undefined ? '' : JSON.stringify(v)),
  };
}

function buildControl(client: ReactorClient, cmd: CommandSchema): HTMLElement {
  const props = (cmd.params['properties'] ?? {}) as Record<string, Field>;
  const names = Object.keys(props);
  const out = el('div', { className: 'result' });
  out.dataset['command'] = cmd.name;
  const wrap = el('div', { className: 'control' });
  wrap.dataset['command'] = cmd.name;
  const title = el(
    'label',
    { className: 'name' },
    el('span', {}, cmd.kind === 'setter' && cmd.field ? cmd.field : cmd.name),
    el('code', { className: 'wire' }, cmd.name),
  );
  wrap.append(title);
  if (cmd.description) wrap.append(el('div', { className: 'desc' }, ...richText(cmd.description)));

  if (names.length === 0) {
    const button = el('button', { type: 'button' }, cmd.name.replace(/_/g, ' '));
    button.addEventListener('click', () => showResult(out, client.send(cmd.name, {})));
    wrap.append(el('div', { className: 'row' }, button), out);
    return wrap;
  }

  if (cmd.kind === 'setter' && names.length === 1) {
    const key = names[0]!;
    const field = props[key]!;
    const send = (): void => showResult(out, sendWithUploads(client, cmd.name, { [key]: input.read() }, out));
    const stateKey = cmd.field ?? key;
    const initial = client.state[stateKey] ?? field.default;
    const input = inputFor(key, field, send, initial);
    input.node.dataset['param'] = key;
    const row = el('div', { className: 'row' }, input.node);
    const t = fieldType(field);
    const isRange = input.node.classList.contains('row');
    if (t !== 'boolean' && t !== 'enum' && !isRange && !isUpload(field)) {
      const set = el('button', { type: 'button', className: 'secondary' }, 'Set');
      set.addEventListener('click', send);
      row.append(set);
    }
    wrap.append(row, out);
    stateUpdaters.set(stateKey, (v) => {
      if (document.activeElement !== input.focusEl) input.write(v);
    });
    input.write(initial);
    return wrap;
  }

  // An event with parameters: a small form. A required parameter without a default starts
  // empty and marked required; the server still checks everything.
  const required = new Set((cmd.params['required'] as string[] | undefined) ?? []);
  const inputs = names.map((n) => ({ n, input: inputFor(n, props[n]!, () => undefined, props[n]!.default) }));
  const form = el('form', { className: 'params' });
  for (const { n, input } of inputs) {
    const f = props[n]!;
    input.write(f.default);
    const mustFill = required.has(n) && f.default === undefined;
    if (mustFill && 'required' in input.focusEl) (input.focusEl as HTMLInputElement).required = true;
    const label = el('label', {}, el('span', {}, n, mustFill ? el('span', { className: 'req', title: 'required' }, ' *') : ''), input.node);
    label.dataset['param'] = n;
    if (mustFill) label.dataset['required'] = '';
    if (f.description) label.title = f.description;
    form.append(label);
  }
  const submit = el('button', { type: 'submit' }, cmd.name.replace(/_/g, ' '));
  form.append(submit);
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const params: Record<string, unknown> = {};
    for (const { n, input } of inputs) {
      const v = input.read();
      if (v !== undefined && v !== '') params[n] = v;
    }
    showResult(out, sendWithUploads(client, cmd.name, params, out));
  });
  wrap.append(form, out);
  return wrap;
}

function buildControls(client: ReactorClient): void {
  const box = $('controls');
  box.replaceChildren();
  stateUpdaters.clear();
  if (client.schema.commands.length === 0) box.append(el('p', { className: 'empty' }, 'This app has no commands.'));
  for (const cmd of client.schema.commands) box.append(buildControl(client, cmd));
  // Only the app's video tracks can be shown; inbound tracks come first in the list.
  const shown = client.schema.tracks.map((t, i) => ({ t, i })).filter(({ t }) => t.direction !== 'in' && t.kind !== 'audio');
  trackSelect.replaceChildren(...shown.map(({ t, i }) => el('option', { value: String(i) }, t.name)));
  if (!shown.some(({ i }) => i === selectedTrack)) selectedTrack = shown[0]?.i ?? 0;
  trackSelect.value = String(selectedTrack);
  buildMedia(client);
  $('app-name').textContent = client.schema.app.name;
  document.title = `${client.schema.app.name} · Reactor`;
  $('app-version').textContent = `v${client.schema.app.version}`;
}

function applyState(state: Record<string, unknown>): void {
  for (const [k, v] of Object.entries(state)) stateUpdaters.get(k)?.(v);
}

function logMessage(name: string, data: unknown): void {
  const list = $('messages');
  list.querySelector('.empty')?.remove();
  list.prepend(el('li', {}, el('span', { className: 'name' }, name), ' ', JSON.stringify(data)));
  while (list.children.length > 50) list.lastChild?.remove();
}

trackSelect.addEventListener('change', () => {
  selectedTrack = Number(trackSelect.value);
  clearCanvas();
});

// ---- media: camera and microphone in, audio out ----------------------------------------------

type BrowserModule = typeof ClientBrowser;
let browserModule: Promise<BrowserModule> | undefined;
/** The SDK's DOM-only entry, served beside its main entry (the import map names only the main one). */
function loadBrowser(): Promise<BrowserModule> {
  browserModule ??= import(new URL('client/browser.js', import.meta.url).href) as Promise<BrowserModule>;
  return browserModule;
}

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

function onAudio(a: ClientAudio): void {
  viewer.audioChunks++;
  viewer.audioPlayers.get(a.trackName)?.push(a);
}

/** The media panel: one control per inbound track and per outbound audio track; none when the app has neither. */
function buildMedia(client: ReactorClient): void {
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

// ---- connection ----------------------------------------------------------------------------

/** Megabits per second, one decimal. */
function mbps(bits: number): string {
  return `${(bits / 1e6).toFixed(bits < 1e6 ? 2 : 1)} Mbit/s`;
}

/**
 * Coded video when the server offers it (`welcome.video`) and this browser decodes one of its
 * codecs (WebCodecs `VideoDecoder.isConfigSupported`); otherwise nothing changes: JPEG frames,
 * drawn by `drawLoop`.
 */
async function startVideo(client: ReactorClient, offer: VideoOffer | undefined): Promise<void> {
  if (!offer || !offer.codecs.some((c) => c !== 'jpeg')) return;
  const { VideoReceiver, hasWebCodecs, pickVideoCodec } = await loadBrowser();
  if (!hasWebCodecs() || (await pickVideoCodec(offer.codecs)) === 'jpeg') return;
  const receiver = new VideoReceiver(client satisfies VideoReceiverClient);
  receiver.on('frame', ({ frame, info }) => drawVideoFrame(frame, info));
  receiver.on('error', (e) => logMessage('video', e.message));
  receiver.on('tier', (d) => logMessage('video', `tier ${d.from} -> ${d.tier}: ${d.reason}`));
  const selection = await receiver.start(offer);
  if (!selection) {
    receiver.close();
    return;
  }
  viewer.video = receiver;
  viewer.videoSelectedAt = performance.now();
  pending = undefined;
  const show = (): void => {
    $('codec').textContent = receiver.codec;
    $('tier').textContent = receiver.tier ?? '-';
    const bits = receiver.serverStats?.bitrate ?? receiver.reception?.bitrate;
    $('bitrate').textContent = bits === undefined ? '-' : mbps(bits);
  };
  show();
  receiver.on('selection', show);
  receiver.on('config', show);
  setInterval(show, 500);
}

async function main(): Promise<void> {
  const token = new URLSearchParams(location.search).get('token') ?? undefined;
  const url = `${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}${config.wsPath}`;
  let client: ReactorClient;
  // The first welcome carries the video offer: listen before it can arrive.
  let welcome: WelcomeMessage | undefined;
  try {
    client = new ReactorClient(url, token === undefined ? { reconnect: true } : { token, reconnect: true });
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
  buildClips(client);
  startVideo(client, welcome?.video).catch((err: unknown) => logMessage('video', `coded video unavailable, JPEG instead: ${errorText(err)}`));
}

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

/** The clip button, the record button and the recordings list. */
function buildClips(client: ReactorClient): void {
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
    return;
  }
  void refreshRecordings();
  setInterval(() => void refreshRecordings(), 5000);
}

void main();
