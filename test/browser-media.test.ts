/**
 * The SDK's browser media parts in Chromium with a fake camera and microphone, loaded from a
 * real server's viewer page (so under its Content-Security-Policy): the camera is captured as
 * JPEG frames of the size asked for, the microphone as 20 ms chunks of 48 kHz PCM, the
 * AudioPlayer plays PCM that an AnalyserNode hears, and the viewer builds a media panel from the
 * schema (camera and microphone toggles, a mute toggle per outbound audio track, only outbound
 * video in the track selector).
 */
import 'reflect-metadata';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { Audio, Input, Output, ReactorApp, Video, reactorApp } from '@reactor/runtime';
import { serve, type ReactorServer } from '@reactor/server';
import { quiet } from './fixtures/cleanups.js';
import { launchWithFakeMedia } from './fixtures/chromium.js';
import type * as ClientBrowser from '@reactor/client/browser';

/** The viewer's test hook that loads the SDK's browser entry (a dynamic import here would be rewritten by vitest). */
interface ViewerHooks {
  reactorViewer: { browser(): Promise<typeof ClientBrowser> };
}

class MediaInput extends Input {
  @Video({ width: 160, height: 120, fps: 10, description: 'Your camera.' })
  webcam!: unknown;

  @Audio({ sampleRate: 48_000 })
  mic!: unknown;
}

class MediaOutput extends Output {
  @Video({ width: 32, height: 24 })
  main?: Video;

  @Audio({ sampleRate: 48_000 })
  soundtrack?: Audio;
}

/** Declares the tracks only; nothing is generated. */
@reactorApp({ name: 'media-tracks', input: MediaInput, output: MediaOutput })
class MediaTracksApp extends ReactorApp {
  generate(): null {
    return null;
  }
}

let server: ReactorServer;
let browser: Browser;
let page: Page;
const pageErrors: string[] = [];

beforeAll(async () => {
  server = await serve(MediaTracksApp, { port: 0, gracePeriodMs: 0, logger: quiet });
  await server.loaded;
  browser = await launchWithFakeMedia();
  page = await browser.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  await page.goto(server.url);
  await page.waitForFunction(() => document.getElementById('connection')?.textContent === 'connected', null, { timeout: 15_000 });
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
});

