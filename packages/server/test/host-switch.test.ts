// HostSwitch: the app host is replaced under open WebSockets (what `reactor dev` does at a
// reload). What a connected client sees, and what happens to its commands, its published track
// and its video while the swap runs.
import 'reflect-metadata';
import { IsString } from 'class-validator';
import { describe, expect, it } from 'vitest';
import { FrameEncoding, decodeFrame, type WelcomeMessage } from '@reactor/client';
import { AppHost, Frames, Input, InputField, InputState, Output, ReactorApp, Video, event, reactorApp, type InputBuffer } from '@reactor/runtime';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HostSwitch, sameTracks, serveHost, serveSwitchable, type ServerOptions } from '../src/index.js';
import { UploadApp } from './fixtures/upload-app.js';
import { quiet, useCleanups } from './fixtures/cleanups.js';
import { until } from '@reactor/test-kit';
import { RawClient } from './fixtures/net.js';
import { ask } from './input-servers.js';

/** Width and height of the app's frames. */
const SIDE = 16;

/** Version `v` of a small app: one state field, a camera in, a video out whose every byte is `v`. */
function versionApp(v: number, failLoad = false, slow: Promise<void> = Promise.resolve()): new () => ReactorApp<InputState, InputState, Output> {
  class SwapState extends InputState {
    @InputField({ default: `default ${v}` })
    @IsString()
    label!: string;
  }
  class SwapInput extends Input {
    @Video({ width: 32, height: 32, fps: 10, maxWidth: 64, maxHeight: 64, maxFps: 30 }) webcam!: InputBuffer;
  }
  class SwapOutput extends Output {
    @Video() mainVideo?: Video;
  }
  @reactorApp({ state: SwapState, input: SwapInput, output: SwapOutput, fps: 30, bufferSize: 4, name: 'swap-test', version: `${v}.0.0` })
  class SwapApp extends ReactorApp<SwapState, InputState, Output, never, SwapInput> {
    override load(): void {
      if (failLoad) throw new Error('load failed on purpose');
    }

    @event({ name: 'slow', description: 'Answers once the test lets it.' })
    async slow(): Promise<{ version: number }> {
      await slow;
      return { version: v };
    }

    generate(): Output {
      const data = new Uint8Array(SIDE * SIDE * 3).fill(v);
      return new SwapOutput({ mainVideo: new Frames(data, [1, SIDE, SIDE, 3]) });
    }
  }
  return SwapApp as unknown as new () => ReactorApp<InputState, InputState, Output>;
}

const cleanups = useCleanups();

async function start(options: ServerOptions = {}, slow?: Promise<void>): Promise<{ swap: HostSwitch; url: string }> {
  const first = new AppHost(versionApp(1, false, slow), { gracePeriodMs: 0, logger: quiet });
  await first.load();
  const swap = new HostSwitch(first, quiet);
  const server = await serveHost(swap, { port: 0, logger: quiet, encoding: 'rgb', ...options });
  cleanups.push(() => server.close());
  return { swap, url: server.wsUrl };
}

async function client(url: string): Promise<RawClient> {
  const c = await new RawClient(url).open();
  cleanups.push(() => c.close());
  return c;
}

/** The value of every byte of the last frame's payload (-1: mixed), after the 24-byte header and its metadata. */
function lastFrameValue(c: RawClient): number {
  const b = c.binaries.at(-1)!;
  const v = b[b.length - 1]!;
  return b.subarray(b.length - SIDE * SIDE * 3).every((x) => x === v) ? v : -1;
}

