import { describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { CommandFailedError, connect, decodeFrame, type AppMessage, type ClientFrame, type ReactorClient, type WelcomeMessage } from '@reactor/client';
import { serve, type ReactorServer } from '../src/index.js';
import { patternApp } from './fixtures/pattern-app.js';
import { until } from '@reactor/test-kit';
import { RawClient, stalledClient } from './fixtures/net.js';
import { quiet, useCleanups } from './fixtures/cleanups.js';

const cleanups = useCleanups();

async function start(opts: Parameters<typeof serve>[1] = {}): Promise<ReactorServer> {
  const server = await serve(patternApp({ width: 64, height: 48, fps: 30 }), { port: 0, gracePeriodMs: 0, logger: quiet, statsIntervalMs: 200, ...opts });
  cleanups.push(() => server.close());
  await server.loaded;
  return server;
}

async function client(server: ReactorServer): Promise<ReactorClient> {
  const c = await connect(server.url, { WebSocket, reconnect: false });
  cleanups.push(() => c.close());
  return c;
}

describe('server: several clients on one session', () => {
  it('shares one session, replies to the sender, broadcasts state and messages, and streams frames in order', async () => {
    const server = await start();
    const [a, b, c] = await Promise.all([client(server), client(server), client(server)]);
    expect(new Set([a.session.sessionId, b.session.sessionId, c.session.sessionId]).size).toBe(1);
    expect(a.schema.commands.map((x) => x.name).sort()).toEqual(['announce', 'refuse', 'reset', 'set_color', 'set_frozen', 'set_label', 'set_speed']);

    const frames = new Map<ReactorClient, ClientFrame[]>([
      [a, []],
      [b, []],
      [c, []],
    ]);
    for (const [cl, list] of frames) cl.on('frame', (f) => list.push(f));
    const states: Record<string, unknown>[] = [];
    b.on('state', (s) => states.push(s));
    const messages: AppMessage[] = [];
    c.on('message', (m) => messages.push(m));

    // A setter: acknowledged to the sender, new state broadcast to everyone.
    await expect(a.send('set_color', { color: 'blue' })).resolves.toBeUndefined();
    await until(() => states.some((s) => s['color'] === 'blue'), 'state broadcast', 5000);
    expect(c.state['color']).toBe('blue');

    // An event with params: the result goes to the sender, the message to all.
    await expect(b.send('announce', { text: 'hi all', times: 2 })).resolves.toEqual({ sent: 2 });
    await until(() => messages.length === 2, 'two notices', 5000);
    expect(messages[0]).toEqual({ type: 'message', name: 'notice', data: { text: 'hi all' } });

    // An app CommandError reaches the sender with its own code.
    const err = await c.send('refuse').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CommandFailedError);
    expect((err as CommandFailedError).code).toBe('not_today');

    await until(() => [...frames.values()].every((l) => l.length >= 15), '15 frames on every client', 10_000);
    for (const list of frames.values()) {
      for (let i = 1; i < list.length; i++) expect(list[i]!.seq).toBeGreaterThan(list[i - 1]!.seq);
      expect(list[0]).toMatchObject({ width: 64, height: 48, trackName: 'main_video', encoding: 0 });
      // A real JPEG (SOI marker).
      expect([list[0]!.payload[0], list[0]!.payload[1]]).toEqual([0xff, 0xd8]);
    }
  });

  it('sends raw RGB when asked, and flush reaches every client', async () => {
    const server = await start({ encoding: 'rgb' });
    const a = await new RawClient(server.wsUrl).open();
    const b = await new RawClient(server.wsUrl).open();
    cleanups.push(
      () => a.close(),
      () => b.close(),
    );
    await until(() => a.binaries.length > 3 && b.binaries.length > 3, 'frames', 10_000);
    const f = decodeFrame(new Uint8Array(a.binaries[0]!));
    expect(f.encoding).toBe(1);
    expect(f.payload.byteLength).toBe(64 * 48 * 3);
    expect(await a.command('r1', 'reset')).toEqual({ type: 'reply', id: 'r1', result: { restarted: true } });
    const [fa, fb] = await Promise.all([a.waitFor((m) => m.type === 'flush'), b.waitFor((m) => m.type === 'flush')]);
    expect(fa).toEqual(fb);
  });

  it('the welcome carries protocol, app, schema, state and session', async () => {
    const server = await start();
    const raw = await new RawClient(server.wsUrl).open();
    cleanups.push(() => raw.close());
    const w = raw.texts[0] as WelcomeMessage;
    expect(w).toMatchObject({
      type: 'welcome',
      protocol: 1,
      app: { name: 'pattern', version: '1.0.0' },
      state: { label: 'hello', color: 'red', speed: 2, frozen: false },
    });
    expect(w.session.state).toMatch(/waiting|streaming/);
    expect(typeof w.clientId).toBe('string');
    const schema = (await (await fetch(`${server.url}/schema`)).json()) as unknown;
    expect(schema).toEqual(w.schema);
  });
});

