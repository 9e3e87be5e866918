/**
 * Hardening found in review: request targets `new URL` cannot parse, requests Node cannot
 * parse, slow headers, DNS rebinding (a foreign Host header on a loopback server), subprotocols,
 * the viewer's security headers, and commands piling up behind a long handler.
 */
import 'reflect-metadata';
import { request } from 'node:http';
import { connect as netConnect } from 'node:net';
import { describe, expect, it } from 'vitest';
import { IsInt, Min } from 'class-validator';
import { event, InputField, InputState, Output, ReactorApp, reactorApp } from '@reactor/runtime';
import { resolveServerOptions, serve, type ReactorServer } from '../src/index.js';
import { patternApp } from './fixtures/pattern-app.js';
import { until } from '@reactor/test-kit';
import { RawClient } from './fixtures/net.js';
import { quiet, useCleanups } from './fixtures/cleanups.js';

/** The burst this test's server allows: also the most commands of a connection that may wait at once. */
const MAX_PENDING_COMMANDS = 16;

const cleanups = useCleanups();

async function start(
  opts: Parameters<typeof serve>[1] = {},
  app: Parameters<typeof serve>[0] = patternApp({ width: 16, height: 16, fps: 10 }),
): Promise<ReactorServer> {
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

/** Sends raw request bytes and resolves with everything the server answers until it closes (or until `until` arrives). */
function rawResponse(port: number, text: string, until?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = netConnect(port, '127.0.0.1', () => s.write(text));
    let got = '';
    s.on('data', (d) => {
      got += d.toString();
      if (until !== undefined && got.includes(until)) {
        resolve(got);
        s.destroy();
      }
    });
    s.on('error', reject);
    s.on('close', () => resolve(got));
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

/** An app whose `slow` event waits until the test calls `release()`. */
function slowApp(): { app: Parameters<typeof serve>[0]; release: () => void } {
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
  return { app: SlowApp, release };
}

/** The ids (or `-` for none) and codes of every answer so far, in arrival order. */
const answers = (c: RawClient): string[] =>
  c.texts.filter((m) => m.type === 'reply' || m.type === 'error').map((m) => `${(m as { id?: string }).id ?? '-'}:${m.type === 'error' ? m.code : 'reply'}`);

describe('server: protocol promises', () => {
  it('answers in arrival order: connection-level errors wait behind a command still running', async () => {
    const { app, release } = slowApp();
    const server = await start({}, app);
    const c = await new RawClient(server.wsUrl).open();
    cleanups.push(() => c.close());
    c.send({ type: 'command', id: 'a', name: 'slow' });
    c.send('{not json');
    c.send({ type: 'subscribe', id: 'b' });
    c.send({ type: 'command', id: 'c', name: 'launch_rockets', params: { x: 1 } });
    c.send({ type: 'command', id: 'd', name: 'set_n', params: { n: 2 } });
    c.ws.send(Buffer.from([1, 2, 3]), { binary: true });
    await until(
      async () => /reactor_command_results_total\{code="unexpected_binary"\} 1/.test(await server.metrics.registry.metrics()),
      'the binary message to be handled',
      5000,
    );
    expect(answers(c)).toEqual([]);
    release();
    await until(() => answers(c).length === 6, 'six answers', 5000);
    // An unknown command is unknown_command whatever its params (the host checks the name first).
    expect(answers(c)).toEqual(['a:reply', '-:malformed_message', 'b:unknown_message_type', 'c:unknown_command', 'd:reply', '-:unexpected_binary']);
  });

  it('counts a command id in code points: 64 emoji are a valid id, 65 are not', async () => {
    const server = await start();
    const c = await new RawClient(server.wsUrl).open();
    cleanups.push(() => c.close());
    const id64 = '😀'.repeat(64); // 128 UTF-16 units
    expect(await c.command(id64, 'set_speed', { speed: 1 })).toEqual({ type: 'reply', id: id64 });
    c.send({ type: 'command', id: '😀'.repeat(65), name: 'set_speed', params: { speed: 1 } });
    expect(await c.waitFor((m) => m.type === 'error')).toMatchObject({ code: 'malformed_message', message: expect.stringContaining('at most 64 characters') });
  });

  it('closes a connection that sends invalid UTF-8 text with 1007', async () => {
    const server = await start();
    const c = await new RawClient(server.wsUrl).open();
    const other = await new RawClient(server.wsUrl).open();
    cleanups.push(() => other.close());
    c.ws.send(Buffer.from([0x7b, 0xff, 0xfe, 0x7d]), { binary: false });
    expect(await c.closed).toBe(1007);
    expect(await other.command('ok', 'set_speed', { speed: 1 })).toEqual({ type: 'reply', id: 'ok' });
  });

  it('caps an error answer: a message with thousands of unknown keys earns a few details and a count', async () => {
    const server = await start();
    const c = await new RawClient(server.wsUrl).open();
    cleanups.push(() => c.close());
    const params: Record<string, number> = { speed: 1 };
    for (let i = 0; i < 3000; i++) params[`k${i}_${'x'.repeat(8)}`] = i;
    const sent = JSON.stringify({ type: 'command', id: 'big', name: 'set_speed', params });
    expect(sent.length).toBeGreaterThan(50_000);
    c.send(sent);
    const answer = await c.waitFor((m) => m.type === 'error' && m.id === 'big');
    expect(answer).toMatchObject({ code: 'invalid_params' });
    expect(JSON.stringify(answer).length).toBeLessThan(4096);
    expect((answer as { details: unknown[] }).details.length).toBeLessThanOrEqual(10);
    expect((answer as { message: string }).message).toMatch(/more details not shown|and \d+ more/);
  });
});

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

  it('answers oversized headers 431 and a request that is not HTTP 400, with a JSON body, as Node would', async () => {
    const server = await start();
    const port = server.port;
    const big = `GET /schema HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`;
    const answer431 = await rawResponse(port, big);
    expect(answer431.split('\r\n')[0]).toBe('HTTP/1.1 431 Request Header Fields Too Large');
    expect(JSON.parse(answer431.split('\r\n\r\n')[1]!)).toMatchObject({ error: { code: 'headers_too_large' } });
    const garbage = await rawResponse(port, 'HELLO THERE\r\n\r\n');
    expect(garbage.split('\r\n')[0]).toBe('HTTP/1.1 400 Bad Request');
    expect(JSON.parse(garbage.split('\r\n\r\n')[1]!)).toMatchObject({ error: { code: 'bad_request' } });
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  });

  it('gives a client headersTimeoutMs (default 10 s) for its headers, then answers 408 and closes', async () => {
    expect(resolveServerOptions().headersTimeoutMs).toBe(10_000);
    const server = await start({ headersTimeoutMs: 300 });
    const t0 = performance.now();
    const answer = await rawResponse(server.port, `GET /schema HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n`); // never finished
    const waited = performance.now() - t0;
    expect(answer.split('\r\n')[0]).toBe('HTTP/1.1 408 Request Timeout');
    expect(waited).toBeGreaterThanOrEqual(250);
    expect(waited).toBeLessThan(5000);
  });

  it('never echoes an offered WebSocket subprotocol', async () => {
    const server = await start();
    const head = await rawResponse(
      server.port,
      upgrade('/ws', `127.0.0.1:${server.port}`).replace('\r\n\r\n', '\r\nSec-WebSocket-Protocol: chat, superchat\r\n\r\n'),
      '\r\n\r\n',
    );
    expect(head.split('\r\n')[0]).toBe('HTTP/1.1 101 Switching Protocols');
    expect(head.toLowerCase()).not.toContain('sec-websocket-protocol');
  });

  it('serves the viewer page with a CSP (frame-ancestors from allowedOrigins) and Referrer-Policy: no-referrer', async () => {
    const own = await start();
    const page = await fetch(`${own.url}/`);
    expect(page.headers.get('referrer-policy')).toBe('no-referrer');
    const csp = page.headers.get('content-security-policy')!;
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("frame-ancestors 'self'");
    expect(csp).toMatch(/script-src 'self' 'sha256-[A-Za-z0-9+/=]+'/);
    const listed = await start({ allowedOrigins: ['https://app.example'] });
    expect((await fetch(`${listed.url}/`)).headers.get('content-security-policy')).toContain("frame-ancestors 'self' https://app.example");
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

  it('rate-limits messages sent ahead of their answers with an error reply; the connection stays and recovers; another connection has its own budget', async () => {
    const { app: SlowApp, release } = slowApp();
    const server = await start({ commandRate: 5, commandBurst: 5 }, SlowApp);
    const c = await new RawClient(server.wsUrl).open();
    const other = await new RawClient(server.wsUrl).open();
    cleanups.push(
      () => c.close(),
      () => other.close(),
    );
    // The first command is still running: the 12 behind it are sent ahead of its answer.
    c.send({ type: 'command', id: 'held', name: 'slow' });
    for (let i = 0; i < 12; i++) c.send({ type: 'command', id: `n${i}`, name: 'set_n', params: { n: i } });
    await until(async () => /reactor_command_results_total\{code="rate_limited"\} \d+/.test(await server.metrics.registry.metrics()), 'refusals', 5000);
    release();
    await until(() => c.texts.filter((m) => (m.type === 'reply' || m.type === 'error') && m.id?.startsWith('n')).length === 12, '12 answers', 5000);
    const limited = c.texts.filter((m) => m.type === 'error' && m.code === 'rate_limited');
    expect(limited.length).toBeGreaterThanOrEqual(6);
    expect(limited[0]).toMatchObject({ message: expect.stringContaining('5 messages per second') });
    expect(await other.command('o', 'set_n', { n: 2 })).toEqual({ type: 'reply', id: 'o' });
    // Once its answers are out, the connection is served again (a client awaiting each reply is never limited).
    for (let i = 0; i < 20; i++) expect(await c.command(`later${i}`, 'set_n', { n: 1 })).toMatchObject({ type: 'reply' });
    expect(c.closeCode).toBeUndefined();
  });

  it(`answers rate_limited once commandBurst (${MAX_PENDING_COMMANDS}) commands of a connection wait behind a long handler, in arrival order after the waiting ones`, async () => {
    const { app: SlowApp, release } = slowApp();
    const server = await start({ commandBurst: MAX_PENDING_COMMANDS }, SlowApp);
    const c = await new RawClient(server.wsUrl).open();
    cleanups.push(() => c.close());
    for (let i = 0; i < MAX_PENDING_COMMANDS + 4; i++) c.send({ type: 'command', id: `c${i}`, name: 'slow' });
    // The refusals are counted as they happen, but answered in arrival order: behind the waiting commands.
    await until(async () => /reactor_command_results_total\{code="rate_limited"\} 4/.test(await server.metrics.registry.metrics()), 'the refusals', 5000);
    expect(c.texts.filter((m) => m.type === 'error' || m.type === 'reply')).toEqual([]);
    release();
    await until(() => c.texts.filter((m) => m.type === 'error').length >= 4, 'the refusals', 5000);
    const refused = c.texts.filter((m) => m.type === 'error');
    expect(refused.map((m) => (m as { id?: string }).id)).toEqual(['c16', 'c17', 'c18', 'c19']);
    expect(refused[0]).toMatchObject({ code: 'rate_limited' });
    await until(() => c.texts.filter((m) => m.type === 'reply').length === MAX_PENDING_COMMANDS, 'the replies', 5000);
    const answers = c.texts.filter((m) => m.type === 'error' || m.type === 'reply').map((m) => (m as { id?: string }).id);
    expect(answers).toEqual(Array.from({ length: MAX_PENDING_COMMANDS + 4 }, (_, i) => `c${i}`));
    expect((await c.command('after', 'slow')).type).toBe('reply');
  });
});
