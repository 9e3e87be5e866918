/**
 * Uploads over HTTP: `POST /uploads` announces a file, `PUT` of the ticket's URL sends its bytes;
 * the server's refusal comes back as a `ReactorClientError` with its code.
 */
import type { BlobLike, UploadOptions } from './media-types.js';
import { ClientErrorCode, ReactorClientError } from '../base/errors.js';
import { parseJsonText, readHttpError, type UploadInfo, type UploadRef, type UploadTicket } from '../base/protocol.js';
import { httpBase, redact } from '../base/socket-url.js';

/** {@link ReactorClient.upload} for the server of socket `wsUrl`, as client `clientId` (empty: none yet) with `token`. */
export async function uploadFile(
  wsUrl: string,
  token: string | undefined,
  clientId: string,
  data: BlobLike | ArrayBuffer | Uint8Array,
  options: UploadOptions,
): Promise<UploadRef> {
  const isBlob = !(data instanceof ArrayBuffer) && !ArrayBuffer.isView(data);
  const size = isBlob ? (data as BlobLike).size : data.byteLength;
  const name = options.name ?? (isBlob ? (data as BlobLike).name : undefined) ?? 'upload';
  const type = options.type ?? (isBlob && (data as BlobLike).type ? (data as BlobLike).type : undefined);
  const base = httpBase(wsUrl);
  const auth: Record<string, string> = token === undefined ? {} : { authorization: `Bearer ${token}` };
  const announce = {
    name,
    size,
    ...(type ? { mimeType: type } : {}),
    ...(clientId ? { clientId } : {}),
    ...(options.command !== undefined ? { command: options.command } : {}),
    ...(options.field !== undefined ? { field: options.field } : {}),
  };
  const ticket = (await http(`upload of "${name}"`, `${base}/uploads`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth },
    body: JSON.stringify(announce),
    ...(options.signal ? { signal: options.signal } : {}),
  })) as UploadTicket;
  const info = (await http(`upload of "${name}"`, new URL(ticket.url.replace(/^\/+/, ''), `${base}/`).href, {
    method: 'PUT',
    headers: { 'content-type': type ?? 'application/octet-stream', ...auth },
    body: data as Uint8Array<ArrayBuffer>,
    ...(options.signal ? { signal: options.signal } : {}),
  })) as UploadInfo;
  return { uploadId: info.uploadId ?? ticket.uploadId };
}

async function http(what: string, url: string, init: RequestInit): Promise<unknown> {
  let res: Response;
  try {
    res = await fetch(url, init);
  } catch (err) {
    if ((err as Error).name === 'AbortError') throw err;
    throw new ReactorClientError(ClientErrorCode.UploadFailed, `${what} failed: cannot reach ${redact(url)}: ${(err as Error).message}`, { cause: err });
  }
  const text = await res.text();
  const body = parseJsonText(text);
  if (!res.ok) {
    const e = readHttpError(body);
    throw new ReactorClientError(
      e?.code ?? ClientErrorCode.UploadFailed,
      `${what} failed (${e?.code ?? `HTTP ${res.status}`}): ${e?.message ?? text.slice(0, 200)}`,
    );
  }
  if (body === undefined) throw new ReactorClientError(ClientErrorCode.UploadFailed, `${what} failed: the server's answer (HTTP ${res.status}) is not JSON`);
  return body;
}
