/**
 * Time-limited TURN credentials (the "TURN REST API" of draft-uberti-behave-turn-rest, which
 * coturn takes with `use-auth-secret` / `static-auth-secret`): the username is
 * `<expiry-unix-seconds>:<id>` and the credential base64(HMAC-SHA1(secret, username)). coturn
 * checks the HMAC with the same secret and refuses the username once its time has passed, so a
 * viewer gets a credential of its own that stops working by itself, never the long-term password.
 */
import { createHmac } from 'node:crypto';
import { type IceServerOptions, isTurn } from './rtc-options.js';

/** A minted credential. */
export interface TurnCredential {
  username: string;
  credential: string;
}

/**
 * Mints the credential of `id` valid for `ttlS` seconds from `nowMs`.
 * @example mintTurnCredential('s3cret', 'c1', 3600, Date.parse('2026-01-01T00:00:00Z'))
 * // { username: '1767229200:c1', credential: base64(HMAC-SHA1('s3cret', '1767229200:c1')) }
 */
export function mintTurnCredential(secret: string, id: string, ttlS: number, nowMs: number = Date.now()): TurnCredential {
  const username = `${Math.floor(nowMs / 1000) + ttlS}:${id}`;
  return { username, credential: createHmac('sha1', secret).update(username).digest('base64') };
}

/**
 * `servers` as one ICE agent should get them: a TURN server given without a username and
 * credential gets a fresh one minted for `id` (when a secret is set; the options check makes sure
 * it is), every other entry is copied as written.
 */
export function iceServersFor(
  servers: readonly IceServerOptions[],
  turn: { secret: string; ttlS: number } | undefined,
  id: string,
  nowMs: number = Date.now(),
): IceServerOptions[] {
  return servers.map((s) => {
    const urls = Array.isArray(s.urls) ? [...s.urls] : s.urls;
    if (!isTurn(s) || !turn || (s.username !== undefined && s.credential !== undefined)) return { ...s, urls };
    return { urls, ...mintTurnCredential(turn.secret, id, turn.ttlS, nowMs) };
  });
}
