/**
 * Clips and recordings of an in-process server (`serve()` with `recording`), through its doors:
 * the `clip` / `recording` messages via `@reactor/client`, `this.output.clip()` from app code,
 * `GET /clips/<id>.mp4` and `GET /recordings`. ffprobe checks the files.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { connect, ReactorClientError, type ReactorClient } from '@reactor/client';
import { serve, type ReactorServer, type RecordingOptions } from '../src/index.js';
import { clipApp, type ClipAppOptions } from './fixtures/clip-app.js';
import { quiet, useCleanups } from './fixtures/cleanups.js';

const cleanups = useCleanups();

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'reactor-clip-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

async function start(recording: RecordingOptions | undefined, app: ClipAppOptions = {}, extra: { token?: string } = {}): Promise<ReactorServer> {
  const server = await serve(clipApp(app), { port: 0, logger: quiet, ...(recording && { recording }), ...extra });
  cleanups.push(() => server.close());
  return server;
}

async function client(server: ReactorServer, token?: string): Promise<ReactorClient> {
  const c = await connect(server.url, { WebSocket, reconnect: false, ...(token !== undefined && { token }) });
  cleanups.push(() => c.close());
  return c;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Waits for `n` more frames (video) or audio chunks on a client. */
async function more(c: ReactorClient, event: 'frame' | 'audio', n: number): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    let seen = 0;
    const timer = setTimeout(() => reject(new Error(`fewer than ${n} ${event}s in 10 s`)), 10_000);
    const off = c.on(event, () => {
      if (++seen < n) return;
      clearTimeout(timer);
      off();
      resolve();
    });
  });
}

async function failure(p: Promise<unknown>): Promise<ReactorClientError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ReactorClientError);
  return err as ReactorClientError;
}

function probe(file: string): { video?: { frames: number; duration: number }; audio?: { duration: number } } {
  const r = spawnSync('ffprobe', ['-v', 'error', '-count_frames', '-show_entries', 'stream=codec_type,duration,nb_read_frames', '-of', 'json', file], {
    encoding: 'utf8',
  });
  expect(r.status, r.stderr).toBe(0);
  const streams = (JSON.parse(r.stdout) as { streams: Array<{ codec_type: string; duration?: string; nb_read_frames?: string }> }).streams;
  const v = streams.find((s) => s.codec_type === 'video');
  const a = streams.find((s) => s.codec_type === 'audio');
  return {
    ...(v && { video: { frames: Number(v.nb_read_frames), duration: Number(v.duration) } }),
    ...(a && { audio: { duration: Number(a.duration) } }),
  };
}

