/**
 * `@reactor/access`: who may reach a Reactor server or router and what a caller may do there.
 * The one access check (Host, token, Origin) for HTTP routes and WebSocket upgrades alike
 * (`auth.ts`), signed session tokens (`tokens.ts`: `TokenMinter`, `TokenVerifier`, the claims and
 * their refusal codes; docs/security.md) and the HTTP helpers the server and the router share
 * (`http.ts`). It depends on `jose` and `@reactor/protocol` only, so the router and
 * `reactor token` install no media stack (issue 36).
 * @packageDocumentation
 */
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
export type { AccessPolicy, AccessDenial, Authorization } from './auth.js';
export {
  TokenMinter,
  TokenVerifier,
  mintToken,
  mayPublish,
  mayRecord,
  looksLikeJwt,
  RECORDING_GRANTS,
  DEFAULT_TOKEN_TTL_S,
  MAX_TOKEN_TTL_S,
  TOKEN_CLOCK_TOLERANCE_S,
  ROLES,
  FULL_GRANT,
} from './tokens.js';
export type { Grant, RecordingGrant, Role, SigningKey, TokenAuthOptions, TokenCheck, TokenErrorCode, TokenRequest } from './tokens.js';
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
export type { AnswerStyle, ErrorEnvelope, Route, RouteMatch } from './http.js';
