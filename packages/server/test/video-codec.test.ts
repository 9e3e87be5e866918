/**
 * Coded video (H.264 / VP8) end to end: a real server, real sockets, the real encoder
 * (`@napi-rs/webcodecs`), and its decoder to prove what a client receives decodes in order.
 */
import { describe, expect, it } from 'vitest';
import { EncodedVideoChunk, VideoDecoder } from '@napi-rs/webcodecs';
import { WebSocket } from 'ws';
import {
  FrameEncoding,
  ReactorClientError,
  connect,
  type ClientFrame,
  KEY_FRAME_MIN_INTERVAL_MS,
  decodeFrame,
  type DecodedFrame,
  type ServerMessage,
  type VideoConfigMessage,
  type WelcomeMessage,
} from '@reactor/client';
import type { AppHost } from '@reactor/runtime';
import { serve, webCodecsEncoderFactory, type CodedVideoEncoder, type ReactorServer, type ServeOptions, type VideoEncoderFactory } from '../src/index.js';
import { MAX_CODED_IN_FLIGHT } from '../src/video/video-streams.js';
import { avcCodecString } from '../src/video/video-encoder.js';
import { quiet, useCleanups } from './fixtures/cleanups.js';
import { patternApp, type PatternAppOptions } from './fixtures/pattern-app.js';
import { until } from '@reactor/test-kit';

const cleanups = useCleanups();

/** Everything a client received, text and binary, in arrival order. */
type Received = { text: ServerMessage; frame?: undefined } | { frame: DecodedFrame; text?: undefined };

/** A raw `ws` client that logs every message in order (frames decoded from the wire format). */
class LogClient {
  readonly ws: WebSocket;
  readonly log: Received[] = [];

  constructor(url: string) {
    this.ws = new WebSocket(url);
    this.ws.on('message', (data, isBinary) => {
      if (isBinary) this.log.push({ frame: decodeFrame(new Uint8Array(data as Buffer)) });
      else this.log.push({ text: JSON.parse(String(data)) as ServerMessage });
    });
    this.ws.on('error', () => undefined);
    cleanups.push(() => this.ws.close());
  }

  get texts(): ServerMessage[] {
    return this.log.flatMap((r) => (r.text ? [r.text] : []));
  }

  get frames(): DecodedFrame[] {
    return this.log.flatMap((r) => (r.frame ? [r.frame] : []));
  }

  async waitFor<T extends ServerMessage>(pred: (m: ServerMessage) => boolean, what: string, timeoutMs = 20_000): Promise<T> {
    await until(() => this.texts.some(pred), what, timeoutMs);
    return this.texts.find(pred) as T;
  }

  async open(): Promise<WelcomeMessage> {
    return this.waitFor<WelcomeMessage>((m) => m.type === 'welcome', 'the welcome');
  }

  send(msg: unknown): void {
    this.ws.send(JSON.stringify(msg));
  }

  /** `select_video`, resolved with its answer. */
  async select(id: string, codec: string, tier?: string): Promise<ServerMessage> {
    this.send(tier === undefined ? { type: 'select_video', id, codec } : { type: 'select_video', id, codec, tier });
    return this.waitFor((m) => (m.type === 'reply' || m.type === 'error') && m.id === id, `the answer to ${id}`);
  }

  /** The log from the first entry matching `from` on. */
  after(from: (r: Received) => boolean): Received[] {
    const i = this.log.findIndex(from);
    return i < 0 ? [] : this.log.slice(i);
  }
}

/** A server of the pattern app, loaded, closed after the test. */
async function start(app: PatternAppOptions, opts: ServeOptions): Promise<ReactorServer> {
  const server = await serve(patternApp(app), { port: 0, gracePeriodMs: 0, logger: quiet, ...opts });
  cleanups.push(() => server.close());
  await server.loaded;
  return server;
}

