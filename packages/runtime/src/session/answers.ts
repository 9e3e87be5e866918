/**
 * The host's own answers to commands (`error` messages), bounded in size: whatever a client
 * sends, an answer lists at most {@link MAX_ERROR_DETAILS} details and then counts the rest.
 */
import { type ErrorMessage, type FieldError, WireErrorCode } from '@reactor/protocol';
import { truncateCodePoints } from '../state/field-errors.js';

/** Details an `invalid_params` answer lists before it counts the rest. */
export const MAX_ERROR_DETAILS = 5;
/** The constraint name of the last detail when details were left out. */
export const MORE_DETAILS_CONSTRAINT = 'moreErrors';

export function errorReply(id: string, code: string, message: string): ErrorMessage {
  return { type: 'error', id, code, message };
}

/**
 * An `invalid_params` answer: the first {@link MAX_ERROR_DETAILS} details, then (when there were
 * more) one `moreErrors` detail counting the rest; the message joins the listed ones.
 */
export function invalidParams(id: string, command: string, details: readonly FieldError[]): ErrorMessage {
  const shown: FieldError[] = details.slice(0, MAX_ERROR_DETAILS).map((d) => ({ ...d, field: truncateCodePoints(d.field) }));
  const rest = details.length - shown.length;
  const text = shown.map((d) => d.message).join('; ') + (rest > 0 ? `; and ${rest} more` : '');
  if (rest > 0) shown.push({ field: 'params', constraint: MORE_DETAILS_CONSTRAINT, message: `${rest} more problem${rest === 1 ? '' : 's'} not listed` });
  return { type: 'error', id, code: WireErrorCode.InvalidParams, message: `invalid params for ${command}: ${text}`, details: shown };
}