describe('clips', () => {
  it('answers clips_disabled / recording_disabled when the server has no recording option, and the stream goes on', async () => {
    const server = await start(undefined);
    const c = await client(server);
    await more(c, 'frame', 3);
    expect((await failure(c.clip({ seconds: 1 }))).code).toBe('clips_disabled');
    const rec = await failure(c.recording('start'));
    expect(rec.code).toBe('recording_disabled');
    expect(rec.message).toMatch(/add a `recording:` section to reactor\.yaml/);
    await more(c, 'frame', 3);
  });

  it('refuses a clip of an app without video with clip_unavailable, and its sound goes on', async () => {
    const server = await start({ dir: tempDir(), minFreeBytes: 0 }, { video: false });
    const c = await client(server);
    await more(c, 'audio', 3);
    const err = await failure(c.clip({ seconds: 1 }));
    expect(err.code).toBe('clip_unavailable');
    expect(err.message).toMatch(/streams no video track to clip \(its outbound tracks: "sound" \(audio\)\)/);
    expect((await failure(c.recording('start'))).code).toBe('clip_unavailable');
    await more(c, 'audio', 3);
  });

  it('checks seconds against the ring: invalid_params above recording.clip_seconds or at 0, malformed_message for a string', async () => {
    const server = await start({ dir: tempDir(), clipSeconds: 5, minFreeBytes: 0 });
    const c = await client(server);
    await more(c, 'frame', 3);
    const over = await failure(c.clip({ seconds: 6 }));
    expect(over.code).toBe('invalid_params');
    expect(over.message).toMatch(/at most 5 \(recording\.clip_seconds\), got 6/);
    expect((await failure(c.clip({ seconds: 0 }))).code).toBe('invalid_params');
    expect((await failure(c.clip({ seconds: '3' as unknown as number }))).code).toBe('malformed_message');
    expect((await failure(c.clip({ seconds: 1, track: 'nope' }))).code).toBe('unknown_track');
  });

  it('serves two clips asked at once by two clients, answers clip_busy to a client that asks again before its answer, and the stream goes on', async () => {
    const dir = tempDir();
    const server = await start({ dir, minFreeBytes: 0 });
    const a = await client(server);
    const b = await client(server);
    // 2.5 s of stream, counted in frames (30 fps; a busy machine plays them later, not fewer).
    await Promise.all([more(a, 'frame', 75), more(b, 'frame', 75)]);
    const [ca, cb, busy] = await Promise.allSettled([a.clip({ seconds: 1 }), b.clip({ seconds: 1 }), a.clip({ seconds: 1 })]);
    expect(ca.status).toBe('fulfilled');
    expect(cb.status).toBe('fulfilled');
    expect(busy.status).toBe('rejected');
    expect(((busy as PromiseRejectedResult).reason as ReactorClientError).code).toBe('clip_busy');
    const ua = (ca as PromiseFulfilledResult<{ url: string }>).value.url;
    const ub = (cb as PromiseFulfilledResult<{ url: string }>).value.url;
    expect(ua).not.toBe(ub);
    for (const u of [ua, ub]) {
      const res = await fetch(u);
      expect(res.status).toBe(200);
      const file = join(dir, `${Math.random()}.mp4`);
      writeFileSync(file, new Uint8Array(await res.arrayBuffer()));
      const p = probe(file);
      expect(p.video!.frames).toBeGreaterThanOrEqual(30);
      expect(p.audio!.duration).toBeGreaterThan(0.9);
    }
    await more(a, 'frame', 5);
    await more(b, 'frame', 5);
  });

  it('takes a clip from app code (this.output.clip) and honours HTTP ranges, the token and the origin on its URL', async () => {
    const token = 'a-token-of-sixteen-chars';
    const server = await start({ dir: tempDir(), minFreeBytes: 0 }, {}, { token });
    const c = await client(server, token);
    await more(c, 'frame', 45); // 1.5 s of stream
    const r = (await c.send('take_clip')) as { url: string; durationS: number };
    expect(r.url).toMatch(/^\/clips\/[\w-]{24}\.mp4$/);
    expect(r.durationS).toBeGreaterThanOrEqual(1);
    const url = `${server.url}${r.url}`;
    expect((await fetch(url)).status).toBe(401);
    const denied = await fetch(url, { headers: { authorization: `Bearer ${token}`, origin: 'http://evil.example' } });
    expect(denied.status).toBe(403);
    const part = await fetch(url, { headers: { authorization: `Bearer ${token}`, range: 'bytes=0-7' } });
    expect(part.status).toBe(206);
    expect(part.headers.get('content-range')).toMatch(/^bytes 0-7\/\d+$/);
    expect(
      Buffer.from(await part.arrayBuffer())
        .subarray(4, 8)
        .toString(),
    ).toBe('ftyp');
    expect((await fetch(`${server.url}/clips/AAAAAAAAAAAAAAAAAAAAAAAA.mp4`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(404);
  });

  it('answers 410 clip_expired once a clip URL expired, and deletes its file', async () => {
    const dir = tempDir();
    const server = await start({ dir, clipExpiryMs: 1000, minFreeBytes: 0 });
    const c = await client(server);
    await more(c, 'frame', 45); // 1.5 s of stream
    const clip = await c.clip({ seconds: 1 });
    expect((await fetch(clip.url)).status).toBe(200);
    await sleep(1100);
    const res = await fetch(clip.url);
    expect(res.status).toBe(410);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('clip_expired');
    await sleep(100);
    expect(readdirSync(join(dir, 'clips')).filter((n) => n.endsWith('.mp4'))).toEqual([]);
  });
});

describe('recordings', () => {
  it('starts and stops by message (recording_state when repeated), lists them at GET /recordings, and the file plays', async () => {
    const dir = tempDir();
    const server = await start({ dir, minFreeBytes: 0 });
    const c = await client(server);
    await more(c, 'frame', 3);
    expect((await failure(c.recording('stop'))).code).toBe('recording_state');
    const started = await c.recording('start');
    expect(started.state).toBe('recording');
    expect((await failure(c.recording('start'))).code).toBe('recording_state');
    await more(c, 'frame', 75); // 2.5 s recorded
    const stopped = await c.recording('stop');
    expect(stopped.state).toBe('stopped');
    expect(stopped.durationS).toBeGreaterThan(1.5);
    const listed = (await (await fetch(`${server.url}/recordings`)).json()) as { recordings: Array<{ name: string; state: string; bytes: number }> };
    expect(listed.recordings.map((r) => [r.name, r.state])).toEqual([[started.name, 'stopped']]);
    const res = await fetch(`${server.url}/recordings/${started.name}`);
    expect(res.status).toBe(200);
    const p = probe(join(dir, started.name));
    expect(p.video!.frames).toBeGreaterThan(40);
    expect(p.audio!.duration).toBeGreaterThan(1.5);
    expect((await fetch(`${server.url}/recordings/..%2Fetc%2Fpasswd.mp4`)).status).toBe(404);
    await more(c, 'frame', 3);
  });

  it.each([
    { cap: 'max_bytes', options: { maxBytes: 64 * 1024 } },
    { cap: 'max_duration', options: { maxDurationMs: 1000 } },
  ])('stops at $cap, leaving a file that plays, while the stream goes on', async ({ cap, options }) => {
    const dir = tempDir();
    const server = await start({ dir, minFreeBytes: 0, ...options }, { width: 320, height: 240 });
    const c = await client(server);
    await more(c, 'frame', 3);
    const first = await c.recording('start');
    const end = Date.now() + 8000;
    let info = first;
    while (info.state === 'recording' && Date.now() < end) {
      await sleep(200);
      const l = (await (await fetch(`${server.url}/recordings`)).json()) as { recordings: Array<typeof first> };
      info = l.recordings.find((r) => r.name === first.name)!;
    }
    expect(info.state).toBe(cap);
    const p = probe(join(dir, first.name));
    expect(p.video!.frames).toBeGreaterThan(0);
    if (cap === 'max_duration') expect(p.video!.duration).toBeLessThanOrEqual(1.05);
    await more(c, 'frame', 5);
    // A cap stops that recording only: a new one can start.
    expect((await c.recording('start')).state).toBe('recording');
  });

  it('records every session with record: true, and a server that closes (SIGTERM) writes its last fragment first', async () => {
    const dir = tempDir();
    const server = await start({ dir, minFreeBytes: 0, record: true });
    const c = await client(server);
    await sleep(2000);
    c.close();
    await server.close();
    const names = readdirSync(dir).filter((n) => n.endsWith('.mp4'));
    expect(names).toHaveLength(1);
    const info = JSON.parse(readFileSync(join(dir, names[0]!.replace(/\.mp4$/, '.json')), 'utf8')) as { state: string; durationS: number };
    expect(info.state).toBe('stopped');
    const p = probe(join(dir, names[0]!));
    expect(p.video!.duration).toBeGreaterThan(1.2);
    expect(Math.abs(p.video!.duration - info.durationS)).toBeLessThan(0.1);
  });

  it('deletes recordings past recording.retention_s', async () => {
    const dir = tempDir();
    const server = await start({ dir, minFreeBytes: 0, retentionMs: 3000 });
    const c = await client(server);
    await more(c, 'frame', 3);
    const r = await c.recording('start');
    await sleep(300);
    await c.recording('stop');
    expect(existsSync(join(dir, r.name))).toBe(true);
    const end = Date.now() + 15000;
    while (existsSync(join(dir, r.name)) && Date.now() < end) await sleep(100);
    expect(existsSync(join(dir, r.name))).toBe(false);
    expect(existsSync(join(dir, r.name.replace(/\.mp4$/, '.json')))).toBe(false);
  });
});
