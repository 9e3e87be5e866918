import 'reflect-metadata';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IsString, MaxLength } from 'class-validator';
import { afterEach, describe, expect, it } from 'vitest';
import {
  type Client,
  DecoratorMisuseError,
  event,
  fileUploaded,
  InputField,
  InputState,
  ReactorApp,
  reactorApp,
  UploadedFile,
  UploadError,
  UploadField,
} from '../../src/index.js';
import { describeApp } from '../../src/internal.js';
import { command, RecordingSink, useHosts } from '../../src/testing.js';

/** The smallest valid PNG header and JPEG header (what the sniffer reads), padded to a size. */
const PNG = Uint8Array.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
const PDF = new TextEncoder().encode('%PDF-1.7\n');
function file(head: Uint8Array, size: number): Uint8Array {
  const out = new Uint8Array(size);
  out.set(head);
  for (let i = head.length; i < size; i++) out[i] = i & 255;
  return out;
}

/** A request body in chunks, as a transport hands it over. */
async function* chunks(bytes: Uint8Array, size = 1000): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < bytes.length; i += size) yield bytes.subarray(i, i + size);
}

class PictureState extends InputState {
  @InputField({ default: 'a forest' })
  @IsString()
  @MaxLength(100)
  prompt!: string;

  @UploadField({ maxBytes: 4000, mimeTypes: ['image/*'], description: 'A picture to start from.' })
  picture!: UploadedFile | null;
}

class SetImageParams {
  @UploadField({ mimeTypes: ['image/png'] })
  image!: UploadedFile;

  @InputField({ default: '' })
  @IsString()
  prompt!: string;
}

const heard: Array<{ file: UploadedFile; client: Client | undefined }> = [];

@reactorApp({ state: PictureState })
class PictureApp extends ReactorApp<PictureState> {
  generate(): null {
    return null;
  }

  @event({ name: 'set_image', params: SetImageParams })
  async setImage(p: SetImageParams): Promise<{ size: number; first: number; kind: string }> {
    const bytes = await p.image.bytes();
    return { size: bytes.byteLength, first: bytes[0]!, kind: p.image.mimeType };
  }

  @event({ name: 'picture_pixels' })
  async pixels(): Promise<{ width: number; height: number; bytes: number }> {
    const img = await this.state.picture!.image();
    return { width: img.width, height: img.height, bytes: img.data.byteLength };
  }

  @fileUploaded
  uploaded(f: UploadedFile, client?: Client): void {
    heard.push({ file: f, client });
  }
}

const start = useHosts(afterEach);
let parent: string | undefined;
afterEach(() => {
  heard.length = 0;
  if (parent !== undefined) rmSync(parent, { recursive: true, force: true });
  parent = undefined;
});

async function streaming(opts: { resolveWaitMs?: number; expiryMs?: number } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'upl-test-'));
  parent = dir;
  const host = start(PictureApp, { gracePeriodMs: 0, uploads: { dir, ...opts } });
  await host.load();
  const sink = new RecordingSink();
  const client = host.connect(sink);
  await sink.waitForSession('streaming');
  const clientId = (sink.ofType('welcome')[0] as { clientId: string }).clientId;
  return { host, sink, client, clientId, parent: dir };
}

