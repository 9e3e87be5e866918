/**
 * The route table of {@link ReactorServer} (method + path -> handler), over the HTTP helpers of
 * `@reactor/access` (`http.ts` there). Each route  says who may use it: `self` (it checks method and access itself: the
 * upload routes), `open` (no token, any Host: health, which load balancers probe) or `token` (the
 * server's Host, token and Origin checks ran). Every other route is `GET` / `HEAD`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { RouteTable, TOKEN_COOKIE, sendBody, sendError, sendJson, writeHttpError, type Grant } from '@reactor/access';
import type { DashboardSampler } from './dashboard/dashboard.js';
import { dashboardSecurityHeaders, renderDashboardPage } from './dashboard/dashboard-page.js';
import { ServerErrorCode } from './base/errors.js';
import type { ServerMetrics } from './base/metrics.js';
import type { ResolvedServerOptions } from './options.js';
import { recordingFileRefusal } from './recording/recording-grant.js';
import type { RecordingService } from './recording/recording-service.js';
import type { HealthReport, ServableHost } from './base/servable-host.js';
import { ViewerNotBuiltError, type ViewerAssets } from './http/static-assets.js';
import type { UploadRoutes } from './http/upload-routes.js';
import { renderViewerPage, viewerBasePath, viewerSecurityHeaders } from './http/viewer-page.js';
import { handleSnapshot, SNAPSHOT_ROUTE, type SnapshotRoutesContext } from './http/snapshot-routes.js';

/** One route's handler and who may use it. */
export interface ServerRoute {
  readonly access: 'self' | 'open' | 'token';
  /** `grant`: what the request's credential grants (a `token` route's; the others get none). */
  run(req: IncomingMessage, res: ServerResponse, url: URL, grant?: Grant): Promise<void> | void;
}

/** What the routes need from the server. */
export interface ServerRoutesContext {
  host: ServableHost;
  options: ResolvedServerOptions;
  metrics: ServerMetrics;
  recording: RecordingService | undefined;
  assets: ViewerAssets;
  uploads: UploadRoutes;
  /** `GET` / `PUT /snapshot` (a fork or a move through the session router). */
  snapshots: SnapshotRoutesContext;
  /** The live dashboard's samples (`/dashboard`, `/dashboard/data`). */
  dashboard: DashboardSampler;
  health(): HealthReport;
}

const GET = ['GET', 'HEAD'] as const;

