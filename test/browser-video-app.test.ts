/**
 * The viewer in Chromium against the sample app itself (VideoApp: 2 CPU ranks on wasm): the
 * generated video plays, a new prompt typed into the generated text box changes the picture,
 * a prompt over 500 characters shows the error next to the control. Saves a screenshot.
 */
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import type { ReactorServer } from '@reactor/server';
import { canvasMeanRgb as mean, rgbDistance as dist } from './fixtures/canvas.js';
import { videoAppInChromium, type VideoAppViewer } from './fixtures/video-app-server.js';

const artifacts = fileURLToPath(new URL('../test-artifacts/', import.meta.url));

let viewer: VideoAppViewer | undefined;
let server: ReactorServer;
let page: Page;
let pageErrors: string[];

beforeAll(async () => {
  viewer = await videoAppInChromium('video-viewer-', 'width: 128\nheight: 96\nframesPerChunk: 4\nworldSize: 2\ndevices: cpu\nbackend: wasm\n', {
    width: 1200,
    height: 700,
  });
  ({ server, page, pageErrors } = viewer);
}, 60_000);

afterAll(() => viewer?.close());

describe('viewer in Chromium, sample video app', () => {
  it('plays the generated video, follows a new prompt, and shows an invalid prompt error', async () => {
    await page.goto(server.url);
    await page.waitForFunction(() => (window as unknown as { reactorViewer: { framesDrawn: number } }).reactorViewer.framesDrawn > 5, null, {
      timeout: 20_000,
    });
    expect(await page.textContent('#app-name')).toBe('reactor-video');
    expect(await page.textContent('#size')).toBe('128x96');
    await expect.poll(() => page.locator('#messages').textContent(), { timeout: 10_000 }).toContain('backend_info');

    const before = await mean(page);
    // The generated text box for set_prompt: a new prompt, then reset to see it from frame 0.
    await page.fill('[data-command=set_prompt] input[type=text]', 'Neon jellyfish in a midnight ocean.');
    await page.click('[data-command=set_prompt] button');
    await expect.poll(() => page.textContent('.result[data-command=set_prompt]')).toBe('ok');
    await page.click('[data-command=reset] button');
    await expect.poll(async () => dist(await mean(page), before), { timeout: 10_000 }).toBeGreaterThan(15);

    // Bad input: the error shows next to the control, the prompt stays.
    await page.fill('[data-command=set_prompt] input[type=text]', 'x'.repeat(501));
    await page.click('[data-command=set_prompt] button');
    await expect.poll(() => page.textContent('.result[data-command=set_prompt]')).toMatch(/^invalid_params: prompt: .*500.*\(maxLength\)/);

    mkdirSync(artifacts, { recursive: true });
    await page.screenshot({ path: `${artifacts}/viewer-video-app.png` });
    expect(pageErrors).toEqual([]);
  }, 60_000);
});
