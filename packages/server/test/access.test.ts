import { describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { ConnectionError, connect } from '@reactor/client';
import { serve } from '../src/index.js';
import { patternApp } from './fixtures/pattern-app.js';
import { RawClient } from './fixtures/net.js';
import { usePatternServers } from './fixtures/cleanups.js';

const { start } = usePatternServers();

function wsStatus(url: string, headers: Record<string, string> = {}): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    ws.on('unexpected-response', (_req, res) => {
      resolve(res.statusCode ?? 0);
      ws.terminate();
    });
    ws.on('open', () => {
      resolve(101);
      ws.close();
    });
    ws.on('error', (e) => (e.message.includes('Unexpected server response') ? undefined : reject(e)));
  });
}

describe('server: access token', () => {
  it('requires the token on every route but /health, and on the WebSocket', async () => {
    const server = await start({ token: 's3cret' });
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    expect((await fetch(`${server.url}/health/live`)).status).toBe(200);
    expect((await fetch(`${server.url}/health/ready`)).status).toBe(200);
    for (const path of ['/', '/schema', '/metrics', '/viewer/app.js']) {
      const res = await fetch(`${server.url}${path}`);
      expect(res.status, path).toBe(401);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('unauthorized');
      expect((await fetch(`${server.url}${path}?token=wrong`)).status, path).toBe(401);
      expect((await fetch(`${server.url}${path}?token=s3cret`)).status, path).toBe(200);
      expect((await fetch(`${server.url}${path}`, { headers: { authorization: 'Bearer s3cret' } })).status, path).toBe(200);
    }
    expect(await wsStatus(server.wsUrl)).toBe(401);
    expect(await wsStatus(`${server.wsUrl}?token=nope`)).toBe(401);
    expect(await wsStatus(server.wsUrl, { authorization: 'Bearer s3cret' })).toBe(101);
    const err = await connect(server.url, { WebSocket, reconnect: false }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectionError);
    expect((err as ConnectionError).code).toBe('connection_failed');
    expect((err as Error).message).toContain('401');
    const ok = await connect(server.url, { WebSocket, reconnect: false, token: 's3cret' });
    expect(ok.schema.app.name).toBe('pattern');
    ok.close();
  });

  it('takes the Authorization scheme in any case (bearer, BEARER), and nothing but Bearer', async () => {
    const server = await start({ token: 's3cret' });
    for (const scheme of ['bearer', 'BEARER', 'Bearer', 'bEaReR']) {
      expect((await fetch(`${server.url}/schema`, { headers: { authorization: `${scheme} s3cret` } })).status, scheme).toBe(200);
      expect(await wsStatus(server.wsUrl, { authorization: `${scheme} s3cret` }), scheme).toBe(101);
    }
    expect((await fetch(`${server.url}/schema`, { headers: { authorization: 'Basic s3cret' } })).status).toBe(401);
    expect((await fetch(`${server.url}/schema`, { headers: { authorization: 'bearer wrong' } })).status).toBe(401);
  });

  it('the viewer page sets a cookie that authorizes its scripts and socket', async () => {
    const server = await start({ token: 'tok' });
    const page = await fetch(`${server.url}/?token=tok`);
    const cookie = page.headers.get('set-cookie')!;
    expect(cookie).toMatch(/^reactor_token=tok; HttpOnly; SameSite=Strict/);
    const jar = cookie.split(';')[0]!;
    expect((await fetch(`${server.url}/viewer/client/index.js`, { headers: { cookie: jar } })).status).toBe(200);
    expect(await wsStatus(server.wsUrl, { cookie: jar })).toBe(101);
  });
});

describe('server: allowed origins', () => {
  it('refuses a foreign browser origin by default (403) and accepts its own and non-browser clients', async () => {
    const server = await start();
    expect(await wsStatus(server.wsUrl, { origin: 'http://evil.example' })).toBe(403);
    expect(await wsStatus(server.wsUrl, { origin: server.url })).toBe(101);
    expect(await wsStatus(server.wsUrl)).toBe(101);
    expect((await fetch(`${server.url}/schema`, { headers: { origin: 'http://evil.example' } })).status).toBe(403);
  });

  it('accepts exactly the configured origins', async () => {
    const server = await start({ allowedOrigins: ['https://app.example'] });
    expect(await wsStatus(server.wsUrl, { origin: 'https://app.example' })).toBe(101);
    expect(await wsStatus(server.wsUrl, { origin: 'https://other.example' })).toBe(403);
    const c = await new RawClient(server.wsUrl, { origin: 'https://app.example' }).open();
    c.close();
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toMatch(/reactor_connections_rejected_total\{reason="origin"\} 1/);
  });
});

describe('server: origins compared by scheme, host and port', () => {
  it('accepts its own origin with the host in any case, and refuses another scheme or port', async () => {
    const server = await start();
    const port = server.port;
    expect(await wsStatus(server.wsUrl, { origin: `http://127.0.0.1:${port}` })).toBe(101);
    expect(await wsStatus(server.wsUrl, { origin: `HTTP://LOCALHOST:${port}`, host: `localhost:${port}` })).toBe(101);
    expect(await wsStatus(server.wsUrl, { origin: `http://LocalHost:${port}`, host: `localhost:${port}` })).toBe(101);
    // Same host name, other scheme or port: another origin.
    expect(await wsStatus(server.wsUrl, { origin: `https://127.0.0.1:${port}` })).toBe(403);
    expect(await wsStatus(server.wsUrl, { origin: `http://127.0.0.1:${port + 1}` })).toBe(403);
    expect(await wsStatus(server.wsUrl, { origin: 'http://127.0.0.1' })).toBe(403);
    expect((await fetch(`${server.url}/schema`, { headers: { origin: `https://127.0.0.1:${port}` } })).status).toBe(403);
    // Behind a TLS-terminating proxy that says so, the page's https origin is the server's own.
    expect(await wsStatus(server.wsUrl, { origin: `https://127.0.0.1:${port}`, 'x-forwarded-proto': 'https' })).toBe(101);
  });

  it('matches configured origins by scheme, host (any case) and port, default ports included', async () => {
    const server = await start({ allowedOrigins: ['https://App.Example', 'http://dev.example:5173'] });
    expect(await wsStatus(server.wsUrl, { origin: 'https://app.example' })).toBe(101);
    expect(await wsStatus(server.wsUrl, { origin: 'https://APP.EXAMPLE:443' })).toBe(101);
    expect(await wsStatus(server.wsUrl, { origin: 'http://app.example' })).toBe(403);
    expect(await wsStatus(server.wsUrl, { origin: 'https://app.example:8443' })).toBe(403);
    expect(await wsStatus(server.wsUrl, { origin: 'http://dev.example:5173' })).toBe(101);
    expect(await wsStatus(server.wsUrl, { origin: 'http://dev.example' })).toBe(403);
    expect(await wsStatus(server.wsUrl, { origin: 'null' })).toBe(403);
  });
});

describe('server: options', () => {
  it('rejects bad options before listening, naming the option', async () => {
    await expect(serve(patternApp(), { port: -1 })).rejects.toThrow('options.port must be an integer from 0 to 65535, got -1');
    await expect(serve(patternApp(), { encoding: 'png' as 'jpeg' })).rejects.toThrow('options.encoding must be "jpeg" or "rgb"');
    await expect(serve(patternApp(), { token: '' })).rejects.toThrow(/options.token must be a non-empty string/);
  });
});
