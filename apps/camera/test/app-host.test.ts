// CameraApp in an in-process AppHost with real rank processes: the waiting card before any
// camera, camera frames pushed through the transport seam (as the server does after decoding)
// come back transformed by the 2 ranks, exactly as the 2-D reference computes them.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ServerMessage } from '@reactor/client';
import { type OutputFrame } from '@reactor/runtime';
import { RecordingLogger, RecordingSink, command, useHosts } from '@reactor/runtime/testing';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { CameraApp } from '../src/app.js';
import { effectParams } from '../src/effects.js';
import { CARD_BACKGROUND } from '../src/waiting-card.js';
import { reference, testPicture } from './reference.js';

const scratch = mkdtempSync(join(tmpdir(), 'camera-app-host-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const config = join(scratch, 'config.yaml');
writeFileSync(config, 'worldSize: 2\n');

const start = useHosts(afterEach);

const isStatus = (camera: string) => (m: ServerMessage) =>
  m.type === 'message' && m.name === 'camera_status' && (m.data as { camera: string }).camera === camera;

describe('CameraApp in a host', () => {
  it('shows the waiting card, then streams each camera frame transformed by 2 ranks, then the card again when the camera leaves', async () => {
    const host = start(CameraApp, { statsIntervalMs: 0, gracePeriodMs: 0, logger: new RecordingLogger() });
    await host.load({ configPath: config });
    expect(host.readiness()).toEqual({ ready: true, reasons: [] });
    const sink = new RecordingSink();
    const viewer = host.connect(sink);
    await sink.waitForMessage(isStatus('waiting'));
    // Before any camera: the card, at the capture size.
    const card = ((await sink.waitFor((e) => e.kind === 'frame')) as { frame: OutputFrame }).frame;
    expect(card).toMatchObject({ track: 'processed', width: 320, height: 240 });
    expect(Array.from(card.rgb.subarray(0, 3))).toEqual([...CARD_BACKGROUND]);

    expect(await viewer.command(command('1', 'set_effect', { effect: 'edges' }))).toEqual({ type: 'reply', id: '1' });
    expect(await viewer.command(command('2', 'set_strength', { strength: 0.4 }))).toEqual({ type: 'reply', id: '2' });

    const camSink = new RecordingSink();
    const camera = host.connect(camSink);
    expect(camera.publish('p1', 'webcam')).toEqual({ type: 'reply', id: 'p1' });
    const W = 320;
    const H = 240;
    for (const [i, [effect, strength]] of (
      [
        ['edges', 0.4],
        ['cartoon', 0.8],
      ] as const
    ).entries()) {
      if (i > 0) {
        await viewer.command(command(`e${i}`, 'set_effect', { effect }));
        await viewer.command(command(`s${i}`, 'set_strength', { strength }));
      }
      // One frame at a time: push, then wait for its transformed copy.
      for (let k = 0; k < 3; k++) {
        const picture = testPicture(W, H, 100 * i + k);
        const want = Buffer.from(reference(picture, W, H, effectParams(effect, strength)));
        const from = sink.events.length;
        expect(camera.pushFrame('webcam', { data: picture, width: W, height: H, ptsMs: k, receivedAtMs: performance.now() })).toBe(true);
        await sink.waitFor((e) => e.kind === 'frame' && Buffer.from(e.frame.rgb).equals(want), { from, timeoutMs: 20_000 });
      }
    }
    expect(
      sink
        .ofType('message')
        .filter((m) => m.name === 'camera_status')
        .map((m) => m.data),
    ).toContainEqual({ camera: 'live', width: 320, height: 240, world_size: 2 });

    // The camera leaves: the card comes back, the session goes on.
    const from = sink.events.length;
    camera.disconnect();
    await sink.waitForMessage(isStatus('waiting'), { from });
    await sink.waitFor((e) => e.kind === 'frame' && Array.from(e.frame.rgb.subarray(0, 3)).join() === CARD_BACKGROUND.join(), { from });
    expect(host.status.state).toBe('streaming');
  }, 120_000);
});
