/**
 * Command-to-pixel latency measured by a real viewer (issue 26): Chromium opens the viewer of the
 * sample app (VideoApp, one CPU rank on wasm), types prompts into its controls; the page measures
 * each from the send to the canvas drawing the frame the server named as applied, shows it in its
 * status overlay and reports it (`client_stats`): the figures arrive in `/metrics`, per command
 * and transport, with the time to first frame. A client that sends garbage stats is refused and
 * leaves the histograms as they were.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import type { Browser, Page } from 'playwright-core';
import type { ReactorServer } from '@reactor/server';
import type * as ClientBrowser from '@reactor/client/browser';
import { videoAppInChromium, type VideoAppViewer } from './fixtures/video-app-server.js';

const PROMPTS = 4;

let viewer: VideoAppViewer | undefined;
let server: ReactorServer;
let browser: Browser;
let page: Page;
let pageErrors: string[];

beforeAll(async () => {
  viewer = await videoAppInChromium('latency-viewer-', 'width: 96\nheight: 64\nframesPerChunk: 4\nworldSize: 1\ndevices: cpu\nbackend: wasm\n', {
    width: 1200,
    height: 760,
  });
  ({ server, browser, page, pageErrors } = viewer);
}, 60_000);

afterAll(() => viewer?.close());

const metrics = async (): Promise<string> => (await fetch(`${server.url}/metrics`)).text();
/** A metric line's value (undefined when the line is absent). */
function value(text: string, line: string): number | undefined {
  const hit = text.split('\n').find((l) => l.startsWith(`${line} `));
  return hit === undefined ? undefined : Number(hit.slice(line.length + 1));
}
const C2P_COUNT = 'reactor_command_to_pixel_seconds_count{command="set_prompt",transport="websocket"}';
const TTFF_COUNT = 'reactor_time_to_first_frame_seconds_count{transport="websocket"}';
/** Every line of the client-measured histograms and counters. */
const figures = (text: string): string[] =>
  text.split('\n').filter((l) => /^reactor_(command_to_pixel|time_to_first_frame|client_freeze|client_frames_dropped)/.test(l));

describe('command-to-pixel latency from the viewer in Chromium, sample app', () => {
  it('reaches /metrics per command and transport, with the time to first frame, and shows in the overlay', async () => {
    await page.goto(server.url);
    await page.waitForFunction(() => (window as unknown as { reactorViewer: { framesDrawn: number } }).reactorViewer.framesDrawn > 3, null, {
      timeout: 30_000,
    });
    await expect.poll(async () => value(await metrics(), TTFF_COUNT), { timeout: 10_000 }).toBe(1);
    expect(await page.textContent('#first-frame')).toMatch(/^\d+ ms$|^\d+\.\d\d s$/);

    for (let i = 0; i < PROMPTS; i++) {
      await page.fill('[data-command=set_prompt] input[type=text]', `A lighthouse, take ${i}.`);
      await page.click('[data-command=set_prompt] button');
      await expect.poll(() => page.textContent('.result[data-command=set_prompt]')).toBe('ok');
      // One at a time: each prompt is applied at its own frame.
      await expect.poll(() => page.textContent('#c2p-samples'), { timeout: 15_000 }).toBe(String(i + 1));
    }
    await expect.poll(async () => value(await metrics(), C2P_COUNT), { timeout: 10_000 }).toBe(PROMPTS);
    const text = await metrics();
    const sum = value(text, 'reactor_command_to_pixel_seconds_sum{command="set_prompt",transport="websocket"}')!;
    // Each sample is a real span: more than 0, less than the protocol's bound.
    expect(sum).toBeGreaterThan(0);
    expect(sum / PROMPTS).toBeLessThan(120);
    expect(await page.textContent('#c2p-p50')).toMatch(/^\d+ ms$|^\d+\.\d\d s$/);
    expect(await page.textContent('#c2p-last')).toMatch(/^\d+ ms$|^\d+\.\d\d s$/);
    expect(pageErrors).toEqual([]);
  }, 90_000);

  it('refuses a client that sends garbage stats, and its garbage changes no histogram', async () => {
    const before = figures(await metrics());
    expect(before.length).toBeGreaterThan(0);
    const ws = new WebSocket(`${server.url.replace(/^http/, 'ws')}/ws`);
    const errors: string[] = [];
    ws.on('message', (data, binary) => {
      if (binary) return;
      const m = JSON.parse(String(data)) as { type: string; code?: string };
      if (m.type === 'error' && m.code !== undefined) errors.push(m.code);
    });
    await new Promise((resolve) => ws.once('open', resolve));
    const garbage = [
      { type: 'client_stats', transport: 'websocket', samples: [{ command: 'set_prompt', ms: 119_000 }], freezes: 0, freezeMs: 0, dropped: 0 },
      { type: 'client_stats', transport: 'websocket', samples: [{ command: 'set_prompt', ms: 1e12 }], freezes: 0, freezeMs: 0, dropped: 0 },
    ];
    for (const g of garbage) ws.send(JSON.stringify(g));
    await expect.poll(() => errors.length, { timeout: 5000 }).toBe(garbage.length);
    expect(errors).toEqual(['invalid_client_stats', 'invalid_client_stats']);
    ws.close();
    expect(figures(await metrics())).toEqual(before);
  });
});

