// VideoApp's soundtrack in an in-process AppHost with real rank processes: each audio chunk the
// host plays out carries one video frame's worth of samples (48 kHz / 24 frames per second =
// 2000), right after its frame and at its presentation time. (That the chord follows the
// prompt is checked on the model: model-steer.test.ts.)
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RecordingLogger, RecordingSink, useHosts } from '@reactor/runtime/testing';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { SOUNDTRACK_SAMPLE_RATE, VIDEO_FPS, VideoApp } from '../src/app.js';

const here = dirname(fileURLToPath(import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'video-soundtrack-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const config = join(scratch, 'config.yaml');
writeFileSync(config, 'width: 32\nheight: 32\nframesPerChunk: 4\nworldSize: 2\ndevices: cpu\nbackend: wasm\n');

const start = useHosts(afterEach);

describe('VideoApp soundtrack', () => {
  it('plays one frame of sound (2000 samples at 48 kHz) with every video frame, at its presentation time', async () => {
    const host = start(VideoApp, { statsIntervalMs: 0, gracePeriodMs: 0, weightsPath: resolve(here, '../weights'), logger: new RecordingLogger() });
    await host.load({ configPath: config });
    const sink = new RecordingSink();
    const client = host.connect(sink);
    await sink.waitForAudio(8, { timeoutMs: 30_000 });
    expect(SOUNDTRACK_SAMPLE_RATE / VIDEO_FPS).toBe(2000);
    for (const a of sink.audioChunks.slice(0, 8)) {
      expect(a).toMatchObject({ track: 'soundtrack', sampleRate: 48_000 });
      expect(a.pcm).toHaveLength(2000);
    }
    // In play order each chunk follows the frame it belongs to, at the same presentation time.
    const order = sink.events.filter((e) => e.kind === 'frame' || e.kind === 'audio').slice(0, 8);
    expect(order.map((e) => e.kind)).toEqual(['frame', 'audio', 'frame', 'audio', 'frame', 'audio', 'frame', 'audio']);
    const pts = (e: (typeof order)[number]): number => (e.kind === 'frame' ? e.frame.ptsMs : e.kind === 'audio' ? e.audio.ptsMs : NaN);
    for (let i = 0; i < 8; i += 2) expect(pts(order[i + 1]!)).toBe(pts(order[i]!));

    client.disconnect();
  }, 90_000);
});
