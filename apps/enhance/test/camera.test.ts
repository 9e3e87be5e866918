// The camera path in an in-process AppHost with a real rank process: a published webcam's
// frames replace the built-in scene (resized to the model input, upscaled, streamed), and the
// scene comes back when the camera is unpublished.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AppHost } from '@reactor/runtime';
import { RecordingLogger, RecordingSink } from '@reactor/runtime/testing';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { EnhanceApp } from '../src/app.js';

const scratch = mkdtempSync(join(tmpdir(), 'enhance-camera-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const config = join(scratch, 'config.yaml');
writeFileSync(config, 'model: slim\noutputWidth: 64\noutputHeight: 40\nframesPerStep: 1\nworldSize: 1\ndevices: cpu\nbackend: wasm\n');

const hosts: AppHost[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.close()));
});

/** A 320x180 camera picture: red on the left half, blue on the right. */
function cameraPicture(): Uint8Array {
  const w = 320;
  const h = 180;
  const rgb = new Uint8Array(w * h * 3);
  for (let y = 0; y < h; y++)
    for (let x = 0; x < w; x++) {
      const o = (y * w + x) * 3;
      if (x < w / 2) rgb[o] = 220;
      else rgb[o + 2] = 220;
    }
  return rgb;
}

/** Mean of each channel over columns [x0, x1) of a 64x40 frame. */
function meanRgb(rgb: Uint8Array, x0: number, x1: number): number[] {
  const sum = [0, 0, 0];
  let n = 0;
  for (let y = 0; y < 40; y++) for (let x = x0; x < x1; x++, n++) for (let c = 0; c < 3; c++) sum[c]! += rgb[(y * 64 + x) * 3 + c]!;
  return sum.map((s) => s / n);
}

describe('EnhanceApp: the camera', () => {
  it('upscales the published webcam instead of the scene, and goes back to the scene when it is unpublished', async () => {
    const host = new AppHost(EnhanceApp, { statsIntervalMs: 0, gracePeriodMs: 0, logger: new RecordingLogger() });
    hosts.push(host);
    await host.load({ configPath: config });
    const sink = new RecordingSink();
    const client = host.connect(sink);
    const source = (s: string) => (m: { type: string; name?: string; data?: unknown }) =>
      m.type === 'message' && m.name === 'enhance_info' && (m.data as { source: string }).source === s;
    await sink.waitForMessage(source('scene'), { timeoutMs: 30_000 });
    expect(sink.ofType('welcome')[0]!.schema.tracks.map((t) => [t.name, t.direction])).toEqual([
      ['webcam', 'in'],
      ['enhanced', 'out'],
    ]);

    expect(client.publish('p1', 'webcam')).toEqual({ type: 'reply', id: 'p1' });
    const picture = cameraPicture();
    expect(client.pushFrame('webcam', { data: picture, width: 320, height: 180, ptsMs: 0, receivedAtMs: performance.now() })).toBe(true);
    const at = sink.messages.length;
    await sink.waitForMessage(source('camera'), { timeoutMs: 30_000, from: at });
    const firstCamera = sink.frames.length;
    await sink.waitForFrames(firstCamera + 2, { timeoutMs: 30_000 });
    const frame = sink.frames[firstCamera + 1]!;
    expect([frame.width, frame.height]).toEqual([64, 40]);
    const [lr, lg, lb] = meanRgb(frame.rgb, 4, 28);
    const [rr, rg, rb] = meanRgb(frame.rgb, 36, 60);
    expect(lr).toBeGreaterThan(180);
    expect(Math.max(lg!, lb!)).toBeLessThan(40);
    expect(rb).toBeGreaterThan(180);
    expect(Math.max(rr!, rg!)).toBeLessThan(40);

    expect(client.unpublish('u1', 'webcam')).toEqual({ type: 'reply', id: 'u1' });
    await sink.waitForMessage(source('scene'), { timeoutMs: 30_000, from: sink.messages.length });
    client.disconnect();
  }, 120_000);
});
