/**
 * Camera and microphone in over WebRTC, in Chromium with its fake devices, through the viewer
 * (`/?transport=webrtc`): its camera toggle publishes the fake camera on the peer connection
 * (`publish` with `"transport":"webrtc"`, a renegotiation), `apps/camera` transforms it, and the
 * transformed picture comes back over WebRTC onto the canvas: with effect `none` it is the
 * camera's picture, with `edges` a dark outline of it. The effect fixture app gets the fake
 * microphone's beep as 48 kHz PCM. No inbound frame comes on the WebSocket.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { serve, type ReactorServer } from '@reactor/server';
import { CameraApp } from '@reactor/app-camera';
import { quiet } from './fixtures/cleanups.js';
import { launchWithFakeMedia } from './fixtures/chromium.js';
import { EFFECT, effectApp, newEffectRecord, type EffectRecord } from './fixtures/effect-app.js';

let browser: Browser;
let dir: string;
const servers: ReactorServer[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'webrtc-input-'));
  browser = await launchWithFakeMedia();
}, 30_000);

afterAll(async () => {
  await browser?.close();
  for (const s of servers) await s.close();
  rmSync(dir, { recursive: true, force: true });
});

interface ViewerWindow {
  reactorViewer: {
    framesDrawn: number;
    transport: { current: string };
    client: { send(name: string, params: unknown): Promise<unknown> };
    publications: Map<string, { transport: string; framesSent: number }>;
  };
}

/** The viewer at `/?transport=webrtc`, once its media runs over WebRTC. */
async function viewer(server: ReactorServer): Promise<Page> {
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  await page.goto(`${server.url}/?transport=webrtc`);
  await page.waitForFunction(() => (window as unknown as ViewerWindow).reactorViewer.transport?.current === 'webrtc', null, { timeout: 20_000 });
  return page;
}

/** Mean RGB of an element drawn to a canvas: the viewer's `#stream` canvas, or the camera preview `<video>`. */
function meanOf(page: Page, selector: string): Promise<[number, number, number]> {
  return page.evaluate((sel) => {
    const el = document.querySelector(sel) as HTMLCanvasElement | HTMLVideoElement;
    const w = el instanceof HTMLVideoElement ? el.videoWidth : el.width;
    const h = el instanceof HTMLVideoElement ? el.videoHeight : el.height;
    const c = document.createElement('canvas');
    c.width = w;
    c.height = h;
    const g = c.getContext('2d')!;
    g.drawImage(el, 0, 0);
    const d = g.getImageData(0, 0, w, h).data;
    const s = [0, 0, 0];
    for (let i = 0; i < d.length; i += 4) for (let k = 0; k < 3; k++) s[k]! += d[i + k]!;
    const n = d.length / 4 || 1;
    return [s[0]! / n, s[1]! / n, s[2]! / n] as [number, number, number];
  }, selector);
}

const distance = (a: number[], b: number[]): number => Math.hypot(a[0]! - b[0]!, a[1]! - b[1]!, a[2]! - b[2]!);

async function metric(server: ReactorServer, line: RegExp): Promise<number> {
  const m = line.exec(await server.metrics.registry.metrics());
  return m ? Number(m[1]) : 0;
}

describe('camera and microphone over WebRTC, in Chromium', () => {
  it('the fake camera goes over WebRTC into apps/camera and the transformed picture comes back', async () => {
    const config = join(dir, 'camera.yaml');
    writeFileSync(config, 'worldSize: 1\n');
    const server = await serve(CameraApp, { port: 0, gracePeriodMs: 0, logger: quiet, configPath: config, video: { codec: 'h264' }, webrtc: {} });
    servers.push(server);
    await server.loaded;
    const page = await viewer(server);
    await page.evaluate(() => (window as unknown as ViewerWindow).reactorViewer.client.send('set_effect', { effect: 'none' }));
    const card = await meanOf(page, '#stream');
    await page.locator('.media[data-track=webcam] .toggle').click();
    await expect.poll(() => page.textContent('.result[data-track=webcam]'), { timeout: 20_000 }).toMatch(/^publishing/);
    expect(await page.evaluate(() => (window as unknown as ViewerWindow).reactorViewer.publications.get('webcam')?.transport)).toBe('webrtc');
    // The app's buffer gets the camera, decoded from RTP: frames of the declared 320x240.
    await expect.poll(() => metric(server, /^reactor_input_frames_accepted_total\{track="webcam"\} (\d+)$/m), { timeout: 20_000 }).toBeGreaterThan(10);
    // Effect none: the canvas shows the camera's picture (the preview's colours), not the waiting card.
    await expect
      .poll(async () => distance(await meanOf(page, '#stream'), await meanOf(page, '.media[data-track=webcam] video')), { timeout: 20_000 })
      .toBeLessThan(20);
    const plain = await meanOf(page, '#stream');
    expect(distance(plain, card)).toBeGreaterThan(10);
    // Effect edges: a dark picture with bright outlines, far from the camera's colours.
    await page.evaluate(() => (window as unknown as ViewerWindow).reactorViewer.client.send('set_effect', { effect: 'edges' }));
    await expect.poll(async () => distance(await meanOf(page, '#stream'), plain), { timeout: 20_000 }).toBeGreaterThan(40);
    // Nothing came as binary frames on the WebSocket.
    expect(server.connections()[0]?.inbound?.received ?? 0).toBe(0);
    expect(server.connections()[0]?.webrtc?.state).toBe('connected');
    await page.close();
  }, 90_000);

  it("the fake microphone's beep reaches the app as 48 kHz PCM over WebRTC", async () => {
    const record: EffectRecord = newEffectRecord();
    const server = await serve(effectApp(record), { port: 0, gracePeriodMs: 0, logger: quiet, video: { codec: 'h264' }, webrtc: {} });
    servers.push(server);
    await server.loaded;
    const page = await viewer(server);
    // The effect app steps on camera frames: the camera goes too (over WebRTC as well).
    await page.locator('.media[data-track=webcam] .toggle').click();
    await expect.poll(() => record.videoFrames, { timeout: 20_000 }).toBeGreaterThan(3);
    expect([...record.videoSizes]).toEqual([`${EFFECT.width}x${EFFECT.height}`]);
    await page.locator('.media[data-track=mic] .toggle').click();
    await expect.poll(() => page.textContent('.result[data-track=mic]'), { timeout: 20_000 }).toMatch(/^publishing/);
    expect(await page.evaluate(() => (window as unknown as ViewerWindow).reactorViewer.publications.get('mic')?.transport)).toBe('webrtc');
    await expect.poll(() => record.audioChunks, { timeout: 20_000 }).toBeGreaterThan(50);
    expect([...record.audioRates]).toEqual([EFFECT.sampleRate]);
    // One chunk per 20 ms Opus packet, as browsers send them.
    expect(record.audioSamples).toBe(record.audioChunks * 960);
    await expect.poll(() => record.audioPeak, { timeout: 15_000 }).toBeGreaterThan(1000);
    expect(server.connections()[0]?.inbound?.received ?? 0).toBe(0);
    await page.close();
  }, 90_000);
});
