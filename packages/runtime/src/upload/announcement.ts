/** The announcement of an upload (`POST /uploads` body): its shape, and the upload field it is for. */
import { RuntimeErrorCode, UploadError } from '../errors/errors.js';
import { MAX_UPLOAD_NAME_LENGTH } from './upload-options.js';

/**
 * What the upload fields an announcement may be for take, checked on the announced size and on
 * the first bytes: an upload no field could use is refused before it is stored.
 */
export interface UploadFieldLimit {
  /** Largest file, bytes (none: only the server's `maxFileBytes`). */
  readonly maxBytes: number | undefined;
  /** Accepted types, `image/*` for a family (none: every type the server takes). */
  readonly mimeTypes: readonly string[] | undefined;
  /** The field(s), for messages: `set_image.image`, or `any upload field of this app (a.b, c.d)`. */
  readonly what: string;
}

/** An announcement's `command` / `field` (both optional): which upload field the file is for. */
export interface UploadTarget {
  readonly command: string | undefined;
  readonly field: string | undefined;
}

const ANNOUNCE_KEYS = ['name', 'size', 'mimeType', 'clientId', 'command', 'field'];

function codePoints(s: string): number {
  let n = 0;
  for (const _ of s) n++;
  return n;
}

/** Checks the shape of a `POST /uploads` body. */
export function checkAnnouncement(request: unknown): {
  name: string;
  size: number;
  clientId: string | undefined;
  command: string | undefined;
  field: string | undefined;
} {
  const bad = (why: string): UploadError =>
    new UploadError(
      RuntimeErrorCode.UploadInvalidRequest,
      `${why}; announce a file as {"name": "<display name>", "size": <exact byte count>, "mimeType"?: "<type>", "clientId"?: "<your clientId>", "command"?: "<command it is for>", "field"?: "<its upload parameter>"}`,
    );
  if (typeof request !== 'object' || request === null || Array.isArray(request)) throw bad('the announcement is not a JSON object');
  const r = request as Record<string, unknown>;
  const extra = Object.keys(r).filter((k) => !ANNOUNCE_KEYS.includes(k));
  if (extra.length > 0) throw bad(`unknown key ${JSON.stringify(extra[0]!.slice(0, 40))}`);
  const { name, size, mimeType, clientId, command, field } = r;
  if (typeof name !== 'string' || name.length === 0 || codePoints(name) > MAX_UPLOAD_NAME_LENGTH) {
    throw bad(`"name" must be a non-empty string of at most ${MAX_UPLOAD_NAME_LENGTH} characters`);
  }
  if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 1) throw bad('"size" must be a positive integer (bytes)');
  if (mimeType !== undefined && (typeof mimeType !== 'string' || mimeType.length > 255)) throw bad('"mimeType" must be a string');
  if (clientId !== undefined && (typeof clientId !== 'string' || clientId.length > 64))
    throw bad('"clientId" must be the clientId string from the welcome message');
  if (command !== undefined && (typeof command !== 'string' || command === '' || command.length > 200))
    throw bad('"command" must be the wire name of the command the file is for');
  if (field !== undefined && (typeof field !== 'string' || field === '' || field.length > 200))
    throw bad('"field" must be the wire name of the upload parameter the file is for');
  if (field !== undefined && command === undefined) throw bad('"field" needs "command": the command whose parameter it is');
  return { name, size, clientId, command, field };
}
