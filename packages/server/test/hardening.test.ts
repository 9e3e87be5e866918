/**
 * Hardening found in review: request targets `new URL` cannot parse, DNS rebinding (a foreign
 * Host header on a loopback server), and commands piling up behind a long handler.
 */
import 'reflect-metadata';
import { request } from 'node:http';
import { connect as netConnect } from 'node:net';
import { describe, expect, it } from 'vitest';
import { IsInt, Min } from 'class-validator';
import { event, InputField, InputState, Output, ReactorApp, reactorApp } from '@reactor/runtime';
import { serve, type ReactorServer } from '../src/index.js';

/** The burst this test's server allows: also the most commands of a connection that may wait at once. */
const MAX_PENDING_COMMANDS = 16;
import { patternApp } from './fixtures/pattern-app.js';
import { RawClient, until } from './fixtures/net.js';
import { quiet, useCleanups } from './fixtures/cleanups.js';

const cleanups = useCleanups();

async function start(opts: Parameters<typeof serve>[1] = {}, app: Parameters<typeof serve>[0] = patternApp({ width: 16, height: 16, fps: 10 })): Promise<ReactorServer> {
  const server = await serve(app, { port: 0, gracePeriodMs: 0, logger: quiet, statsIntervalMs: 0, ...opts });
  cleanups.push(() => server.close());
  await server.loaded;
  return server;
}

/** Sends raw request bytes and resolves with the first response line. */
function rawRequest(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = netConnect(port, '127.0.0.1', () => s.write(text));
    let got = '';
    s.on('data', (d) => {
      got += d.toString();
      if (got.includes('\r\n')) {
        resolve(got.split('\r\n')[0]!);
        s.destroy();
      }
    });
    s.on('error', reject);
    s.on('close', () => resolve(got.split('\r\n')[0] ?? ''));
  });
}

function get(port: number, path: string, host: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, headers: { host } }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

const upgrade = (target: string, host: string) =>
  `GET ${target} HTTP/1.1\r\nHost: ${host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`;

describe('server hardening', () => {
  it('answers 400 to request targets that cannot be parsed, on both HTTP and the upgrade, and keeps serving', async () => {
    const server = await start({ token: 'a-long-enough-token' });
    const port = server.port;
    for (const target of ['//', '//[/ws', '/\\']) {
      expect(await rawRequest(port, upgrade(target, `127.0.0.1:${port}`)), `upgrade ${target}`).toBe('HTTP/1.1 400 Bad Request');
      expect(await rawRequest(port, `GET ${target} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`), `GET ${target}`).toMatch(/^HTTP\/1\.1 400 /);
    }
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  });

  it('refuses a foreign Host on a loopback server (DNS rebinding), on routes and the WebSocket, unless allowed', async () => {
    const server = await start();
    const port = server.port;
    const evil = `attacker.example:${port}`;
    const r = await get(port, '/schema', evil);
    expect(r.status).toBe(403);
    expect(JSON.parse(r.body)).toMatchObject({ error: { code: 'host_not_allowed' } });
    expect(await rawRequest(port, upgrade('/ws', evil))).toBe('HTTP/1.1 403 Forbidden');
    for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`]) expect((await get(port, '/schema', host)).status, host).toBe(200);
    expect((await get(port, '/health', evil)).status).toBe(200); // health stays open, as with the token

    const proxied = await start({ allowedHosts: ['reactor.example.com'] });
    expect((await get(proxied.port, '/schema', 'reactor.example.com')).status).toBe(200);
    expect((await get(proxied.port, '/schema', evil)).status).toBe(403);
  });

  it(`answers rate_limited once commandBurst (${MAX_PENDING_COMMANDS}) commands of a connection wait behind a long handler, in arrival order after the waiting ones`, async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    class S extends InputState {
      @InputField({ default: 0 }) @IsInt() @Min(0) n!: number;
    }
    @reactorApp({ state: S, name: 'slow' })
    class SlowApp extends ReactorApp<S, S, Output | null> {
      generate(): null {
        return null;
      }
      @event({ name: 'slow', description: 'Waits for the test.' })
      async slow(): Promise<string> {
        await gate;
        return 'done';
      }
    }
    const server = await start({ commandBurst: MAX_PENDING_COMMANDS }, SlowApp);
    const c = await new RawClient(server.wsUrl).open();
    cleanups.push(() => c.close());
    for (let i = 0; i < MAX_PENDING_COMMANDS + 4; i++) c.send({ type: 'command', id: `c${i}`, name: 'slow' });
    // The refusals are counted as they happen, but answered in arrival order: behind the waiting commands.
    await until(async () => /reactor_command_results_total\{code="rate_limited"\} 4/.test(await server.metrics.registry.metrics()), 5000, 'the refusals');
    expect(c.texts.filter((m) => m.type === 'error' || m.type === 'reply')).toEqual([]);
    release();
    await until(() => c.texts.filter((m) => m.type === 'error').length >= 4, 5000, 'the refusals');
    const refused = c.texts.filter((m) => m.type === 'error');
    expect(refused.map((m) => (m as { id?: string }).id)).toEqual(['c16', 'c17', 'c18', 'c19']);
    expect(refused[0]).toMatchObject({ code: 'rate_limited' });
    await until(() => c.texts.filter((m) => m.type === 'reply').length === MAX_PENDING_COMMANDS, 5000, 'the replies');
    const answers = c.texts.filter((m) => m.type === 'error' || m.type === 'reply').map((m) => (m as { id?: string }).id);
    expect(answers).toEqual(Array.from({ length: MAX_PENDING_COMMANDS + 4 }, (_, i) => `c${i}`));
    expect((await c.command('after', 'slow')).type).toBe('reply');
  });
});
