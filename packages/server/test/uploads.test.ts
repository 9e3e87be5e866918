/**
 * The upload routes end to end: a real server on port 0, real HTTP requests (fetch, and raw
 * `node:http` requests for bodies that lie or break off), real files under a per-test folder.
 * After every refused upload: the session still streams and no file is left behind.
 */
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { decodeFrame, type ErrorMessage, type ReplyMessage, type UploadInfo, type UploadTicket } from '@reactor/client';
import { mintToken, type ReactorServer, serve, type ServeOptions } from '../src/index.js';
import { quiet, useCleanups } from './fixtures/cleanups.js';
import { RawClient } from './fixtures/net.js';
import { UploadApp } from './fixtures/upload-app.js';

const cleanups = useCleanups();

interface Served {
  server: ReactorServer;
  dir: string;
  /** A connected client in a streaming session. */
  client: RawClient;
  clientId: string;
}

async function start(opts: ServeOptions = {}, connect = true): Promise<Served> {
  const dir = mkdtempSync(join(tmpdir(), 'upl-server-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const server = await serve(UploadApp, { port: 0, gracePeriodMs: 0, logger: quiet, uploadDir: dir, ...opts });
  cleanups.push(() => server.close());
  await server.loaded;
  if (!connect) return { server, dir, client: undefined as unknown as RawClient, clientId: '' };
  const client = await new RawClient(server.wsUrl, opts.token ? { headers: { authorization: `Bearer ${opts.token}` } } : {}).open();
  cleanups.push(() => client.close());
  const welcome = await client.waitFor<{ type: 'welcome'; clientId: string } & ReplyMessage>((m) => m.type === 'welcome');
  await client.waitFor((m) => m.type === 'session' && m.session.state === 'streaming');
  return { server, dir, client, clientId: (welcome as unknown as { clientId: string }).clientId };
}

/** Every file (not folder) under `dir`, by name. */
function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) out.push(...filesUnder(p));
    else out.push(e);
  }
  return out;
}

/** The session goes on (more frames arrive) and only the stored uploads `kept` are on disk. */
async function stillHealthy(s: Served, kept: string[] = []): Promise<void> {
  const seen = s.client.binaries.length;
  await expect.poll(() => s.client.binaries.length, { timeout: 10_000 }).toBeGreaterThan(seen + 2);
  expect(s.client.closeCode).toBeUndefined();
  expect(filesUnder(s.dir).sort()).toEqual([...kept].sort());
}

async function announce(s: Served, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; json: unknown }> {
  const res = await fetch(`${s.server.url}/uploads`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

async function ticket(s: Served, name: string, size: number): Promise<UploadTicket> {
  const r = await announce(s, { name, size, clientId: s.clientId });
  expect(r.status).toBe(201);
  return r.json as UploadTicket;
}

interface RawAnswer {
  status?: number;
  json?: { error?: { code: string; message: string } } & Partial<UploadInfo>;
  error?: string;
}

/**
 * A raw `PUT`: `chunks` written one by one (chunked transfer unless `content-length` is given),
 * `abortAfter` destroys the socket after that many chunks (a client that breaks off).
 */
function put(
  s: Served,
  path: string,
  chunks: Buffer[],
  opts: { headers?: Record<string, string>; abortAfter?: number; method?: string } = {},
): Promise<RawAnswer> {
  return new Promise((resolve) => {
    const req = request(`${s.server.url}${path}`, { method: opts.method ?? 'PUT', headers: opts.headers ?? {} });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, json: body ? (JSON.parse(body) as RawAnswer['json']) : undefined }));
      res.on('error', (e) => resolve({ status: res.statusCode!, error: e.message }));
    });
    req.on('error', (e) => resolve({ error: e.message }));
    let i = 0;
    const pump = (): void => {
      while (i < chunks.length) {
        if (opts.abortAfter !== undefined && i === opts.abortAfter) {
          // The chunks written so far go out; then the connection breaks off mid-body.
          setImmediate(() => req.destroy());
          return;
        }
        const ok = req.write(chunks[i++]!);
        if (!ok) return void req.once('drain', pump);
      }
      req.end();
    };
    pump();
  });
}

async function png(width: number, height: number, rgb: [number, number, number]): Promise<Buffer> {
  return sharp({ create: { width, height, channels: 3, background: { r: rgb[0], g: rgb[1], b: rgb[2] } } })
    .png()
    .toBuffer();
}

/** `size` bytes that start like a PNG (the sniffer reads the first bytes only). */
function pngLike(size: number): Buffer {
  const b = Buffer.alloc(size, 7);
  b.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  return b;
}

