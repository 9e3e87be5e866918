/**
 * The upload routes of the server: `POST /uploads` (a JSON announcement -> 201 ticket) and
 * `PUT /uploads/{id}` (the raw bytes -> 200 info), with the token's upload grant (`upl`) counted
 * per token.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { UPLOAD_PATH, UploadError, type AppHostApi } from '@reactor/runtime';
import { readBody, sendJson, type AccessDenial, type Authorization } from '@reactor/access';
import { ServerErrorCode } from '../base/errors.js';
import type { ServerMetrics } from '../base/metrics.js';

/** Largest `POST /uploads` body (the JSON announcement), bytes. */
export const MAX_UPLOAD_REQUEST_BYTES = 4096;
/**
 * After refusing an upload mid-body, how long the server still reads (and drops) what the client
 * has in flight, so that it can read the answer, before it cuts the connection, ms.
 */
export const UPLOAD_REFUSAL_LINGER_MS = 1000;

/** The HTTP status of each upload error. */
const UPLOAD_STATUS: Record<string, number> = {
  [ServerErrorCode.UploadNoSession]: 409,
  [ServerErrorCode.UploadTooLarge]: 413,
  [ServerErrorCode.UploadQuotaExceeded]: 413,
  [ServerErrorCode.UploadTypeNotAllowed]: 415,
  [ServerErrorCode.UploadLengthMismatch]: 400,
  [ServerErrorCode.UploadNotFound]: 404,
  [ServerErrorCode.UploadAlreadyWritten]: 409,
  [ServerErrorCode.UploadInvalidRequest]: 400,
};

/** What the upload routes need from the server. */
export interface UploadRoutesContext {
  host: AppHostApi;
  metrics: ServerMetrics;
  /** The server's access check (Host, token, Origin). */
  authorize(req: IncomingMessage, url: URL): Promise<Authorization>;
  /** Answers a refused request (and counts it). */
  refuse(res: ServerResponse, denial: AccessDenial): void;
}

/** `/uploads` and `/uploads/{id}`. */
export class UploadRoutes {
  readonly #c: UploadRoutesContext;
  /** Bytes announced for upload per token (`grant.tokenId`), against its `upl` grant. */
  readonly #uploadedBy = new Map<string, number>();

  constructor(c: UploadRoutesContext) {
    this.#c = c;
  }

  /**
   * `POST /uploads` (a JSON announcement -> 201 ticket) and `PUT /uploads/{id}` (the raw bytes ->
   * 200 info), under the same Host, token and Origin checks as every route; no CORS headers, so
   * a page of another origin cannot even send its preflight.
   */
  async handle(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const announce = url.pathname === '/uploads';
    const method = announce ? 'POST' : 'PUT';
    if (req.method !== method) {
      res.setHeader('Allow', method);
      refuseBody(req, res);
      return sendJson(res, 405, {
        error: {
          code: ServerErrorCode.MethodNotAllowed,
          message: `${req.method} is not supported here: announce with POST /uploads, then PUT the bytes to /uploads/{uploadId}`,
        },
      });
    }
    const auth = await this.#c.authorize(req, url);
    if (!auth.ok) {
      refuseBody(req, res);
      return this.#c.refuse(res, auth.denial);
    }
    const grant = auth.grant;
    if (grant.uploadBytes === 0) {
      refuseBody(req, res);
      return sendJson(res, 403, {
        error: {
          code: ServerErrorCode.UploadNotAllowed,
          message: `your token grants no uploads (role "${grant.role}"); uploading takes a controller's token, or one whose upl claim allows bytes`,
        },
      });
    }
    const uploads = this.#c.host.uploads;
    if (!uploads) {
      refuseBody(req, res);
      return sendJson(res, 404, { error: { code: ServerErrorCode.NotFound, message: 'this app host takes no uploads' } });
    }
    try {
      if (announce) {
        const body = await readBody(req, MAX_UPLOAD_REQUEST_BYTES, announcementTooLarge);
        let request: unknown;
        try {
          request = JSON.parse(body);
        } catch {
          throw new UploadError(
            ServerErrorCode.UploadInvalidRequest,
            `the announcement is not JSON; send {"name": "<display name>", "size": <exact byte count>} (at most ${MAX_UPLOAD_REQUEST_BYTES} bytes)`,
          );
        }
        const size = (request as { size?: unknown } | null)?.size;
        if (grant.uploadBytes !== undefined && grant.tokenId !== undefined && typeof size === 'number') {
          const used = this.#uploadedBy.get(grant.tokenId) ?? 0;
          if (used + size > grant.uploadBytes) {
            return sendJson(res, 413, {
              error: {
                code: ServerErrorCode.UploadGrantExceeded,
                message: `this upload of ${size} bytes would pass what your token grants (${grant.uploadBytes} bytes, ${used} already announced); ask for a token with a larger upl`,
              },
            });
          }
        }
        const ticket = uploads.announce(request);
        if (grant.uploadBytes !== undefined && grant.tokenId !== undefined && typeof size === 'number') {
          this.#uploadedBy.set(grant.tokenId, (this.#uploadedBy.get(grant.tokenId) ?? 0) + size);
        }
        this.#c.metrics.uploads.inc({ outcome: 'announced' });
        return sendJson(res, 201, ticket);
      }
      let id: string;
      try {
        id = decodeURIComponent(url.pathname.slice(UPLOAD_PATH.length));
      } catch {
        id = '';
      }
      const header = req.headers['content-length'];
      const contentLength = header !== undefined && /^\d+$/.test(header) ? Number(header) : undefined;
      const info = await uploads.write(id, req.iterator({ destroyOnReturn: false }), contentLength !== undefined ? { contentLength } : {});
      this.#c.metrics.uploads.inc({ outcome: 'stored' });
      this.#c.metrics.uploadBytes.inc(info.size);
      return sendJson(res, 200, info);
    } catch (err) {
      if (!(err instanceof UploadError) || UPLOAD_STATUS[err.code] === undefined) throw err;
      this.#c.metrics.uploads.inc({ outcome: err.code });
      refuseBody(req, res);
      if (req.destroyed && !req.complete) return; // the client went away mid-body: nobody to answer
      return sendJson(res, UPLOAD_STATUS[err.code]!, { error: { code: err.code, message: err.message } });
    }
  }
}

/**
 * An answer sent before the request body was read: the connection closes after it, and the
 * bytes the client still has in flight are read and dropped (never stored) for a moment, so a
 * client that reads its answer only after sending gets it instead of a reset.
 */
function refuseBody(req: IncomingMessage, res: ServerResponse): void {
  if (req.complete) return;
  res.setHeader('Connection', 'close');
  req.resume();
  const cut = setTimeout(() => req.socket.destroy(), UPLOAD_REFUSAL_LINGER_MS);
  cut.unref();
  req.socket.once('close', () => clearTimeout(cut));
}

function announcementTooLarge(): Error {
  return new UploadError(
    ServerErrorCode.UploadInvalidRequest,
    `the announcement is larger than ${MAX_UPLOAD_REQUEST_BYTES} bytes; send only {"name", "size", "mimeType"?, "clientId"?}`,
  );
}
