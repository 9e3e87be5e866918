/**
 * Today's WebSocket H.264 viewer over an impaired network: `reactor run --manifest` (the moving
 * pattern of scripts/net/pattern-app.mjs, `server.video.codec: h264`) in the link's server
 * namespace, Debian's Chromium in its viewer namespace, 80 ms round trip, 4 Mbit/s, 2 % loss
 * each way between them (scripts/net/impaired-link.mjs). Loose bounds: it plays H.264, frames
 * keep coming; the figures are the benchmark's (bench/webrtc-network.bench.mjs).
 * Needs root (`ip netns`); CI runs as root. Skipped, with the reason printed, only off Linux or
 * without root.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { chromium, type Browser } from 'playwright-core';
import { createImpairedLink, type ImpairedLink } from '../scripts/net/impaired-link.mjs';
import { chromiumOnLink, measure, serveOnLink, startMeter } from '../scripts/net/playback.mjs';

const unavailable = process.platform !== 'linux' || process.getuid?.() !== 0 ? 'needs root on Linux (ip netns); CI runs as root' : undefined;
if (unavailable) console.warn(`network viewer test skipped: ${unavailable}`);

const cleanups: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe.skipIf(unavailable !== undefined)('WebSocket H.264 viewer over an impaired link (80 ms, 4 Mbit/s, 2 % loss)', () => {
  let link: ImpairedLink;
  let browser: Browser;

  it('plays the stream in Chromium in the other namespace', async () => {
    link = await createImpairedLink({ rttMs: 80, rateKbit: 4000, loss: 0.02 });
    cleanups.push(() => link.close());
    const server = await serveOnLink(link, {
      serverYaml: ['video: { codec: h264 }'],
      env: { REACTOR_PATTERN_WIDTH: '640', REACTOR_PATTERN_HEIGHT: '360' },
    });
    cleanups.push(() => server.stop());
    const url = new URL(server.url);
    expect(url.hostname).toBe(link.server.ip);
    browser = await chromium.launch(chromiumOnLink(link, url.origin));
    cleanups.push(() => browser.close());
    const page = await browser.newPage();
    await page.goto(url.href);
    await startMeter(page);
    await page.waitForFunction(
      () => {
        const v = (window as unknown as { reactorViewer: { video?: { codec: string }; framesDrawn: number } }).reactorViewer;
        return v.video?.codec === 'h264' && v.framesDrawn > 5;
      },
      null,
      { timeout: 30_000 },
    );
    const m = await measure(page, 4000);
    expect(m.source).toBe('canvas');
    // Loose: frames keep coming through loss and delay (the benchmark has the real figures).
    expect(m.frames).toBeGreaterThan(8);
    expect(m.maxGapMs).toBeLessThan(3000);
    expect(await page.locator('#codec').textContent()).toBe('h264');
  }, 60_000);
});