/** The default factory, counting encode calls and open encoders. */
function countingFactory(inner: VideoEncoderFactory = webCodecsEncoderFactory): {
  factory: VideoEncoderFactory;
  counts: { encodes: number; opened: number; closed: number };
} {
  const counts = { encodes: 0, opened: 0, closed: 0 };
  const factory: VideoEncoderFactory = async (config) => {
    const e = await inner(config);
    counts.opened++;
    let closed = false;
    const wrapped: CodedVideoEncoder = {
      encode(rgb, ts, key) {
        counts.encodes++;
        return e.encode(rgb, ts, key);
      },
      get codecString() {
        return e.codecString;
      },
      close() {
        if (!closed) counts.closed++;
        closed = true;
        e.close();
      },
    };
    return wrapped;
  };
  return { factory, counts };
}

/** Decodes H.264 / VP8 frames with @napi-rs/webcodecs; resolves with the timestamps of the pictures out, in order. */
async function decodeAll(config: VideoConfigMessage, frames: DecodedFrame[]): Promise<{ out: number[]; errors: string[] }> {
  const out: number[] = [];
  const errors: string[] = [];
  const decoder = new VideoDecoder({
    output: (f) => {
      out.push(f.timestamp);
      f.close();
    },
    error: (e) => errors.push(e.message),
  });
  decoder.configure({ codec: config.codecString!, codedWidth: config.width, codedHeight: config.height });
  for (const f of frames) decoder.decode(new EncodedVideoChunk({ type: f.key ? 'key' : 'delta', timestamp: f.seq, data: f.payload }));
  await decoder.flush();
  decoder.close();
  return { out, errors };
}

const coded = (r: Received): boolean => r.frame !== undefined && (r.frame.encoding === FrameEncoding.H264 || r.frame.encoding === FrameEncoding.Vp8);