describe('server: /metrics', () => {
  it('reports steps, step time, frames emitted once per frame, frames sent per client, clients and command results', async () => {
    // A deep frame queue: on a loaded machine these in-process readers may fall a few frames behind, which must not count as drops here.
    const server = await start({ maxQueuedFrames: 100 });
    const a = await new RawClient(server.wsUrl).open();
    const b = await new RawClient(server.wsUrl).open();
    cleanups.push(
      () => a.close(),
      () => b.close(),
    );
    await a.command('1', 'set_speed', { speed: 1 });
    await until(() => a.binaries.length >= 10 && b.binaries.length >= 10, 'frames', 5000);
    await a.waitFor((m) => m.type === 'stats' && m.steps > 0);
    const text = await (await fetch(`${server.url}/metrics`)).text();
    const value = (name: string): number => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
    expect(value('reactor_steps_total')).toBeGreaterThan(0);
    // Every step is observed individually (AppHost.onStep), so the histogram counts every step.
    expect(value('reactor_step_duration_seconds_count')).toBeGreaterThan(0);
    expect(value('reactor_step_duration_seconds_count')).toBe(value('reactor_steps_total'));
    const emitted = value('reactor_frames_emitted_total\\{track="main_video"\\}');
    const sent = value('reactor_frames_sent_total');
    expect(emitted).toBeGreaterThanOrEqual(10);
    // Two clients: every frame sent about twice, encoded (emitted) once.
    expect(sent).toBeGreaterThanOrEqual(emitted * 2 - 6);
    // Encoded once per frame (one may still be in the encoder at scrape time).
    expect(value('reactor_frame_encode_seconds_count')).toBeGreaterThanOrEqual(emitted - 1);
    expect(value('reactor_frame_encode_seconds_count')).toBeLessThanOrEqual(emitted);
    expect(value('reactor_clients')).toBe(2);
    expect(value('reactor_command_results_total\\{code="ok"\\}')).toBe(1);
    expect(text).toContain('reactor_frames_dropped_total{reason="slow_client"} 0');
  });
});