function split(b: Buffer, n: number): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 0; i < b.length; i += n) out.push(b.subarray(i, i + n));
  return out;
}

async function metric(s: Served, line: string): Promise<string | undefined> {
  const text = await (await fetch(`${s.server.url}/metrics`)).text();
  return text.split('\n').find((l) => l.startsWith(line));
}

describe('uploads: the happy path', () => {
  it('announces, stores the bytes typed from the bytes, runs @fileUploaded with the uploader, and a command uses the picture', async () => {
    const s = await start({ encoding: 'rgb' });
    const red = await png(8, 4, [200, 30, 30]);
    const t = await ticket(s, 'red.png', red.length);
    expect(t).toEqual({ uploadId: expect.stringMatching(/^[0-9a-f-]{36}$/), url: `/uploads/${t.uploadId}`, expiresInMs: 60_000 });
    // The Content-Type claims JPEG; the bytes are a PNG and the server keeps what they are.
    const res = await fetch(`${s.server.url}${t.url}`, { method: 'PUT', headers: { 'content-type': 'image/jpeg' }, body: red });
    expect(res.status).toBe(200);
    expect(res.headers.get('access-control-allow-origin')).toBeNull();
    const info = (await res.json()) as UploadInfo;
    expect(info).toEqual({ uploadId: t.uploadId, name: 'red.png', mimeType: 'image/png', size: red.length });
    const heard = await s.client.waitFor((m) => m.type === 'message' && m.name === 'file_received');
    expect(heard).toMatchObject({ data: { name: 'red.png', mime_type: 'image/png', size: red.length, by: s.clientId } });

    expect(await s.client.command('1', 'set_image', { image: { uploadId: t.uploadId }, prompt: 'a red room' })).toEqual({
      type: 'reply',
      id: '1',
      result: { width: 8, height: 4, name: 'red.png', mimeType: 'image/png' },
    });
    // The picture steers the stream: frames turn the picture's colour.
    await expect.poll(() => [...decodeFrame(s.client.binaries.at(-1)!).payload.subarray(0, 3)], { timeout: 10_000 }).toEqual([200, 30, 30]);
    expect(await s.client.command('2', 'set_picture', { picture: { uploadId: t.uploadId } })).toEqual({ type: 'reply', id: '2' });
    const state = await s.client.waitFor((m) => m.type === 'state' && (m.state as { picture: unknown }).picture !== null);
    expect(state).toMatchObject({ state: { prompt: 'a red room', picture: info } });
    expect(await metric(s, 'reactor_uploads_total{outcome="stored"}')).toBe('reactor_uploads_total{outcome="stored"} 1');
    expect(await metric(s, 'reactor_upload_bytes_total')).toBe(`reactor_upload_bytes_total ${red.length}`);
    await stillHealthy(s, [t.uploadId]);
  });

  it('the schema shows upload fields as references with an x-reactor-upload marker', async () => {
    const s = await start({}, false);
    const schema = (await (await fetch(`${s.server.url}/schema`)).json()) as {
      commands: Array<{ name: string; params: { properties: Record<string, unknown> } }>;
    };
    const setImage = schema.commands.find((c) => c.name === 'set_image')!;
    expect(setImage.params.properties.image).toEqual({
      type: 'object',
      properties: { uploadId: { type: 'string' } },
      required: ['uploadId'],
      additionalProperties: false,
      description: 'The start picture.',
      'x-reactor-upload': { mimeTypes: ['image/png', 'image/jpeg'] },
    });
  });
});

