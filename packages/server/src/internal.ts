/**
 * Helpers for sibling packages, not part of the public API. Loads only the access rules (and
 * `@reactor/client`'s codes), not the runtime: `@reactor/router` runs on this alone.
 * @internal
 * @packageDocumentation
 */
/** @internal The server's access rules (Host, token, Origin), reused by `@reactor/router` so both answer the same way. */
export { checkAccess, presentedToken, tokenMatches, originAllowed, hostAllowed, TOKEN_COOKIE, LOOPBACK_HOSTS, isLoopbackHost } from './auth.js';
/** @internal */
export type { AccessPolicy, AccessDenial } from './auth.js';
