/**
 * The SDK's coded-video decoder (`VideoTrackDecoder`, `@reactor/client/browser`) in Debian's
 * Chromium, loaded from a real server's viewer page (a secure context on 127.0.0.1, under its
 * CSP). The H.264 (Annex B) and VP8 chunks come from Chromium's own `VideoEncoder` inside the
 * page: a moving picture, a key frame every 10 frames. What is checked: one VideoFrame per frame,
 * in order, each closed after its listeners; deltas before a key frame, after a gap, after a
 * decode error are discarded and a key frame is asked for (once per 500 ms), and decoding
 * resumes at the next key frame; a flush waits for a key frame; JPEG frames decode too.
 */
import 'reflect-metadata';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { Output, ReactorApp, Video, reactorApp } from '@reactor/runtime';
import { serve, type ReactorServer } from '@reactor/server';
import { quiet } from './fixtures/cleanups.js';
import { launchWithFakeMedia } from './fixtures/chromium.js';
import type * as ClientBrowser from '@reactor/client/browser';

interface ViewerHooks {
  reactorViewer: { browser(): Promise<typeof ClientBrowser> };
}

class OneTrack extends Output {
  @Video({ width: 32, height: 24 })
  main?: Video;
}

@reactorApp({ name: 'codec-decoder', output: OneTrack })
class NothingApp extends ReactorApp {
  generate(): null {
    return null;
  }
}

let server: ReactorServer;
let browser: Browser;
let page: Page;
const pageErrors: string[] = [];
const consoleLines: string[] = [];

beforeAll(async () => {
  server = await serve(NothingApp, { port: 0, gracePeriodMs: 0, logger: quiet });
  await server.loaded;
  browser = await launchWithFakeMedia();
  page = await browser.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.on('console', (m) => consoleLines.push(m.text()));
  await page.goto(server.url);
  await page.waitForFunction(() => document.getElementById('connection')?.textContent === 'connected', null, { timeout: 15_000 });
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
});

/** What one scenario in the page reports. */
interface Run {
  out: { seq: number; w: number; h: number; closedAfter: boolean; luma: number }[];
  requests: { reason: string; seq: number }[];
  errors: string[];
  counters: { decoded: number; discarded: number; keyFrameRequests: number; errors: number };
  /** Frames fed to decode(). */
  fed: number;
}

type Step =
  | { op: 'frames'; from: number; to: number; gapAt?: number; burst?: boolean }
  | { op: 'garbage'; seq: number }
  | { op: 'flush'; nextSeq: number }
  | { op: 'configure' }
  | { op: 'wait'; ms: number };

/**
 * Encodes 40 frames (key at 0, 10, 20, 30) with the page's VideoEncoder, then plays `steps` into a
 * fresh VideoTrackDecoder and reports what came out.
 */