describe('@UploadField in the schema', () => {
  it('shows a state field and a parameter as an upload reference with an x-reactor-upload marker; the state starts null', () => {
    const def = describeApp(PictureApp);
    const ref = { type: 'object', properties: { uploadId: { type: 'string' } }, required: ['uploadId'], additionalProperties: false };
    const setter = def.schema.commands.find((c) => c.name === 'set_picture')!;
    expect(setter.params).toEqual({
      type: 'object',
      additionalProperties: false,
      required: ['picture'],
      properties: { picture: { ...ref, description: 'A picture to start from.', 'x-reactor-upload': { maxBytes: 4000, mimeTypes: ['image/*'] } } },
    });
    const ev = def.schema.commands.find((c) => c.name === 'set_image')!;
    expect((ev.params.properties as Record<string, unknown>).image).toEqual({ ...ref, 'x-reactor-upload': { mimeTypes: ['image/png'] } });
    expect(ev.params.required).toEqual(['image']);
    expect(def.state.snapshot(def.state.createDefaults())).toEqual({ prompt: 'a forest', picture: null });
  });

  it('refuses bad options at decoration, naming the field', () => {
    const misuse = (fn: () => void): string => {
      try {
        fn();
      } catch (err) {
        expect(err).toBeInstanceOf(DecoratorMisuseError);
        return (err as Error).message;
      }
      throw new Error('accepted');
    };
    class A {}
    expect(misuse(() => UploadField({ maxBytes: 0 })(A.prototype, 'f'))).toMatchInlineSnapshot(
      `"@UploadField maxBytes must be a positive integer (bytes), got 0 (A.f)"`,
    );
    expect(misuse(() => UploadField({ mimeTypes: ['PNG'] })(A.prototype, 'g'))).toContain('mimeTypes must be a non-empty list');
    UploadField()(A.prototype, 'h');
    expect(misuse(() => InputField()(A.prototype, 'h'))).toMatchInlineSnapshot(
      `"@UploadField and @InputField on A.h: an upload field takes @UploadField alone (once)"`,
    );
  });
});

