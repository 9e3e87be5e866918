import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import 'reflect-metadata';
import { IsIn, IsNumber, Max, Min } from 'class-validator';
import { InputField, InputState, Output, ReactorApp, event, reactorApp } from '@reactor/runtime';
import { serve, type ReactorServer } from '@reactor/server';
import { patternApp } from '../packages/server/test/fixtures/pattern-app.js';
import { quiet } from './fixtures/cleanups.js';
import { launchChromium } from './fixtures/chromium.js';

const artifacts = fileURLToPath(new URL('../test-artifacts/', import.meta.url));

let server: ReactorServer;
let browser: Browser;
let page: Page;
const pageErrors: string[] = [];

beforeAll(async () => {
  server = await serve(patternApp({ width: 160, height: 120, fps: 30 }), { port: 0, gracePeriodMs: 0, logger: quiet, token: 'viewer-token' });
  await server.loaded;
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1200, height: 760 } });
  page.on('pageerror', (e) => pageErrors.push(e.message));
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
});

/** Mean RGB of a small square at the canvas's top-left area, and a hash of a row. */
function sample(p: Page): Promise<{ r: number; g: number; b: number; row: string }> {
  return p.evaluate(() => {
    const c = document.getElementById('stream') as HTMLCanvasElement;
    const ctx = c.getContext('2d')!;
    const d = ctx.getImageData(0, 0, 16, 16).data;
    let r = 0;
    let g = 0;
    let b = 0;
    for (let i = 0; i < d.length; i += 4) {
      r += d[i]!;
      g += d[i + 1]!;
      b += d[i + 2]!;
    }
    const n = d.length / 4;
    const row = Array.from(ctx.getImageData(0, 60, c.width, 1).data.filter((_, i) => i % 4 === 0)).join(',');
    return { r: r / n, g: g / n, b: b / n, row };
  });
}

class TuneState extends InputState {
  @InputField({ default: 2, description: 'Gain, `0.08` to `10`.' })
  @IsNumber()
  @Min(0.08)
  @Max(10)
  gain!: number;
}

class NudgeParams {
  @InputField({ description: 'How far, in pixels.' })
  @IsNumber()
  @Min(0)
  @Max(10)
  amount!: number;

  @InputField({ description: 'Which way.' })
  @IsIn(['left', 'right'])
  direction!: string;
}

/** An app with a required event parameter without a default, a float setter and backticks in a description. */
@reactorApp({ name: 'tune', state: TuneState })
class TuneApp extends ReactorApp<TuneState, TuneState, Output | null> {
  generate(): null {
    return null;
  }

  @event({ name: 'nudge', description: 'Moves the picture by `amount` pixels towards `direction`.', params: NudgeParams })
  nudge(p: NudgeParams): { moved: number; direction: string } {
    return { moved: p.amount, direction: p.direction };
  }
}

