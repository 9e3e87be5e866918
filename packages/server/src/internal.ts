/**
 * Helpers for sibling packages, not part of the public API.
 * @internal
 * @packageDocumentation
 */
/** @internal The server's access rules (Host, token, Origin), reused by `@reactor/router` so both answer the same way. */
export { checkAccess, presentedToken, tokenMatches, originAllowed, hostAllowed, TOKEN_COOKIE } from './auth.js';
/** @internal */
export type { AccessPolicy, AccessDenial } from './auth.js';