describe('uploads into a session', () => {
  it('stores the bytes, types them from the bytes, fires @fileUploaded with the uploader, and a setter publishes the reference', async () => {
    const { host, sink, client, clientId, parent } = await streaming();
    const ticket = host.uploads.announce({ name: '../../etc/passwd', size: 3000, mimeType: 'text/plain', clientId });
    expect(ticket).toEqual({ uploadId: expect.any(String), url: `/uploads/${ticket.uploadId}`, expiresInMs: 60_000 });
    const info = await host.uploads.write(ticket.uploadId, chunks(file(PNG, 3000)));
    expect(info).toEqual({ uploadId: ticket.uploadId, name: '../../etc/passwd', mimeType: 'image/png', size: 3000 });
    // The name is only displayed: the file is named by its id, in the session's folder.
    const [folder] = readdirSync(parent);
    expect(readdirSync(join(parent, folder!))).toEqual([ticket.uploadId]);
    await expect.poll(() => heard.length).toBe(1);
    expect(heard[0]!.file.name).toBe('../../etc/passwd');
    expect(heard[0]!.client?.id).toBe(clientId);

    const answer = await client.command(command('1', 'set_picture', { picture: { uploadId: ticket.uploadId } }));
    expect(answer).toEqual({ type: 'reply', id: '1' });
    expect(sink.ofType('state').at(-1)).toEqual({ type: 'state', state: { prompt: 'a forest', picture: info } });
  });

  it('hands an event the resolved file: its bytes, and its pixels through the host decoder', async () => {
    const { host, client } = await streaming();
    host.uploads.configure({ decodeImage: async () => ({ data: new Uint8Array(2 * 3 * 3), width: 2, height: 3 }) });
    const t = host.uploads.announce({ name: 'a.png', size: 100 });
    await host.uploads.write(t.uploadId, chunks(file(PNG, 100), 7));
    expect(await client.command(command('1', 'set_image', { image: { uploadId: t.uploadId } }))).toEqual({
      type: 'reply',
      id: '1',
      result: { size: 100, first: 0x89, kind: 'image/png' },
    });
    await client.command(command('2', 'set_picture', { picture: { uploadId: t.uploadId } }));
    expect(await client.command(command('3', 'picture_pixels'))).toEqual({ type: 'reply', id: '3', result: { width: 2, height: 3, bytes: 18 } });
  });

  it('a command waits for bytes still arriving, and the client’s later commands stay behind it', async () => {
    const { host, client } = await streaming();
    const t = host.uploads.announce({ name: 'late.png', size: 100 });
    const first = client.command(command('1', 'set_image', { image: { uploadId: t.uploadId } }));
    const second = client.command(command('2', 'set_prompt', { prompt: 'after' }));
    const order: string[] = [];
    void first.then(() => order.push('1'));
    void second.then(() => order.push('2'));
    await host.uploads.write(t.uploadId, chunks(file(PNG, 100)));
    expect(await first).toMatchObject({ type: 'reply', id: '1' });
    expect(await second).toEqual({ type: 'reply', id: '2' });
    expect(order).toEqual(['1', '2']);
  });

  it('answers unresolved_upload for an unknown id at once and for bytes that never come after the wait', async () => {
    const { host, client } = await streaming({ resolveWaitMs: 100 });
    expect(await client.command(command('1', 'set_image', { image: { uploadId: 'nope' } }))).toMatchObject({
      type: 'error',
      code: 'unresolved_upload',
      message: expect.stringContaining('image: no upload "nope" in this session'),
    });
    host.uploads.announce({ name: 'x.png', size: 10 });
    const t = host.uploads.announce({ name: 'never.png', size: 10 });
    const t0 = performance.now();
    const answer = await client.command(command('2', 'set_image', { image: { uploadId: t.uploadId } }));
    expect(answer).toMatchObject({ type: 'error', code: 'unresolved_upload', message: expect.stringContaining('did not arrive within 100 ms') });
    expect(performance.now() - t0).toBeGreaterThanOrEqual(90);
  });

  it('answers upload_rejected for a file the field does not take, invalid_params for a malformed reference', async () => {
    const { host, client } = await streaming();
    const pdf = host.uploads.announce({ name: 'doc.pdf', size: 50 });
    await host.uploads.write(pdf.uploadId, chunks(file(PDF, 50)));
    expect(await client.command(command('1', 'set_image', { image: { uploadId: pdf.uploadId } }))).toMatchObject({
      code: 'upload_rejected',
      message: 'image takes image/png; upload "doc.pdf" is application/pdf',
    });
    const big = host.uploads.announce({ name: 'big.png', size: 5000 });
    await host.uploads.write(big.uploadId, chunks(file(PNG, 5000)));
    expect(await client.command(command('2', 'set_picture', { picture: { uploadId: big.uploadId } }))).toMatchObject({
      code: 'upload_rejected',
      message: 'picture takes files of at most 4000 bytes; upload "big.png" has 5000',
    });
    expect(await client.command(command('3', 'set_picture', { picture: 'big.png' }))).toMatchObject({
      code: 'invalid_params',
      details: [{ field: 'picture', constraint: 'isUploadRef' }],
    });
  });

  it('refuses bytes that do not fit while they stream, and forgets the upload', async () => {
    const { host, parent } = await streaming();
    const code = (p: Promise<unknown>) =>
      p.then(
        () => 'stored',
        (e: UploadError) => e.code,
      );
    const long = host.uploads.announce({ name: 'a', size: 100 });
    let pulled = 0;
    async function* endless(): AsyncGenerator<Uint8Array> {
      for (;;) {
        pulled++;
        yield file(PNG, 64);
      }
    }
    expect(await code(host.uploads.write(long.uploadId, endless()))).toBe('upload_length_mismatch');
    expect(pulled).toBe(2); // stopped at the chunk that went over
    expect(await code(host.uploads.write(long.uploadId, chunks(file(PNG, 100))))).toBe('upload_not_found');
    const short = host.uploads.announce({ name: 'b', size: 100 });
    expect(await code(host.uploads.write(short.uploadId, chunks(file(PNG, 60))))).toBe('upload_length_mismatch');
    const text = host.uploads.announce({ name: 'c', size: 100, mimeType: 'image/png' });
    expect(await code(host.uploads.write(text.uploadId, chunks(new TextEncoder().encode('x'.repeat(100)))))).toBe('upload_type_not_allowed');
    const twice = host.uploads.announce({ name: 'd', size: 100 });
    await host.uploads.write(twice.uploadId, chunks(file(PNG, 100)));
    expect(await code(host.uploads.write(twice.uploadId, chunks(file(PNG, 100))))).toBe('upload_already_written');
    // Only the stored file is left on disk.
    const [folder] = readdirSync(parent);
    expect(readdirSync(join(parent, folder!))).toEqual([twice.uploadId]);
  });

  it('keeps the per-file limit and the session quota on announced sizes, and expires unwritten announcements', async () => {
    const { host } = await streaming({ expiryMs: 50 });
    host.uploads.configure({ maxFileBytes: 1000, quotaBytes: 2500 });
    const fail = (req: unknown) => {
      try {
        host.uploads.announce(req);
      } catch (err) {
        return (err as UploadError).code;
      }
      return 'ok';
    };
    expect(fail({ name: 'a', size: 1001 })).toBe('upload_too_large');
    expect(fail({ name: 'a', size: 1000 })).toBe('ok');
    expect(fail({ name: 'b', size: 1000 })).toBe('ok');
    expect(fail({ name: 'c', size: 1000 })).toBe('upload_quota_exceeded');
    expect(fail({ size: 10 })).toBe('upload_invalid_request');
    expect(fail({ name: 'x', size: 10, path: '/etc' })).toBe('upload_invalid_request');
    expect(fail({ name: 'x', size: -1 })).toBe('upload_invalid_request');
    // Expired announcements give their reservation back.
    await expect.poll(() => fail({ name: 'c', size: 1000 }), { timeout: 5000 }).toBe('ok');
    expect(() => host.uploads.configure({ maxFileBytes: 10, quotaBytes: 5 })).toThrow(/quotaBytes \(5\) is below uploads.maxFileBytes \(10\)/);
  });

  it('removes the files and the folder when the session ends; a kept UploadedFile then says upload_gone', async () => {
    const { host, client, parent } = await streaming();
    const t = host.uploads.announce({ name: 'a.png', size: 100 });
    await host.uploads.write(t.uploadId, chunks(file(PNG, 100)));
    expect(readdirSync(parent)).toHaveLength(1);
    const kept =
      heard.length > 0
        ? heard[0]!.file
        : await expect
            .poll(() => heard.length)
            .toBe(1)
            .then(() => heard[0]!.file);
    client.disconnect();
    await expect.poll(() => host.status.state).toBe('ready');
    expect(readdirSync(parent)).toEqual([]);
    await expect(kept.bytes()).rejects.toMatchObject({ code: 'upload_gone' });
    expect(() => host.uploads.announce({ name: 'a', size: 1 })).toThrow(expect.objectContaining({ code: 'upload_no_session' }));
  });

  it("removes the folder a killed server left (its pid is gone) when the next store makes its own; a live owner's folder stays", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'upl-test-'));
    parent = dir;
    const dead = spawnSync(process.execPath, ['-e', '']).pid!;
    mkdirSync(join(dir, `reactor-uploads-${dead}-AbC123`));
    writeFileSync(join(dir, `reactor-uploads-${dead}-AbC123`, 'u1'), 'left by a SIGKILLed server');
    mkdirSync(join(dir, `reactor-uploads-${process.ppid}-Live01`));
    mkdirSync(join(dir, 'not-ours'));
    const host = start(PictureApp, { gracePeriodMs: 0, uploads: { dir } });
    await host.load();
    const sink = new RecordingSink();
    host.connect(sink);
    await sink.waitForSession('streaming');
    const t = host.uploads.announce({ name: 'a.png', size: 100 });
    await host.uploads.write(t.uploadId, chunks(file(PNG, 100)));
    const names = readdirSync(dir).sort();
    expect(names).not.toContain(`reactor-uploads-${dead}-AbC123`);
    expect(names).toContain(`reactor-uploads-${process.ppid}-Live01`);
    expect(names).toContain('not-ours');
    expect(names.filter((n) => n.startsWith(`reactor-uploads-${process.pid}-`))).toHaveLength(1);
  });

  it('an upload in progress when the host closes stops, and leaves nothing behind', async () => {
    const { host, parent } = await streaming();
    const t = host.uploads.announce({ name: 'a.png', size: 10_000 });
    let release!: () => void;
    const stuck = new Promise<void>((r) => (release = r));
    async function* stalls(): AsyncGenerator<Uint8Array> {
      yield file(PNG, 100);
      await stuck;
    }
    const writing = host.uploads.write(t.uploadId, stalls()).catch((err: unknown) => err);
    await expect.poll(() => readdirSync(parent).length).toBe(1);
    await host.close();
    expect(await writing).toMatchObject({ code: 'upload_not_found' });
    expect(readdirSync(parent)).toEqual([]);
    release();
  });
});
