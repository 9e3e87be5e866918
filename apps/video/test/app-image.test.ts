// VideoApp's set_image in an in-process AppHost with real rank processes: a PNG goes through
// the host's upload store (announce, write: what the server's upload routes call), `set_image`
// names it, and the frames' mean colour moves towards the picture's; `clear_image` lets go.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { deflateSync, inflateSync } from 'node:zlib';
import type { ServerMessage } from '@reactor/client';
import { type OutputFrame } from '@reactor/runtime';
import { RecordingLogger, RecordingSink, command, useHosts } from '@reactor/runtime/testing';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { VideoApp } from '../src/app.js';

const here = dirname(fileURLToPath(import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'video-image-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const config = join(scratch, 'config.yaml');
writeFileSync(config, 'width: 32\nheight: 32\nframesPerChunk: 4\nworldSize: 2\ndevices: cpu\nbackend: wasm\n');

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

/** A PNG (8-bit RGB, filter 0 on every row) of `width` x `height` pixels of one colour. */
function png(width: number, height: number, rgb: readonly [number, number, number]): Buffer {
  const raw = Buffer.alloc(height * (1 + width * 3));
  for (let y = 0; y < height; y++) for (let x = 0; x < width; x++) raw.set(rgb, y * (1 + width * 3) + 1 + x * 3);
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

/** Decodes the PNGs {@link png} writes (the server would use sharp; this host has no decoder of its own). */
async function decodePng(bytes: Uint8Array): Promise<{ data: Uint8Array; width: number; height: number }> {
  const buf = Buffer.from(bytes);
  const width = buf.readUInt32BE(16);
  const height = buf.readUInt32BE(20);
  const idat: Buffer[] = [];
  for (let o = 8; o < buf.length;) {
    const len = buf.readUInt32BE(o);
    if (buf.toString('ascii', o + 4, o + 8) === 'IDAT') idat.push(buf.subarray(o + 8, o + 8 + len));
    o += 12 + len;
  }
  const raw = inflateSync(Buffer.concat(idat));
  const data = new Uint8Array(width * height * 3);
  for (let y = 0; y < height; y++) data.set(raw.subarray(y * (1 + width * 3) + 1, (y + 1) * (1 + width * 3)), y * width * 3);
  return { data, width, height };
}

function meanColour(f: OutputFrame): number[] {
  const s = [0, 0, 0];
  for (let i = 0; i < f.rgb.length; i += 3) for (let c = 0; c < 3; c++) s[c]! += f.rgb[i + c]!;
  return s.map((v) => v / (f.rgb.length / 3));
}

const start = useHosts(afterEach);

describe('VideoApp set_image', () => {
  it("moves the frames' mean colour towards an uploaded picture, and back after clear_image", async () => {
    const host = start(VideoApp, {
      statsIntervalMs: 0,
      gracePeriodMs: 0,
      weightsPath: resolve(here, '../weights'),
      logger: new RecordingLogger(),
      uploads: { decodeImage: decodePng },
    });
    await host.load({ configPath: config });
    const sink = new RecordingSink();
    const client = host.connect(sink);
    await sink.waitForFrames(4, { timeoutMs: 30_000 });
    const clientId = sink.ofType('welcome')[0]!.clientId;

    const goal = [30, 230, 60] as const;
    const dist = (m: number[]): number => Math.hypot(...m.map((v, i) => v - goal[i]!));
    const before = dist(meanColour(sink.frames.at(-1)!));
    const bytes = png(40, 30, goal);
    const ticket = host.uploads.announce({ name: 'green.png', size: bytes.length, mimeType: 'image/png', clientId });
    const file = await host.uploads.write(
      ticket.uploadId,
      (async function* () {
        yield new Uint8Array(bytes);
      })(),
    );
    expect(file).toMatchObject({ mimeType: 'image/png', size: bytes.length });

    const from = sink.events.length;
    expect(await client.command(command('1', 'set_image', { image: { uploadId: ticket.uploadId } }))).toEqual({ type: 'reply', id: '1' });
    const set = (await sink.waitForMessage((m) => m.type === 'message' && m.name === 'image_set', { from })) as Extract<ServerMessage, { type: 'message' }>;
    expect(set.data).toEqual({ name: 'green.png', width: 40, height: 30 });
    // Over the 72-frame transition the mean colour comes within a sixth of its distance (w ends at 0.85).
    await sink.waitFor((e) => e.kind === 'frame' && dist(meanColour(e.frame)) < before / 6, { from, timeoutMs: 60_000 });

    const cleared = sink.events.length;
    expect(await client.command(command('2', 'clear_image'))).toEqual({ type: 'reply', id: '2' });
    await sink.waitFor((e) => e.kind === 'frame' && dist(meanColour(e.frame)) > before * 0.8, { from: cleared, timeoutMs: 60_000 });
    client.disconnect();
  }, 120_000);
});
