/** `@reactorApp({ snapshot })`, checked: what a session snapshot holds and how the rewind ring keeps it (docs/snapshots.md). */
import { createHash } from 'node:crypto';
import type { AppSchema, CommandSchema } from '@reactor/protocol';
import { AppDefinitionError, RuntimeErrorCode } from '../errors/errors.js';
import type { SnapshotOptions } from './app-options.js';
import type { CommandSpec } from './command-specs.js';

/** The built-in command that restores a snapshot of the ring. */
export const REWIND_COMMAND = 'rewind';

/** An app's snapshot options, with their defaults. */
export interface SnapshotSpec {
  readonly fields: readonly string[];
  readonly everySteps: number;
  readonly ringBytes: number;
  readonly maxBytes: number;
  readonly rewindRoles: readonly string[];
  readonly rewindsPerSecond: number;
  /** SHA-256 (hex) of the app's schema and `fields`: a snapshot restores only into the same one. */
  readonly schemaHash: string;
}

const KEYS = ['fields', 'everySteps', 'ringBytes', 'maxBytes', 'rewindRoles', 'rewindsPerSecond'];

/** The `rewind` command's schema: `seq` (a frame the viewer saw) or `seconds` back. */
export const REWIND_SCHEMA: CommandSchema = {
  name: REWIND_COMMAND,
  description: 'Goes back to a snapshot of the session: the newest taken at or before frame `seq`, or `seconds` ago (one of the two).',
  kind: 'event',
  params: {
    type: 'object',
    properties: {
      seq: { type: 'integer', minimum: 0, description: 'A frame seq: back to the newest snapshot whose first frame is at or before it.' },
      seconds: { type: 'number', exclusiveMinimum: 0, description: 'How far back, in seconds of played frames.' },
    },
    additionalProperties: false,
  },
};

function fail(appName: string, key: string, message: string): never {
  throw new AppDefinitionError(RuntimeErrorCode.InvalidAppOption, appName, `snapshot.${key}`, message);
}

/** The ring settings an operator may override (`reactor.yaml` `snapshots:`, `AppHostOptions.snapshots`). */
export const RING_KEYS = ['everySteps', 'ringBytes', 'maxBytes', 'rewindsPerSecond'] as const;

/** What is wrong with a ring setting's value (`rewindsPerSecond` a positive number, the others positive integers), or undefined. */
export function ringValueProblem(key: (typeof RING_KEYS)[number], v: unknown): string | undefined {
  if (key === 'rewindsPerSecond') return typeof v === 'number' && Number.isFinite(v) && v > 0 ? undefined : `must be a positive number, got ${String(v)}`;
  return typeof v === 'number' && Number.isInteger(v) && v >= 1 ? undefined : `must be a positive integer, got ${String(v)}`;
}

function ringValue(appName: string, key: (typeof RING_KEYS)[number], v: unknown, dflt: number): number {
  if (v === undefined) return dflt;
  const problem = ringValueProblem(key, v);
  if (problem) fail(appName, key, problem);
  return v as number;
}

/** The snapshot spec of an app (undefined: it takes no snapshots), and its `rewind` command. */
export function compileSnapshot(
  appName: string,
  appClass: { prototype: object },
  options: SnapshotOptions | undefined,
  schema: AppSchema,
): { spec: SnapshotSpec; command: CommandSpec } | undefined {
  if (options === undefined) return undefined;
  if (options === null || typeof options !== 'object') fail(appName, '', 'must be an object');
  for (const k of Object.keys(options)) if (!KEYS.includes(k)) fail(appName, k, `is not a snapshot option (${KEYS.join(', ')})`);
  const fields = options.fields ?? [];
  if (!Array.isArray(fields) || fields.some((f) => typeof f !== 'string' || f.length === 0)) fail(appName, 'fields', 'must be a list of property names');
  const proto = appClass.prototype as Record<string, unknown>;
  for (const f of fields) {
    if (typeof Object.getOwnPropertyDescriptor(proto, f)?.value === 'function') fail(appName, 'fields', `${f} is a method, not a property`);
  }
  const roles = options.rewindRoles ?? ['controller'];
  if (!Array.isArray(roles) || roles.length === 0 || roles.some((r) => typeof r !== 'string' || !/^[a-z][a-z0-9_]{0,31}$/.test(r))) {
    fail(appName, 'rewindRoles', `must be a non-empty list of snake_case role names, got ${JSON.stringify(roles)}`);
  }
  const perSecond = ringValue(appName, 'rewindsPerSecond', options.rewindsPerSecond, 2);
  const maxBytes = ringValue(appName, 'maxBytes', options.maxBytes, 32 * 1024 * 1024);
  const ringBytes = ringValue(appName, 'ringBytes', options.ringBytes, 64 * 1024 * 1024);
  const schemaHash = createHash('sha256')
    .update(JSON.stringify({ state: schema.state, tracks: schema.tracks, fields: [...fields].sort() }))
    .digest('hex');
  const spec: SnapshotSpec = Object.freeze({
    fields: Object.freeze([...fields]),
    everySteps: ringValue(appName, 'everySteps', options.everySteps, 8),
    ringBytes,
    maxBytes,
    rewindRoles: Object.freeze([...new Set(roles)]),
    rewindsPerSecond: perSecond,
    schemaHash,
  });
  const commandSchema: CommandSchema = { ...REWIND_SCHEMA, ...(options.rewindRoles && { roles: [...spec.rewindRoles] }) };
  return { spec, command: { name: REWIND_COMMAND, kind: 'event', urgent: false, roles: spec.rewindRoles, builtin: 'rewind', schema: commandSchema } };
}
