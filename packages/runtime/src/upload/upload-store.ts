/**
 * One session's uploads: announced files, their bytes on disk, the limits checked while the
 * bytes stream in, and the cleanup. The host keeps one store per session and closes it when the
 * session ends; a process that exits without that (a crash of the app, `process.exit()`)
 * removes every live folder in its `exit` handler.
 */
import { randomUUID } from 'node:crypto';
import { open, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CodedError, UPLOAD_PATH, WireErrorCode, type UploadTicket } from '@reactor/protocol';
import { RuntimeErrorCode, UploadError } from '../errors/errors.js';
import { type UploadFieldLimit, type UploadTarget, checkAnnouncement } from './announcement.js';
import { SNIFF_BYTES, UPLOAD_MIME_TYPES, mimeMatches, sniffMimeType } from './sniff.js';
import { createUploadFolder, removeUploadFolder } from './upload-folders.js';
import type { ResolvedUploadOptions } from './upload-options.js';
import { type ImageDecoder, UploadedFile } from './uploaded-file.js';

/** Why a command's upload reference could not be resolved (the message of its `unresolved_upload`). */
export class UnresolvedUpload extends CodedError {
  constructor(message: string) {
    super(WireErrorCode.UnresolvedUpload, message);
  }
}

interface Waiter {
  resolve(file: UploadedFile): void;
  reject(err: UnresolvedUpload): void;
}

interface Entry {
  readonly id: string;
  readonly name: string;
  readonly size: number;
  readonly limit: UploadFieldLimit | undefined;
  readonly clientId: string | undefined;
  state: 'announced' | 'writing' | 'stored';
  expiry: NodeJS.Timeout | undefined;
  file: UploadedFile | undefined;
  waiters: Waiter[];
}

/** One session's uploads. */
export class UploadStore {
  readonly #entries = new Map<string, Entry>();
  readonly #options: () => ResolvedUploadOptions;
  readonly #onStored: (file: UploadedFile, clientId: string | undefined) => void;
  readonly #abort = new AbortController();
  readonly #writes = new Set<Promise<unknown>>();
  #folder: Promise<string> | undefined;
  /** Bytes announced or stored (the quota counts both). */
  #used = 0;
  #closed = false;

  constructor(options: () => ResolvedUploadOptions, onStored: (file: UploadedFile, clientId: string | undefined) => void) {
    this.#options = options;
    this.#onStored = onStored;
  }

  /** Bytes announced or stored in this session. */
  get usedBytes(): number {
    return this.#used;
  }

