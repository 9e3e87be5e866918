/**
 * Keyboard controls, generated from the schema: a setter whose field is marked `x-reactor-keys`
 * (`@InputField({ keys })`: `KeyboardEvent.key` in lower case -> the value held) gets a row of
 * key caps, and the page's keyboard drives it. Every key down or up of a bound key sends the set
 * of held values (`set_<field>` with the array, the order of first press); focus leaving the page
 * lets every key go (`[]`). Keys typed into a text field of the page are the field's, not the
 * world's. The server lets a leaving client's keys go; a rebuilt panel (a reconnect's welcome)
 * starts with none held, and a key still down comes back with its next auto-repeat key down.
 */
import type { CommandSchema, JsonSchema, ReactorClient } from '@reactor/client';
import { el, errorText } from './dom.js';

/** The listeners of the panel built last; a rebuild removes them. */
let listening: AbortController | undefined;

const label = (key: string): string => ({ arrowup: '↑', arrowdown: '↓', arrowleft: '←', arrowright: '→', ' ': 'space' })[key] ?? key.toUpperCase();

function typing(target: EventTarget | null): boolean {
  const t = target as HTMLElement | null;
  return !!t && (t.isContentEditable || ['INPUT', 'TEXTAREA', 'SELECT'].includes(t.tagName));
}

/** Removes the keyboard listeners of the last panel (controls rebuilt for another app). */
export function stopKeys(): void {
  listening?.abort();
  listening = undefined;
}

/** The key bindings of a field's schema, or undefined when it is not a keys field. */
export function keyBindings(field: JsonSchema): Record<string, string> | undefined {
  const k = field['x-reactor-keys'];
  if (k === null || typeof k !== 'object' || Array.isArray(k)) return undefined;
  const out: Record<string, string> = {};
  for (const [key, v] of Object.entries(k as Record<string, unknown>)) if (typeof v === 'string') out[key] = v;
  return out;
}

/** The key caps of `cmd` (a setter of a keys field) and the page's keyboard wired to it. */
export function buildKeys(client: ReactorClient, cmd: CommandSchema, param: string, bindings: Record<string, string>, out: HTMLElement): HTMLElement {
  listening?.abort();
  listening = new AbortController();
  const { signal } = listening;
  const held: string[] = []; // keys, in the order pressed
  const caps = new Map<string, HTMLElement>();
  const row = el('div', { className: 'row keys' });
  row.dataset['keys'] = param;
  for (const [key, value] of Object.entries(bindings)) {
    const cap = el('kbd', { title: value }, el('b', {}, label(key)), el('span', {}, ` ${value.replace(/_/g, ' ')}`));
    cap.dataset['key'] = key;
    caps.set(key, cap);
    row.append(cap);
  }
  let sent = '[]';
  const send = (): void => {
    const values = [...new Set(held.map((k) => bindings[k]!))];
    for (const [k, cap] of caps) cap.classList.toggle('held', held.includes(k));
    const text = JSON.stringify(values);
    if (text === sent) return;
    sent = text;
    client.send(cmd.name, { [param]: values }).then(
      () => {
        out.className = 'result ok';
        out.textContent = values.length ? `held: ${values.join(', ')}` : 'no keys held';
      },
      (err: Error) => {
        out.className = 'result err';
        out.textContent = errorText(err);
      },
    );
  };
  const release = (): void => {
    held.length = 0;
    send();
  };
  window.addEventListener(
    'keydown',
    (e) => {
      const key = e.key.toLowerCase();
      if (!(key in bindings) || e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
      e.preventDefault();
      if (!held.includes(key)) held.push(key);
      send();
    },
    { signal },
  );
  window.addEventListener(
    'keyup',
    (e) => {
      const key = e.key.toLowerCase();
      const i = held.indexOf(key);
      if (i < 0) return;
      held.splice(i, 1);
      send();
    },
    { signal },
  );
  window.addEventListener('blur', release, { signal });
  document.addEventListener('visibilitychange', () => document.hidden && release(), { signal });
  return el('div', {}, row, el('div', { className: 'desc' }, 'Hold the keys on this page; they are let go when it loses focus.'));
}