describe('viewer in Chromium', () => {
  it('renders a required parameter without a default as an empty required input, float sliders on round steps, and descriptions with code spans', async () => {
    const tune = await serve(TuneApp, { port: 0, gracePeriodMs: 0, logger: quiet });
    try {
      await tune.loaded;
      const p = await browser.newPage();
      const errors: string[] = [];
      p.on('pageerror', (e) => errors.push(e.message));
      await p.goto(tune.url);
      await expect.poll(() => p.textContent('#connection')).toBe('connected');
      const nudge = p.locator('.control[data-command=nudge]');
      // The required number: an empty number box (not a slider at its midpoint), marked required.
      const amount = nudge.locator('[data-param=amount] input');
      expect(await amount.getAttribute('type')).toBe('number');
      expect(await amount.inputValue()).toBe('');
      expect(await amount.evaluate((e) => (e as HTMLInputElement).required)).toBe(true);
      expect(await nudge.locator('[data-param=amount]').getAttribute('data-required')).toBe('');
      expect(await nudge.locator('input[type=range]').count()).toBe(0);
      expect(await nudge.textContent()).not.toContain('undefined');
      // The required choice: nothing chosen until the user picks.
      expect(await nudge.locator('[data-param=direction] select').inputValue()).toBe('');
      // The description's backticks are code spans.
      expect(await nudge.locator('.desc').textContent()).toBe('Moves the picture by amount pixels towards direction.');
      expect(await nudge.locator('.desc code').allTextContents()).toEqual(['amount', 'direction']);
      // Filled in, it sends the values.
      await amount.fill('3.5');
      await nudge.locator('[data-param=direction] select').selectOption('right');
      await nudge.locator('button[type=submit]').click();
      await expect.poll(() => p.textContent('.result[data-command=nudge]')).toBe('ok: {"moved":3.5,"direction":"right"}');
      // A float slider keeps its value: 2 stays 2 (not 1.92), on a round step.
      const gain = p.locator('[data-command=set_gain] input[type=range]');
      expect(await gain.inputValue()).toBe('2');
      expect(await gain.getAttribute('step')).toBe('0.01');
      expect(await p.locator('[data-command=set_gain] .value').textContent()).toBe('2');
      expect(await p.locator('[data-command=set_gain] .desc code').allTextContents()).toEqual(['0.08', '10']);
      expect(errors).toEqual([]);
      await p.close();
    } finally {
      await tune.close();
    }
  }, 30_000);

  it('connects, draws frames, sends a generated control, and shows an invalid value error', async () => {
    await page.goto(`${server.url}/?token=viewer-token`);
    await page.waitForFunction(() => (window as unknown as { reactorViewer: { framesDrawn: number } }).reactorViewer.framesDrawn > 5, null, {
      timeout: 15_000,
    });
    await expect.poll(() => page.textContent('#connection')).toBe('connected');
    expect(await page.textContent('#app-name')).toBe('pattern');
    expect(await page.textContent('#size')).toBe('160x120');

    // Frames are drawn: pixels change over time (the stripes move).
    const first = await sample(page);
    expect(first.r).toBeGreaterThan(first.b + 40); // red by default
    await expect.poll(async () => (await sample(page)).row, { timeout: 5000 }).not.toBe(first.row);

    // Controls are generated from the schema, one of each kind.
    expect(await page.locator('[data-command=set_label] input[type=text]').count()).toBe(1);
    expect(await page.locator('[data-command=set_frozen] input[type=checkbox]').count()).toBe(1);
    expect(await page.locator('[data-command=set_speed] input[type=range]').count()).toBe(1);
    expect(await page.locator('[data-command=set_color] select option').allTextContents()).toEqual(['red', 'green', 'blue']);
    expect(await page.locator('[data-command=reset] button').count()).toBe(1);
    expect(await page.locator('[data-command=announce] form input').count()).toBe(2);

    // A select sends set_color; the reply shows next to it and the picture turns blue.
    await page.selectOption('[data-command=set_color] select', { label: 'blue' });
    await expect.poll(() => page.textContent('.result[data-command=set_color]')).toBe('ok');
    await expect
      .poll(
        async () => {
          const s = await sample(page);
          return s.b > s.r + 40;
        },
        { timeout: 5000 },
      )
      .toBe(true);

    // A button (parameterless event) shows its result.
    await page.click('[data-command=reset] button');
    await expect.poll(() => page.textContent('.result[data-command=reset]')).toBe('ok: {"restarted":true}');

    // A params form: the broadcast message shows in the log.
    await page.fill('[data-command=announce] input[name=text]', 'hello viewers');
    await page.click('[data-command=announce] button[type=submit]');
    await expect.poll(() => page.textContent('#messages')).toContain('hello viewers');

    // An invalid value: the server's error, with the field and the constraint, next to the control.
    await page.fill('[data-command=set_label] input[type=text]', 'this label is far too long for the field');
    await page.click('[data-command=set_label] button');
    const result = page.locator('.result[data-command=set_label]');
    await expect.poll(() => result.textContent()).toContain('invalid_params');
    expect(await result.textContent()).toContain('label');
    expect(await result.textContent()).toContain('maxLength');
    expect(await result.getAttribute('class')).toContain('err');

    mkdirSync(artifacts, { recursive: true });
    await page.screenshot({ path: `${artifacts}viewer.png`, fullPage: true });
    expect(pageErrors).toEqual([]);
  }, 60_000);

  it('draws raw RGB frames too', async () => {
    const rgbServer = await serve(patternApp({ width: 64, height: 64, fps: 30 }), { port: 0, gracePeriodMs: 0, logger: quiet, encoding: 'rgb' });
    try {
      await rgbServer.loaded;
      const p = await browser.newPage();
      await p.goto(rgbServer.url);
      await p.waitForFunction(() => (window as unknown as { reactorViewer: { framesDrawn: number } }).reactorViewer.framesDrawn > 3, null, { timeout: 15_000 });
      expect(await p.textContent('#size')).toBe('64x64');
      const s = await sample(p);
      expect(s.r).toBeGreaterThan(s.g + 40);
      await p.close();
    } finally {
      await rgbServer.close();
    }
  }, 30_000);
});
