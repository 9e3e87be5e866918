/**
 * Errors across the process boundary: a rank turns a thrown value into a {@link WireError}; the
 * parent rebuilds it, as an instance of the worker module's own exported class when there is one.
 * @internal
 */
import type { WireError } from '../protocol.js';

const SKIP_PROPS = new Set(['name', 'message', 'stack', 'cause', 'code']);

/** Turns anything thrown into a JSON-safe {@link WireError}. */
export function serializeError(value: unknown, depth = 0): WireError {
  if (!(value instanceof Error)) {
    return { name: 'Error', type: 'Error', message: `A non-Error value was thrown: ${safeString(value)}` };
  }
  const wire: WireError = {
    name: value.name,
    type: value.constructor?.name || value.name,
    message: value.message,
  };
  if (value.stack !== undefined) wire.stack = value.stack;
  const code = (value as { code?: unknown }).code;
  if (code !== undefined && isJsonSafe(code)) wire.code = code;
  const props: Record<string, unknown> = {};
  let any = false;
  for (const key of Object.keys(value)) {
    if (SKIP_PROPS.has(key)) continue;
    const v = (value as unknown as Record<string, unknown>)[key];
    if (isJsonSafe(v)) {
      props[key] = v;
      any = true;
    }
  }
  if (any) wire.props = props;
  if (value.cause !== undefined && depth < 4) wire.cause = serializeError(value.cause, depth + 1);
  return wire;
}

function isJsonSafe(v: unknown): boolean {
  try {
    return JSON.stringify(v) !== undefined;
  } catch {
    return false;
  }
}

function safeString(v: unknown): string {
  try {
    return typeof v === 'string' ? JSON.stringify(v) : String(v);
  } catch {
    return Object.prototype.toString.call(v);
  }
}

/** An error class exported by a worker module. */
export type ErrorClass = abstract new (...args: never[]) => Error;

/** Every `Error` subclass a module exports, by class name and by export name. */
export function collectErrorClasses(moduleNamespace: Record<string, unknown>): Map<string, ErrorClass> {
  const classes = new Map<string, ErrorClass>();
  for (const [exportName, v] of Object.entries(moduleNamespace)) {
    if (typeof v === 'function' && v.prototype instanceof Error) {
      classes.set(v.name, v as ErrorClass);
      if (exportName !== 'default') classes.set(exportName, v as ErrorClass);
    }
  }
  return classes;
}

/** Parent-side facts attached to every rebuilt error. */
export interface RankErrorFields {
  /** The rank that threw. */
  rank: number;
  /** The rank's stack trace, as the rank printed it. */
  rankStack?: string;
}

/**
 * Rebuilds a rank's error. If the worker module exports a class of that name the result is an
 * instance of it (its constructor is not run; fields are copied); otherwise an `Error` with the
 * rank's name. Either way it carries `rank` and the rank's stack.
 */
export function reviveError(wire: WireError, rank: number, classes: ReadonlyMap<string, ErrorClass>): Error & RankErrorFields {
  const Cls = classes.get(wire.type);
  const err: Error = Cls ? (Object.create(Cls.prototype) as Error) : new Error(wire.message);
  Object.defineProperty(err, 'message', { value: wire.message, writable: true, configurable: true, enumerable: false });
  if (!Cls || err.name !== wire.name) {
    Object.defineProperty(err, 'name', { value: wire.name, writable: true, configurable: true, enumerable: false });
  }
  if (wire.props) Object.assign(err, wire.props);
  if (wire.code !== undefined) (err as { code?: unknown }).code = wire.code;
  if (wire.cause) {
    Object.defineProperty(err, 'cause', { value: reviveError(wire.cause, rank, classes), writable: true, configurable: true, enumerable: false });
  }
  const fields = err as Error & RankErrorFields;
  Object.defineProperty(fields, 'rank', { value: rank, writable: true, configurable: true, enumerable: true });
  if (wire.stack !== undefined) {
    Object.defineProperty(fields, 'rankStack', { value: wire.stack, writable: true, configurable: true, enumerable: false });
    // The rank's stack is where the error happened; the parent's frames say nothing useful.
    Object.defineProperty(fields, 'stack', { value: `${wire.stack}\n    at <rank ${rank}>`, writable: true, configurable: true, enumerable: false });
  }
  return fields;
}
