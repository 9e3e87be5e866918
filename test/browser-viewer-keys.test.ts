// The viewer's keyboard controls (issue 40), in Chromium: a setter whose field declares
// `@InputField({ keys })` becomes key caps, and keys held on the page reach the app's state, as a
// second client (a real socket) sees it.
import 'reflect-metadata';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { WebSocket } from 'ws';
import { ArrayMaxSize, IsArray, IsIn, IsString, MaxLength } from 'class-validator';
import { connect } from '@reactor/client';
import { InputField, InputState, Output, ReactorApp, reactorApp } from '@reactor/runtime';
import { serve, type ReactorServer } from '@reactor/server';
import { quiet } from './fixtures/cleanups.js';
import { launchChromium } from './fixtures/chromium.js';

const MOVES = ['forward', 'back', 'turn_left', 'turn_right'] as const;

class WalkState extends InputState {
  @InputField({
    default: Object.freeze([]) as unknown as string[],
    keys: { w: 'forward', s: 'back', a: 'turn_left', arrowleft: 'turn_left', d: 'turn_right' },
    description: 'Held keys.',
  })
  @IsArray()
  @ArrayMaxSize(4)
  @IsIn(MOVES, { each: true })
  keys!: string[];

  @InputField({ default: 'x', description: 'A text field: keys typed here are its own.' })
  @IsString()
  @MaxLength(20)
  note!: string;
}

@reactorApp({ name: 'walk', state: WalkState })
class WalkApp extends ReactorApp<WalkState, WalkState, Output | null> {
  generate(): null {
    return null;
  }
}

let server: ReactorServer;
let browser: Browser;

beforeAll(async () => {
  server = await serve(WalkApp, { port: 0, gracePeriodMs: 0, logger: quiet });
  await server.loaded;
  browser = await launchChromium();
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
});

describe('viewer keyboard controls', () => {
  it('draws key caps from x-reactor-keys and sends the held set on every key down and up, none while typing, [] on blur', async () => {
    const watcher = await connect(server.url, { WebSocket, reconnect: false });
    const keys = (): unknown => watcher.state['keys'];
    const p = await browser.newPage();
    const errors: string[] = [];
    p.on('pageerror', (e) => errors.push(e.message));
    await p.goto(server.url);
    await expect.poll(() => p.textContent('#connection')).toBe('connected');
    const caps = p.locator('[data-command=set_keys] kbd');
    expect(await caps.evaluateAll((els) => els.map((e) => (e as HTMLElement).dataset['key']))).toEqual(['w', 's', 'a', 'arrowleft', 'd']);
    // The page must have focus for key events: click the stream, not a control.
    await p.locator('body').click({ position: { x: 5, y: 5 } });

    await p.keyboard.down('w');
    await expect.poll(keys).toEqual(['forward']);
    await p.keyboard.down('ArrowLeft');
    await expect.poll(keys).toEqual(['forward', 'turn_left']);
    expect(await p.locator('[data-command=set_keys] kbd.held').evaluateAll((els) => els.map((e) => (e as HTMLElement).dataset['key']))).toEqual([
      'w',
      'arrowleft',
    ]);
    await p.keyboard.up('w');
    await expect.poll(keys).toEqual(['turn_left']);
    await p.keyboard.up('ArrowLeft');
    await expect.poll(keys).toEqual([]);

    // Typing into a text field is the field's: the world's keys stay as they are.
    const note = p.locator('[data-command=set_note] input');
    await note.fill('x');
    await note.press('w');
    expect(await note.inputValue()).toBe('xw');
    await p.keyboard.down('d'); // still in the text field
    await p.keyboard.up('d');
    await p.locator('body').click({ position: { x: 5, y: 5 } });
    await p.keyboard.down('d');
    await expect.poll(keys).toEqual(['turn_right']);
    // Focus leaving the page lets every key go.
    await p.evaluate(() => window.dispatchEvent(new Event('blur')));
    await expect.poll(keys).toEqual([]);
    expect(errors).toEqual([]);
    watcher.close();
    await p.close();
  }, 60_000);
});