describe('server: coded video', () => {
  it('offers the codec and ladder in the welcome; select_video h264 answers, then video_config, then a key frame first; a client joining mid-stream too; the stream decodes in order', async () => {
    const server = await start({ width: 128, height: 96, chunk: 2 }, { video: { codec: 'h264' } });
    const a = new LogClient(server.wsUrl);
    const welcome = await a.open();
    expect(welcome.video).toEqual({
      codecs: ['h264', 'jpeg'],
      tiers: [
        { name: 'full', scale: 1, bitrate: 4_000_000 },
        { name: 'half', scale: 0.5, bitrate: 1_500_000 },
        { name: 'low', scale: 0.5, bitrate: 500_000 },
      ],
      keyFrameInterval: 60,
    });
    expect(await a.select('v1', 'h264')).toEqual({ type: 'reply', id: 'v1', result: { codec: 'h264', tier: 'full' } });
    await until(() => a.frames.filter((f) => f.encoding === FrameEncoding.H264).length >= 40, 'a second of H.264', 30_000);
    // The second client joins a running encoder: it still starts with its config and a key frame.
    const b = new LogClient(server.wsUrl);
    await b.open();
    expect(await b.select('v2', 'h264')).toMatchObject({ type: 'reply' });
    await until(() => b.frames.filter((f) => f.encoding === FrameEncoding.H264).length >= 20, 'frames for the second client', 30_000);
    expect(server.videoEncoders()).toMatchObject([{ track: 'main_video', codec: 'h264', tier: 'full', clients: 2, open: true }]);

    for (const c of [a, b]) {
      const tail = c.after((r) => r.text?.type === 'reply');
      const firstCoded = tail.findIndex(coded);
      const config = tail.slice(0, firstCoded).find((r) => r.text?.type === 'video_config')?.text as VideoConfigMessage | undefined;
      expect(config).toMatchObject({ type: 'video_config', track: 'main_video', codec: 'h264', width: 128, height: 96, tier: 'full', bitrate: 4_000_000 });
      expect(config!.codecString).toMatch(/^avc1\.[0-9a-f]{6}$/);
      expect(tail[firstCoded]!.frame!.key).toBe(true);
      const frames = tail.filter(coded).map((r) => r.frame!);
      // Every frame after the first in order, each once.
      for (let i = 1; i < frames.length; i++) expect(frames[i]!.seq).toBeGreaterThan(frames[i - 1]!.seq);
      const { out, errors } = await decodeAll(config!, frames);
      expect(errors).toEqual([]);
      expect(out).toEqual(frames.map((f) => f.seq));
    }
  }, 60_000);

  it('streams VP8 that decodes, and a client that never selects keeps receiving JPEG with no video_config', async () => {
    const server = await start({ width: 64, height: 64, chunk: 2 }, { video: { codec: 'vp8' } });
    const old = new LogClient(server.wsUrl);
    await old.open();
    const a = new LogClient(server.wsUrl);
    await a.open();
    expect(await a.select('v', 'vp8', 'half')).toEqual({ type: 'reply', id: 'v', result: { codec: 'vp8', tier: 'half' } });
    await until(() => a.frames.filter((f) => f.encoding === FrameEncoding.Vp8).length >= 20, 'VP8 frames', 30_000);
    const config = a.texts.find((m) => m.type === 'video_config') as VideoConfigMessage;
    expect(config).toMatchObject({ codec: 'vp8', codecString: 'vp8', width: 32, height: 32, tier: 'half' });
    const frames = a.frames.filter((f) => f.encoding === FrameEncoding.Vp8);
    expect(frames[0]!.key).toBe(true);
    expect(frames[0]!.width).toBe(32);
    const { out, errors } = await decodeAll(config, frames);
    expect(errors).toEqual([]);
    expect(out).toEqual(frames.map((f) => f.seq));
    await until(() => old.frames.length >= 10, 'JPEG frames for the old client', 10_000);
    expect(old.frames.every((f) => f.encoding === FrameEncoding.Jpeg)).toBe(true);
    expect(old.texts.some((m) => m.type === 'video_config')).toBe(false);
  }, 60_000);

  it('names an H.264 level browsers parse on a small low-bitrate tier (x264 says 1b there, which Chromium refuses)', async () => {
    const server = await start(
      { width: 160, height: 96, chunk: 2 },
      {
        video: {
          codec: 'h264',
          tiers: [
            { name: 'full', scale: 1, bitrate: 1_500_000 },
            { name: 'low', scale: 0.5, bitrate: 50_000 },
          ],
        },
      },
    );
    const a = new LogClient(server.wsUrl);
    await a.open();
    expect(await a.select('s', 'h264', 'low')).toMatchObject({ type: 'reply', id: 's' });
    const config = await a.waitFor<VideoConfigMessage>((m) => m.type === 'video_config' && m.codec === 'h264', 'the video_config');
    expect(config).toMatchObject({ width: 80, height: 48, tier: 'low' });
    // a level of Table A-1 (x264 may pick 1b here, level_idc 9, which the string names as 1.1)
    const [, level] = /^avc1\.[0-9a-f]{4}([0-9a-f]{2})$/.exec(config.codecString!)!;
    expect([0x0a, 0x0b, 0x0c, 0x0d, 0x14]).toContain(parseInt(level!, 16));
    // an SPS that says 1b (High profile, level_idc 9) is named 1.1
    expect(avcCodecString(new Uint8Array([0, 0, 0, 1, 0x67, 0x64, 0x00, 0x09, 0xac, 0xd9]))).toBe('avc1.64000b');
    expect(avcCodecString(new Uint8Array([0, 0, 0, 1, 0x67, 0x42, 0xc0, 0x1f, 0xac, 0xd9]))).toBe('avc1.42c01f');
    await until(() => a.frames.filter((f) => f.encoding === FrameEncoding.H264).length >= 6, 'H.264 frames', 10_000);
    const { out, errors } = await decodeAll(
      config,
      a.frames.filter((f) => f.encoding === FrameEncoding.H264),
    );
    expect(errors).toEqual([]);
    expect(out.length).toBeGreaterThanOrEqual(6);
  });

  it('answers unsupported_codec and unknown_tier, and keeps the connection on its codec', async () => {
    const server = await start({ width: 32, height: 32 }, { video: { codec: 'h264' } });
    const a = new LogClient(server.wsUrl);
    await a.open();
    expect(await a.select('c', 'vp8')).toMatchObject({
      type: 'error',
      id: 'c',
      code: 'unsupported_codec',
      message: 'this server streams h264 or jpeg; asked for "vp8"',
    });
    expect(await a.select('t', 'h264', 'ultra')).toMatchObject({
      type: 'error',
      id: 't',
      code: 'unknown_tier',
      message: 'no tier "ultra"; this server\'s tiers: full, half, low',
    });
    expect(server.videoEncoders()).toEqual([]);
    await until(() => a.frames.length >= 5, 'frames', 10_000);
    expect(a.frames.every((f) => f.encoding === FrameEncoding.Jpeg)).toBe(true);
  });

  it('encodes each frame once for 8 clients on one tier (encoder calls = frames played), and every client gets the stream', async () => {
    const { factory, counts } = countingFactory();
    const server = await start({ width: 64, height: 64, chunk: 2 }, { video: { codec: 'h264', encoderFactory: factory } });
    const clients = Array.from({ length: 8 }, () => new LogClient(server.wsUrl));
    await Promise.all(clients.map((c) => c.open()));
    await Promise.all(clients.map((c, i) => c.select(`s${i}`, 'h264')));
    await until(() => clients.every((c) => c.frames.filter((f) => f.encoding === FrameEncoding.H264).length >= 5), 'every client streaming', 30_000);
    const played = (): number => (server.host as AppHost).counters.framesPlayed;
    const p0 = played();
    const e0 = counts.encodes;
    await until(() => played() - p0 >= 60, '60 more frames', 30_000);
    const p1 = played();
    const e1 = counts.encodes;
    // A frame the encoder was too far behind to take (a busy machine) is counted once, as encoder_busy.
    const busy = Number(/reactor_frames_dropped_total\{reason="encoder_busy"\} (\d+)/.exec(await (await fetch(`${server.url}/metrics`)).text())?.[1]);
    // A frame or two may be between playout and the encoder at either end of the window.
    expect(Math.abs(e1 - e0 + busy - (p1 - p0))).toBeLessThanOrEqual(3 + busy);
    expect(counts.opened).toBe(1);
    expect(server.videoEncoders()).toMatchObject([{ clients: 8 }]);
  }, 60_000);

  it('encodes at its own rate when slower than the playout: the frames it cannot take are encoder_busy, and every frame it takes reaches the client (no gap, no wait for a key frame)', async () => {
    // The real encoder made slow: one frame at a time, 20 ms each (50 fps), under a 1000 fps playout.
    const slow: VideoEncoderFactory = async (config) => {
      const e = await webCodecsEncoderFactory(config);
      let last: Promise<unknown> = Promise.resolve();
      return {
        encode(rgb, ts, key) {
          const copy = rgb.slice();
          const p = last.then(() => new Promise((r) => setTimeout(r, 20))).then(() => e.encode(copy, ts, key));
          last = p.catch(() => undefined);
          return p;
        },
        get codecString() {
          return e.codecString;
        },
        close: () => e.close(),
      };
    };
    const { factory, counts } = countingFactory(slow);
    const server = await start(
      { width: 64, height: 64, fps: 1000, chunk: 16 },
      // The socket is not what is measured: a client whose writes a busy machine delays for a
      // moment keeps its coded frames (64 may wait) instead of dropping them as slow_client.
      { maxQueuedFrames: 64, video: { codec: 'h264', keyFrameInterval: 100_000, encoderFactory: factory } },
    );
    const a = new LogClient(server.wsUrl);
    await a.open();
    await a.select('v', 'h264');
    const scrape = async (): Promise<string> => (await fetch(`${server.url}/metrics`)).text();
    const dropped = (text: string, reason: string): number => Number(new RegExp(`reactor_frames_dropped_total\\{reason="${reason}"\\} (\\d+)`).exec(text)?.[1]);
    let text = '';
    await until(
      async () => {
        text = await scrape();
        return dropped(text, 'encoder_busy') >= 100 && a.frames.filter((f) => f.encoding === FrameEncoding.H264).length >= 40;
      },
      'the encoder to fall behind while the client gets H.264 frames',
      60_000,
      200,
    );
    // Every frame encoded by now reaches the client (those still being encoded arrive later).
    const encoded = counts.encodes - MAX_CODED_IN_FLIGHT;
    await until(() => a.frames.filter((f) => f.encoding === FrameEncoding.H264).length >= encoded, `the ${encoded} frames encoded`, 30_000);
    text = await scrape();
    const got = a.frames.filter((f) => f.encoding === FrameEncoding.H264);
    // Nothing of what was encoded was lost for the client: no frame dropped after its encoding, no
    // delta frame waiting for a key frame, no key frame asked for because of a loss.
    expect(dropped(text, 'awaiting_key')).toBe(0);
    expect(dropped(text, 'slow_client')).toBe(0);
    expect(dropped(text, 'encode_error')).toBe(0);
    expect(Number(/reactor_video_key_frame_requests_total\{reason="drop"\} (\d+)/.exec(text)?.[1] ?? 0)).toBe(0);
    expect(got[0]!.key).toBe(true);
    for (let i = 1; i < got.length; i++) expect(got[i]!.seq).toBeGreaterThan(got[i - 1]!.seq);
    const config = a.texts.find((m): m is VideoConfigMessage => m.type === 'video_config')!;
    const decoded = await decodeAll(config, got);
    expect(decoded.errors).toEqual([]);
    expect(decoded.out).toHaveLength(got.length);
  }, 90_000);

  it('starts the stream again at a key frame after a flush (reset)', async () => {
    const server = await start({ width: 64, height: 64, chunk: 2 }, { video: { codec: 'h264', keyFrameInterval: 100_000 } });
    const a = new LogClient(server.wsUrl);
    await a.open();
    await a.select('v', 'h264');
    await until(() => a.frames.filter((f) => f.encoding === FrameEncoding.H264).length >= 30, 'H.264 frames', 30_000);
    const forced0 = server.videoEncoders()[0]!.keyFramesForced;
    a.send({ type: 'command', id: 'r', name: 'reset' });
    const flush = await a.waitFor<{ type: 'flush'; nextSeq: number }>((m) => m.type === 'flush', 'the flush');
    await until(() => a.frames.some((f) => f.seq >= flush.nextSeq), 'frames after the flush', 20_000);
    const after = a.frames.filter((f) => f.seq >= flush.nextSeq);
    expect(after[0]!.key).toBe(true);
    expect(server.videoEncoders()[0]!.keyFramesForced).toBe(forced0 + 1);
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toMatch(/reactor_video_key_frame_requests_total\{reason="flush"\} 1\b/);
  }, 60_000);

  it('moves a client to JPEG with encoder_failed when its encoder fails, and the server keeps streaming', async () => {
    let failAfter = 10;
    const failing: VideoEncoderFactory = async (config) => {
      const e = await webCodecsEncoderFactory(config);
      return {
        encode: (rgb, ts, key) => (--failAfter < 0 ? Promise.reject(new Error('injected encoder fault')) : e.encode(rgb, ts, key)),
        get codecString() {
          return e.codecString;
        },
        close: () => e.close(),
      };
    };
    const server = await start({ width: 64, height: 64, chunk: 2 }, { video: { codec: 'h264', encoderFactory: failing } });
    const a = new LogClient(server.wsUrl);
    await a.open();
    await a.select('v', 'h264');
    const err = await a.waitFor((m) => m.type === 'error' && m.code === 'encoder_failed', 'encoder_failed');
    expect(err).toEqual({
      type: 'error',
      code: 'encoder_failed',
      message: 'the h264 encoder of track "main_video" (tier full) failed: injected encoder fault; the track continues in JPEG (a video_config follows)',
    });
    await until(() => a.after((r) => r.text?.type === 'error').some((r) => r.frame?.encoding === FrameEncoding.Jpeg), 'JPEG frames', 20_000);
    const tail = a.after((r) => r.text?.type === 'error');
    const firstJpeg = tail.findIndex((r) => r.frame?.encoding === FrameEncoding.Jpeg);
    expect(tail.slice(0, firstJpeg).find((r) => r.text?.type === 'video_config')?.text).toEqual({
      type: 'video_config',
      track: 'main_video',
      codec: 'jpeg',
      width: 64,
      height: 64,
      tier: 'full',
    });
    expect(tail.slice(firstJpeg).some(coded)).toBe(false);
    expect(server.videoEncoders()).toEqual([]);
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toMatch(/reactor_video_encoder_failures_total\{codec="h264",tier="full"\} 1\b/);
    expect(server.connections()[0]!.video).toMatchObject({ codec: 'jpeg', tier: 'full' });
  }, 60_000);

  it('reports a factory that cannot make an encoder (a missing native binary) as encoder_failed and streams JPEG', async () => {
    const server = await start(
      { width: 32, height: 32 },
      {
        video: {
          codec: 'vp8',
          encoderFactory: () => {
            throw new Error('native binary missing');
          },
        },
      },
    );
    const a = new LogClient(server.wsUrl);
    await a.open();
    await a.select('v', 'vp8');
    const err = await a.waitFor((m) => m.type === 'error' && m.code === 'encoder_failed', 'encoder_failed');
    expect((err as { message: string }).message).toContain('native binary missing');
    await until(() => a.frames.some((f) => f.encoding === FrameEncoding.Jpeg), 'JPEG frames', 20_000);
  });

  it('closes encoders when their last client leaves and when the session ends: none left open across sessions', async () => {
    const { factory, counts } = countingFactory();
    const server = await start({ width: 32, height: 32, chunk: 2 }, { video: { codec: 'h264', encoderFactory: factory } });
    const host = server.host as AppHost;
    for (let session = 0; session < 3; session++) {
      const a = new LogClient(server.wsUrl);
      await a.open();
      await a.select('v', 'h264', session === 1 ? 'half' : 'full');
      await until(() => a.frames.some((f) => f.encoding === FrameEncoding.H264), 'H.264 frames', 20_000);
      expect(server.videoEncoders()).toMatchObject([{ clients: 1, open: true }]);
      a.ws.close();
      await until(() => host.status.state === 'ready', 'the session to end', 10_000);
      await until(() => counts.closed === counts.opened, 'every encoder closed', 10_000);
      expect(server.videoEncoders()).toEqual([]);
    }
    expect(counts.opened).toBe(3);
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).not.toMatch(/reactor_video_encoders\{[^}]*\} [1-9]/);
  }, 60_000);

  it(`forces at most one key frame per ${KEY_FRAME_MIN_INTERVAL_MS} ms however many request_key_frame arrive, and holds back deltas until it`, async () => {
    const server = await start({ width: 64, height: 64, chunk: 2 }, { video: { codec: 'h264', keyFrameInterval: 100_000 }, commandRate: 1000 });
    const a = new LogClient(server.wsUrl);
    await a.open();
    await a.select('v', 'h264');
    await until(() => a.frames.filter((f) => f.encoding === FrameEncoding.H264).length >= 10, 'H.264 frames', 20_000);
    const enc = (): number => server.videoEncoders()[0]!.keyFramesForced;
    const forced0 = enc();
    const t0 = performance.now();
    for (let i = 0; i < 20; i++) a.send({ type: 'request_key_frame', track: 'main_video' });
    await until(() => enc() > forced0, 'a forced key frame', 10_000);
    // Requests keep coming for a while: still at most one per interval.
    const timer = setInterval(() => a.send({ type: 'request_key_frame', track: 'main_video' }), 20);
    await until(() => performance.now() - t0 > 3 * KEY_FRAME_MIN_INTERVAL_MS, 'time to pass', 10_000);
    clearInterval(timer);
    const elapsed = performance.now() - t0;
    expect(enc() - forced0).toBeLessThanOrEqual(Math.ceil(elapsed / KEY_FRAME_MIN_INTERVAL_MS) + 1);
    expect(server.connections()[0]!.video!.keyFrameRequests).toBeGreaterThanOrEqual(20);
    a.send({ type: 'request_key_frame', track: 'nope' });
    expect(await a.waitFor((m) => m.type === 'error', 'the error')).toMatchObject({ code: 'unknown_track' });
  }, 60_000);

  it('hands Node users of @reactor/client the coded frames: selectVideo(), the video_config event before them, key flags, requestKeyFrame()', async () => {
    const server = await start({ width: 64, height: 64, chunk: 2 }, { video: { codec: 'h264' } });
    const client = await connect(server.url, { WebSocket, reconnect: false });
    cleanups.push(() => client.close());
    expect(client.videoOffer?.codecs).toEqual(['h264', 'jpeg']);
    const events: Array<{ config?: VideoConfigMessage; frame?: ClientFrame }> = [];
    client.on('video_config', (config) => events.push({ config }));
    client.on('frame', (frame) => events.push({ frame: { ...frame, payload: frame.payload.slice() } }));
    await expect(client.selectVideo('vp8')).rejects.toThrow(ReactorClientError);
    expect(await client.selectVideo('h264', 'half')).toEqual({ codec: 'h264', tier: 'half' });
    await until(() => events.filter((e) => e.frame?.encoding === FrameEncoding.H264).length >= 10, 'H.264 frames', 20_000);
    const first = events.findIndex((e) => e.frame?.encoding === FrameEncoding.H264);
    const config = events.slice(0, first).find((e) => e.config)?.config;
    expect(config).toMatchObject({ codec: 'h264', tier: 'half', width: 32, height: 32 });
    expect(client.videoConfigs.get('main_video')).toEqual(config);
    expect(events[first]!.frame).toMatchObject({ key: true, trackName: 'main_video', width: 32, height: 32 });
    const coded = events.flatMap((e) => (e.frame?.encoding === FrameEncoding.H264 ? [e.frame] : []));
    const { out, errors } = await decodeAll(config!, coded);
    expect(errors).toEqual([]);
    expect(out).toEqual(coded.map((f) => f.seq));
    client.requestKeyFrame('main_video');
    await until(() => server.connections()[0]?.video?.keyFrameRequests === 1, 'the key-frame request', 10_000);
  }, 60_000);

  it('drops a slow client to the next key frame: after a lost frame no delta frame reaches it before a key frame, and the stream still decodes', async () => {
    // Noise at a high bitrate: ~150 KB frames fill a stalled socket's kernel buffers within seconds.
    // The frames the encoder encoded, by timestamp (µs): on a busy machine it does not take some
    // (`encoder_busy`), which leaves a gap in seq but none in the coded stream.
    const encoded: number[] = [];
    const recording: VideoEncoderFactory = async (config) => {
      const e = await webCodecsEncoderFactory(config);
      return {
        encode: async (rgb, ts, key) => {
          const chunk = await e.encode(rgb, ts, key);
          if (chunk) encoded.push(ts);
          return chunk;
        },
        get codecString() {
          return e.codecString;
        },
        close: () => e.close(),
      };
    };
    const server = await start(
      { width: 256, height: 256, chunk: 2, noise: true },
      { video: { codec: 'h264', keyFrameInterval: 100_000, tiers: [{ name: 'full', scale: 1, bitrate: 40_000_000 }], encoderFactory: recording } },
    );
    const a = new LogClient(server.wsUrl);
    await a.open();
    await a.select('v', 'h264');
    await until(() => a.frames.filter((f) => f.encoding === FrameEncoding.H264).length >= 5, 'H.264 frames', 20_000);
    const dropped0 = server.connections()[0]!.framesDropped;
    a.ws.pause();
    await until(() => server.connections()[0]!.framesDropped >= dropped0 + 10, 'frames dropped for the stalled client', 40_000);
    a.ws.resume();
    // What the kernel buffered arrives first; then the frames after the first gap.
    const coded = (): DecodedFrame[] => a.frames.filter((f) => f.encoding === FrameEncoding.H264);
    // A gap: a frame the encoder encoded that this client did not get, between two it got.
    const us = (f: DecodedFrame): number => Math.round(f.ptsMs * 1000);
    const lostBefore = (f: DecodedFrame[], k: number): boolean => encoded.some((ts) => ts > us(f[k - 1]!) && ts < us(f[k]!));
    const afterGap = (): number => {
      const f = coded();
      const i = f.findIndex((_, k) => k > 0 && lostBefore(f, k));
      return i < 0 ? 0 : f.length - i;
    };
    await until(() => afterGap() >= 10, 'ten frames after the first gap', 40_000);
    const frames = coded();
    let gaps = 0;
    for (let i = 1; i < frames.length; i++) {
      if (!lostBefore(frames, i)) continue;
      gaps++;
      expect(frames[i]!.key, `frame ${frames[i]!.seq} after frames lost from ${frames[i - 1]!.seq}`).toBe(true);
    }
    expect(gaps).toBeGreaterThan(0);
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(Number(/reactor_video_key_frame_requests_total\{reason="drop"\} (\d+)/.exec(metrics)?.[1])).toBeGreaterThan(0);
    const config = a.texts.find((m) => m.type === 'video_config') as VideoConfigMessage;
    const { out, errors } = await decodeAll(config, frames);
    expect(errors).toEqual([]);
    expect(out).toEqual(frames.map((f) => f.seq));
  }, 120_000);
});
