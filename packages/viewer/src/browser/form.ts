/**
 * The form builder: one control per command of the app's schema (a button, a setter's input kept
 * in step with the state, or an event's small form; upload fields send their file first), with
 * the track picker, the media panel and the app's name rebuilt beside them.
 */
import { type CommandSchema, type JsonSchema, type ReactorClient, CommandFailedError } from '@reactor/client';
import { buildTrackSelect } from './canvas.js';
import { $, el, errorText, formatBytes, richText } from './dom.js';
import { buildKeys, keyBindings, stopKeys } from './keys.js';
import { buildMedia } from './media.js';
import { REWIND, rewindButtons } from './rewind.js';
import { forkButton, routerPrefix } from './fork.js';

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
    const bindings = keyBindings(field);
    if (bindings !== undefined) {
      wrap.append(buildKeys(client, cmd, key, bindings, out), out);
      return wrap;
    }
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

  // The built-in rewind (an app with snapshots): buttons for the usual steps back, then its form.
  if (cmd.name === REWIND) wrap.append(rewindButtons((params) => showResult(out, client.send(REWIND, params))));
  // Behind a session router, an app with snapshots can also be forked onto another instance.
  if (cmd.name === REWIND && routerPrefix() !== undefined) wrap.append(forkButton(client));

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

export function buildControls(client: ReactorClient): void {
  const box = $('controls');
  box.replaceChildren();
  stateUpdaters.clear();
  stopKeys();
  if (client.schema.commands.length === 0) box.append(el('p', { className: 'empty' }, 'This app has no commands.'));
  for (const cmd of client.schema.commands) box.append(buildControl(client, cmd));
  buildTrackSelect(client);
  buildMedia(client);
  $('app-name').textContent = client.schema.app.name;
  document.title = `${client.schema.app.name} · Reactor`;
  $('app-version').textContent = `v${client.schema.app.version}`;
}

export function applyState(state: Record<string, unknown>): void {
  for (const [k, v] of Object.entries(state)) stateUpdaters.get(k)?.(v);
}
