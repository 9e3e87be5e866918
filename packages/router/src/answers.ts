/** The router's answers, over the shared HTTP helpers (`@reactor/access`) in the router's style. */
import type { ServerResponse } from 'node:http';
import { ROUTER_ANSWER, sendError, sendJson } from '@reactor/access';
import { RouterError, RouterErrorCode } from './errors.js';

/** A JSON answer (`Content-Length`, `Cache-Control: no-store`). */
export function sendRouterJson(res: ServerResponse, status: number, body: unknown): void {
  sendJson(res, status, body, ROUTER_ANSWER);
}

/** An error answer: `{"error": {"code", "message"}}`, with `Retry-After` and `retryAfterS` when given (429, 503). */
export function sendRouterError(res: ServerResponse, status: number, code: RouterErrorCode, message: string, retryAfterS?: number): void {
  if (retryAfterS !== undefined) res.setHeader('Retry-After', String(retryAfterS));
  sendError(res, status, code, message, ROUTER_ANSWER, retryAfterS !== undefined ? { retryAfterS } : undefined);
}

/** `err` as a {@link RouterError} (`internal_error` for anything else). */
export function asRouterError(err: unknown): RouterError {
  return err instanceof RouterError ? err : new RouterError(RouterErrorCode.InternalError, (err as Error)?.message ?? String(err), { cause: err });
}
