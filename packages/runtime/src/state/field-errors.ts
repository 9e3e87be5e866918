/**
 * Field errors as clients receive them (`invalid_params` details): the real cause first, and
 * never more of the client's own input echoed than {@link MAX_ECHO_LENGTH} code points.
 */
import type { FieldError } from '@reactor/protocol';

/** Code points of client input (a key, a command name) an error echoes. */
export const MAX_ECHO_LENGTH = 64;

/**
 * Constraints that check a value's type. When one of them fails for a field, the field's other
 * constraints (`maxLength`, `min`, `max` ...) are not reported: they only fail because of the
 * type, and would hide the real cause.
 */
const TYPE_CONSTRAINTS = new Set(['isDefined', 'isString', 'isNumber', 'isInt', 'isBoolean', 'isArray', 'isObject', 'isDate', 'isEnum', 'isNumberString']);

/** Length in Unicode code points (what JSON Schema's `maxLength` counts), not UTF-16 units. */
export function codePointLength(text: string): number {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

/** `text` cut to `max` code points, with `…` when it was longer. */
export function truncateCodePoints(text: string, max = MAX_ECHO_LENGTH): string {
  if (text.length <= max) return text;
  const points = Array.from(text);
  return points.length <= max ? text : `${points.slice(0, max).join('')}…`;
}

/** The detail for a key the params (or state) class does not declare; the key echoed, cut. */
export function unknownKey(key: string): FieldError {
  const k = truncateCodePoints(key);
  return { field: k, constraint: 'whitelistValidation', message: `property ${k} should not exist` };
}

/** One field's failed constraints, the type check alone when it failed (see {@link TYPE_CONSTRAINTS}). */
export function realCauses(constraints: ReadonlyArray<readonly [constraint: string, message: string]>): Array<readonly [string, string]> {
  const typeFailures = constraints.filter(([c]) => TYPE_CONSTRAINTS.has(c));
  return typeFailures.length > 0 ? typeFailures : [...constraints];
}
