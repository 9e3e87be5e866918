/**
 * The viewer's transport ladder on a real (namespaced) network: `reactor run --manifest` (the
 * moving pattern of scripts/net/pattern-app.mjs, H.264) in the link's server namespace, the viewer in Chromium
 * in its viewer namespace (scripts/net/impaired-link.mjs: 80 ms round trip, 4 Mbit/s each way).
 * - UDP blocked between them, `?transport=auto`: the viewer ends up on the WebSocket by itself,
 *   says so on its transport badge, and keeps drawing frames;
 * - `?transport=webrtc`, then 2 % loss each way: it plays on over WebRTC and shows the link's
 *   round trip.
 * Loose bounds; the figures are bench/webrtc-network.bench.mjs's.
 * Needs root (`ip netns`); CI runs as root. Skipped, with the reason printed, only off Linux or
 * without root.
 */
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { chromium, type Page } from 'playwright-core';
import { createImpairedLink, type ImpairedLink } from '../scripts/net/impaired-link.mjs';
import { chromiumOnLink, measure, serveOnLink, startMeter } from '../scripts/net/playback.mjs';

const unavailable = process.platform !== 'linux' || process.getuid?.() !== 0 ? 'needs root on Linux (ip netns); CI runs as root' : undefined;
if (unavailable) console.warn(`WebRTC viewer network test skipped: ${unavailable}`);

type ViewerWindow = Window & { reactorViewer: { framesDrawn: number; transport: { current: string; reason?: string; stats?: { rttMs?: number } } } };

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});
let link: ImpairedLink | undefined;
afterAll(async () => {
  await link?.close();
});

/** The server on the link, the viewer with `?transport=` in Chromium in the viewer namespace. */
async function viewer(transport: string, serverYaml: string[] = []): Promise<Page> {
  link ??= await createImpairedLink({ rttMs: 80, rateKbit: 4000 });
  const server = await serveOnLink(link, {
    serverYaml: ['video: { codec: h264 }', ...serverYaml],
    env: { REACTOR_PATTERN_WIDTH: '320', REACTOR_PATTERN_HEIGHT: '180' },
  });
  cleanups.push(() => server.stop());
  const url = new URL(server.url);
  const browser = await chromium.launch(chromiumOnLink(link, url.origin, ['--autoplay-policy=no-user-gesture-required']));
  cleanups.push(() => browser.close());
  const page = await browser.newPage();
  url.searchParams.set('transport', transport);
  await page.goto(url.href);
  return page;
}

describe.skipIf(unavailable !== undefined)('the viewer across two network namespaces', () => {
  it('with UDP blocked ends up on the WebSocket by itself, says so, and keeps playing', async () => {
    link ??= await createImpairedLink({ rttMs: 80, rateKbit: 4000 });
    link.blockUdp(true);
    cleanups.push(async () => link!.blockUdp(false));
    // The viewer waits the server's connect window (welcome.webrtc) plus 1 s: 3 s here, not the default 10 s.
    const page = await viewer('auto', ['webrtc: { connect_timeout_ms: 2000 }']);
    await page.waitForFunction(() => (window as unknown as ViewerWindow).reactorViewer.transport?.reason !== undefined, null, { timeout: 30_000 });
    const t = await page.evaluate(() => (window as unknown as ViewerWindow).reactorViewer.transport);
    expect(t.current).toBe('websocket');
    expect(await page.textContent('#transport')).toBe('websocket (WebRTC failed)');
    expect(await page.getAttribute('#transport', 'title')).toMatch(/^WebRTC failed, media is on the WebSocket: /);
    await startMeter(page);
    const m = await measure(page, 3000);
    expect(m.source).toBe('canvas');
    expect(m.frames).toBeGreaterThan(10);
  }, 60_000);

  it('plays over WebRTC through 2 % loss and shows the round trip of the link', async () => {
    const page = await viewer('webrtc');
    // Connected first, then the loss: DTLS retransmissions under loss on this loaded machine
    // can overrun the connect window (the viewer's is the server's 10 s plus 1 s).
    await page.waitForFunction(() => (window as unknown as ViewerWindow).reactorViewer.transport?.current === 'webrtc', null, { timeout: 20_000 });
    link!.setLoss(0.02);
    cleanups.push(async () => link!.setLoss(0));
    expect(await page.textContent('#transport')).toBe('webrtc');
    await startMeter(page);
    const m = await measure(page, 4000);
    expect(m.frames).toBeGreaterThan(20);
    await page.waitForFunction(() => (window as unknown as ViewerWindow).reactorViewer.transport.stats?.rttMs !== undefined, null, { timeout: 10_000 });
    const rtt = await page.evaluate(() => (window as unknown as ViewerWindow).reactorViewer.transport.stats!.rttMs!);
    // 80 ms through the hop, plus queueing: never less.
    expect(rtt).toBeGreaterThanOrEqual(75);
    expect(rtt).toBeLessThan(1000);
    expect(await page.textContent('#rtc-stats')).toMatch(/^rtt \d+ ms/);
  }, 60_000);
});
