/**
 * Uploads (issue 22): a body's chunks are not kept in memory once written (the store lives as long
 * as its session), and an upload no field could use is refused before and while its bytes stream,
 * not accepted in full and refused by the command that names it.
 */
import 'reflect-metadata';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterEach, describe, expect, it } from 'vitest';
import { event, ReactorApp, reactorApp, UploadedFile, UploadError, UploadField } from '../../src/index.js';
import { RecordingSink, useHosts } from '../../src/testing.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const PNG = Uint8Array.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
const JPEG = Uint8Array.from([0xff, 0xd8, 0xff, 0xe0, 0, 0x10, 0x4a, 0x46, 0x49, 0x46, 0]);

class SketchParams {
  @UploadField({ maxBytes: 5000, mimeTypes: ['image/png'] })
  sketch!: UploadedFile;
}
class PhotoParams {
  @UploadField({ maxBytes: 20_000, mimeTypes: ['image/jpeg'] })
  photo!: UploadedFile;
}
class AnyParams {
  @UploadField()
  file!: UploadedFile;
}

@reactorApp({ name: 'limits' })
class LimitsApp extends ReactorApp {
  generate(): null {
    return null;
  }
  @event({ name: 'set_sketch', params: SketchParams })
  sketch(p: SketchParams): number {
    return p.sketch.size;
  }
  @event({ name: 'set_photo', params: PhotoParams })
  photo(p: PhotoParams): number {
    return p.photo.size;
  }
}

@reactorApp({ name: 'open-uploads' })
class OpenApp extends ReactorApp {
  generate(): null {
    return null;
  }
  @event({ name: 'take', params: AnyParams })
  take(p: AnyParams): number {
    return p.file.size;
  }
}

const start = useHosts(afterEach);
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function streaming(app: typeof LimitsApp | typeof OpenApp, opts: { maxFileBytes?: number; quotaBytes?: number } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'upl-limits-'));
  dirs.push(dir);
  const host = start(app, { gracePeriodMs: 0, uploads: { dir, ...opts } });
  await host.load();
  const sink = new RecordingSink();
  host.connect(sink);
  await sink.waitForSession('streaming');
  return { host, dir };
}

function code(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(UploadError);
    return `${(err as UploadError).code}: ${(err as Error).message}`;
  }
  throw new Error('accepted');
}

describe('uploads: memory', () => {
  it('keeps no chunk of a stored body alive while the session (and its store) lives on', async () => {
    const { host } = await streaming(OpenApp, { maxFileBytes: 64 << 20, quotaBytes: 128 << 20 });
    const CHUNK = 256 * 1024;
    const N = 64;
    const refs: Array<WeakRef<Uint8Array>> = [];
    async function* body(): AsyncGenerator<Uint8Array> {
      for (let i = 0; i < N; i++) {
        const c = new Uint8Array(CHUNK).fill(i & 255);
        if (i === 0) c.set(PNG);
        refs.push(new WeakRef(c));
        yield c;
      }
    }
    const t = host.uploads.announce({ name: 'big.png', size: CHUNK * N });
    const info = await host.uploads.write(t.uploadId, body());
    expect(info.size).toBe(CHUNK * N);
    for (let i = 0; i < 5; i++) {
      gc();
      await new Promise((r) => setImmediate(r));
    }
    const alive = refs.filter((r) => r.deref() !== undefined).length;
    // The last batch may still be referenced by the file handle's last writev; nothing more.
    expect(alive).toBeLessThanOrEqual(4);
  });
});

describe('uploads: field limits before and while the bytes stream', () => {
  it('an announcement naming its field is held to that field: size at POST, type from the first bytes', async () => {
    const { host, dir } = await streaming(LimitsApp);
    expect(code(() => host.uploads.announce({ name: 's.png', size: 6000, command: 'set_sketch', field: 'sketch' }))).toBe(
      "upload_too_large: the file is 6000 bytes; set_sketch.sketch takes files of at most 5000 bytes (the schema's x-reactor-upload maxBytes)",
    );
    // Within the size, the wrong type: refused after the first bytes; nothing is kept.
    const t = host.uploads.announce({ name: 'p.png', size: 4000, command: 'set_sketch' });
    let chunksRead = 0;
    async function* jpegBody(): AsyncGenerator<Uint8Array> {
      for (let i = 0; i < 40; i++) {
        chunksRead++;
        const c = new Uint8Array(100);
        if (i === 0) c.set(JPEG);
        yield c;
      }
    }
    await expect(host.uploads.write(t.uploadId, jpegBody())).rejects.toMatchObject({
      code: 'upload_type_not_allowed',
      message: 'the bytes are image/jpeg (read from the file itself); set_sketch.sketch takes image/png; nothing more was read',
    });
    expect(chunksRead).toBe(1);
    const folders = readdirSync(dir);
    expect(folders.flatMap((f) => readdirSync(join(dir, f)))).toEqual([]);
  });

  it('an announcement naming no field is held to what the upload fields take together (largest maxBytes, union of types)', async () => {
    const { host } = await streaming(LimitsApp);
    expect(code(() => host.uploads.announce({ name: 'x.bin', size: 20_001 }))).toBe(
      "upload_too_large: the file is 20001 bytes; any upload field of this app (set_sketch.sketch, set_photo.photo) takes files of at most 20000 bytes (the schema's x-reactor-upload maxBytes)",
    );
    expect(host.uploads.announce({ name: 'x.jpg', size: 20_000 }).uploadId).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('refuses an announcement naming a command or field the app does not have (upload_invalid_request)', async () => {
    const { host } = await streaming(LimitsApp);
    expect(code(() => host.uploads.announce({ name: 'x', size: 10, command: 'set_nothing' }))).toMatch(
      /^upload_invalid_request: no command "set_nothing"; the upload fields of this app: set_sketch.sketch, set_photo.photo/,
    );
    expect(code(() => host.uploads.announce({ name: 'x', size: 10, command: 'set_sketch', field: 'photo' }))).toMatch(
      /^upload_invalid_request: command "set_sketch" has no upload field "photo"; its upload fields: set_sketch.sketch/,
    );
    expect(code(() => host.uploads.announce({ name: 'x', size: 10, field: 'photo' }))).toMatch(/^upload_invalid_request: "field" needs "command"/);
  });

  it('a field without maxBytes leaves the server limit in charge', async () => {
    const { host } = await streaming(OpenApp, { maxFileBytes: 100_000, quotaBytes: 200_000 });
    expect(host.uploads.announce({ name: 'x', size: 100_000 }).uploadId).toBeTruthy();
    expect(code(() => host.uploads.announce({ name: 'y', size: 100_001 }))).toMatch(/^upload_too_large: .*at most 100000 bytes per upload/);
  });
});

describe('uploads: folders a killed process left', () => {
  it("host.uploads.sweep() removes them (with their files) before any upload, and keeps a live process's", async () => {
    const { host, dir } = await streaming(OpenApp);
    const dead = join(dir, 'reactor-uploads-999999999-abc123');
    mkdirSync(dead);
    writeFileSync(join(dead, 'user-file'), 'a user file');
    const live = join(dir, `reactor-uploads-${process.ppid}-def456`);
    mkdirSync(live);
    expect(await host.uploads.sweep!()).toBe(1);
    expect(readdirSync(dir).sort()).toEqual([`reactor-uploads-${process.ppid}-def456`]);
  });
});