function scenario(codec: 'h264' | 'vp8', steps: Step[], configCodec?: string): Promise<Run> {
  return page.evaluate(
    async ({ codec, steps, configCodec }) => {
      const { VideoTrackDecoder } = await (window as unknown as ViewerHooks).reactorViewer.browser();
      const W = 128;
      const H = 96;
      const codecString = codec === 'h264' ? 'avc1.42E01F' : 'vp8';
      const chunks: { key: boolean; data: Uint8Array }[] = [];
      const enc = new VideoEncoder({
        output: (c) => {
          const data = new Uint8Array(c.byteLength);
          c.copyTo(data);
          chunks.push({ key: c.type === 'key', data });
        },
        error: (e) => {
          throw e;
        },
      });
      enc.configure({
        codec: codecString,
        width: W,
        height: H,
        bitrate: 400_000,
        framerate: 30,
        latencyMode: 'realtime',
        ...(codec === 'h264' ? { avc: { format: 'annexb' as const } } : {}),
      });
      const canvas = new OffscreenCanvas(W, H);
      const g = canvas.getContext('2d')!;
      for (let i = 0; i < 40; i++) {
        // brightness ramps with the frame number, so order shows in the decoded pictures
        const v = 20 + i * 5;
        g.fillStyle = `rgb(${v},${v},${v})`;
        g.fillRect(0, 0, W, H);
        g.fillStyle = '#f00';
        g.fillRect((i * 3) % W, 10, 16, 16);
        const f = new VideoFrame(canvas, { timestamp: i * 33_333 });
        enc.encode(f, { keyFrame: i % 10 === 0 });
        f.close();
      }
      await enc.flush();
      enc.close();

      const dec = new VideoTrackDecoder('main');
      const out: Run['out'] = [];
      const requests: Run['requests'] = [];
      const errors: string[] = [];
      let lastFed = -1;
      const probe = new OffscreenCanvas(W, H).getContext('2d', { willReadFrequently: true })!;
      let held: VideoFrame | undefined;
      dec.on('frame', ({ frame, info }) => {
        probe.drawImage(frame, 0, 0);
        const px = probe.getImageData(W - 4, H - 4, 1, 1).data;
        held = frame;
        out.push({ seq: info.seq, w: frame.displayWidth, h: frame.displayHeight, closedAfter: false, luma: px[1]! });
        queueMicrotask(() => {
          // closed by the decoder once the listeners returned
          out[out.length - 1]!.closedAfter = held!.format === null;
        });
      });
      dec.on('keyframe_needed', (k) => requests.push({ reason: k.reason, seq: lastFed }));
      dec.on('error', (e) => errors.push(e.message));
      const config = {
        type: 'video_config',
        track: 'main',
        codec,
        codecString: configCodec ?? codecString,
        width: W,
        height: H,
        tier: 'full',
        bitrate: 400_000,
      } as const;
      dec.configure(config);
      let fed = 0;
      const encoding = codec === 'h264' ? 3 : 4;
      const feed = (seq: number, payload: Uint8Array, key: boolean, gap = false): void => {
        lastFed = seq;
        fed++;
        dec.decode({ encoding, seq, ptsMs: seq * 33.333, width: W, height: H, payload, key }, gap);
      };
      for (const s of steps) {
        if (s.op === 'frames') {
          for (let i = s.from; i < s.to; i++) {
            // a stream's pace: the next frame once the decoder is not behind (a busy machine's
            // decoder can hold 10, which the decoder rightly treats as behind)
            if (!s.burst) while (dec.queueSize > 3) await new Promise((r) => setTimeout(r, 5));
            feed(i, chunks[i]!.data, chunks[i]!.key, i === s.gapAt);
            if (!s.burst) await new Promise((r) => setTimeout(r, 5));
          }
        } else if (s.op === 'garbage') {
          feed(s.seq, new Uint8Array(600).fill(0x5a), true);
        } else if (s.op === 'flush') {
          dec.flush(s.nextSeq);
        } else if (s.op === 'configure') {
          dec.configure({ ...config, tier: 'half' });
        } else {
          await new Promise((r) => setTimeout(r, s.ms));
        }
      }
      // let the decoder drain: every frame fed is given or counted as discarded (a busy machine's
      // decoder may give its last pictures well after its queue emptied)
      const t0 = performance.now();
      const settled = (): boolean => dec.counters.decoded + dec.counters.discarded >= fed && dec.queueSize === 0;
      while (!settled() && performance.now() - t0 < 10_000) await new Promise((r) => setTimeout(r, 20));
      await new Promise((r) => setTimeout(r, 50));
      const counters = dec.counters;
      dec.close();
      return { out, requests, errors, counters: { ...counters }, fed };
    },
    { codec, steps, configCodec },
  );
}

