/**
 * File uploads into a host's current session (the transport's upload routes): the limits, the
 * announcement checked against the app's upload fields, the bytes, the `@fileUploaded` hooks.
 * Commands refer to a stored file by its id (see `command-dispatch.ts`).
 */
import type { UploadInfo, UploadTicket } from '@reactor/protocol';
import { RuntimeErrorCode, UploadError } from '../errors/errors.js';
import type { FieldSpec } from '../state/field-set.js';
import type { UploadedFile } from '../upload/uploaded-file.js';
import type { UploadFieldLimit, UploadTarget } from '../upload/announcement.js';
import { sweepOrphanUploadFolders } from '../upload/upload-folders.js';
import { type ResolvedUploadOptions, resolveUploadOptions } from '../upload/upload-options.js';
import { UploadStore } from '../upload/upload-store.js';
import type { Client } from './client.js';
import type { HostSession } from './host-client.js';
import type { HostCore } from './host-core.js';
import type { UploadsApi } from './transport.js';

/** The uploads of a host: what `AppHost.uploads` calls. */
export class HostUploads {
  private uploadOptions: ResolvedUploadOptions;

  /**
   * File uploads into the current session (the server's upload routes call it): announce, then
   * write the bytes; commands refer to a stored file by its id.
   */
  readonly api: UploadsApi = {
    configure: (options) => {
      this.uploadOptions = resolveUploadOptions(options ?? {}, this.uploadOptions);
    },
    announce: (request) => this.announceUpload(request),
    write: (uploadId, body, options) => this.writeUpload(uploadId, body, options),
    sweep: () => sweepOrphanUploadFolders(this.uploadOptions.dir),
  };

  constructor(
    private readonly core: HostCore,
    /** The upload options as the host's options set them (`resolveUploadOptions`). */
    options: ResolvedUploadOptions,
    /** Whether the host is closing or closed (no upload is taken then). */
    private readonly closed: () => boolean,
  ) {
    this.uploadOptions = options;
  }

  /** How long a command waits for the bytes of a file it refers to, ms. */
  get resolveWaitMs(): number {
    return this.uploadOptions.resolveWaitMs;
  }

  /** The upload fields a command may carry (the setter's field, or the event's upload params). */
  uploadFieldsOf(name: unknown): readonly FieldSpec[] {
    const spec = typeof name === 'string' ? this.core.def.commands.get(name) : undefined;
    if (!spec) return [];
    if (spec.kind === 'setter') return spec.field?.upload ? [spec.field] : [];
    return spec.params?.publicFields.filter((f) => f.upload) ?? [];
  }

  /** `uploads.announce()`: into the current session's store (made on first use). */
  private announceUpload(request: unknown): UploadTicket {
    const session = this.core.session;
    if (!session || session.over || this.closed()) {
      throw new UploadError(RuntimeErrorCode.UploadNoSession, 'no session is running, so there is nothing to upload to; connect a client first, then upload');
    }
    session.uploads ??= new UploadStore(
      () => this.uploadOptions,
      (file, clientId) => this.fileStored(session, file, clientId),
    );
    return session.uploads.announce(request, (target) => this.uploadLimit(target));
  }

  /**
   * What an announced file must fit: the upload field its announcement names (`command`, and
   * `field` when the command has several), else every upload field of the app together (the
   * largest `maxBytes` when each declares one, the union of their types when each declares
   * them). An app with a `@fileUploaded` hook takes any upload the server takes when none is named.
   * @throws UploadError `upload_invalid_request` for a command or field the app does not have.
   */
  private uploadLimit(target: UploadTarget): UploadFieldLimit | undefined {
    const { def } = this.core;
    const bad = (why: string): UploadError => new UploadError(RuntimeErrorCode.UploadInvalidRequest, why);
    const all = [...def.commands.keys()].flatMap((c) => this.uploadFieldsOf(c).map((field) => ({ command: c, field })));
    const list = (fs: ReadonlyArray<{ command: string; field: FieldSpec }>): string => fs.map((f) => `${f.command}.${f.field.wire}`).join(', ');
    let fields = all;
    let what: string;
    if (target.command !== undefined) {
      const shown = JSON.stringify(target.command.slice(0, 64));
      if (!def.commands.has(target.command)) throw bad(`no command ${shown}; the upload fields of this app: ${list(all) || '(none)'}`);
      fields = all.filter((f) => f.command === target.command);
      if (fields.length === 0) throw bad(`command ${shown} takes no file; the upload fields of this app: ${list(all) || '(none)'}`);
      if (target.field !== undefined) {
        const own = fields;
        fields = own.filter((f) => f.field.wire === target.field);
        if (fields.length === 0)
          throw bad(`command ${shown} has no upload field ${JSON.stringify(target.field.slice(0, 64))}; its upload fields: ${list(own)}`);
      }
      what = fields.length === 1 ? list(fields) : `each of ${list(fields)}`;
    } else {
      if (all.length === 0 || def.hooks.fileUploaded.length > 0) return undefined;
      what = all.length === 1 ? list(all) : `any upload field of this app (${list(all)})`;
    }
    const sizes = fields.map((f) => f.field.upload!.maxBytes);
    const types = fields.map((f) => f.field.upload!.mimeTypes);
    return {
      maxBytes: sizes.every((b) => b !== undefined) ? Math.max(...(sizes as number[])) : undefined,
      mimeTypes: types.every((t) => t !== undefined) ? [...new Set(types.flat() as string[])] : undefined,
      what,
    };
  }

  /** `uploads.write()`: an upload of the current session. */
  private async writeUpload(uploadId: string, body: AsyncIterable<Uint8Array>, options?: { contentLength?: number }): Promise<UploadInfo> {
    const store = this.core.session?.uploads;
    if (!store || typeof uploadId !== 'string') {
      throw new UploadError(
        RuntimeErrorCode.UploadNotFound,
        `no upload ${JSON.stringify(String(uploadId).slice(0, 64))}: never announced, expired, or of a session that ended; announce the file again with POST /uploads`,
      );
    }
    const file = await store.write(uploadId, body, options);
    return file.toJSON();
  }

  /** A file's bytes are stored: `@fileUploaded` hooks run in their turn, with the uploader when it is in the session. */
  private fileStored(session: HostSession, file: UploadedFile, clientId: string | undefined): void {
    const { core } = this;
    core.notifyChange();
    if (core.def.hooks.fileUploaded.length === 0) return;
    void core.task(async () => {
      if (core.session !== session || session.over) return;
      const c = clientId === undefined ? undefined : core.clients.get(clientId);
      const client = c && c.session === session && c.lifecycle.is('joined') ? c : undefined;
      for (const method of core.def.hooks.fileUploaded) {
        try {
          await (core.app as unknown as Record<string, (f: UploadedFile, c?: Client) => unknown>)[method]!.call(core.app, file, client);
        } catch (err) {
          core.logger.error({ err }, `@fileUploaded hook ${core.def.appClass.name}.${method} threw (ignored)`);
        }
      }
    });
  }
}
