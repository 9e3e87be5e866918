/**
 * The page's elements and what every panel of the viewer uses to fill them: element lookup and
 * creation, the page's config, description text, byte counts, one-line errors, the messages list.
 */
import { CommandFailedError } from '@reactor/client';

export const $ = <T extends HTMLElement>(id: string): T => document.getElementById(id) as T;

export const config = JSON.parse($('reactor-config').textContent ?? '{}') as { wsPath: string; basePath?: string; recording?: boolean };

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Partial<HTMLElementTagNameMap[K]> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const e = Object.assign(document.createElement(tag), props);
  e.append(...children);
  return e;
}

/**
 * A description as text with `code` spans: the app writes Markdown-style backticks; the page
 * shows them as <code> (built as nodes, never as HTML).
 */
export function richText(text: string): (Node | string)[] {
  return text.split(/`([^`]+)`/).map((part, i) => (i % 2 === 1 ? el('code', {}, part) : part));
}

export function formatBytes(n: number): string {
  return n < 1024 ? `${n} B` : n < 1024 * 1024 ? `${(n / 1024).toFixed(1)} KB` : `${(n / 1024 / 1024).toFixed(1)} MB`;
}

/** An error as one line: `code: message` for the SDK's errors, `Name: message` for the browser's. */
export function errorText(err: unknown): string {
  if (err instanceof CommandFailedError) {
    const details = err.details?.map((d) => `${d.field}: ${d.message} (${d.constraint})`).join('; ');
    return `${err.code}: ${details || err.message}`;
  }
  const e = err as { code?: unknown; name?: string; message?: string };
  if (typeof e?.code === 'string') return `${e.code}: ${e.message ?? ''}`;
  return `${e?.name ?? 'Error'}: ${e?.message ?? String(err)}`;
}

export function logMessage(name: string, data: unknown): void {
  const list = $('messages');
  list.querySelector('.empty')?.remove();
  list.prepend(el('li', {}, el('span', { className: 'name' }, name), ' ', JSON.stringify(data)));
  while (list.children.length > 50) list.lastChild?.remove();
}
