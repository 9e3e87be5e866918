/**
 * The fork button (issue 41): behind a session router (the page lives under `/s/{instance}`), an
 * app with session snapshots gets a "Fork" button beside the rewind buttons. A click asks the
 * router for a fork of this session (`POST /sessions/{id}/fork`, the page's token cookie as its
 * credential) and shows a link to the fork's viewer. docs/snapshots.md "Fork".
 */
import type { ReactorClient } from '@reactor/client';
import { config, el } from './dom.js';

/** The router prefix of a page it relays: `/s/{instance}`; undefined when the page is served directly. */
export function routerPrefix(basePath = config.basePath ?? ''): string | undefined {
  return /^\/s\/[^/]+$/.test(basePath) ? basePath : undefined;
}

/** A "Fork" button and its answer: the fork's link, or the router's refusal (`code: message`). */
export function forkButton(client: ReactorClient): HTMLElement {
  const out = el('span', { className: 'result' });
  out.dataset['fork'] = '';
  const b = el(
    'button',
    { type: 'button', className: 'secondary', title: 'A new session from this moment, on another instance (the router allocates it)' },
    '⑂ Fork',
  );
  b.dataset['fork'] = '';
  b.addEventListener('click', () => {
    const id = client.session.sessionId;
    out.className = 'result';
    out.textContent = '...';
    if (id === undefined) {
      out.className = 'result err';
      out.textContent = 'no session to fork yet';
      return;
    }
    void fetch(`/sessions/${encodeURIComponent(id)}/fork`, { method: 'POST', credentials: 'same-origin' }).then(
      async (r) => {
        const body = (await r.json().catch(() => ({}))) as { sessionId?: string; path?: string; error?: { code: string; message: string } };
        if (r.status !== 201 || body.path === undefined) {
          out.className = 'result err';
          out.textContent = body.error ? `${body.error.code}: ${body.error.message}` : `the router answered ${r.status}`;
          return;
        }
        out.className = 'result ok';
        out.textContent = 'fork: ';
        out.append(el('a', { href: `${body.path}/`, target: '_blank', rel: 'noopener' }, body.sessionId ?? body.path));
      },
      (err: Error) => {
        out.className = 'result err';
        out.textContent = err.message;
      },
    );
  });
  return el('div', { className: 'row fork' }, b, out);
}