describe('VideoTrackDecoder in Chromium', () => {
  for (const codec of ['h264', 'vp8'] as const) {
    describe(codec, () => {
      it('gives one VideoFrame per frame, in order, at the coded size, each closed after its listeners', async () => {
        const r = await scenario(codec, [{ op: 'frames', from: 0, to: 40 }]);
        expect(r.errors).toEqual([]);
        expect(r.requests).toEqual([]);
        expect(r.out.map((o) => o.seq)).toEqual([...Array(40).keys()]);
        expect(new Set(r.out.map((o) => `${o.w}x${o.h}`))).toEqual(new Set(['128x96']));
        expect(r.out.every((o) => o.closedAfter)).toBe(true);
        // the picture brightens frame by frame (20 + 5 per frame, give or take the codec)
        expect(r.out[39]!.luma - r.out[0]!.luma).toBeGreaterThan(150);
        expect(r.counters).toMatchObject({ decoded: 40, discarded: 0, keyFrameRequests: 0, errors: 0 });
      }, 30_000);

      it('joining mid-stream: discards the deltas before the first key frame, asks for one once, then decodes from it', async () => {
        const r = await scenario(codec, [{ op: 'frames', from: 3, to: 25 }]);
        expect(r.requests).toEqual([{ reason: 'no_key_yet', seq: 3 }]);
        expect(r.out.map((o) => o.seq)).toEqual([...Array(15).keys()].map((i) => i + 10));
        expect(r.counters.discarded).toBe(7);
        expect(r.out.length + r.counters.discarded).toBe(r.fed);
      }, 30_000);

      it('a video_config mid-stream (a tier change) loses no frame queued before it: each is given or counted as discarded', async () => {
        // 10 frames fed at once (queued in the decoder), the new configuration, then from key frame 10
        const r = await scenario(codec, [{ op: 'frames', from: 0, to: 10, burst: true }, { op: 'configure' }, { op: 'frames', from: 10, to: 20 }]);
        expect(r.errors).toEqual([]);
        const seqs = r.out.map((o) => o.seq);
        expect(seqs).toEqual([...new Set(seqs)].sort((a, b) => a - b));
        expect(seqs.filter((s) => s >= 10)).toEqual([...Array(10).keys()].map((i) => i + 10));
        expect(r.out.length + r.counters.discarded).toBe(r.fed);
        if (process.env['CODEC_DEBUG']) console.log(codec, 'after a configure:', seqs.join(' '), r.counters);
      }, 30_000);

      it('after a gap: discards deltas until the next key frame and asks for it', async () => {
        // frame 13 is missing; 14 is fed with the gap flag
        const r = await scenario(codec, [
          { op: 'frames', from: 0, to: 13 },
          { op: 'frames', from: 14, to: 30, gapAt: 14 },
        ]);
        expect(r.requests).toEqual([{ reason: 'gap', seq: 14 }]);
        expect(r.out.map((o) => o.seq)).toEqual([...[...Array(13).keys()], ...[...Array(10).keys()].map((i) => i + 20)]);
        expect(r.out.length + r.counters.discarded).toBe(r.fed);
      }, 30_000);

      it('after a decode error: reports it, asks for a key frame, and decodes again from the next one', async () => {
        const r = await scenario(codec, [
          { op: 'frames', from: 0, to: 5 },
          { op: 'garbage', seq: 5 },
          { op: 'wait', ms: 300 },
          { op: 'frames', from: 6, to: 25 },
        ]);
        expect(r.errors.length).toBeGreaterThanOrEqual(1);
        expect(r.errors[0]).toMatch(/track "main"/);
        expect(r.requests[0]).toMatchObject({ reason: 'decode_error' });
        const seqs = r.out.map((o) => o.seq);
        expect(seqs.slice(0, 5)).toEqual([0, 1, 2, 3, 4]);
        expect(seqs.filter((s) => s > 5 && s < 10)).toEqual([]);
        expect(seqs.filter((s) => s >= 10)).toEqual([...Array(15).keys()].map((i) => i + 10));
      }, 30_000);

      it('a flush drops what is queued and waits for a key frame', async () => {
        const r = await scenario(codec, [
          { op: 'frames', from: 0, to: 4 },
          { op: 'wait', ms: 200 },
          { op: 'flush', nextSeq: 6 },
          { op: 'frames', from: 4, to: 22 },
        ]);
        const seqs = r.out.map((o) => o.seq);
        expect(seqs).toEqual([0, 1, 2, 3, ...[...Array(12).keys()].map((i) => i + 10)]);
        // 4 and 5 are below nextSeq (stale, no request); 6 is a delta after the flush: one request
        expect(r.requests).toEqual([{ reason: 'no_key_yet', seq: 6 }]);
        expect(r.out.length + r.counters.discarded).toBe(r.fed);
      }, 30_000);
    });
  }

  it('decodes H.264 whose video_config names level 1b as x264 writes it (avc1.640009, which Chromium refuses as it is)', async () => {
    const r = await scenario('h264', [{ op: 'frames', from: 0, to: 20 }], 'avc1.640009');
    expect(r.errors).toEqual([]);
    expect(r.out.map((o) => o.seq)).toEqual([...Array(20).keys()]);
  }, 30_000);

  it('a configuration the browser refuses is one error, not a loop: frames are discarded until the next video_config', async () => {
    const r = await scenario('h264', [{ op: 'frames', from: 0, to: 20 }], 'avc1.ff001f');
    expect(r.errors).toHaveLength(1);
    expect(r.errors[0]).toMatch(/avc1\.ff001f decoder of track "main" failed/);
    expect(r.counters.errors).toBe(1);
    expect(r.out).toEqual([]);
    expect(r.counters.discarded).toBe(r.fed);
  }, 30_000);

  it('decodes JPEG frames (before a video_config, or after a fallback) into VideoFrames too', async () => {
    const r = await page.evaluate(async () => {
      const { VideoTrackDecoder } = await (window as unknown as ViewerHooks).reactorViewer.browser();
      const c = new OffscreenCanvas(64, 48);
      const g = c.getContext('2d')!;
      g.fillStyle = '#0f0';
      g.fillRect(0, 0, 64, 48);
      const jpeg = new Uint8Array(await (await c.convertToBlob({ type: 'image/jpeg' })).arrayBuffer());
      const dec = new VideoTrackDecoder('main');
      const got: { seq: number; w: number; key: boolean }[] = [];
      const done = new Promise<void>((res) =>
        dec.on('frame', ({ frame, info }) => {
          got.push({ seq: info.seq, w: frame.displayWidth, key: info.key });
          res();
        }),
      );
      dec.decode({ encoding: 0, seq: 7, ptsMs: 1, width: 64, height: 48, payload: jpeg, key: false });
      await done;
      dec.close();
      return got;
    });
    expect(r).toEqual([{ seq: 7, w: 64, key: true }]);
  }, 30_000);

  it('left no VideoFrame to the garbage collector and threw nothing', () => {
    expect(consoleLines.filter((l) => /VideoFrame.*garbage collected/i.test(l))).toEqual([]);
    expect(pageErrors).toEqual([]);
  });
});