describe('trackVideoElement in Chromium', () => {
  it('takes presentation times from requestVideoFrameCallback: a command sample and a freeze', async () => {
    const p = await browser.newPage();
    try {
      await p.goto(server.url);
      const result = await p.evaluate(async () => {
        const { LatencyTracker, trackVideoElement } = await (
          window as unknown as { reactorViewer: { browser(): Promise<typeof ClientBrowser> } }
        ).reactorViewer.browser();
        const canvas = Object.assign(document.createElement('canvas'), { width: 64, height: 48 });
        const ctx = canvas.getContext('2d')!;
        const stream = canvas.captureStream(0);
        const [capture] = stream.getVideoTracks() as CanvasCaptureMediaStreamTrack[];
        const video = Object.assign(document.createElement('video'), { muted: true, autoplay: true, srcObject: stream });
        document.body.append(video);
        const tracker = new LatencyTracker();
        tracker.connecting();
        const seen: number[] = [];
        // The compositor's count of presented pictures stands in for the server's seq here.
        const stop = trackVideoElement(video, tracker, { track: 'main', seqOf: (m) => (seen.push(m.presentedFrames), m.presentedFrames) });
        const draw = (i: number): void => {
          ctx.fillStyle = `rgb(${(i * 37) % 255}, 80, 160)`;
          ctx.fillRect(0, 0, 64, 48);
          capture!.requestFrame();
        };
        const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
        // play() settles with the first frame: not awaited before one is drawn.
        const playing = video.play();
        for (let i = 0; i < 15; i++) {
          draw(i);
          await sleep(33);
        }
        const sentAt = performance.now();
        tracker.applied('set_prompt', sentAt, { outcome: 'applied', seq: Math.max(...seen) + 3, track: 'main' });
        for (let i = 15; i < 25; i++) {
          draw(i);
          await sleep(33);
        }
        await sleep(450); // nothing drawn: a freeze
        for (let i = 25; i < 35; i++) {
          draw(i);
          await sleep(33);
        }
        stop();
        await playing;
        return { summary: tracker.summary(), sinceSent: performance.now() - sentAt, presented: seen.length };
      });
      expect(result.presented).toBeGreaterThan(20);
      expect(result.summary.samples).toBe(1);
      expect(result.summary.lastMs).toBeGreaterThan(0);
      expect(result.summary.lastMs).toBeLessThan(result.sinceSent);
      expect(result.summary.firstFrameMs).toBeGreaterThan(0);
      expect(result.summary.freezes).toBeGreaterThanOrEqual(1);
      expect(result.summary.freezeMs).toBeGreaterThan(400);
    } finally {
      await p.close();
    }
  }, 30_000);
});
