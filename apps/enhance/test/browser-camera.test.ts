// The enhance app end to end in Chromium with a fake camera: the viewer's camera toggle publishes
// the fake device's moving test picture, the app upscales it (slim, wasm, one rank, a small size),
// and the viewer's canvas shows the upscaled picture: the output size, and a picture that follows
// the camera's (its luminance correlates with the fake camera's picture at the same size, which
// the built-in scene's does not, before the camera is on and after it is off again).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { silentLogger } from '@reactor/log';
import { serve, type ReactorServer } from '@reactor/server';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EnhanceApp } from '../src/app.js';

const OUT = { width: 128, height: 72 };
const scratch = mkdtempSync(join(tmpdir(), 'enhance-browser-'));
const config = join(scratch, 'config.yaml');
writeFileSync(config, `model: slim\noutputWidth: ${OUT.width}\noutputHeight: ${OUT.height}\nframesPerStep: 1\nworldSize: 1\ndevices: cpu\nbackend: wasm\n`);

let server: ReactorServer;
let browser: Browser;
let page: Page;
const pageErrors: string[] = [];

beforeAll(async () => {
  server = await serve(EnhanceApp, { port: 0, gracePeriodMs: 0, logger: silentLogger, encoding: 'rgb', configPath: config });
  await server.loaded;
  // Debian's Chromium with a fake camera (a moving test picture) and no permission prompt.
  browser = await chromium.launch({
    executablePath: process.env['CHROMIUM_PATH'] ?? '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--use-fake-device-for-media-stream', '--use-fake-ui-for-media-stream'],
  });
  page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  page.on('pageerror', (e) => pageErrors.push(e.message));
  await page.goto(server.url);
  await page.waitForFunction(() => document.getElementById('connection')?.textContent === 'connected', null, { timeout: 30_000 });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
  rmSync(scratch, { recursive: true, force: true });
});

/** Opens the fake camera in the page on its own (a probe the viewer knows nothing of). */
function openProbe(p: Page): Promise<void> {
  return p.evaluate(async () => {
    const video = document.createElement('video');
    video.muted = true;
    video.srcObject = await navigator.mediaDevices.getUserMedia({ video: { width: 640, height: 360 } });
    await video.play();
    (window as unknown as { probe: HTMLVideoElement }).probe = video;
  });
}

/**
 * How well the viewer's canvas follows the fake camera: the best Pearson correlation of luminance,
 * over `samples` looks 100 ms apart, between the canvas and the camera's picture (the probe)
 * drawn at the canvas's size. The best of several, because the camera's pattern moves and the
 * canvas shows it a few frames late: high when the canvas shows the camera, near 0 otherwise.
 */
function canvasFollowsCamera(p: Page, samples = 20): Promise<number> {
  return p.evaluate(async (samples) => {
    const stream = document.getElementById('stream') as HTMLCanvasElement;
    const video = (window as unknown as { probe: HTMLVideoElement }).probe;
    const { width, height } = stream;
    const scratch = document.createElement('canvas');
    scratch.width = width;
    scratch.height = height;
    const ctx = scratch.getContext('2d', { willReadFrequently: true })!;
    const luma = (d: Uint8ClampedArray): Float64Array => {
      const out = new Float64Array(d.length / 4);
      for (let i = 0; i < out.length; i++) out[i] = 0.299 * d[i * 4]! + 0.587 * d[i * 4 + 1]! + 0.114 * d[i * 4 + 2]!;
      return out;
    };
    const correlation = (a: Float64Array, b: Float64Array): number => {
      const ma = a.reduce((x, y) => x + y, 0) / a.length;
      const mb = b.reduce((x, y) => x + y, 0) / b.length;
      let cov = 0;
      let va = 0;
      let vb = 0;
      for (let i = 0; i < a.length; i++) {
        cov += (a[i]! - ma) * (b[i]! - mb);
        va += (a[i]! - ma) ** 2;
        vb += (b[i]! - mb) ** 2;
      }
      return va === 0 || vb === 0 ? 0 : cov / Math.sqrt(va * vb);
    };
    let best = -1;
    for (let k = 0; k < samples; k++) {
      ctx.drawImage(video, 0, 0, width, height);
      const camera = luma(ctx.getImageData(0, 0, width, height).data);
      const shown = luma(stream.getContext('2d')!.getImageData(0, 0, width, height).data);
      best = Math.max(best, correlation(shown, camera));
      await new Promise((r) => setTimeout(r, 100));
    }
    return best;
  }, samples);
}

const framesDrawn = (p: Page): Promise<number> => p.evaluate(() => (window as unknown as { reactorViewer: { framesDrawn: number } }).reactorViewer.framesDrawn);

describe('EnhanceApp in Chromium with a fake camera', () => {
  it('upscales the camera the viewer publishes, and the canvas shows it at the output size', async () => {
    await expect.poll(() => framesDrawn(page), { timeout: 60_000 }).toBeGreaterThan(2);
    expect(await page.textContent('#size')).toBe(`${OUT.width}x${OUT.height}`);
    await openProbe(page);
    // The built-in scene plays: the canvas does not follow the camera.
    expect(await canvasFollowsCamera(page)).toBeLessThan(0.5);

    await page.locator('.media[data-track=webcam] .toggle').click();
    await expect.poll(() => page.textContent('.result[data-track=webcam]'), { timeout: 30_000 }).toMatch(/^publishing · sent [1-9]/);
    // The scene is replaced by the camera: the canvas keeps the output size and follows the camera's picture.
    await expect.poll(() => canvasFollowsCamera(page), { timeout: 60_000, interval: 100 }).toBeGreaterThan(0.8);
    const [width, height] = await page.evaluate(() => {
      const c = document.getElementById('stream') as HTMLCanvasElement;
      return [c.width, c.height];
    });
    expect([width, height]).toEqual([OUT.width, OUT.height]);
    expect(await page.textContent('#size')).toBe(`${OUT.width}x${OUT.height}`);

    // Turned off, the built-in scene comes back: the canvas no longer follows the camera.
    await page.locator('.media[data-track=webcam] .toggle').click();
    await expect.poll(() => page.textContent('.result[data-track=webcam]'), { timeout: 15_000 }).toBe('off');
    await expect.poll(() => canvasFollowsCamera(page), { timeout: 60_000, interval: 100 }).toBeLessThan(0.5);
    expect(pageErrors).toEqual([]);
  }, 180_000);
});
