/**
 * The HTTP error envelope: every error answer of a Reactor server or session router (its
 * routes, a refused WebSocket upgrade, an unparsable request) has the body
 * `{"error":{"code":...,"message":...}}`, the router's 429/503 adding `retryAfterS`. Written and
 * read here, so both sides agree on it.
 */

/** The body of an HTTP error answer. */
export interface HttpErrorEnvelope {
  error: { code: string; message: string };
  /** Seconds to wait before asking again (a session router's 429 and 503; also its `Retry-After` header). */
  retryAfterS?: number;
}

/** The envelope of an error answer, ready to serialise (`code` first, then `message`). */
export function httpErrorEnvelope<C extends string>(code: C, message: string): { error: { code: C; message: string }; retryAfterS?: number } {
  return { error: { code, message } };
}

/** The envelope as the bytes of a JSON body: `{"error":{"code":...,"message":...}}`. */
export function encodeHttpError(code: string, message: string): string {
  return JSON.stringify(httpErrorEnvelope(code, message));
}

/** What an error answer's body says: its code and message, each when present and a string. */
export interface HttpErrorInfo {
  code?: string;
  message?: string;
}

/**
 * Reads the `error` of an already parsed answer body; `undefined` when the body is not an
 * envelope (no JSON, another server). Fields of the wrong type are left out, not trusted.
 */
export function readHttpError(body: unknown): HttpErrorInfo | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const e = (body as { error?: unknown }).error;
  if (typeof e !== 'object' || e === null) return undefined;
  const { code, message } = e as { code?: unknown; message?: unknown };
  const out: HttpErrorInfo = {};
  if (typeof code === 'string') out.code = code;
  if (typeof message === 'string') out.message = message;
  return out;
}

/**
 * Parses an answer's text as JSON and reads its envelope; `undefined` for empty text, text
 * that is not JSON, or a body that is not an envelope.
 */
export function parseHttpError(text: string): HttpErrorInfo | undefined {
  return readHttpError(parseJsonText(text));
}

/** An answer's text as JSON; `undefined` for empty text or text that is not JSON. */
export function parseJsonText(text: string): unknown {
  if (!text) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}