describe('server: bad input', () => {
  it('answers each bad message with a clear error and keeps the connection and the others', async () => {
    const server = await start({ maxMessageBytes: 1024 });
    const bad = await new RawClient(server.wsUrl).open();
    const good = await new RawClient(server.wsUrl).open();
    cleanups.push(
      () => bad.close(),
      () => good.close(),
    );
    const errorAfter = async (n: number): Promise<ServerMessageError> => {
      const m = await bad.waitFor((x) => x.type === 'error' && bad.texts.filter((y) => y.type === 'error').indexOf(x) === n);
      return m as ServerMessageError;
    };
    bad.send('{not json');
    expect(await errorAfter(0)).toMatchObject({ code: 'malformed_message', message: expect.stringContaining('not valid JSON') });
    bad.send({ type: 'subscribe', id: 'x' });
    expect(await errorAfter(1)).toMatchObject({ code: 'unknown_message_type', id: 'x', message: expect.stringContaining('"subscribe"') });
    expect(await bad.command('u', 'launch_rockets', {})).toMatchObject({
      type: 'error',
      code: 'unknown_command',
      message: expect.stringContaining('set_label'),
    });
    const invalid = await bad.command('i', 'set_label', { label: 'x'.repeat(21) });
    expect(invalid).toMatchObject({ type: 'error', code: 'invalid_params', details: [{ field: 'label', constraint: 'maxLength' }] });
    const missing = await bad.command('m', 'announce', {});
    expect(missing).toMatchObject({ type: 'error', code: 'invalid_params', details: [expect.objectContaining({ field: 'text' })] });
    const extra = await bad.command('e', 'set_speed', { speed: 3, turbo: true });
    expect(extra).toMatchObject({
      type: 'error',
      code: 'invalid_params',
      details: [expect.objectContaining({ field: 'turbo', constraint: 'whitelistValidation' })],
    });
    const range = await bad.command('r', 'set_speed', { speed: 11 });
    expect(range).toMatchObject({ type: 'error', code: 'invalid_params', details: [expect.objectContaining({ field: 'speed', constraint: 'max' })] });
    bad.ws.send(Buffer.from([1, 2, 3]), { binary: true });
    expect(await errorAfter(7)).toMatchObject({ code: 'unexpected_binary' });
    // Still a working connection.
    expect(await bad.command('ok', 'set_speed', { speed: 3 })).toEqual({ type: 'reply', id: 'ok' });
    // Too big: closed with 1009, the other client untouched.
    bad.send({ type: 'command', id: 'big', name: 'set_label', params: { label: 'x'.repeat(2000) } });
    expect(await bad.closed).toBe(1009);
    expect(await good.command('g', 'set_speed', { speed: 4 })).toEqual({ type: 'reply', id: 'g' });
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toMatch(/reactor_command_results_total\{code="invalid_params"\} 4/);
    expect(metrics).toMatch(/reactor_command_results_total\{code="malformed_message"\} 1/);
  });

  // Rate limits (messages sent ahead of their answers): hardening.test.ts; a client awaiting each reply: wire-edges.test.ts.

  it('reaps a client that stops answering pings, and only that client', async () => {
    const server = await start({ heartbeatMs: 150 });
    const dead = await new RawClient(server.wsUrl, { autoPong: false }).open();
    const alive = await new RawClient(server.wsUrl).open();
    cleanups.push(() => alive.close());
    const code = await dead.closed;
    expect(code).toBe(1006); // terminated without a close frame
    await until(() => server.connections().length === 1, 'one connection left', 2000);
    expect(alive.closeCode).toBeUndefined();
    expect(await (await fetch(`${server.url}/metrics`)).text()).toMatch(/reactor_connections_rejected_total\{reason="heartbeat"\} 1/);
  });

  it('survives clients that vanish mid-frame (TCP reset while a large frame is being written)', async () => {
    // No resume grace: a reset client leaves at once (held clients are test/resume.test.ts's).
    const server = await serve(patternApp({ width: 256, height: 256, fps: 30 }), {
      port: 0,
      gracePeriodMs: 0,
      logger: quiet,
      encoding: 'rgb',
      resumeGraceMs: 0,
    });
    cleanups.push(() => server.close());
    await server.loaded;
    const other = await new RawClient(server.wsUrl).open();
    cleanups.push(() => other.close());
    for (let i = 0; i < 5; i++) {
      const victim = await stalledClient(server.port);
      victim.resume();
      // The first bytes of a 196 KB frame have arrived: cut the connection with a reset now.
      await new Promise<void>((resolve) => {
        let bytes = 0;
        victim.on('data', (d: Buffer) => {
          bytes += d.byteLength;
          if (bytes > 1000) {
            victim.resetAndDestroy();
            resolve();
          }
        });
      });
    }
    await until(() => server.connections().length === 1, 'victims gone', 5000);
    const before = other.binaries.length;
    await until(() => other.binaries.length > before + 10, 'frames still flowing', 5000);
    expect(await other.command('s', 'set_speed', { speed: 5 })).toEqual({ type: 'reply', id: 's' });
    expect((await (await fetch(`${server.url}/health`)).json()) as unknown).toMatchObject({ status: 'ready', clients: 1 });
  });
});

type ServerMessageError = { type: 'error'; code: string; message: string; id?: string };