describe('SDK media in Chromium', () => {
  it('captures the fake camera as JPEG frames of the requested size, at most the requested rate', async () => {
    const r = await page.evaluate(async () => {
      const { cameraFrames } = await (window as unknown as ViewerHooks).reactorViewer.browser();
      const stream = await navigator.mediaDevices.getUserMedia({ video: true });
      const track = stream.getVideoTracks()[0]!;
      const sizes: string[] = [];
      const soi: number[] = [];
      const t0 = performance.now();
      for await (const f of cameraFrames(track, { width: 160, height: 120, fps: 10, quality: 0.8 })) {
        const bitmap = await createImageBitmap(new Blob([f.jpeg as Uint8Array<ArrayBuffer>], { type: 'image/jpeg' }));
        sizes.push(`${f.width}x${f.height} ${bitmap.width}x${bitmap.height}`);
        soi.push(f.jpeg![0]!, f.jpeg![1]!);
        bitmap.close();
        if (sizes.length === 8) break;
      }
      const elapsed = performance.now() - t0;
      track.stop();
      return { sizes, soi, elapsed };
    });
    expect(new Set(r.sizes)).toEqual(new Set(['160x120 160x120']));
    expect(new Set(r.soi)).toEqual(new Set([0xff, 0xd8])); // every payload starts as a JPEG does
    // 8 frames at 10 fps: the first is immediate, so at least 7 intervals of 100 ms (minus timer slack).
    expect(r.elapsed).toBeGreaterThan(600);
  }, 30_000);

  it('captures the fake microphone as 20 ms chunks of mono 48 kHz PCM with signal in them', async () => {
    const r = await page.evaluate(async () => {
      const { microphoneChunks } = await (window as unknown as ViewerHooks).reactorViewer.browser();
      const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
      const track = stream.getAudioTracks()[0]!;
      const lengths = new Set<number>();
      let peak = 0;
      let samples = 0;
      let chunks = 0;
      let first = 0;
      let last = 0;
      for await (const c of microphoneChunks(track, { sampleRate: 48_000 })) {
        if (chunks === 0) first = performance.now();
        last = performance.now();
        chunks++;
        lengths.add(c.samples.length);
        if (chunks > 1) samples += c.samples.length;
        for (const s of c.samples) peak = Math.max(peak, Math.abs(s));
        if (chunks === 100) break;
      }
      track.stop();
      return { lengths: [...lengths], peak, samples, seconds: (last - first) / 1000 };
    });
    expect(r.lengths).toEqual([960]);
    expect(r.peak).toBeGreaterThan(1000); // the fake device beeps
    // Samples per second of wall time, from the 2nd chunk to the 100th: 48 kHz give or take scheduling.
    const rate = r.samples / r.seconds;
    expect(rate).toBeGreaterThan(48_000 * 0.8);
    expect(rate).toBeLessThan(48_000 * 1.25);
  }, 30_000);

  it('plays PCM through the AudioPlayer: an AnalyserNode on its output sees the signal, and none when muted', async () => {
    const r = await page.evaluate(async () => {
      const { AudioPlayer } = await (window as unknown as ViewerHooks).reactorViewer.browser();
      const player = new AudioPlayer({ sampleRate: 48_000 });
      await player.start();
      const analyser = player.context.createAnalyser();
      analyser.fftSize = 2048;
      player.output.connect(analyser);
      const rms = (): number => {
        const buf = new Float32Array(analyser.fftSize);
        analyser.getFloatTimeDomainData(buf);
        return Math.sqrt(buf.reduce((a, x) => a + x * x, 0) / buf.length);
      };
      const silentBefore = rms();
      // 1.5 s of a 440 Hz tone in 20 ms chunks, pushed ahead (the jitter buffer holds at most 400 ms; the rest is paced below).
      let n = 0;
      const chunk = (): Int16Array => {
        const s = new Int16Array(960);
        for (let i = 0; i < s.length; i++, n++) s[i] = Math.round(Math.sin((2 * Math.PI * 440 * n) / 48_000) * 12_000);
        return s;
      };
      let loud = 0;
      for (let i = 0; i < 75; i++) {
        player.push(chunk());
        await new Promise((res) => setTimeout(res, 18));
        loud = Math.max(loud, rms());
      }
      player.muted = true;
      await new Promise((res) => setTimeout(res, 100));
      let mutedPeak = 0;
      for (let i = 0; i < 10; i++) {
        player.push(chunk());
        await new Promise((res) => setTimeout(res, 18));
        mutedPeak = Math.max(mutedPeak, rms());
      }
      const state = player.context.state;
      await player.close();
      return { silentBefore, loud, mutedPeak, state };
    });
    expect(r.state).toBe('running');
    expect(r.silentBefore).toBeLessThan(0.001);
    expect(r.loud).toBeGreaterThan(0.1); // a 12000/32768 sine has an RMS of about 0.26
    expect(r.mutedPeak).toBeLessThan(0.01);
  }, 30_000);

  it('builds the media panel from the schema: camera and microphone toggles, a mute toggle for outbound audio', async () => {
    expect(await page.locator('.media[data-track=webcam] input[data-kind=camera]').count()).toBe(1);
    expect(await page.locator('.media[data-track=mic] input[data-kind=microphone]').count()).toBe(1);
    expect(await page.locator('.media[data-track=webcam] .wire').textContent()).toBe('160x120 @ 10 fps');
    expect(await page.locator('.media[data-track=mic] .wire').textContent()).toBe('48000 Hz');
    expect(await page.locator('.media[data-track=soundtrack] input[name=mute]').count()).toBe(1);
    await expect.poll(() => page.textContent('.result[data-track=soundtrack]')).toBe('playing');
    // Only the outbound video track can be shown.
    expect(await page.locator('#track option').allTextContents()).toEqual(['main']);
    await page.locator('.media[data-track=soundtrack] .toggle').click();
    await expect.poll(() => page.textContent('.result[data-track=soundtrack]')).toBe('muted');
    expect(
      await page.evaluate(
        () => (window as unknown as { reactorViewer: { audioPlayers: Map<string, { muted: boolean }> } }).reactorViewer.audioPlayers.get('soundtrack')?.muted,
      ),
    ).toBe(true);
    expect(pageErrors).toEqual([]);
  }, 30_000);
});
