// CameraApp served on a free port, driven by a Node WebSocket client speaking the protocol:
// it publishes the `webcam` track, sends synthetic RGB frames, and gets them back transformed
// (the server sends raw RGB here, `encoding: 'rgb'`, so the bytes can be compared with the
// reference computed in the test).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type DecodedFrame, FrameEncoding, type ServerMessage, decodeFrame, encodeFrameHeader, parseServerMessage, toWebSocketUrl } from '@reactor/client';
import { silentLogger } from '@reactor/log';
import { type ReactorServer, serve } from '@reactor/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { CameraApp } from '../src/app.js';
import { effectParams } from '../src/effects.js';
import { CARD_BACKGROUND } from '../src/waiting-card.js';
import { reference, testPicture } from './reference.js';

const scratch = mkdtempSync(join(tmpdir(), 'camera-app-wire-'));
const config = join(scratch, 'config.yaml');
writeFileSync(config, 'worldSize: 2\n');
let server: ReactorServer;

beforeAll(async () => {
  server = await serve(CameraApp, { port: 0, logger: silentLogger, configPath: config, encoding: 'rgb' });
  await server.loaded;
}, 60_000);
afterAll(async () => {
  await server?.close();
  rmSync(scratch, { recursive: true, force: true });
});

type Event = { kind: 'message'; msg: ServerMessage } | { kind: 'frame'; frame: DecodedFrame };

/** A bare protocol client: records every message and frame, and waits on conditions. */
class WireClient {
  readonly events: Event[] = [];
  private waiters: { pred: (e: Event) => boolean; from: number; resolve: (e: Event) => void }[] = [];
  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      const e: Event = isBinary ? { kind: 'frame', frame: decodeFrame(new Uint8Array(data)) } : { kind: 'message', msg: parseServerMessage(data.toString()) };
      this.events.push(e);
      const i = this.events.length - 1;
      this.waiters = this.waiters.filter((w) => (i >= w.from && w.pred(e) ? (w.resolve(e), false) : true));
    });
  }
  static async open(url: string): Promise<WireClient> {
    const ws = new WebSocket(toWebSocketUrl(url));
    const c = new WireClient(ws);
    await c.waitFor((e) => e.kind === 'message' && e.msg.type === 'welcome');
    return c;
  }
  waitFor(pred: (e: Event) => boolean, from = 0, timeoutMs = 20_000): Promise<Event> {
    const hit = this.events.slice(from).find(pred);
    if (hit) return Promise.resolve(hit);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new Error(`timed out; last events: ${JSON.stringify(this.events.slice(-5).map((e) => (e.kind === 'message' ? e.msg : { frame: e.frame.track })))}`),
          ),
        timeoutMs,
      );
      this.waiters.push({ pred, from, resolve: (e) => (clearTimeout(timer), resolve(e)) });
    });
  }
  async request(msg: Record<string, unknown> & { id: string }): Promise<ServerMessage> {
    const from = this.events.length;
    this.ws.send(JSON.stringify(msg));
    const e = await this.waitFor((e) => e.kind === 'message' && (e.msg.type === 'reply' || e.msg.type === 'error') && e.msg.id === msg.id, from);
    return (e as { msg: ServerMessage }).msg;
  }
  close(): void {
    this.ws.close();
  }
}

describe('CameraApp over the wire', () => {
  it('turns the frames a Node client publishes into transformed frames, checked against the reference', async () => {
    const c = await WireClient.open(server.url);
    try {
      const welcome = c.events[0]!.kind === 'message' ? c.events[0]!.msg : undefined;
      const tracks = (welcome as { schema: { tracks: { name: string; direction: string; width?: number; height?: number }[] } }).schema.tracks;
      expect(tracks.map((t) => [t.name, t.direction])).toEqual([
        ['webcam', 'in'],
        ['processed', 'out'],
      ]);
      expect(tracks[0]).toMatchObject({ width: 320, height: 240 });
      const inIndex = 0;
      const outIndex = 1;

      // Before any camera: the waiting card.
      const card = (await c.waitFor((e) => e.kind === 'frame' && e.frame.track === outIndex)) as { frame: DecodedFrame };
      expect(card.frame).toMatchObject({ encoding: FrameEncoding.Rgb, width: 320, height: 240 });
      expect(Array.from(card.frame.payload.subarray(0, 3))).toEqual([...CARD_BACKGROUND]);

      expect(await c.request({ type: 'command', id: 'c1', name: 'set_effect', params: { effect: 'blur' } })).toMatchObject({ type: 'reply' });
      expect(await c.request({ type: 'command', id: 'c2', name: 'set_strength', params: { strength: 0.25 } })).toMatchObject({ type: 'reply' });
      expect(await c.request({ type: 'publish', id: 'p1', track: 'webcam' })).toEqual({ type: 'reply', id: 'p1' });

      const W = 320;
      const H = 240;
      for (let k = 0; k < 4; k++) {
        const picture = testPicture(W, H, 500 + k);
        const want = Buffer.from(reference(picture, W, H, effectParams('blur', 0.25)));
        const from = c.events.length;
        c.ws.send(Buffer.concat([encodeFrameHeader({ encoding: FrameEncoding.Rgb, track: inIndex, seq: k, ptsMs: k * 33, width: W, height: H }), picture]));
        await c.waitFor((e) => e.kind === 'frame' && e.frame.track === outIndex && Buffer.from(e.frame.payload).equals(want), from);
      }

      // Unpublish: the card again, the connection and the session go on.
      const from = c.events.length;
      expect(await c.request({ type: 'unpublish', id: 'p2', track: 'webcam' })).toEqual({ type: 'reply', id: 'p2' });
      await c.waitFor(
        (e) => e.kind === 'message' && e.msg.type === 'message' && e.msg.name === 'camera_status' && (e.msg.data as { camera: string }).camera === 'waiting',
        from,
      );
      await c.waitFor((e) => e.kind === 'frame' && Array.from(e.frame.payload.subarray(0, 3)).join() === CARD_BACKGROUND.join(), from);
    } finally {
      c.close();
    }
  }, 60_000);
});
