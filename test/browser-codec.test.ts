/**
 * The viewer with coded video in Debian's Chromium, against the sample app (VideoApp, 2 CPU
 * ranks on wasm) served with `video.codec` `h264` and `vp8`: the browser picks the codec and
 * decodes it with WebCodecs; frames appear in order, each decoded once; a prompt change shows; a
 * second viewer joining mid-stream has a picture within one key-frame interval; a viewer behind a
 * bandwidth-limited proxy moves down a tier and keeps playing; a browser without WebCodecs still
 * plays JPEG.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import type { ReactorServer } from '@reactor/server';
import { VIDEO_FPS } from '@reactor/app-video';
import { canvasMeanRgb as mean, rgbDistance as dist } from './fixtures/canvas.js';
import { launchWithFakeMedia } from './fixtures/chromium.js';
import { throttleProxy, type ThrottleProxy } from './fixtures/throttle-proxy.js';
import { serveVideoApp, type VideoAppServer } from './fixtures/video-app-server.js';

/** The server's default (60 frames: 2.5 s at the app's 24 fps). */
const KEY_FRAME_INTERVAL = 60;

/** What the page's viewer says about its video (through `window.reactorViewer`). */
interface VideoState {
  codec: string | undefined;
  tier: string | undefined;
  framesDrawn: number;
  log: { seq: number; receivedAt: number; decodedAt: number; encoding: number; key: boolean }[];
  counters: Record<string, { decoded: number; discarded: number; keyFrameRequests: number; errors: number }>;
  selectedAt: number | undefined;
  status: { codec: string; tier: string; bitrate: string };
}

function videoState(page: Page): Promise<VideoState> {
  return page.evaluate(() => {
    const v = (window as unknown as { reactorViewer: Record<string, any> }).reactorViewer;
    const rx = v['video'];
    return {
      codec: rx?.codec,
      tier: rx?.tier,
      framesDrawn: v['framesDrawn'],
      log: [...v['decodeLog']],
      counters: rx ? rx.counters() : {},
      selectedAt: v['videoSelectedAt'],
      status: {
        codec: document.getElementById('codec')!.textContent!,
        tier: document.getElementById('tier')!.textContent!,
        bitrate: document.getElementById('bitrate')!.textContent!,
      },
    };
  });
}

let browser: Browser;
const pageErrors: string[] = [];

beforeAll(async () => {
  browser = await launchWithFakeMedia();
}, 60_000);

afterAll(async () => {
  await browser?.close();
});

async function openViewer(url: string, init?: () => void): Promise<Page> {
  const page = await browser.newPage({ viewport: { width: 1200, height: 700 } });
  page.on('pageerror', (e) => pageErrors.push(e.message));
  if (init) await page.addInitScript(init);
  await page.goto(url);
  return page;
}

/**
 * Waits until the viewer has selected `codec` and its decoder of the main track has decoded more
 * than `frames` frames. (Frames drawn are not enough: JPEG frames drawn before the selection count
 * there, and the track's decoder exists only from the first coded frame.)
 */
async function waitForCodec(page: Page, codec: string, frames = 5): Promise<void> {
  await page.waitForFunction(
    ([codec, frames]) => {
      const v = (window as unknown as { reactorViewer: { video?: { codec: string; counters(): Record<string, { decoded: number }> }; framesDrawn: number } })
        .reactorViewer;
      return v.video?.codec === codec && (v.video.counters()['main_video']?.decoded ?? 0) > (frames as number);
    },
    [codec, frames] as const,
    { timeout: 30_000 },
  );
}

