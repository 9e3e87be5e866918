/** The JSON Schema of an app's message classes (`@reactorApp({ messages })`). */
import type { JsonSchema } from '@reactor/protocol';
import { getMetadataStorage } from 'class-validator';
import { targetConstructorToSchema } from 'class-validator-jsonschema';
import type { AnyClass } from '../metadata/keys.js';
import { toSnakeCase } from '../metadata/naming.js';

/**
 * JSON Schema of a message class: its fields with their types from class-validator constraints
 * (wire names), and the fields its constructor assigns (`constructor(readonly text: string)`),
 * typed by their constraints or left open (`{}`) when they have none. Never a bare `object`:
 * a class without fields publishes `properties: {}`.
 */
export function messageSchema(cls: AnyClass): JsonSchema {
  const metas = getMetadataStorage().getTargetValidationMetadatas(cls, '', true, false);
  const properties: Record<string, JsonSchema> = {};
  let required: string[] = [];
  if (metas.length > 0) {
    const s = targetConstructorToSchema(cls) as JsonSchema;
    for (const [k, v] of Object.entries((s.properties ?? {}) as Record<string, JsonSchema>)) properties[toSnakeCase(k)] = v;
    if (Array.isArray(s.required)) required = (s.required as string[]).map(toSnakeCase);
  }
  for (const field of assignedFields(cls)) properties[toSnakeCase(field)] ??= {};
  const out: JsonSchema = { type: 'object', properties };
  if (required.length > 0) out.required = required;
  return out;
}

/** Names of the instance fields a class (and its bases) assigns in code (`this.x = ...`), in order. */
function assignedFields(cls: AnyClass): string[] {
  const names: string[] = [];
  for (let c: unknown = cls; typeof c === 'function' && c !== Function.prototype && c !== Object; c = Object.getPrototypeOf(c)) {
    const source = constructorBody(Function.prototype.toString.call(c));
    const own: string[] = [];
    for (const m of source.matchAll(/\bthis\.([A-Za-z_$][\w$]*)\s*=(?!=)/g)) if (!own.includes(m[1]!)) own.push(m[1]!);
    names.unshift(...own.filter((n) => !names.includes(n)));
  }
  return names;
}

/** The body of a class's `constructor(...) { ... }` in its source, or '' when it has none. */
function constructorBody(source: string): string {
  const start = source.indexOf('constructor(');
  if (start < 0) return '';
  let i = start + 'constructor'.length;
  let depth = 0;
  // The parameter list (defaults may hold parentheses), then the body's braces.
  for (; i < source.length; i++) {
    if (source[i] === '(') depth++;
    else if (source[i] === ')' && --depth === 0) break;
  }
  const open = source.indexOf('{', i);
  if (open < 0) return '';
  depth = 0;
  for (let j = open; j < source.length; j++) {
    if (source[j] === '{') depth++;
    else if (source[j] === '}' && --depth === 0) return source.slice(open + 1, j);
  }
  return '';
}