describe('server: HostSwitch', () => {
  it('moves a connected client to the new host on its open socket: a new welcome, the state prepare set, frames of the new version, a notice', async () => {
    const { swap, url } = await start();
    const a = await client(url);
    await until(() => a.binaries.length > 0 && lastFrameValue(a) === 1, 'frames of version 1', 10_000);
    const next = new AppHost(versionApp(2), { gracePeriodMs: 0, logger: quiet });
    expect(sameTracks(next.schema, swap.schema)).toBe(true);
    const { loadError } = await swap.replace(next, {
      load: (h) => h.load(),
      prepare: async (h) => {
        const quietHandle = h.connect({ message: () => undefined, frame: () => undefined, close: () => undefined });
        await quietHandle.command({ type: 'command', id: 'carry', name: 'set_label', params: { label: 'carried' } });
        quietHandle.disconnect();
        return { type: 'error', code: 'state_reset', message: 'a notice' };
      },
    });
    expect(loadError).toBeUndefined();
    const welcomes = (): WelcomeMessage[] => a.texts.filter((m): m is WelcomeMessage => m.type === 'welcome');
    await until(() => welcomes().length === 2, 'the second welcome', 5_000);
    expect(welcomes()[1]!.app.version).toBe('2.0.0');
    expect(welcomes()[1]!.state).toEqual({ label: 'carried' });
    await a.waitFor((m) => m.type === 'error' && m.code === 'state_reset' && m.id === undefined);
    const seen = a.binaries.length;
    await until(() => a.binaries.length > seen && lastFrameValue(a) === 2, 'frames of version 2', 10_000);
    expect((await a.command('c1', 'set_label', { label: 'after' })).type).toBe('reply');
    expect(a.closeCode).toBeUndefined();
    // The old host is closed, the new one serves.
    expect(swap.current).toBe(next);
    expect(swap.status.clients).toBe(1);
  });

  it('holds commands sent during the swap for the new host, refuses publish meanwhile, and publishes a held track again', async () => {
    const { swap, url } = await start();
    const a = await client(url);
    const b = await client(url);
    expect(await ask(a, 'publish', 'p1', 'webcam')).toEqual({ type: 'reply', id: 'p1' });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const next = new AppHost(versionApp(2), { gracePeriodMs: 0, logger: quiet });
    const replaced = swap.replace(next, {
      load: async (h) => {
        await gate;
        await h.load();
      },
    });
    // While the new version loads: a command waits, a publish is refused.
    a.send({ type: 'command', id: 'during', name: 'set_label', params: { label: 'sent during the swap' } });
    expect(await ask(b, 'publish', 'p2', 'webcam')).toMatchObject({ type: 'error', id: 'p2', code: 'no_session' });
    await new Promise((r) => setTimeout(r, 100));
    expect(a.texts.some((m) => m.type === 'reply' && m.id === 'during')).toBe(false);
    release();
    await replaced;
    await a.waitFor((m) => m.type === 'reply' && m.id === 'during');
    // Run by the new version: its state has the value.
    await until(() => next.status.sessionId !== undefined, 'the new session', 5_000);
    const c = await client(url);
    expect((c.texts.find((m) => m.type === 'welcome') as WelcomeMessage).state).toEqual({ label: 'sent during the swap' });
    // a still holds the camera on the new host: b is refused by the host, naming a's new id.
    const aId = (a.texts.filter((m) => m.type === 'welcome').at(-1) as WelcomeMessage).clientId;
    expect(await ask(b, 'publish', 'p3', 'webcam')).toMatchObject({ type: 'error', id: 'p3', code: 'publish_refused', message: expect.stringContaining(aId) });
    expect(a.texts.some((m) => m.type === 'track_released')).toBe(false);
    expect([a.closeCode, b.closeCode]).toEqual([undefined, undefined]);
  });

  it('leaves a new host whose load failed in place: clients see its welcome with status failed and what failed() says, and the next replace recovers', async () => {
    const { swap, url } = await start();
    const a = await client(url);
    const broken = new AppHost(versionApp(2, true), { gracePeriodMs: 0, logger: quiet });
    const { loadError } = await swap.replace(broken, {
      load: (h) => h.load(),
      prepare: () => ({ type: 'error', code: 'state_reset', message: 'prepare must not run after a failed load' }),
      failed: (h, err) => (h === broken ? { type: 'error', code: 'state_reset', message: `lost: ${(err as Error).message}` } : undefined),
    });
    expect((loadError as Error).message).toContain('load failed on purpose');
    await until(() => a.texts.some((m) => m.type === 'error'), 'the failed() notice', 5_000);
    expect(a.texts.filter((m) => m.type === 'error')).toEqual([expect.objectContaining({ code: 'state_reset', message: expect.stringContaining('lost: ') })]);
    expect(JSON.stringify(a.texts)).toContain('load failed on purpose');
    const last = (): WelcomeMessage => a.texts.filter((m) => m.type === 'welcome').at(-1) as WelcomeMessage;
    await until(() => a.texts.filter((m) => m.type === 'welcome').length === 2, 'the second welcome', 5_000);
    expect(last().session.state).toBe('failed');
    expect(a.closeCode).toBeUndefined();
    const fixed = new AppHost(versionApp(3), { gracePeriodMs: 0, logger: quiet });
    await swap.replace(fixed, { load: (h) => h.load() });
    await until(() => last().app.version === '3.0.0', 'the welcome of version 3', 5_000);
    await until(() => a.binaries.length > 0 && lastFrameValue(a) === 3, 'frames of version 3', 10_000);
    expect(a.closeCode).toBeUndefined();
  });

  it('restarts coded video at a key frame, after a new video_config, on the new host', async () => {
    const { swap, url } = await start({ video: { codec: 'h264', keyFrameInterval: 100_000 } });
    const a = await client(url);
    a.send({ type: 'select_video', id: 'v', codec: 'h264' });
    await a.waitFor((m) => m.type === 'reply' && m.id === 'v');
    const coded = (from: number): ReturnType<typeof decodeFrame>[] =>
      a.binaries
        .slice(from)
        .map((b) => decodeFrame(new Uint8Array(b)))
        .filter((f) => f.encoding === FrameEncoding.H264);
    await until(() => coded(0).length >= 10, 'H.264 frames of version 1', 20_000);
    const texts = a.texts.length;
    // How many binary messages had arrived when the second welcome did (RawClient's own listener runs first).
    let binariesAtWelcome = -1;
    a.ws.on('message', (data, isBinary) => {
      if (!isBinary && binariesAtWelcome < 0 && (JSON.parse(String(data)) as { type: string }).type === 'welcome') binariesAtWelcome = a.binaries.length;
    });
    await swap.replace(new AppHost(versionApp(2), { gracePeriodMs: 0, logger: quiet }), { load: (h) => h.load() });
    await until(() => binariesAtWelcome >= 0, 'the second welcome', 5_000);
    await until(() => coded(binariesAtWelcome).length >= 3, 'H.264 frames of version 2', 20_000);
    // After the new welcome: a video_config again, and the first coded frame is a key frame.
    const after = a.texts.slice(a.texts.findIndex((m, i) => i >= texts && m.type === 'welcome'));
    expect(after.some((m) => m.type === 'video_config' && m.codec === 'h264')).toBe(true);
    expect(coded(binariesAtWelcome)[0]!.key).toBe(true);
    expect(a.closeCode).toBeUndefined();
  }, 60_000);

  it('serveSwitchable: an upload announced on the old host is unknown to the new one (its session ended), and uploads go on to the new host with the same limits', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'host-switch-uploads-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const server = await serveSwitchable(UploadApp, { port: 0, gracePeriodMs: 0, logger: quiet, uploadDir: dir, maxUploadBytes: 1000 });
    cleanups.push(() => server.close());
    await server.loaded;
    const a = await client(server.wsUrl);
    const clientId = (): string => (a.texts.filter((m) => m.type === 'welcome').at(-1) as WelcomeMessage).clientId;
    const announce = async (size: number): Promise<{ status: number; json: { uploadId?: string; url?: string; error?: { code: string } } }> => {
      const res = await fetch(`${server.url}/uploads`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'a.png', size, clientId: clientId() }),
      });
      return { status: res.status, json: (await res.json()) as { uploadId?: string; url?: string; error?: { code: string } } };
    };
    const bytes = Buffer.alloc(100, 7);
    bytes.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    const old = await announce(bytes.length);
    expect(old.status).toBe(201);
    const next = new AppHost(UploadApp, { gracePeriodMs: 0, logger: quiet });
    await server.host.replace(next, { load: (h) => h.load() });
    await until(() => a.texts.filter((m) => m.type === 'welcome').length === 2, 'the second welcome', 5_000);
    const late = await fetch(`${server.url}${old.json.url}`, { method: 'PUT', body: bytes });
    expect(late.status).toBe(404);
    expect(((await late.json()) as { error: { code: string } }).error.code).toBe('upload_not_found');
    // The limits the server set (maxUploadBytes, the folder) hold on the new host too.
    expect(await announce(1001)).toMatchObject({ status: 413, json: { error: { code: 'upload_too_large' } } });
    const fresh = await announce(bytes.length);
    expect(fresh.status).toBe(201);
    const stored = await fetch(`${server.url}${fresh.json.url}`, { method: 'PUT', body: bytes });
    expect(stored.status).toBe(200);
    expect(readdirSync(dir).length).toBeGreaterThan(0);
  });

  it('lets a command the old host is running finish there and answers it on the same socket', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const { swap, url } = await start({}, gate);
    const a = await client(url);
    a.send({ type: 'command', id: 'slow', name: 'slow' });
    await new Promise((r) => setTimeout(r, 100));
    const replaced = swap.replace(new AppHost(versionApp(2), { gracePeriodMs: 0, logger: quiet }), { load: (h) => h.load() });
    setTimeout(release, 100);
    await replaced;
    // Run by version 1 (the old host waits for it before it closes), answered on the open socket.
    expect(await a.waitFor((m) => (m.type === 'reply' || m.type === 'error') && m.id === 'slow')).toEqual({
      type: 'reply',
      id: 'slow',
      result: { version: 1 },
    });
    await until(() => a.texts.filter((m) => m.type === 'welcome').length === 2, 'the second welcome', 5_000);
    expect((await a.command('again', 'slow')).type).toBe('reply');
    expect(a.closeCode).toBeUndefined();
  });
});