for (const codec of ['h264', 'vp8'] as const) {
  describe(`viewer in Chromium, sample video app, ${codec}`, () => {
    let app: VideoAppServer | undefined;
    let server: ReactorServer;
    let page: Page;
    const encoding = codec === 'h264' ? 3 : 4;

    beforeAll(async () => {
      app = await serveVideoApp(`codec-viewer-${codec}-`, 'width: 160\nheight: 96\nframesPerChunk: 4\nworldSize: 2\ndevices: cpu\nbackend: wasm\n', {
        video: {
          codec,
          keyFrameInterval: KEY_FRAME_INTERVAL,
          framerate: VIDEO_FPS,
          tiers: [
            { name: 'full', scale: 1, bitrate: 1_500_000 },
            { name: 'half', scale: 0.5, bitrate: 150_000 },
            { name: 'low', scale: 0.5, bitrate: 50_000 },
          ],
        },
      });
      server = app.server;
      page = await openViewer(server.url);
    }, 90_000);

    afterAll(async () => {
      await app?.close();
    });

    it(`picks ${codec}, draws every frame once and in order, and shows codec, tier and bitrate`, async () => {
      await waitForCodec(page, codec, 10);
      // Count the frames of the track the client receives from now on, in the page.
      // In one turn of the page's JS: start counting, and note the frames drawn and the
      // decoder's counters (a frame discarded between two evaluates would be counted before the
      // window yet arrive inside it).
      const start = await page.evaluate(() => {
        const v = (window as unknown as { reactorViewer: Record<string, any> }).reactorViewer;
        v['received'] = [] as number[];
        v['client'].on('frame', (f: { trackName: string; seq: number }) => f.trackName === 'main_video' && v['received'].push(f.seq));
        return {
          framesDrawn: v['framesDrawn'] as number,
          counters: v['video'].counters()['main_video'] as VideoState['counters'][string],
        };
      });
      await expect.poll(async () => (await videoState(page)).framesDrawn - start.framesDrawn, { timeout: 20_000 }).toBeGreaterThan(3 * VIDEO_FPS);
      // Stop counting, then let the decoder drain what it holds.
      const received = await page.evaluate(() => {
        const v = (window as unknown as { reactorViewer: Record<string, any> }).reactorViewer;
        const r = v['received'] as number[];
        v['received'] = [];
        return [...r];
      });
      await expect.poll(async () => (await videoState(page)).log.some((e) => e.seq >= received.at(-1)!), { timeout: 10_000 }).toBe(true);
      const after = await videoState(page);
      // The window starts at its first frame: frames that arrived before it (a busy machine's
      // decoder holds several) may be drawn inside it, and are not the window's.
      const from = received[0]! - 1;
      const inWindow = received.filter((seq) => seq > from);
      const drawn = after.log.filter((e) => e.seq > from && e.seq <= inWindow.at(-1)!).map((e) => e.seq);
      // drawn in order, each once, only frames that arrived
      expect(drawn).toEqual([...new Set(drawn)].sort((a, b) => a - b));
      expect(drawn.every((seq) => inWindow.includes(seq))).toBe(true);
      expect(after.log.filter((e) => e.seq > from).every((e) => e.encoding === encoding)).toBe(true);
      // every frame that arrived is drawn or counted as discarded (a lost reference, a decoder
      // behind on this loaded machine), never silently lost; most are drawn
      const c0 = start.counters;
      const c1 = after.counters['main_video']!;
      expect(c1.errors - c0.errors).toBe(0);
      expect(inWindow.length - drawn.length).toBeLessThanOrEqual(c1.discarded - c0.discarded);
      expect(drawn.length).toBeGreaterThan(inWindow.length * 0.7);
      if (c1.discarded === c0.discarded) expect(drawn).toEqual(inWindow);
      expect(after.status.codec).toBe(codec);
      expect(after.status.tier).toBe(after.tier);
      expect(['full', 'half', 'low']).toContain(after.tier);
      expect(after.status.bitrate).toMatch(/^\d+(\.\d+)? Mbit\/s$/);
      // The picture's size is its tier's: full 160x96, half and low 80x48 (a loaded machine may
      // step the viewer down a tier; the status line and the picture can be a frame apart).
      expect(['160x96', '80x48']).toContain(await page.textContent('#size'));
      expect(await mean(page).then((m) => m[0] + m[1] + m[2])).toBeGreaterThan(30);
      expect(pageErrors).toEqual([]);
    }, 60_000);

    it('shows a prompt change', async () => {
      const before = await mean(page);
      await page.fill('[data-command=set_prompt] input[type=text]', 'Neon jellyfish in a midnight ocean.');
      await page.click('[data-command=set_prompt] button');
      await expect.poll(() => page.textContent('.result[data-command=set_prompt]')).toBe('ok');
      await page.click('[data-command=reset] button');
      await expect.poll(async () => dist(await mean(page), before), { timeout: 15_000 }).toBeGreaterThan(15);
      // the reset flushed playout: the decoder waited for the server's key frame, it did not ask
      const s = await videoState(page);
      if (s.counters['main_video']?.errors) console.log('decode errors:', (await page.textContent('#messages'))?.slice(0, 1500));
      expect(s.counters['main_video']?.errors).toBe(0);
      expect(s.codec).toBe(codec);
    }, 60_000);

    it('gives a viewer that joins mid-stream a picture within one key-frame interval', async () => {
      const late = await openViewer(server.url);
      try {
        await waitForCodec(late, codec, 2);
        // the frames drawn before the selection's first coded one are JPEG: wait for that one
        await expect.poll(async () => (await videoState(late)).log.some((e) => e.encoding === encoding), { timeout: 20_000 }).toBe(true);
        const s = await videoState(late);
        const firstCoded = s.log.find((e) => e.encoding === encoding)!;
        expect(firstCoded.key).toBe(true);
        expect(s.selectedAt).toBeDefined();
        // from the selection's reply to the first coded picture: at most one key-frame interval
        expect(firstCoded.decodedAt - s.selectedAt!).toBeLessThan((KEY_FRAME_INTERVAL / VIDEO_FPS) * 1000);
      } finally {
        await late.close();
      }
    }, 60_000);

    it('moves a viewer behind a slow link down a tier, and it keeps playing', async () => {
      const proxy: ThrottleProxy = await throttleProxy(server.port, 1_000_000);
      const slow = await openViewer(`http://127.0.0.1:${proxy.port}/`);
      try {
        await waitForCodec(slow, codec, 10);
        expect((await videoState(slow)).tier).toBe('full');
        // Full tier needs more than this; half fits with room.
        proxy.setRate(60_000);
        await expect.poll(async () => (await videoState(slow)).tier, { timeout: 30_000, interval: 250 }).not.toBe('full');
        const moved = await videoState(slow);
        await slow.evaluate(() => {
          const v = (window as unknown as { reactorViewer: Record<string, any> }).reactorViewer;
          v['slowReceived'] = { coded: 0, key: 0, jpeg: 0 };
          v['client'].on('frame', (f: { trackName: string; encoding: number; key?: boolean }) => {
            if (f.trackName !== 'main_video') return;
            const r = v['slowReceived'];
            if (f.encoding === 0) r.jpeg++;
            else r.coded++;
            if (f.key === true) r.key++;
          });
        });
        try {
          await expect.poll(async () => (await videoState(slow)).framesDrawn - moved.framesDrawn, { timeout: 20_000 }).toBeGreaterThan(VIDEO_FPS);
        } catch (err) {
          // say what the viewer saw: frames that arrived after the move, its decoder, its reception
          const seen = await slow.evaluate(() => {
            const v = (window as unknown as { reactorViewer: Record<string, any> }).reactorViewer;
            return { received: v['slowReceived'], reception: v['video']?.reception, server: v['video']?.serverStats, tier: v['video']?.tier };
          });
          const s = await videoState(slow);
          console.log('slow viewer after the move:', JSON.stringify({ drawn: s.framesDrawn - moved.framesDrawn, ...seen, counters: s.counters }));
          console.log('its messages:', ((await slow.textContent('#messages')) ?? '').slice(0, 3000));
          throw err;
        }
        const s = await videoState(slow);
        expect(s.status.tier).not.toBe('full');
        const seqs = s.log.map((e) => e.seq);
        expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
        const messages = (await slow.textContent('#messages')) ?? '';
        if (process.env['CODEC_DEBUG']) console.log('SLOW', messages.slice(0, 3000), JSON.stringify(s.counters));
        expect(messages).toMatch(/tier full -> half: .*(lost|late)/);
      } finally {
        await slow.close();
        await proxy.close();
      }
    }, 90_000);

    it('falls back to JPEG when this browser refuses the coded configuration (one error, no loop)', async () => {
      const refusing = await openViewer(server.url, () => {
        // isConfigSupported still says yes (the viewer selects the codec); configure() is refused
        const Real = window.VideoDecoder;
        window.VideoDecoder = class extends Real {
          readonly #error: (e: DOMException) => void;
          constructor(init: VideoDecoderInit) {
            super(init);
            this.#error = init.error;
          }
          override configure(): void {
            setTimeout(() => this.#error(new DOMException('refused by the test', 'NotSupportedError')));
          }
        };
      });
      try {
        await expect.poll(async () => (await videoState(refusing)).status.codec, { timeout: 30_000 }).toBe('jpeg');
        const drawn = (await videoState(refusing)).framesDrawn;
        await expect.poll(async () => (await videoState(refusing)).framesDrawn - drawn, { timeout: 20_000 }).toBeGreaterThan(10);
        const s = await videoState(refusing);
        expect(s.codec).toBe('jpeg');
        expect(s.log.slice(-5).every((e) => e.encoding === 0)).toBe(true);
        expect(s.counters['main_video']?.errors).toBe(1);
        expect((await refusing.textContent('#messages')) ?? '').toMatch(/decoder of track \\?"main_video\\?" failed: refused by the test/);
      } finally {
        await refusing.close();
      }
    }, 60_000);

    it('still plays JPEG in a browser without WebCodecs', async () => {
      const old = await openViewer(server.url, () => {
        delete (window as { VideoDecoder?: unknown }).VideoDecoder;
      });
      try {
        await old.waitForFunction(() => (window as unknown as { reactorViewer: { framesDrawn: number } }).reactorViewer.framesDrawn > 10, null, {
          timeout: 30_000,
        });
        const s = await videoState(old);
        expect(s.codec).toBeUndefined();
        expect(s.status.codec).toBe('jpeg');
        expect(s.log.slice(-5).every((e) => e.encoding === 0)).toBe(true);
      } finally {
        await old.close();
      }
      expect(pageErrors).toEqual([]);
    }, 60_000);
  });
}
