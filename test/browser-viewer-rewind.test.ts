// The viewer's rewind buttons (issue 41), in Chromium: an app with session snapshots has the
// built-in `rewind` command, the viewer draws "back N s" buttons for it, and a click rewinds the
// session: the page shows the answer (the frame it went back to), a second client (a real socket) sees the cut.
import 'reflect-metadata';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { WebSocket } from 'ws';
import { connect } from '@reactor/client';
import { Frames, InputState, Output, ReactorApp, Video, reactorApp } from '@reactor/runtime';
import { serve, type ReactorServer } from '@reactor/server';
import { quiet } from './fixtures/cleanups.js';
import { launchChromium } from './fixtures/chromium.js';

class Out extends Output {
  @Video({ width: 8, height: 8 })
  main?: Video;
}

/** Paints its step counter (a field the snapshots keep) into every pixel's red byte. */
@reactorApp({ name: 'counter', state: InputState, output: Out, fps: 30, snapshot: { fields: ['made'], everySteps: 10 } })
class CounterApp extends ReactorApp<InputState, InputState, Out> {
  made = 0;
  generate(): Out {
    this.made = (this.made + 1) % 256;
    return new Out({ main: new Frames(new Uint8Array(8 * 8 * 3).fill(this.made), [1, 8, 8, 3]) });
  }
}

let server: ReactorServer;
let browser: Browser;

beforeAll(async () => {
  server = await serve(CounterApp, { port: 0, gracePeriodMs: 0, logger: quiet });
  await server.loaded;
  browser = await launchChromium();
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
});

describe('viewer rewind buttons', () => {
  it('draws back-2/5/10-s buttons for the rewind command; a click rewinds the session for every viewer', async () => {
    const watcher = await connect(server.url, { WebSocket, reconnect: false });
    const flushes: number[] = [];
    const seqs = new Set<number>();
    watcher.on('flush', (f) => flushes.push(f.nextSeq));
    watcher.on('frame', (f) => seqs.add(f.seq));
    const p = await browser.newPage();
    const errors: string[] = [];
    p.on('pageerror', (e) => errors.push(e.message));
    await p.goto(server.url);
    await expect.poll(() => p.textContent('#connection')).toBe('connected');
    const buttons = p.locator('[data-command=rewind] button[data-seconds]');
    expect(await buttons.evaluateAll((els) => els.map((e) => (e as HTMLElement).dataset['seconds']))).toEqual(['2', '5', '10']);
    // 30 fps, a snapshot every 10 frames: 2 s back needs 2 s of frames played.
    await expect.poll(() => seqs.size, { timeout: 20_000 }).toBeGreaterThan(75);
    await p.locator('[data-command=rewind] button[data-seconds="2"]').click();
    await expect.poll(() => p.textContent('.result[data-command=rewind]'), { timeout: 10_000 }).toMatch(/^ok: \{"seq":\d+/);
    const answer = JSON.parse((await p.textContent('.result[data-command=rewind]'))!.slice(4)) as { seq: number; secondsBack: number };
    expect(answer.secondsBack).toBeGreaterThanOrEqual(2);
    expect(seqs.has(answer.seq)).toBe(true);
    await expect.poll(() => flushes.length).toBe(1);
    expect(errors).toEqual([]);
    watcher.close();
    await p.close();
  }, 60_000);
});
