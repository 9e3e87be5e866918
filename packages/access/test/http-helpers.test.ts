import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ROUTER_ANSWER, RouteTable, oneOfParam, parseTarget, readBody, sendError, sendJson, wholeNumberParam } from '../src/index.js';

let server: Server | undefined;
afterEach(async () => {
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = undefined;
});

/** Serves `handler` on an ephemeral loopback port and sends one request. */
async function exchange(
  handler: (req: IncomingMessage, res: ServerResponse) => void | Promise<void>,
  method = 'GET',
  body?: string,
): Promise<{ status: number; headers: IncomingMessage['headers']; body: string }> {
  server = createServer((req, res) => void handler(req, res));
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method, path: '/x' }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(parts).toString('utf8') }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('the HTTP helpers the server and the router share', () => {
  it('writes the error envelope with the server headers by default and the router headers on request', async () => {
    const a = await exchange((_req, res) => sendError(res, 404, 'not_found', 'nothing here'));
    expect(a.status).toBe(404);
    expect(JSON.parse(a.body)).toEqual({ error: { code: 'not_found', message: 'nothing here' } });
    expect(a.headers['x-content-type-options']).toBe('nosniff');
    expect(a.headers['cache-control']).toBeUndefined();
    const b = await exchange((_req, res) => sendError(res, 429, 'no_free_instance', 'busy', ROUTER_ANSWER, { retryAfterS: 5 }));
    expect(b.body).toBe('{"error":{"code":"no_free_instance","message":"busy"},"retryAfterS":5}');
    expect(b.headers['cache-control']).toBe('no-store');
    expect(b.headers['content-length']).toBe(String(Buffer.byteLength(b.body)));
    expect(b.headers['x-content-type-options']).toBeUndefined();
  });

  it("reads a body up to its limit and refuses a larger one with the caller's error", async () => {
    const ok = await exchange(async (req, res) => sendJson(res, 200, { got: await readBody(req, 8, () => new Error('too big')) }), 'POST', '12345678');
    expect(JSON.parse(ok.body)).toEqual({ got: '12345678' });
    const big = await exchange(
      (req, res) =>
        readBody(req, 8, () => new Error('too big')).then(
          () => sendJson(res, 200, {}),
          (err: Error) => sendError(res, 400, 'bad_request', err.message),
        ),
      'POST',
      '123456789',
    );
    expect(big.status).toBe(400);
    expect(JSON.parse(big.body)).toEqual({ error: { code: 'bad_request', message: 'too big' } });
  });

  it('parses targets and query values', () => {
    expect(parseTarget('//')).toBeNull();
    const url = parseTarget('/sessions?wait=12&role=spectator&bad=1x')!;
    expect(wholeNumberParam(url, 'wait')).toBe(12);
    expect(wholeNumberParam(url, 'bad')).toBeNaN();
    expect(wholeNumberParam(url, 'none')).toBeUndefined();
    expect(oneOfParam(url, 'role', ['controller', 'spectator'], 'controller')).toBe('spectator');
    expect(oneOfParam(url, 'nope', ['controller', 'spectator'], 'controller')).toBe('controller');
    expect(oneOfParam(parseTarget('/?role=admin')!, 'role', ['controller', 'spectator'], 'controller')).toBeUndefined();
  });

  it('matches routes in order, with the pattern groups and whether the method is answered', () => {
    const table = new RouteTable<string>([
      { methods: ['GET', 'HEAD'], path: '/schema', handler: 'schema' },
      { methods: ['DELETE'], path: /^\/sessions\/([^/]+)$/, handler: 'release' },
      { methods: '*', path: /^\/uploads(?:$|\/)/, handler: 'uploads' },
    ]);
    expect(table.match('GET', '/schema')).toMatchObject({ route: { handler: 'schema' }, params: [], allowed: true });
    expect(table.match('POST', '/schema')?.allowed).toBe(false);
    expect(table.match('DELETE', '/sessions/abc')).toMatchObject({ route: { handler: 'release' }, params: ['abc'], allowed: true });
    expect(table.match('PUT', '/uploads/1')?.allowed).toBe(true);
    expect(table.match('GET', '/uploadsX')).toBeUndefined();
    expect(table.match('GET', '/nothing')).toBeUndefined();
  });
});
