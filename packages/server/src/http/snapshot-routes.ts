/**
 * `GET /snapshot` and `PUT /snapshot?session=<id>`: the instance side of a fork or a move through
 * the session router (docs/snapshots.md "Fork", "Move"). The router takes the running session's
 * snapshot from one instance and seeds it on the instance it allocated, which starts that
 * session from it. A move takes it with `?freeze=1`: the session holds its commands from the
 * snapshot on (they are not lost in the transfer), and `POST /snapshot/thaw` ends the freeze when
 * the move failed (the held commands apply here). A snapshot is a session's whole state, so only the instance's static token
 * (the router's, `--token`) may use these: a viewer's signed token is `snapshot_forbidden`, and
 * an open server (no token) serves neither.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { HttpErrorCode, WireErrorCode } from '@reactor/protocol';
import { FULL_GRANT, sendBody, sendJson, type AccessDenial, type Authorization } from '@reactor/access';
import { ServerErrorCode } from '../base/errors.js';
import type { ServableHost } from '../base/servable-host.js';

/** The route's path. */
export const SNAPSHOT_PATH = '/snapshot';
/** The path that ends a move's freeze. */
export const THAW_PATH = '/snapshot/thaw';
/** Both paths, for the route table. */
export const SNAPSHOT_ROUTE = /^\/snapshot(?:\/thaw)?$/;

/** What a snapshot route needs from the server. */
export interface SnapshotRoutesContext {
  host: ServableHost;
  /** Whether the server has a static token (without one nobody may use these routes). */
  hasToken: boolean;
  authorize(req: IncomingMessage, url: URL): Promise<Authorization>;
  refuse(res: ServerResponse, denial: AccessDenial): void;
}

/** HTTP status of each snapshot code the codec throws. */
const STATUS: Record<string, number> = {
  [HttpErrorCode.SnapshotCorrupt]: 400,
  [HttpErrorCode.SnapshotTruncated]: 400,
  [HttpErrorCode.SnapshotAppMismatch]: 409,
  [HttpErrorCode.SnapshotVersionMismatch]: 409,
  [HttpErrorCode.SnapshotTooBig]: 413,
  [WireErrorCode.NoSession]: 409,
};

const refusal = (res: ServerResponse, status: number, code: string, message: string): void => sendJson(res, status, { error: { code, message } });

/** `GET` (take) and `PUT` (seed) of `/snapshot`. */
export async function handleSnapshot(c: SnapshotRoutesContext, req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  const thaw = url.pathname === THAW_PATH;
  if (thaw && req.method !== 'POST') {
    res.setHeader('Allow', 'POST');
    req.resume();
    return refusal(res, 405, ServerErrorCode.MethodNotAllowed, `${req.method} is not supported here: POST ${THAW_PATH} ends a move's freeze`);
  }
  if (!thaw && req.method !== 'GET' && req.method !== 'PUT') {
    res.setHeader('Allow', 'GET, PUT');
    req.resume();
    return refusal(
      res,
      405,
      ServerErrorCode.MethodNotAllowed,
      `${req.method} is not supported here: GET ${SNAPSHOT_PATH} takes one, PUT ${SNAPSHOT_PATH}?session=<id> seeds one`,
    );
  }
  const auth = await c.authorize(req, url);
  if (!auth.ok) {
    req.resume();
    return c.refuse(res, auth.denial);
  }
  if (!c.hasToken || auth.grant !== FULL_GRANT) {
    req.resume();
    return refusal(
      res,
      403,
      ServerErrorCode.SnapshotForbidden,
      c.hasToken
        ? "a snapshot is a session's whole state: only the instance's static token (the session router's) may take or seed one, not a viewer's token"
        : "a snapshot is a session's whole state: this instance has no token, so nobody may take or seed one; start it with --token (the session router's)",
    );
  }
  const snapshots = c.host.snapshots;
  if (!snapshots?.take || !snapshots.seed || !snapshots.thaw || snapshots.maxBytes === undefined) {
    req.resume();
    return refusal(
      res,
      404,
      ServerErrorCode.SnapshotUnsupported,
      `app ${c.host.schema.app.name} takes no snapshots: add @reactorApp({ snapshot }) to fork or move its sessions`,
    );
  }
  try {
    if (thaw) {
      req.resume();
      return sendJson(res, 200, { thawed: snapshots.thaw() });
    }
    if (req.method === 'GET') {
      const freeze = url.searchParams.get('freeze');
      const bytes = await snapshots.take(freeze === '1' || freeze === 'true' ? { freeze: true } : undefined);
      res.setHeader('Cache-Control', 'no-store');
      return sendBody(res, 200, 'application/octet-stream', Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    }
    const session = url.searchParams.get('session');
    if (!session) {
      req.resume();
      return refusal(res, 400, ServerErrorCode.BadRequest, `PUT ${SNAPSHOT_PATH} needs ?session=<id>: the session that starts from the snapshot`);
    }
    const bytes = await readBytes(req, snapshots.maxBytes);
    if (bytes === undefined) {
      res.setHeader('Connection', 'close');
      return refusal(res, 413, HttpErrorCode.SnapshotTooBig, `the snapshot is over this app's snapshot.maxBytes (${snapshots.maxBytes} bytes)`);
    }
    const seeded = snapshots.seed(session, bytes);
    return sendJson(res, 202, { session, bytes: seeded.bytes, step: seeded.step });
  } catch (err) {
    const code = (err as { code?: unknown })?.code;
    const status = typeof code === 'string' ? STATUS[code] : undefined;
    if (status === undefined || typeof code !== 'string') throw err;
    return refusal(res, status, code, (err as Error).message);
  }
}

/** The body, or undefined as soon as it passes `limit` (the rest is not kept). */
async function readBytes(req: IncomingMessage, limit: number): Promise<Uint8Array | undefined> {
  const parts: Buffer[] = [];
  let total = 0;
  for await (const chunk of req.iterator({ destroyOnReturn: false })) {
    total += (chunk as Buffer).byteLength;
    if (total > limit) {
      req.resume();
      return undefined;
    }
    parts.push(chunk as Buffer);
  }
  return new Uint8Array(Buffer.concat(parts));
}
