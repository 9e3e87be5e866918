/**
 * Edges an outside client meets on the wire (issue 22): envelope keys that only exist on
 * `Object.prototype`, `"params": null`, a client that awaits every reply, the key-frame cadence
 * with a pipelined encoder, and `reactor_frames_emitted_total` with coded-video viewers.
 */
import { describe, expect, it } from 'vitest';
import { FrameEncoding, decodeFrame, type ServerMessage } from '@reactor/client';
import { serve, type CodedVideoEncoder, type ReactorServer, type ServeOptions, type VideoEncoderFactory } from '../src/index.js';
import { quiet, useCleanups } from './fixtures/cleanups.js';
import { until } from '@reactor/test-kit';
import { RawClient } from './fixtures/net.js';
import { patternApp, type PatternAppOptions } from './fixtures/pattern-app.js';

const cleanups = useCleanups();

async function start(opts: ServeOptions = {}, app: PatternAppOptions = { width: 32, height: 32, fps: 30 }): Promise<ReactorServer> {
  const server = await serve(patternApp(app), { port: 0, gracePeriodMs: 0, logger: quiet, ...opts });
  cleanups.push(() => server.close());
  await server.loaded;
  return server;
}

async function client(server: ReactorServer): Promise<RawClient> {
  const c = await new RawClient(server.wsUrl).open();
  cleanups.push(() => c.close());
  return c;
}

/** A counter's value in `/metrics` (summed over its label sets; 0 when absent). */
async function metric(server: ReactorServer, name: string): Promise<number> {
  const text = await server.metrics.registry.metrics();
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^(\w+)(?:\{[^}]*\})? (\S+)$/.exec(line);
    if (m && m[1] === name) sum += Number(m[2]);
  }
  return sum;
}

describe('server: envelope keys and params', () => {
  it.each(['__proto__', 'constructor', 'toString', 'hasOwnProperty'])('refuses a command carrying the key %s (malformed_message, naming it)', async (key) => {
    const server = await start();
    const c = await client(server);
    c.send(`{"type":"command","id":"k","name":"reset","${key}":1}`);
    const answer = await c.waitFor((m) => (m.type === 'reply' || m.type === 'error') && m.id === 'k');
    expect(answer).toMatchObject({ type: 'error', code: 'malformed_message', id: 'k' });
    expect((answer as { message: string }).message).toContain(`unknown key(s) "${key}" in command`);
    // A track message too.
    c.send(`{"type":"publish","id":"p","track":"main_video","${key}":{}}`);
    expect(await c.waitFor((m) => m.type === 'error' && m.id === 'p')).toMatchObject({ code: 'malformed_message' });
  });

  it('refuses "params": null (invalid_params: an object or nothing), and "params" keys that only exist on Object.prototype', async () => {
    const server = await start();
    const c = await client(server);
    expect(await c.command('n', 'reset', null)).toMatchObject({ type: 'error', code: 'invalid_params', id: 'n', message: 'params must be a JSON object' });
    c.send('{"type":"command","id":"p","name":"reset","params":{"__proto__":{"x":1}}}');
    expect(await c.waitFor((m) => (m.type === 'reply' || m.type === 'error') && m.id === 'p')).toMatchObject({ type: 'error', code: 'invalid_params' });
    c.send('{"type":"command","id":"s","name":"set_color","params":{"color":"blue","constructor":1}}');
    expect(await c.waitFor((m) => (m.type === 'reply' || m.type === 'error') && m.id === 's')).toMatchObject({ type: 'error', code: 'invalid_params' });
    // And the same command without them still runs.
    expect(await c.command('ok', 'reset', {})).toMatchObject({ type: 'reply', id: 'ok' });
  });
});

describe('server: command limits', () => {
  it('never rate-limits a client that awaits each reply: 4x commandBurst sequential commands all answered', async () => {
    const server = await start({ commandRate: 10, commandBurst: 8 });
    const c = await client(server);
    const answers: ServerMessage[] = [];
    for (let i = 0; i < 32; i++) answers.push(await c.command(`s${i}`, 'set_speed', { speed: 1 + (i % 3) }));
    expect(answers.filter((a) => a.type === 'error')).toEqual([]);
    expect(answers).toHaveLength(32);
  });
  // A client that sends ahead of its answers is still limited: hardening.test.ts (commands behind a long handler).
});

/** A fake coded encoder whose chunks come out `delayMs` late (so hand-offs overlap, as with a real pipelined encoder); it records each frame's key flag. */
function slowFactory(delayMs: number): { factory: VideoEncoderFactory; keys: boolean[] } {
  const keys: boolean[] = [];
  const factory: VideoEncoderFactory = () => {
    const e: CodedVideoEncoder = {
      codecString: 'avc1.42001f',
      encode(_rgb, _ts, key) {
        keys.push(key);
        return new Promise((resolve) => setTimeout(() => resolve({ data: new Uint8Array([0, 0, 0, 1, key ? 0x65 : 0x41]), key }), delayMs));
      },
      close() {},
    };
    return e;
  };
  return { factory, keys };
}

describe('server: coded video cadence and metrics', () => {
  it('forces exactly one key frame per keyFrameInterval with a pipelined encoder (no second one right after)', async () => {
    const { factory, keys } = slowFactory(60);
    const server = await start({ video: { codec: 'h264', encoderFactory: factory, keyFrameInterval: 10 } }, { width: 32, height: 32, fps: 60, chunk: 4 });
    const c = await client(server);
    c.send({ type: 'select_video', id: 'v', codec: 'h264' });
    await until(() => keys.length >= 45, '45 frames encoded', 20_000);
    const at = keys.slice(0, 45).flatMap((k, i) => (k ? [i] : []));
    // The first frame of the encoder, then one every 10 frames.
    expect(at).toEqual([0, 10, 20, 30, 40]);
  });

  it('counts reactor_frames_emitted_total for frames played to H.264 viewers (not only JPEG encodes)', async () => {
    const { factory } = slowFactory(1);
    const server = await start({ video: { codec: 'h264', encoderFactory: factory } });
    const c = await client(server);
    c.send({ type: 'select_video', id: 'v', codec: 'h264' });
    await c.waitFor((m) => m.type === 'reply' && m.id === 'v');
    const coded: number[] = [];
    c.ws.on('message', (d, bin) => {
      if (bin && decodeFrame(new Uint8Array(d as Buffer)).encoding === FrameEncoding.H264) coded.push(1);
    });
    await until(() => coded.length >= 5, 'coded frames', 10_000);
    const before = await metric(server, 'reactor_frames_emitted_total');
    await until(() => coded.length >= 20, '15 more coded frames', 10_000);
    expect((await metric(server, 'reactor_frames_emitted_total')) - before).toBeGreaterThanOrEqual(10);
  });
});
