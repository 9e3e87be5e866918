// VideoApp served on a free port, driven by a Node client over HTTP and WebSocket: it uploads a
// PNG (POST /uploads, PUT the bytes), sends `set_image` with the reference, and the frames' mean
// colour moves towards the picture's; the soundtrack arrives as PCM frames of one video frame's
// worth of samples each (48 kHz / 24 frames per second = 2000).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { deflateSync } from 'node:zlib';
import { type DecodedFrame, FrameEncoding, type ServerMessage, decodeFrame, parseServerMessage, toWebSocketUrl } from '@reactor/client';
import { silentLogger } from '@reactor/log';
import { type ReactorServer, serve } from '@reactor/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { SOUNDTRACK_SAMPLE_RATE, VIDEO_FPS, VideoApp } from '../src/app.js';

const here = dirname(fileURLToPath(import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'video-app-wire-'));
const config = join(scratch, 'config.yaml');
writeFileSync(config, 'width: 48\nheight: 48\nframesPerChunk: 4\nworldSize: 2\ndevices: cpu\nbackend: wasm\n');
let server: ReactorServer;

beforeAll(async () => {
  server = await serve(VideoApp, { port: 0, logger: silentLogger, configPath: config, weightsPath: resolve(here, '../weights'), encoding: 'rgb' });
  await server.loaded;
}, 60_000);
afterAll(async () => {
  await server?.close();
  rmSync(scratch, { recursive: true, force: true });
});

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of bytes) c = CRC_TABLE[(c ^ b) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** A PNG (RGB, 8 bits) of `width` x `height` pixels filled by `pixel(x, y)`. */
function png(width: number, height: number, pixel: (x: number, y: number) => [number, number, number]): Buffer {
  const raw = Buffer.alloc(height * (1 + width * 3));
  for (let y = 0; y < height; y++) for (let x = 0; x < width; x++) raw.set(pixel(x, y), y * (1 + width * 3) + 1 + x * 3);
  const chunk = (type: string, data: Buffer): Buffer => {
    const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
    const out = Buffer.alloc(12 + data.length);
    out.writeUInt32BE(data.length, 0);
    body.copy(out, 4);
    out.writeUInt32BE(crc32(body), 8 + data.length);
    return out;
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);
  return Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
}

type Event = { kind: 'message'; msg: ServerMessage } | { kind: 'frame'; frame: DecodedFrame };

function meanColour(f: DecodedFrame): [number, number, number] {
  const s = [0, 0, 0];
  for (let i = 0; i < f.payload.length; i += 3) for (let c = 0; c < 3; c++) s[c]! += f.payload[i + c]!;
  return s.map((v) => v / (f.payload.length / 3)) as [number, number, number];
}

describe('VideoApp over the wire: the soundtrack and set_image', () => {
  it('streams 2000 samples of sound per frame, and moves the frames towards an uploaded PNG', async () => {
    const events: Event[] = [];
    let wake = (): void => {};
    const ws = new WebSocket(toWebSocketUrl(server.url));
    ws.on('message', (data: Buffer, binary: boolean) => {
      events.push(binary ? { kind: 'frame', frame: decodeFrame(new Uint8Array(data)) } : { kind: 'message', msg: parseServerMessage(data.toString()) });
      wake();
    });
    const until = <T>(find: () => T | undefined, ms = 30_000): Promise<T> =>
      new Promise((ok, fail) => {
        const lastMessages = (): string => JSON.stringify(events.flatMap((e) => (e.kind === 'message' ? [e.msg] : [])).slice(-4));
        const timer = setTimeout(() => fail(new Error(`timed out after ${ms} ms; ${events.length} events; last messages: ${lastMessages()}`)), ms);
        wake = () => {
          const v = find();
          if (v !== undefined) {
            clearTimeout(timer);
            ok(v);
          }
        };
        wake();
      });
    try {
      const welcome = await until(() => events.find((e) => e.kind === 'message' && e.msg.type === 'welcome'));
      const w = (welcome as { msg: Extract<ServerMessage, { type: 'welcome' }> }).msg;
      const tracks = w.schema.tracks;
      const video = tracks.findIndex((t) => t.name === 'main_video');
      const audio = tracks.findIndex((t) => t.name === 'soundtrack');
      expect(tracks[audio]).toMatchObject({ kind: 'audio', direction: 'out', sampleRate: SOUNDTRACK_SAMPLE_RATE });

      // The soundtrack: every PCM frame holds one video frame's worth of samples.
      const pcm = await until(() => {
        const got = events.filter((e): e is { kind: 'frame'; frame: DecodedFrame } => e.kind === 'frame' && e.frame.track === audio);
        return got.length >= 8 ? got : undefined;
      });
      for (const { frame } of pcm) {
        expect(frame.encoding).toBe(FrameEncoding.PcmS16le);
        expect(frame.width).toBe(SOUNDTRACK_SAMPLE_RATE / VIDEO_FPS);
        expect(frame.payload.byteLength).toBe(2 * frame.width);
      }
      expect(new Int16Array(pcm[3]!.frame.payload.slice().buffer).some((v) => Math.abs(v) > 1000)).toBe(true);

      // The picture: bright green, one colour everywhere.
      const goal: [number, number, number] = [30, 230, 60];
      const bytes = png(40, 30, () => goal);
      const before = meanColour((events.filter((e) => e.kind === 'frame' && e.frame.track === video).at(-1) as { frame: DecodedFrame }).frame);
      const post = await fetch(new URL('/uploads', server.url), {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'green.png', size: bytes.length, mimeType: 'image/png', clientId: w.clientId }),
      });
      expect(post.status).toBe(201);
      const ticket = (await post.json()) as { uploadId: string; url: string };
      const put = await fetch(new URL(ticket.url, server.url), { method: 'PUT', body: bytes });
      expect(put.status, await put.clone().text()).toBe(200);
      expect(await put.json()).toMatchObject({ uploadId: ticket.uploadId, mimeType: 'image/png', size: bytes.length });
      const from = events.length;
      ws.send(JSON.stringify({ type: 'command', id: 'img', name: 'set_image', params: { image: { uploadId: ticket.uploadId } } }));
      const answer = await until(() => events.slice(from).find((e) => e.kind === 'message' && 'id' in e.msg && e.msg.id === 'img'));
      expect((answer as { msg: ServerMessage }).msg).toEqual({ type: 'reply', id: 'img' });
      await until(() => events.slice(from).find((e) => e.kind === 'message' && e.msg.type === 'message' && e.msg.name === 'image_set'));

      // Over the 3 s transition the frames' mean colour comes within a third of its distance.
      const dist = (m: number[]): number => Math.hypot(...m.map((v, i) => v - goal[i]!));
      await until(() => events.slice(from).find((e) => e.kind === 'frame' && e.frame.track === video && dist(meanColour(e.frame)) < dist(before) / 3));
    } finally {
      ws.close();
    }
  }, 90_000);
});
