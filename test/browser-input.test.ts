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
import { canvasMeanRgb as canvasRgb } from './fixtures/canvas.js';
import { launchWithFakeMedia } from './fixtures/chromium.js';
import { EFFECT, effectApp, newEffectRecord, solidPng, type EffectRecord } from './fixtures/effect-app.js';

const artifacts = fileURLToPath(new URL('../test-artifacts/', import.meta.url));

let server: ReactorServer;
let record: EffectRecord;
let browser: Browser;
let page: Page;
const pageErrors: string[] = [];

beforeAll(async () => {
  record = newEffectRecord();
  server = await serve(effectApp(record), { port: 0, gracePeriodMs: 0, logger: quiet, encoding: 'rgb' });
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

  it("plays the app's soundtrack: an AnalyserNode on the viewer's player hears it", async () => {
    await expect.poll(() => page.textContent('.result[data-track=soundtrack]'), { timeout: 10_000 }).toBe('playing');
    const rms = await page.evaluate(async () => {
      const player = (
        window as unknown as { reactorViewer: { audioPlayers: Map<string, { context: AudioContext; output: GainNode }> } }
      ).reactorViewer.audioPlayers.get('soundtrack')!;
      const analyser = player.context.createAnalyser();
      analyser.fftSize = 2048;
      player.output.connect(analyser);
      const buf = new Float32Array(analyser.fftSize);
      let best = 0;
      const deadline = performance.now() + 10_000;
      while (best < 0.05 && performance.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        analyser.getFloatTimeDomainData(buf);
        best = Math.max(best, Math.sqrt(buf.reduce((a, x) => a + x * x, 0) / buf.length));
      }
      return best;
    });
    expect(rms).toBeGreaterThan(0.05);
  }, 30_000);

  it('uploads a picture through the file input: the command carries its reference and the video is tinted', async () => {
    const before = await canvasRgb(page);
    await page.setInputFiles('[data-command=set_tint] input[type=file]', {
      name: 'tint.png',
      mimeType: 'image/png',
      buffer: Buffer.from(solidPng(8, 8, [250, 0, 0])),
    });
    await expect.poll(() => page.textContent('.result[data-command=set_tint]'), { timeout: 15_000 }).toBe('ok');
    // The next step reads the picture (the command only set the state).
    await expect.poll(() => record.tint?.map(Math.round), { timeout: 10_000 }).toEqual([250, 0, 0]);
    // Half-way to pure red: the picture's redness (red minus the mean of green and blue) goes
    // from r to 125 + r / 2, a rise of at least 40 for any picture that was not already red.
    const redness = ([r, g, b]: [number, number, number]): number => r - (g + b) / 2;
    await expect.poll(async () => redness(await canvasRgb(page)) - redness(before), { timeout: 10_000 }).toBeGreaterThan(40);
  }, 60_000);

  it('shows an upload the server refuses next to its control', async () => {
    await page.setInputFiles('[data-command=set_tint] input[type=file]', { name: 'notes.png', mimeType: 'image/png', buffer: Buffer.from('just some text') });
    await expect.poll(() => page.textContent('.result[data-command=set_tint]'), { timeout: 15_000 }).toMatch(/^upload_type_not_allowed: /);
    expect(await page.getAttribute('.result[data-command=set_tint]', 'class')).toContain('err');
    expect(pageErrors).toEqual([]);
  }, 30_000);

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