  /**
   * Checks an announcement (`POST /uploads` body) and reserves its size against the quota.
   * @throws UploadError `upload_invalid_request`, `upload_too_large`, `upload_quota_exceeded`, `upload_no_session` (closed).
   */
  announce(request: unknown, limitOf?: (target: UploadTarget) => UploadFieldLimit | undefined): UploadTicket {
    if (this.#closed) throw new UploadError(RuntimeErrorCode.UploadNoSession, 'the session is ending; upload to the next one');
    const { name, size, clientId, command, field } = checkAnnouncement(request);
    const o = this.#options();
    if (size > o.maxFileBytes) {
      throw new UploadError(RuntimeErrorCode.UploadTooLarge, `the file is ${size} bytes; this server takes at most ${o.maxFileBytes} bytes per upload`);
    }
    const limit = limitOf?.({ command, field });
    if (limit?.maxBytes !== undefined && size > limit.maxBytes) {
      throw new UploadError(
        RuntimeErrorCode.UploadTooLarge,
        `the file is ${size} bytes; ${limit.what} takes files of at most ${limit.maxBytes} bytes (the schema's x-reactor-upload maxBytes)`,
      );
    }
    if (this.#used + size > o.quotaBytes) {
      throw new UploadError(
        RuntimeErrorCode.UploadQuotaExceeded,
        `this session's uploads would hold ${this.#used + size} bytes, over its quota of ${o.quotaBytes} bytes (${this.#used} in use)`,
      );
    }
    const id = randomUUID();
    const entry: Entry = { id, name, size, limit, clientId, state: 'announced', expiry: undefined, file: undefined, waiters: [] };
    entry.expiry = setTimeout(() => {
      if (entry.state !== 'announced' || this.#entries.get(id) !== entry) return;
      this.#forget(entry, `upload ${id} expired: its bytes were not sent within ${o.expiryMs} ms of the announcement`);
    }, o.expiryMs);
    entry.expiry.unref();
    this.#entries.set(id, entry);
    this.#used += size;
    return { uploadId: id, url: `${UPLOAD_PATH}${id}`, expiresInMs: o.expiryMs };
  }

  /**
   * Stores the bytes of an announced upload, checking them as they stream in: never more than
   * announced (nor than the per-file limit), the type from the first bytes. The first byte
   * over a limit stops the write: nothing more is read from `body` and the partial file is
   * deleted. A failed write forgets the upload.
   * @throws UploadError `upload_not_found`, `upload_already_written`, `upload_too_large`,
   *   `upload_length_mismatch` (shorter, longer, or aborted), `upload_type_not_allowed`.
   */
  async write(id: string, body: AsyncIterable<Uint8Array>, options: { contentLength?: number } = {}): Promise<UploadedFile> {
    const entry = this.#entries.get(id);
    if (!entry || this.#closed) throw notFound(id);
    if (entry.state !== 'announced') {
      throw new UploadError(
        RuntimeErrorCode.UploadAlreadyWritten,
        `upload ${id} ${entry.state === 'stored' ? 'was already written' : 'is being written'}; announce a new upload for new bytes`,
      );
    }
    entry.state = 'writing';
    clearTimeout(entry.expiry);
    const task = this.#write(entry, body, options.contentLength);
    this.#writes.add(task);
    try {
      return await task;
    } finally {
      this.#writes.delete(task);
    }
  }

  async #write(entry: Entry, body: AsyncIterable<Uint8Array>, contentLength: number | undefined): Promise<UploadedFile> {
    const max = this.#options().maxFileBytes;
    const tooMany = (n: number): UploadError =>
      n > max
        ? new UploadError(RuntimeErrorCode.UploadTooLarge, `the body passed ${max} bytes, this server's limit per upload; nothing more was read`)
        : new UploadError(RuntimeErrorCode.UploadLengthMismatch, `the body is longer than the ${entry.size} bytes announced; nothing more was read`);
    let path: string | undefined;
    let handle: Awaited<ReturnType<typeof open>> | undefined;
    try {
      if (contentLength !== undefined && contentLength !== entry.size) {
        if (contentLength > entry.size) throw tooMany(contentLength);
        throw new UploadError(
          RuntimeErrorCode.UploadLengthMismatch,
          `Content-Length is ${contentLength} but ${entry.size} bytes were announced; send exactly the announced bytes`,
        );
      }
      const folder = await this.#folderPath();
      // The upload id names the file: a client's name is never part of a path.
      path = join(folder, entry.id);
      handle = await open(path, 'wx', 0o600);
      let written = 0;
      let mimeType: string | undefined;
      let head: Uint8Array = new Uint8Array(0);
      const it = body[Symbol.asyncIterator]();
      // Chunks are written in batches of about WRITE_BATCH_BYTES, one writev each: a write per
      // 64 KiB network chunk cost more than half the loopback throughput.
      let batch: Uint8Array[] = [];
      let batchBytes = 0;
      const flush = async (): Promise<void> => {
        if (batchBytes === 0) return;
        const parts = batch;
        const total = batchBytes;
        batch = [];
        batchBytes = 0;
        const done = (await handle!.writev(parts)).bytesWritten;
        if (done < total) {
          const rest = Buffer.concat(parts).subarray(done);
          let off = 0;
          while (off < rest.byteLength) off += (await handle!.write(rest, off, rest.byteLength - off)).bytesWritten;
        }
      };
      try {
        for (;;) {
          const next = await untilAborted(it.next(), this.#abort.signal);
          if (next === ABORTED || this.#closed) throw notFound(entry.id, 'its session ended while the bytes arrived');
          if (next.done) break;
          const chunk = next.value;
          if (written + chunk.byteLength > entry.size) throw tooMany(written + chunk.byteLength);
          if (mimeType === undefined && head.byteLength < SNIFF_BYTES) {
            head = concat(head, chunk.subarray(0, SNIFF_BYTES - head.byteLength));
            if (head.byteLength >= SNIFF_BYTES) mimeType = this.#sniff(head, entry.limit);
          }
          batch.push(chunk);
          batchBytes += chunk.byteLength;
          written += chunk.byteLength;
          if (batchBytes >= WRITE_BATCH_BYTES) await flush();
        }
        await flush();
      } catch (err) {
        if (err instanceof UploadError) throw err;
        throw new UploadError(
          RuntimeErrorCode.UploadLengthMismatch,
          `the body ended after ${written} of ${entry.size} bytes: the client aborted or the connection broke (${(err as Error)?.message ?? String(err)})`,
          { cause: err },
        );
      } finally {
        // Stops reading the body (a Node request iterated with destroyOnReturn: false stays answerable).
        void it.return?.()?.catch?.(() => undefined);
      }
      if (written < entry.size) {
        throw new UploadError(
          RuntimeErrorCode.UploadLengthMismatch,
          `the body ended after ${written} of the ${entry.size} bytes announced; resend the whole file`,
        );
      }
      mimeType ??= this.#sniff(head, entry.limit);
      await handle.close();
      handle = undefined;
      if (this.#closed) throw notFound(entry.id, 'its session ended while the bytes arrived');
      const decode = (): ImageDecoder | undefined => this.#options().decodeImage;
      const file = new UploadedFile({
        id: entry.id,
        name: entry.name,
        mimeType,
        size: written,
        path,
        present: () => !this.#closed && this.#entries.get(entry.id) === entry,
        decodeImage: decode,
      });
      entry.state = 'stored';
      entry.file = file;
      for (const w of entry.waiters.splice(0)) w.resolve(file);
      this.#onStored(file, entry.clientId);
      return file;
    } catch (err) {
      await handle?.close().catch(() => undefined);
      if (path !== undefined) await rm(path, { force: true }).catch(() => undefined);
      if (this.#entries.get(entry.id) === entry) this.#forget(entry, `the upload of ${entry.id} failed: ${(err as Error).message}`);
      throw err;
    }
  }

  #sniff(head: Uint8Array, limit: UploadFieldLimit | undefined): string {
    const type = sniffMimeType(head);
    if (type === undefined) {
      throw new UploadError(
        RuntimeErrorCode.UploadTypeNotAllowed,
        `the bytes are not of a type this server accepts (read from the file itself, not its Content-Type); accepted: ${UPLOAD_MIME_TYPES.join(', ')}`,
      );
    }
    if (limit?.mimeTypes !== undefined && !mimeMatches(type, limit.mimeTypes)) {
      throw new UploadError(
        RuntimeErrorCode.UploadTypeNotAllowed,
        `the bytes are ${type} (read from the file itself); ${limit.what} takes ${limit.mimeTypes.join(', ')}; nothing more was read`,
      );
    }
    return type;
  }

  /**
   * The file of an upload id once its bytes are stored, waiting up to `waitMs` for bytes still
   * arriving.
   * @throws UnresolvedUpload: unknown or expired id, a failed upload, or no bytes in time.
   */
  resolve(id: string, waitMs: number): Promise<UploadedFile> {
    const entry = this.#closed ? undefined : this.#entries.get(id);
    if (!entry) {
      return Promise.reject(
        new UnresolvedUpload(
          `no upload ${JSON.stringify(id.slice(0, 64))} in this session: never announced, expired, failed, or of a session that ended; upload the file again`,
        ),
      );
    }
    if (entry.file) return Promise.resolve(entry.file);
    return new Promise<UploadedFile>((resolve, reject) => {
      const waiter: Waiter = {
        resolve: (f) => {
          clearTimeout(timer);
          resolve(f);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      const timer = setTimeout(() => {
        entry.waiters = entry.waiters.filter((w) => w !== waiter);
        reject(
          new UnresolvedUpload(`the bytes of upload ${id} did not arrive within ${waitMs} ms; PUT them to ${UPLOAD_PATH}${id} before sending the command`),
        );
      }, waitMs);
      entry.waiters.push(waiter);
    });
  }

  /** Drops an entry: its reservation is released, and commands waiting for it fail with `reason`. */
  #forget(entry: Entry, reason: string): void {
    clearTimeout(entry.expiry);
    this.#entries.delete(entry.id);
    this.#used -= entry.size;
    for (const w of entry.waiters.splice(0)) w.reject(new UnresolvedUpload(reason));
  }

  #folderPath(): Promise<string> {
    const parent = this.#options().dir ?? tmpdir();
    this.#folder ??= createUploadFolder(parent);
    return this.#folder;
  }

  /** Ends the store: writes in progress stop, waiting commands fail, every file and the folder are deleted. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#abort.abort();
    for (const e of [...this.#entries.values()]) this.#forget(e, 'the session ended');
    await Promise.allSettled([...this.#writes]);
    if (!this.#folder) return;
    const dir = await this.#folder.catch(() => undefined);
    if (dir === undefined) return;
    await removeUploadFolder(dir);
  }
}

const ABORTED = Symbol('aborted');

/**
 * `step`, or {@link ABORTED} once `signal` aborts, whichever comes first. The abort listener is
 * removed as soon as `step` settles: racing every chunk against one long-lived promise (the
 * former `Promise.race([it.next(), aborted])`) left a reaction per chunk on that promise, each
 * holding its chunk, so a store kept every byte of every body in memory until it closed.
 */
function untilAborted<T>(step: Promise<T>, signal: AbortSignal): Promise<T | typeof ABORTED> {
  if (signal.aborted) return Promise.resolve(ABORTED);
  return new Promise((resolve, reject) => {
    const onAbort = (): void => resolve(ABORTED);
    signal.addEventListener('abort', onAbort, { once: true });
    step.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(err instanceof Error ? err : new Error(String(err)));
      },
    );
  });
}

/** Bytes of body gathered before one `writev` to the upload's file. */
const WRITE_BATCH_BYTES = 1024 * 1024;

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.byteLength + b.byteLength);
  out.set(a);
  out.set(b, a.byteLength);
  return out;
}

function notFound(id: string, why = 'never announced, expired (not written in time), failed, or of a session that ended'): UploadError {
  return new UploadError(RuntimeErrorCode.UploadNotFound, `no upload ${JSON.stringify(id.slice(0, 64))}: ${why}; announce the file again with POST /uploads`);
}