describe('uploads: bad input', () => {
  it('refuses an announced size over maxUploadBytes (413 upload_too_large)', async () => {
    const s = await start({ maxUploadBytes: 1000 });
    const r = await announce(s, { name: 'big.png', size: 1001 });
    expect(r).toEqual({
      status: 413,
      json: { error: { code: 'upload_too_large', message: 'the file is 1001 bytes; this server takes at most 1000 bytes per upload' } },
    });
    await stillHealthy(s);
  });

  it("holds an upload that names its field (command, field) to the field's maxBytes at POST and its types from the first bytes (the client's upload() and the viewer name it)", async () => {
    const s = await start({ maxUploadBytes: 10_000_000, uploadQuotaBytes: 20_000_000 });
    // set_picture's field takes at most PICTURE_MAX_BYTES (1 MB): a 2 MB file is refused before a byte is sent.
    const big = await announce(s, { name: 'big.png', size: 2_000_000, command: 'set_picture' });
    expect(big).toEqual({
      status: 413,
      json: {
        error: {
          code: 'upload_too_large',
          message: "the file is 2000000 bytes; set_picture.picture takes files of at most 1000000 bytes (the schema's x-reactor-upload maxBytes)",
        },
      },
    });
    // set_image.image takes PNG or JPEG: a PDF is refused once its first bytes are read, and nothing is kept.
    const pdf = Buffer.concat([Buffer.from('%PDF-1.7\n'), Buffer.alloc(300_000, 32)]);
    const r = await announce(s, { name: 'doc.png', size: pdf.length, command: 'set_image', field: 'image' });
    expect(r.status).toBe(201);
    const answer = await put(s, (r.json as UploadTicket).url, split(pdf, 16_384));
    expect([answer.status, answer.json?.error?.code]).toEqual([415, 'upload_type_not_allowed']);
    expect(answer.json?.error?.message).toBe(
      'the bytes are application/pdf (read from the file itself); set_image.image takes image/png, image/jpeg; nothing more was read',
    );
    const unknown = await announce(s, { name: 'x.png', size: 10, command: 'set_prompt' });
    expect([unknown.status, (unknown.json as { error: { code: string } }).error.code]).toEqual([400, 'upload_invalid_request']);
    await stillHealthy(s);
  });

  it('stops reading a body that streams past the per-file limit (413) or past its announced size (400), and keeps nothing', async () => {
    const s = await start({ maxUploadBytes: 100_000 });
    const t = await ticket(s, 'a.png', 100_000);
    const over = await put(s, t.url, split(pngLike(400_000), 16_384));
    expect(over.status).toBe(413);
    expect(over.json?.error?.code).toBe('upload_too_large');
    const t2 = await ticket(s, 'b.png', 50_000);
    const longer = await put(s, t2.url, split(pngLike(80_000), 16_384));
    expect([longer.status, longer.json?.error?.code]).toEqual([400, 'upload_length_mismatch']);
    // A Content-Length that disagrees is refused before a byte is read.
    const t3 = await ticket(s, 'c.png', 50_000);
    const lying = await put(s, t3.url, [pngLike(60_000)], { headers: { 'content-length': '60000' } });
    expect([lying.status, lying.json?.error?.code]).toEqual([400, 'upload_length_mismatch']);
    expect(await metric(s, 'reactor_uploads_total{outcome="upload_too_large"}')).toBe('reactor_uploads_total{outcome="upload_too_large"} 1');
    await stillHealthy(s);
  });

  it("refuses an announcement over the session's quota (413 upload_quota_exceeded)", async () => {
    const s = await start({ maxUploadBytes: 2000, uploadQuotaBytes: 3000 });
    const t = await ticket(s, 'one.png', 2000);
    expect((await put(s, t.url, [pngLike(2000)])).status).toBe(200);
    const r = await announce(s, { name: 'two.png', size: 1500 });
    expect(r.status).toBe(413);
    expect(r.json).toMatchObject({ error: { code: 'upload_quota_exceeded' } });
    expect((r.json as { error: { message: string } }).error.message).toContain('over its quota of 3000 bytes (2000 in use)');
    await stillHealthy(s, [t.uploadId]);
  });

  it('types the file from its bytes: text claiming image/png is refused (415); a PDF claiming PNG is kept as a PDF and an image field rejects it', async () => {
    const s = await start();
    const text = Buffer.from('#!/bin/sh\necho not a picture\n'.repeat(10));
    const t = await ticket(s, 'cat.png', text.length);
    const r = await put(s, t.url, [text], { headers: { 'content-type': 'image/png' } });
    expect([r.status, r.json?.error?.code]).toEqual([415, 'upload_type_not_allowed']);
    const pdf = Buffer.concat([Buffer.from('%PDF-1.7\n'), Buffer.alloc(200, 32)]);
    const t2 = await ticket(s, 'photo.png', pdf.length);
    const stored = await put(s, t2.url, [pdf], { headers: { 'content-type': 'image/png' } });
    expect([stored.status, stored.json?.mimeType]).toEqual([200, 'application/pdf']);
    expect(await s.client.command('1', 'set_image', { image: { uploadId: t2.uploadId } })).toEqual({
      type: 'error',
      id: '1',
      code: 'upload_rejected',
      message: 'image takes image/png, image/jpeg; upload "photo.png" is application/pdf',
    });
    await stillHealthy(s, [t2.uploadId]);
  });

  it('forgets a body the client breaks off, and deletes what arrived', async () => {
    const s = await start();
    const t = await ticket(s, 'half.png', 200_000);
    const r = await put(s, t.url, split(pngLike(200_000), 10_000), { headers: { 'content-length': '200000' }, abortAfter: 5 });
    expect(r.error).toBeDefined();
    await expect
      .poll(() => metric(s, 'reactor_uploads_total{outcome="upload_length_mismatch"}'))
      .toBe('reactor_uploads_total{outcome="upload_length_mismatch"} 1');
    expect(await put(s, t.url, [pngLike(200_000)])).toMatchObject({ status: 404, json: { error: { code: 'upload_not_found' } } });
    await stillHealthy(s);
  });

  it('answers 404 for an unknown id and for an announcement that expired unwritten; a command waiting for it is told why', async () => {
    const s = await start({ uploadExpiryMs: 200 });
    expect(await put(s, '/uploads/not-an-id', [pngLike(10)])).toMatchObject({ status: 404, json: { error: { code: 'upload_not_found' } } });
    expect(await put(s, '/uploads/..%2F..%2Fetc%2Fpasswd', [pngLike(10)])).toMatchObject({ status: 404, json: { error: { code: 'upload_not_found' } } });
    const t = await ticket(s, 'late.png', 10);
    // The command waits for the bytes; the expiry ends the wait.
    expect(await s.client.command('1', 'set_image', { image: { uploadId: t.uploadId } })).toMatchObject({
      type: 'error',
      code: 'unresolved_upload',
      message: `image: upload ${t.uploadId} expired: its bytes were not sent within 200 ms of the announcement`,
    });
    expect(await put(s, t.url, [pngLike(10)])).toMatchObject({ status: 404, json: { error: { code: 'upload_not_found' } } });
    await stillHealthy(s);
  });

  it('refuses a second PUT of the same upload (409 upload_already_written)', async () => {
    const s = await start();
    const t = await ticket(s, 'once.png', 100);
    expect((await put(s, t.url, [pngLike(100)])).status).toBe(200);
    expect(await put(s, t.url, [pngLike(100)])).toMatchObject({ status: 409, json: { error: { code: 'upload_already_written' } } });
    await stillHealthy(s, [t.uploadId]);
  });

  it('never uses the name as a path: "../" names are stored under the upload id and only displayed', async () => {
    const s = await start();
    const name = '../../../../tmp/evil.png';
    const t = await ticket(s, name, 100);
    const r = await put(s, t.url, [pngLike(100)]);
    expect(r).toMatchObject({ status: 200, json: { name, uploadId: t.uploadId } });
    const [folder] = readdirSync(s.dir);
    expect(readdirSync(join(s.dir, folder!))).toEqual([t.uploadId]);
    await stillHealthy(s, [t.uploadId]);
  });

  it('refuses an upload when no session exists (409 upload_no_session), and malformed announcements (400)', async () => {
    const s = await start({}, false);
    const r = await announce(s, { name: 'a.png', size: 10 });
    expect(r).toMatchObject({ status: 409, json: { error: { code: 'upload_no_session' } } });
    const live = await start();
    for (const body of [{ size: 10 }, { name: 'a', size: 0 }, { name: 'a', size: 10, path: '/etc/passwd' }, 'x'.repeat(5000)]) {
      const bad = await announce(live, body);
      expect([bad.status, (bad.json as { error: { code: string } }).error.code], JSON.stringify(body).slice(0, 40)).toEqual([400, 'upload_invalid_request']);
    }
    const notJson = await fetch(`${live.server.url}/uploads`, { method: 'POST', body: 'name=a&size=10' });
    expect([notJson.status, ((await notJson.json()) as { error: { code: string } }).error.code]).toEqual([400, 'upload_invalid_request']);
    expect(filesUnder(s.dir)).toEqual([]);
    await stillHealthy(live);
  });

  it('answers unresolved_upload when the bytes do not arrive within uploadWaitMs, and the session streams on', async () => {
    const s = await start({ uploadWaitMs: 300 });
    const t = await ticket(s, 'never.png', 100);
    const t0 = performance.now();
    const answer = (await s.client.command('1', 'set_image', { image: { uploadId: t.uploadId } })) as ErrorMessage;
    expect(performance.now() - t0).toBeGreaterThanOrEqual(290);
    expect(answer).toEqual({
      type: 'error',
      id: '1',
      code: 'unresolved_upload',
      message: `image: the bytes of upload ${t.uploadId} did not arrive within 300 ms; PUT them to /uploads/${t.uploadId} before sending the command`,
    });
    // The wait did not hold the step loop: frames kept coming while the command waited.
    await stillHealthy(s);
  });
});

