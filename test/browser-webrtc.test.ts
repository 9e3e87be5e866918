/**
 * WebRTC in Chromium against the sample app (VideoApp, CPU ranks on wasm, H.264), signalled over
 * the server's WebSocket exactly as docs/protocol.md "WebRTC" says, from a page script with the
 * browser's own RTCPeerConnection: the video plays over WebRTC in order, no binary media frame
 * comes on the WebSocket while connected, a prompt change shows, a late joiner gets a picture
 * within one key-frame interval, the soundtrack arrives as Opus, `rtc_close` brings media back
 * to the WebSocket, and the peer connection and its UDP sockets are gone once the client leaves.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import type { ReactorServer } from '@reactor/server';
import { launchChromium } from './fixtures/chromium.js';
import { RTC_PAGE_SCRIPT, type RtcPageWindow } from './fixtures/rtc-page.js';
import { serveVideoApp, type VideoAppServer } from './fixtures/video-app-server.js';

const KEY_FRAME_INTERVAL = 30;

let app: VideoAppServer | undefined;
let server: ReactorServer;
let browser: Browser;
const pageErrors: string[] = [];

beforeAll(async () => {
  app = await serveVideoApp('webrtc-', 'width: 160\nheight: 96\nframesPerChunk: 4\nworldSize: 1\ndevices: cpu\nbackend: wasm\n', {
    gracePeriodMs: 60_000,
    video: { codec: 'h264', keyFrameInterval: KEY_FRAME_INTERVAL },
  });
  server = app.server;
  browser = await launchChromium(['--autoplay-policy=no-user-gesture-required']);
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await app?.close();
});

async function openPage(): Promise<Page> {
  const page = await browser.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  // A same-origin page (the WebSocket's Origin check), without the viewer on it.
  await page.goto(`${server.url}/health`);
  await page.addScriptTag({ content: RTC_PAGE_SCRIPT });
  return page;
}

type W = Window & RtcPageWindow;

describe('WebRTC transport in Chromium, sample video app', () => {
  it('plays over WebRTC in order, shows a prompt change, sends no WS media while connected, carries the soundtrack', async () => {
    const page = await openPage();
    await page.evaluate(() => (window as unknown as W).rtcTest.start({ audio: true }));
    await page.waitForFunction(() => (window as unknown as W).rtcTest.state === 'connected', null, { timeout: 20_000 });
    await page.waitForFunction(() => (window as unknown as W).rtcTest.presented > 20, null, { timeout: 20_000 });
    const r = await page.evaluate(() => {
      const t = (window as unknown as W).rtcTest;
      return { tracks: t.tracks, binaryWhileConnected: t.binaryWhileConnected, order: t.outOfOrder, errors: t.errors };
    });
    expect(r.tracks).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ track: 'main_video', direction: 'out' }),
        expect.objectContaining({ track: 'soundtrack', direction: 'out' }),
      ]),
    );
    expect(r.errors).toEqual([]);
    // rVFC's mediaTime only goes forward: frames are presented in order.
    expect(r.order).toBe(0);

    // The server moved this client's media off the WebSocket.
    const info = server.connections()[0]!;
    expect(info.webrtc?.state).toBe('connected');
    expect(r.binaryWhileConnected).toBe(0);

    // A prompt change (command on the WebSocket) shows in the WebRTC picture.
    const before = await page.evaluate(() => (window as unknown as W).rtcTest.meanColor());
    await page.evaluate(() => (window as unknown as W).rtcTest.command('set_prompt', { prompt: 'Neon jellyfish in a midnight ocean.' }));
    await page.evaluate(() => (window as unknown as W).rtcTest.command('reset', {}));
    await expect
      .poll(
        async () => {
          const now = await page.evaluate(() => (window as unknown as W).rtcTest.meanColor());
          return Math.hypot(...now.map((x, i) => x - before[i]!));
        },
        { timeout: 15_000 },
      )
      .toBeGreaterThan(15);

    // The soundtrack arrives as Opus and is decoded.
    await expect.poll(() => page.evaluate(() => (window as unknown as W).rtcTest.audio()), { timeout: 10_000 }).toMatchObject({ codec: 'audio/opus' });
    const audio = await page.evaluate(() => (window as unknown as W).rtcTest.audio());
    expect(audio.samples).toBeGreaterThan(0);

    // rtc_close: back to WebSocket media.
    await page.evaluate(() => (window as unknown as W).rtcTest.send({ type: 'rtc_close' }));
    await page.waitForFunction(() => (window as unknown as W).rtcTest.state === 'closed', null, { timeout: 5000 });
    await page.waitForFunction(() => (window as unknown as W).rtcTest.binaryAfterClose > 3, null, { timeout: 10_000 });
    await page.close();
    expect(pageErrors).toEqual([]);
  }, 90_000);

  it('gives a late joiner a picture within one key-frame interval', async () => {
    const first = await openPage();
    await first.evaluate(() => (window as unknown as W).rtcTest.start({ audio: false }));
    await first.waitForFunction(() => (window as unknown as W).rtcTest.presented > 10, null, { timeout: 20_000 });
    const late = await openPage();
    await late.evaluate(() => (window as unknown as W).rtcTest.start({ audio: false }));
    await late.waitForFunction(() => (window as unknown as W).rtcTest.state === 'connected', null, { timeout: 20_000 });
    const fps = 30;
    const started = Date.now();
    await late.waitForFunction(() => (window as unknown as W).rtcTest.presented > 0, null, { timeout: 20_000 });
    const waited = Date.now() - started;
    // One key-frame interval at the app's frame rate, plus a second for a loaded 2-core machine.
    expect(waited).toBeLessThan((KEY_FRAME_INTERVAL / fps) * 1000 + 1000);
    // Both viewers share one encoder per tier (each starts on the lowest and steps up by its own feedback, so a tier is not known in advance).
    const tiers = server
      .videoEncoders()
      .filter((e) => e.track === 'main_video')
      .map((e) => `${e.codec}:${e.tier}`);
    expect(tiers.length).toBeGreaterThan(0);
    expect(new Set(tiers).size).toBe(tiers.length);
    await first.close();
    await late.close();
  }, 60_000);

  it('closes the peer connection and its UDP sockets when the client goes', async () => {
    const udp = (): number => process.getActiveResourcesInfo().filter((r) => r === 'UDPWrap').length;
    await expect.poll(() => server.connections().length, { timeout: 10_000 }).toBe(0);
    await expect.poll(udp, { timeout: 10_000 }).toBe(0);
    const page = await openPage();
    await page.evaluate(() => (window as unknown as W).rtcTest.start({ audio: true }));
    await page.waitForFunction(() => (window as unknown as W).rtcTest.state === 'connected', null, { timeout: 20_000 });
    expect(udp()).toBeGreaterThan(0);
    const peers = (): Promise<string> => fetch(`${server.url}/metrics`).then((r) => r.text());
    expect(await peers()).toMatch(/^reactor_webrtc_peers 1$/m);
    // The page goes away without rtc_close: the WebSocket closes, and the peer with it.
    await page.close();
    await expect.poll(() => server.connections().length, { timeout: 10_000 }).toBe(0);
    await expect.poll(udp, { timeout: 10_000 }).toBe(0);
    expect(await peers()).toMatch(/^reactor_webrtc_peers 0$/m);
  }, 60_000);
});
