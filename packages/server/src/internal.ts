/**
 * Helpers for sibling packages, not part of the public API. Loads only the access rules (and
 * `@reactor/protocol`'s codes), not the runtime: `@reactor/router` runs on this alone.
 * @internal
 * @packageDocumentation
 */
/** @internal The server's access rules (Host, token, Origin), reused by `@reactor/router` so both answer the same way. */
export {
  authorize,
  bearerChallenge,
  checkAccess,
  presentedToken,
  tokenMatches,
  originAllowed,
  hostAllowed,
  TOKEN_COOKIE,
  LOOPBACK_HOSTS,
  isLoopbackHost,
} from './auth.js';
/** @internal */
export type { AccessPolicy, AccessDenial, Authorization } from './auth.js';
/** @internal Signed tokens, for the router (it mints instance tokens and checks its callers'). */
export { TokenMinter, TokenVerifier, FULL_GRANT, looksLikeJwt } from './tokens.js';
/** @internal */
export type { Grant, TokenAuthOptions, TokenRequest, SigningKey } from './tokens.js';
/** @internal The HTTP helpers (JSON answers, the error envelope, targets, query values, bodies, a route table), shared with the router. */
export {
  ROUTER_ANSWER,
  SERVER_ANSWER,
  RouteTable,
  errorEnvelope,
  oneOfParam,
  parseTarget,
  readBody,
  safeDecode,
  sendBody,
  sendError,
  sendJson,
  wholeNumberParam,
  writeHttpError,
} from './http.js';
/** @internal */
export type { AnswerStyle, ErrorEnvelope, Route, RouteMatch } from './http.js';
