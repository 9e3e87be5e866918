/**
 * The rewind buttons (issue 41): for an app with session snapshots, whose schema has the built-in
 * `rewind` command, one button per step back (2, 5, 10 seconds) above the command's own form
 * (which also takes a frame `seq`). docs/snapshots.md.
 */
import { el } from './dom.js';

/** The built-in command's wire name. */
export const REWIND = 'rewind';

/** Seconds back the buttons offer. */
const STEPS_S = [2, 5, 10];

/** A row of "back N s" buttons; `send` sends `rewind` with the params and shows its answer. */
export function rewindButtons(send: (params: { seconds: number }) => void): HTMLElement {
  const row = el('div', { className: 'row rewind' });
  for (const s of STEPS_S) {
    const b = el('button', { type: 'button', className: 'secondary', title: `Go back ${s} seconds (to the newest snapshot at least that old)` }, `⟲ ${s} s`);
    b.dataset['seconds'] = String(s);
    b.addEventListener('click', () => send({ seconds: s }));
    row.append(b);
  }
  return row;
}