describe('uploads: access', () => {
  it('takes the same token, Host and Origin checks as every route, opens no CORS, and takes only POST and PUT', async () => {
    const s = await start({ token: 'upload-secret-token' });
    const auth = { authorization: 'Bearer upload-secret-token' };
    expect((await announce(s, { name: 'a.png', size: 10 })).status).toBe(401);
    expect((await announce(s, { name: 'a.png', size: 10 }, { ...auth, origin: 'http://evil.example' })).status).toBe(403);
    // fetch() cannot set Host: a raw request does (DNS rebinding).
    const rebound = await put(s, '/uploads', [Buffer.from(JSON.stringify({ name: 'a.png', size: 10 }))], {
      method: 'POST',
      headers: { ...auth, host: 'evil.example' },
    });
    expect([rebound.status, rebound.json?.error?.code]).toEqual([403, 'host_not_allowed']);
    const ok = await announce(s, { name: 'a.png', size: 10 }, { ...auth, origin: s.server.url });
    expect(ok.status).toBe(201);
    const t = ok.json as UploadTicket;
    expect((await put(s, t.url, [pngLike(10)])).status).toBe(401);
    expect((await put(s, t.url, [pngLike(10)], { headers: { ...auth, origin: 'http://evil.example' } })).status).toBe(403);
    const preflight = await fetch(`${s.server.url}/uploads`, { method: 'OPTIONS', headers: { ...auth, origin: 'http://evil.example' } });
    expect(preflight.status).toBe(405);
    expect(preflight.headers.get('access-control-allow-origin')).toBeNull();
    expect((await fetch(`${s.server.url}/uploads`, { headers: auth })).status).toBe(405);
    expect(await put(s, t.url, [pngLike(10)], { headers: auth })).toMatchObject({ status: 200, json: { uploadId: t.uploadId } });
    await stillHealthy(s, [t.uploadId]);
  });

  it("refuses a spectator's set_image naming an upload whose bytes are still arriving with forbidden_role at once, not after the upload wait", async () => {
    const secret = 'an-upload-roles-test-hmac-secret-0123456789';
    // A wait far longer than the answer's own wait below: an answer only after it would fail the test.
    const s = await start({ auth: { secret }, uploadWaitMs: 600_000 }, false);
    const steerToken = await mintToken({ secret }, { ttlS: 600 });
    const steer = await new RawClient(s.server.wsUrl, { headers: { authorization: `Bearer ${steerToken}` } }).open();
    cleanups.push(() => steer.close());
    const steerId = (await steer.waitFor<{ type: 'welcome'; clientId: string } & ReplyMessage>((m) => m.type === 'welcome')) as unknown as { clientId: string };
    await steer.waitFor((m) => m.type === 'session' && m.session.state === 'streaming');
    const viewer = await new RawClient(s.server.wsUrl, {
      headers: { authorization: `Bearer ${await mintToken({ secret }, { role: 'spectator', ttlS: 600 })}` },
    }).open();
    cleanups.push(() => viewer.close());
    // The controller announces a picture and sends none of its bytes yet.
    const announced = await announce(s, { name: 'a.png', size: 10, clientId: steerId.clientId }, { authorization: `Bearer ${steerToken}` });
    expect(announced.status).toBe(201);
    const { uploadId } = announced.json as UploadTicket;
    const answer = (await viewer.command('v1', 'set_image', { image: { uploadId }, prompt: 'x' })) as ErrorMessage;
    expect(answer).toMatchObject({ type: 'error', code: 'forbidden_role' });
    expect(answer.message).toMatch(/command set_image: your role "spectator" may not/);
  });
});

describe('uploads: cleanup', () => {
  it("deletes a session's files when it ends, and everything when the server closes mid-upload", async () => {
    const s = await start();
    const t = await ticket(s, 'a.png', 100);
    await put(s, t.url, [pngLike(100)]);
    expect(filesUnder(s.dir)).toEqual([t.uploadId]);
    s.client.close();
    await expect.poll(() => readdirSync(s.dir)).toEqual([]);
    // A new session, an upload half sent, then the server closes.
    const c2 = await new RawClient(s.server.wsUrl).open();
    await c2.waitFor((m) => m.type === 'session' && m.session.state === 'streaming');
    const s2 = { ...s, client: c2 };
    const t2 = await ticket({ ...s2, clientId: '' }, 'b.png', 1_000_000);
    const half = put(s2, t2.url, split(pngLike(500_000), 50_000), { headers: { 'content-length': '1000000' } });
    await expect.poll(() => filesUnder(s.dir).length).toBe(1);
    await s.server.close();
    expect((await half).status ?? 'cut').not.toBe(200);
    expect(readdirSync(s.dir)).toEqual([]);
  });
});