/** The server's routes, in the order they are matched. */
export function serverRoutes(c: ServerRoutesContext): RouteTable<ServerRoute> {
  const health = (req: IncomingMessage, res: ServerResponse, url: URL): void => {
    const h = c.health();
    if (h.ready) return sendJson(res, 200, url.pathname === '/health' ? h : { ready: true, reasons: [] });
    const error = { code: ServerErrorCode.NotReady, message: `not ready: ${h.reasons.map((x) => x.message).join('; ')}` };
    return sendJson(res, 503, url.pathname === '/health' ? { ...h, error } : { ready: false, reasons: h.reasons, error });
  };
  const tokenCookie = (res: ServerResponse, url: URL): void => {
    const token = url.searchParams.get('token');
    if ((c.options.token !== undefined || c.options.verifier !== undefined) && token !== null) {
      // Lets the page's module scripts, its socket and its data requests carry the token without putting it in every URL.
      res.setHeader('Set-Cookie', `${TOKEN_COOKIE}=${encodeURIComponent(token)}; HttpOnly; SameSite=Strict; Path=/`);
    }
  };
  const viewerPage = (req: IncomingMessage, res: ServerResponse, url: URL): void => {
    tokenCookie(res, url);
    // Behind a session router the page lives under /s/{instance}: its scripts and socket are asked for there.
    const basePath = viewerBasePath(req.headers['x-forwarded-prefix']);
    const html = renderViewerPage({ title: c.host.schema.app.name, wsPath: c.options.path, basePath, recording: c.recording !== undefined });
    res.setHeader('Cache-Control', 'no-store');
    for (const [name, value] of Object.entries(viewerSecurityHeaders(c.options.allowedOrigins, basePath))) res.setHeader(name, value);
    return sendBody(res, 200, 'text/html; charset=utf-8', html);
  };
  const token = (run: ServerRoute['run']): ServerRoute => ({ access: 'token', run });
  const open = (run: ServerRoute['run']): ServerRoute => ({ access: 'open', run });
  return new RouteTable<ServerRoute>([
    { methods: '*', path: SNAPSHOT_ROUTE, handler: { access: 'self', run: (req, res, url) => handleSnapshot(c.snapshots, req, res, url) } },
    { methods: '*', path: /^\/uploads(?:$|\/)/, handler: { access: 'self', run: (req, res, url) => c.uploads.handle(req, res, url) } },
    {
      methods: GET,
      path: '/favicon.ico',
      handler: open((_req, res) => {
        res.statusCode = 204;
        res.end();
      }),
    },
    { methods: GET, path: '/health/live', handler: open((_req, res) => sendJson(res, 200, { status: 'live' })) },
    { methods: GET, path: '/health/ready', handler: open(health) },
    { methods: GET, path: '/health', handler: open(health) },
    { methods: GET, path: '/', handler: token(viewerPage) },
    { methods: GET, path: '/index.html', handler: token(viewerPage) },
    { methods: GET, path: '/schema', handler: token((_req, res) => sendJson(res, 200, c.host.schema)) },
    {
      methods: GET,
      path: '/metrics',
      handler: token(async (_req, res) => {
        const text = await c.metrics.registry.metrics();
        return sendBody(res, 200, c.metrics.registry.contentType, text);
      }),
    },
    {
      methods: GET,
      path: '/dashboard',
      handler: token((req, res, url) => {
        tokenCookie(res, url);
        const basePath = viewerBasePath(req.headers['x-forwarded-prefix']);
        res.setHeader('Cache-Control', 'no-store');
        for (const [name, value] of Object.entries(dashboardSecurityHeaders(basePath))) res.setHeader(name, value);
        return sendBody(res, 200, 'text/html; charset=utf-8', renderDashboardPage({ title: c.host.schema.app.name, basePath }));
      }),
    },
    {
      methods: GET,
      path: '/dashboard/data',
      handler: token(async (_req, res, url) => {
        const raw = url.searchParams.get('since');
        const since = raw === null ? undefined : Number(raw);
        if (since !== undefined && (raw!.trim() === '' || !Number.isFinite(since))) {
          return sendError(
            res,
            400,
            ServerErrorCode.BadRequest,
            `since must be a time in seconds since the epoch (the last "t" the page has), got ${JSON.stringify(raw)}`,
          );
        }
        res.setHeader('Cache-Control', 'no-store');
        return sendJson(res, 200, await c.dashboard.data(since));
      }),
    },
    {
      methods: GET,
      path: /^\/(?:clips|recordings)(?:$|\/)/,
      handler: token(async (req, res, url, grant) => {
        if (c.recording) {
          // The clip files take the token's `clip` grant, the recordings' listing and files its `record` grant (as on the socket).
          const refused = grant && recordingFileRefusal(url.pathname, grant);
          if (refused) return sendError(res, 403, refused.code, refused.message);
          if (await c.recording.serve(req, res, url.pathname)) return;
        }
        notFound(res, url, c.options);
      }),
    },
    {
      methods: GET,
      path: /^\/viewer\/(.*)$/,
      handler: token(async (_req, res, url) => {
        try {
          const asset = await c.assets.get(url.pathname.slice('/viewer/'.length));
          if (asset) {
            res.setHeader('Cache-Control', 'no-cache');
            return sendBody(res, 200, asset.contentType, asset.body);
          }
        } catch (err) {
          if (err instanceof ViewerNotBuiltError) return sendError(res, 500, err.code, err.message);
          throw err;
        }
        notFound(res, url, c.options);
      }),
    },
  ]);
}

/** The answer for a path no route answers. */
export function notFound(res: ServerResponse, url: URL, options: ResolvedServerOptions): void {
  sendError(res, 404, ServerErrorCode.NotFound, `no route ${url.pathname}; try /, /schema, /health, /metrics or the WebSocket at ${options.path}`);
}

/**
 * Answers a request Node could not parse as Node itself would without a `clientError`
 * listener: 431 for oversized headers, 408 for headers that took too long, 400 otherwise
 * (with a JSON body); nothing on a socket that is already gone.
 */
export function answerClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || !socket.writable || (socket as Duplex & { _httpMessage?: unknown })._httpMessage) {
    socket.destroy();
    return;
  }
  const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
  const code = status === 431 ? ServerErrorCode.HeadersTooLarge : ServerErrorCode.BadRequest;
  const message =
    status === 431
      ? 'the request headers are too large'
      : status === 408
        ? 'the request headers did not arrive in time'
        : 'the request cannot be parsed as HTTP/1.1';
  writeHttpError(socket, status, code, message);
}
