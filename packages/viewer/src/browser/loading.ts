/**
 * The card over the stream while the app loads: "loading 63 %", what it is doing
 * (`reading weights`, `rank 1: compiling`) and a bar, from the session status's `progress`
 * (the app's `context.reportProgress()` and its ranks' `reportProgress()`), instead of a blank
 * canvas. "loading" alone before the first report; gone once the app is loaded.
 */
import type { SessionStatus } from '@reactor/client';
import { $, el } from './dom.js';

let card: { root: HTMLDivElement; pct: HTMLDivElement; stage: HTMLDivElement; fill: HTMLDivElement } | undefined;

/** The card, built on first use inside the stage (styled here so the page's stylesheet stays as it is). */
function loadingCard(): NonNullable<typeof card> {
  if (card) return card;
  const pct = el('div', { id: 'loading-percent' });
  pct.style.cssText = 'font-size:28px;font-weight:600;font-variant-numeric:tabular-nums;';
  const stage = el('div', { id: 'loading-stage' });
  stage.style.cssText = 'margin-top:4px;color:var(--muted);font-size:13px;overflow-wrap:anywhere;';
  const fill = el('div');
  fill.style.cssText = 'height:100%;width:0;background:var(--accent, #4c8bf5);transition:width 0.2s;';
  const bar = el('div', {}, fill);
  bar.style.cssText = 'margin:12px auto 0;height:6px;width:60%;border-radius:3px;overflow:hidden;background:var(--line, #333);';
  const root = el('div', { id: 'loading', role: 'progressbar', hidden: true }, pct, stage, bar);
  root.setAttribute('aria-valuemin', '0');
  root.setAttribute('aria-valuemax', '100');
  root.style.cssText = 'position:absolute;inset:0;display:flex;flex-direction:column;justify-content:center;text-align:center;';
  const canvas = $('stream');
  canvas.parentElement?.append(root);
  card = { root, pct, stage, fill };
  return card;
}

/** Shows the card while `session` is loading (with its progress), hides it otherwise. */
export function showLoading(session: SessionStatus): void {
  const loading = session.state === 'loading';
  if (!loading && !card) return;
  const c = loadingCard();
  c.root.hidden = !loading;
  c.root.style.display = loading ? 'flex' : 'none';
  if (!loading) return;
  const p = session.progress;
  const pct = p ? Math.floor(p.ratio * 100) : undefined;
  c.pct.textContent = pct === undefined ? 'loading' : `loading ${pct} %`;
  c.stage.textContent = p?.stage ?? '';
  c.fill.style.width = `${pct ?? 0}%`;
  if (pct === undefined) c.root.removeAttribute('aria-valuenow');
  else c.root.setAttribute('aria-valuenow', String(pct));
}
