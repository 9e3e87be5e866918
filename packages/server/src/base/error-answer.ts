/** Bounds on what the server writes back to a client: error answers and close reasons. */
import type { ErrorMessage } from '@reactor/protocol';

/** Most `details` an error answer carries; the rest are counted in its message. */
export const MAX_ERROR_DETAILS = 10;
/** Longest `message` of an error answer, in UTF-16 units. */
export const MAX_ERROR_MESSAGE = 1000;
const MAX_DETAIL_TEXT = 200;

function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 3)}...`;
}

/**
 * An error answer bounded in size whatever the client sent: a few details, then a count, and
 * short texts (a 60 KB message must not earn an 800 KB answer).
 */
export function capError(msg: ErrorMessage): ErrorMessage {
  const details = msg.details;
  const extra = details && details.length > MAX_ERROR_DETAILS ? details.length - MAX_ERROR_DETAILS : 0;
  const out: ErrorMessage = { ...msg, message: clip(msg.message, MAX_ERROR_MESSAGE - (extra ? 40 : 0)) + (extra ? ` (${extra} more details not shown)` : '') };
  if (details) {
    out.details = details
      .slice(0, MAX_ERROR_DETAILS)
      .map((d) => ({ field: clip(d.field, MAX_DETAIL_TEXT), constraint: clip(d.constraint, MAX_DETAIL_TEXT), message: clip(d.message, MAX_DETAIL_TEXT) }));
  }
  return out;
}

/** Close reasons are limited to 123 bytes by the WebSocket protocol. */
export function truncateReason(reason: string): string {
  const b = Buffer.from(reason);
  return b.byteLength <= 123
    ? reason
    : b
        .subarray(0, 120)
        .toString('utf8')
        .replace(/\uFFFD$/, '') + '...';
}
