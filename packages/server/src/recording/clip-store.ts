/**
 * Clip files: each clip is written once to `<dir>/clips/<id>.mp4` under an unguessable id
 * (144 random bits) and answered at `GET /clips/<id>.mp4` until it expires; then its file is
 * deleted and its URL answers 410 `clip_expired`.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CodedError, WireErrorCode } from '@reactor/protocol';
import { freeBytes } from './files.js';

interface StoredClip {
  readonly path: string;
  readonly bytes: number;
  readonly expiresAt: number;
  gone: boolean;
}

/** Why a clip could not be stored: the disk is (nearly) full. */
export class ClipDiskFullError extends CodedError {
  constructor(message: string) {
    super(WireErrorCode.DiskFull, message);
  }
}

export class ClipStore {
  readonly dir: string;
  readonly #expiryMs: number;
  readonly #minFreeBytes: number;
  readonly #clips = new Map<string, StoredClip>();

  constructor(dir: string, expiryMs: number, minFreeBytes: number) {
    this.dir = join(dir, 'clips');
    this.#expiryMs = expiryMs;
    this.#minFreeBytes = minFreeBytes;
  }

  /**
   * Stores a clip. Checks the free space first (the clip plus `minFreeBytes` must fit).
   * @throws ClipDiskFullError when it does not fit, or the write ran out of space; other write errors as they are.
   */
  async save(bytes: Uint8Array): Promise<{ id: string; expiresAt: number }> {
    await mkdir(this.dir, { recursive: true });
    const free = await freeBytes(this.dir);
    if (free < bytes.byteLength + this.#minFreeBytes) {
      throw new ClipDiskFullError(
        `the clip needs ${bytes.byteLength} bytes and the disk of ${this.dir} has ${free} free, below the ${this.#minFreeBytes} bytes recording.min_free_bytes keeps`,
      );
    }
    const id = randomBytes(18).toString('base64url');
    const path = join(this.dir, `${id}.mp4`);
    const tmp = `${path}.part`;
    try {
      await writeFile(tmp, bytes);
      await rename(tmp, path);
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
    const expiresAt = Date.now() + this.#expiryMs;
    this.#clips.set(id, { path, bytes: bytes.byteLength, expiresAt, gone: false });
    return { id, expiresAt };
  }

  /** The clip of an id: its file, `'expired'`, or `undefined` (never made here). */
  get(id: string): { path: string; bytes: number } | 'expired' | undefined {
    const c = this.#clips.get(id);
    if (!c) return undefined;
    if (c.gone || Date.now() >= c.expiresAt) {
      void this.#expire(c);
      return 'expired';
    }
    return c;
  }

  async #expire(c: StoredClip): Promise<void> {
    if (c.gone) return;
    c.gone = true;
    await rm(c.path, { force: true });
  }

  /** Deletes expired clips, and clip files older than the expiry left by earlier runs of the server. */
  async sweep(): Promise<void> {
    const now = Date.now();
    for (const c of this.#clips.values()) if (now >= c.expiresAt) await this.#expire(c);
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch {
      return;
    }
    for (const name of names) {
      const id = name.replace(/\.mp4(\.part)?$/, '');
      if (this.#clips.has(id)) continue;
      const path = join(this.dir, name);
      const s = await stat(path).catch(() => undefined);
      if (s && now - s.mtimeMs >= this.#expiryMs) await rm(path, { force: true });
    }
  }
}
