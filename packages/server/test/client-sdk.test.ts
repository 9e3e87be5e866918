import { once } from 'node:events';
import type { AddressInfo, Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer, type WebSocket as WsSocket } from 'ws';
import { CommandTimeoutError, ConnectionError, connect, toWebSocketUrl, type ConnectionStatus } from '@reactor/client';
import { until } from '@reactor/test-kit';
import { usePatternServers } from './pattern-servers.js';

const { start, cleanups } = usePatternServers();

describe('@reactor/client against a real server', () => {
  it('iterates frames with an async iterator until aborted', async () => {
    const server = await start();
    const client = await connect(server.url, { WebSocket, reconnect: false });
    cleanups.push(() => client.close());
    const ac = new AbortController();
    const seqs: number[] = [];
    for await (const f of client.frames({ signal: ac.signal })) {
      seqs.push(f.seq);
      if (seqs.length === 5) ac.abort();
    }
    expect(seqs).toHaveLength(5);
    expect([...seqs].sort((a, b) => a - b)).toEqual(seqs);
  });

  it('reconnects with back-off after the server goes away and re-joins', async () => {
    const first = await start();
    const port = first.port;
    const client = await connect(first.url, { WebSocket, reconnect: { initialDelayMs: 50, maxDelayMs: 200 } });
    cleanups.push(() => client.close());
    const statuses: ConnectionStatus[] = [];
    client.on('status', (s) => statuses.push(s));
    const oldId = client.clientId;
    await first.close();
    await until(() => statuses.some((s) => s.state === 'reconnecting' && (s.attempt ?? 0) >= 2), 'two reconnect attempts', 5000);
    // The same address comes back (the port the OS gave the first server).
    const second = await start({ port });
    await until(() => client.connectionState === 'open', 'the client to re-join', 10_000);
    expect(client.clientId).not.toBe(oldId);
    expect(client.session.sessionId).toBeDefined();
    await expect(client.send('set_speed', { speed: 1 })).resolves.toBeUndefined();
    expect(statuses[0]).toMatchObject({ state: 'reconnecting', attempt: 1 });
    expect(statuses.at(-1)).toEqual({ state: 'open' });
    await second.close();
  });

  it('rejects pending and new commands clearly, honours timeouts and AbortSignal', async () => {
    const server = await start();
    const client = await connect(server.url, { WebSocket, reconnect: false });
    const ac = new AbortController();
    const aborted = client.send('set_speed', { speed: 1 }, { signal: ac.signal });
    ac.abort(new Error('user gave up'));
    await expect(aborted).rejects.toThrow('user gave up');
    await expect(client.send('set_speed', { speed: 1 }, { timeoutMs: 1 })).rejects.toBeInstanceOf(CommandTimeoutError);
    client.close();
    const err = await client.send('set_speed', { speed: 1 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectionError);
    expect((err as ConnectionError).code).toBe('not_connected');
  });

  it('aborts the initial connection with the signal', async () => {
    const server = await start();
    const ac = new AbortController();
    ac.abort(new Error('never mind'));
    await expect(connect(server.url, { WebSocket, signal: ac.signal })).rejects.toThrow('never mind');
  });

  it('builds WebSocket URLs from base URLs', () => {
    expect(toWebSocketUrl('http://127.0.0.1:8080')).toBe('ws://127.0.0.1:8080/ws');
    expect(toWebSocketUrl('https://h.example/app/', 'a b')).toBe('wss://h.example/app/ws?token=a+b');
    expect(toWebSocketUrl('ws://h:1/ws')).toBe('ws://h:1/ws');
    expect(() => toWebSocketUrl('ftp://h')).toThrow('url must be http(s):// or ws(s)://');
  });
});

describe('@reactor/client: app messages in the same read as the welcome', () => {
  /**
   * A server that writes its welcome and three app messages in one TCP write (the client reads
   * them at once, before `connect()` resolves), and one more message when asked.
   */
  async function corkedServer(welcome: string): Promise<{ url: string; later(): void; close(): Promise<void> }> {
    const wss = new WebSocketServer({ port: 0 });
    await once(wss, 'listening');
    const sockets: WsSocket[] = [];
    wss.on('connection', (ws) => {
      sockets.push(ws);
      const raw = (ws as unknown as { _socket: Socket })._socket;
      raw.cork();
      ws.send(welcome);
      for (const name of ['a', 'b', 'c']) ws.send(JSON.stringify({ type: 'message', name, data: { name } }));
      process.nextTick(() => raw.uncork());
    });
    return {
      url: `http://127.0.0.1:${(wss.address() as AddressInfo).port}`,
      later: () => sockets.forEach((ws) => ws.send(JSON.stringify({ type: 'message', name: 'later', data: null }))),
      close: () => new Promise<void>((r) => wss.close(() => r())),
    };
  }

  it('gives them to the first message listener attached after `await connect()`, in order; a listener a moment later gets only new ones', async () => {
    // A real welcome, taken from a real server.
    const real = await start();
    const raw = new WebSocket(real.wsUrl);
    const [data] = (await once(raw, 'message')) as [Buffer];
    raw.close();
    const fake = await corkedServer(data.toString());
    cleanups.push(() => fake.close());

    const client = await connect(fake.url, { WebSocket, reconnect: false, stats: false });
    cleanups.push(() => client.close());
    const first: string[] = [];
    client.on('message', (m) => first.push(m.name));
    const iterated: string[] = [];
    const it = client.messages();
    await until(() => first.length >= 3, 'the three early messages', 5000);
    expect(first).toEqual(['a', 'b', 'c']);

    // The window has closed: a listener added later starts with what comes after it.
    await new Promise((r) => setTimeout(r, 20));
    const late: string[] = [];
    client.on('message', (m) => late.push(m.name));
    fake.later();
    await until(() => late.length >= 1 && first.length >= 4, 'the later message', 5000);
    expect(late).toEqual(['later']);
    expect(first).toEqual(['a', 'b', 'c', 'later']);
    // The iterator made in the same tick as the first listener saw the early ones too.
    for await (const m of it) {
      iterated.push(m.name);
      if (iterated.length === 4) break;
    }
    expect(iterated).toEqual(['a', 'b', 'c', 'later']);
  });
});
