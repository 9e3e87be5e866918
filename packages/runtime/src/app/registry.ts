import { type AppSchema, type CommandSchema, type JsonSchema, type MessageSchema, PROTOCOL_VERSION, type TrackSchema } from '@reactor/client';
import { getMetadataStorage } from 'class-validator';
import { targetConstructorToSchema } from 'class-validator-jsonschema';
import { AppDefinitionError, RuntimeErrorCode } from '../errors/errors.js';
import { type AnyClass, type HookKind, readAppOptions, readEvents, readHooks, readTracks } from '../metadata/keys.js';
import { WIRE_NAME_PATTERN, toSnakeCase } from '../metadata/naming.js';
import { Output } from '../output/output.js';
import { type FieldSpec, FieldSet } from '../state/field-set.js';
import { InputState } from '../state/input-state.js';
import type { AppOptions } from './app-options.js';
import { ReactorApp } from './reactor-app.js';

/** Default frames the model may run ahead of playout, per track. */
export const DEFAULT_BUFFER_SIZE = 16;

/** A command, compiled. */
export interface CommandSpec {
  readonly name: string;
  readonly kind: 'setter' | 'event';
  /** Setter: the state field. */
  readonly field?: FieldSpec;
  /** Event: the method and its params. */
  readonly method?: string;
  readonly params?: FieldSet;
  readonly schema: CommandSchema;
}

/** A declared output track, compiled. */
export interface TrackSpec {
  readonly name: string;
  readonly property: string;
  readonly index: number;
  readonly fps: number | undefined;
  readonly width: number | undefined;
  readonly height: number | undefined;
}

export interface MessageSpec {
  readonly name: string;
  readonly schema: MessageSchema;
}

/** Everything the host needs to know about an app class: scanned and checked once, cached. */
export interface AppDefinition {
  readonly appClass: new () => ReactorApp<any, any, any, any>;
  readonly state: FieldSet<InputState>;
  readonly outputClass: (new (...args: any[]) => Output) | undefined;
  readonly tracks: readonly TrackSpec[];
  readonly trackByProperty: ReadonlyMap<string, TrackSpec>;
  readonly fps: number | undefined;
  readonly bufferSize: number;
  readonly commands: ReadonlyMap<string, CommandSpec>;
  readonly hooks: Readonly<Record<HookKind, readonly string[]>>;
  readonly messages: ReadonlyMap<AnyClass, MessageSpec>;
  readonly schema: AppSchema;
}

const cache = new WeakMap<AnyClass, AppDefinition>();

/**
 * Registers an app class: scans its decorators, checks the whole class (state, commands,
 * params, output, messages, options) and builds its schema. The result is cached per class.
 *
 * @throws AppDefinitionError naming the class and member at fault.
 */
export function describeApp(appClass: AnyClass): AppDefinition {
  const hit = cache.get(appClass);
  if (hit) return hit;
  const def = compile(appClass);
  cache.set(appClass, def);
  return def;
}

function compile(appClass: AnyClass): AppDefinition {
  const appName = appClass.name || '(anonymous app)';
  if (typeof appClass !== 'function' || !(appClass.prototype instanceof ReactorApp)) {
    throw new AppDefinitionError(
      RuntimeErrorCode.InvalidApp,
      appName,
      undefined,
      'is not a ReactorApp subclass; declare it as `class MyApp extends ReactorApp<State, Input, Result>`',
    );
  }
  if (typeof (appClass.prototype as { generate?: unknown }).generate !== 'function') {
    throw new AppDefinitionError(RuntimeErrorCode.InvalidApp, appName, 'generate', 'is missing; implement generate(input) to run the model');
  }
  const options = readAppOptions<AppOptions>(appClass) ?? {};
  for (const key of Object.keys(options)) {
    if (!['state', 'output', 'messages', 'fps', 'bufferSize', 'name', 'version', 'description'].includes(key)) {
      throw new AppDefinitionError(
        RuntimeErrorCode.InvalidAppOption,
        appName,
        key,
        'is not an @reactorApp option (state, output, messages, fps, bufferSize, name, version, description)',
      );
    }
  }

  // state
  const stateClass = options.state ?? InputState;
  if (typeof stateClass !== 'function' || (stateClass !== InputState && !(stateClass.prototype instanceof InputState))) {
    throw new AppDefinitionError(RuntimeErrorCode.InvalidStateField, appName, 'state', 'the state class must extend InputState');
  }
  const state = FieldSet.compile<InputState>(stateClass);

  // options
  if (options.fps !== undefined && !(typeof options.fps === 'number' && Number.isFinite(options.fps) && options.fps > 0)) {
    throw new AppDefinitionError(RuntimeErrorCode.InvalidAppOption, appName, 'fps', `must be a positive number, got ${String(options.fps)}`);
  }
  const bufferSize = options.bufferSize ?? DEFAULT_BUFFER_SIZE;
  if (!Number.isInteger(bufferSize) || bufferSize < 1) {
    throw new AppDefinitionError(
      RuntimeErrorCode.InvalidAppOption,
      appName,
      'bufferSize',
      `must be a positive integer (frames), got ${String(options.bufferSize)}`,
    );
  }

  // output
  const outputClass = options.output;
  const tracks: TrackSpec[] = [];
  if (outputClass !== undefined) {
    if (typeof outputClass !== 'function' || !(outputClass.prototype instanceof Output)) {
      throw new AppDefinitionError(RuntimeErrorCode.InvalidOutputClass, appName, 'output', 'the output class must extend Output');
    }
    const records = readTracks(outputClass);
    if (records.length === 0) {
      throw new AppDefinitionError(
        RuntimeErrorCode.InvalidOutputClass,
        outputClass.name,
        undefined,
        'declares no track; add one, e.g. `@Video() mainVideo?: Video;`',
      );
    }
    for (const r of records) {
      const o = r.options;
      if (o.fps !== undefined && !(Number.isFinite(o.fps) && o.fps > 0)) {
        throw new AppDefinitionError(RuntimeErrorCode.InvalidOutputClass, outputClass.name, r.property, `fps must be a positive number, got ${String(o.fps)}`);
      }
      for (const dim of ['width', 'height'] as const) {
        const v = o[dim];
        if (v !== undefined && !(Number.isInteger(v) && v > 0)) {
          throw new AppDefinitionError(
            RuntimeErrorCode.InvalidOutputClass,
            outputClass.name,
            r.property,
            `${dim} must be a positive integer, got ${String(v)}`,
          );
        }
      }
      if ((o.width === undefined) !== (o.height === undefined)) {
        throw new AppDefinitionError(RuntimeErrorCode.InvalidOutputClass, outputClass.name, r.property, 'declare both width and height, or neither');
      }
      tracks.push({ name: toSnakeCase(r.property), property: r.property, index: tracks.length, fps: o.fps ?? options.fps, width: o.width, height: o.height });
    }
  }

  // messages
  const messages = new Map<AnyClass, MessageSpec>();
  const messageNames = new Set<string>();
  for (const m of options.messages ?? []) {
    if (typeof m !== 'function' || !m.name) {
      throw new AppDefinitionError(RuntimeErrorCode.InvalidMessageClass, appName, 'messages', 'every entry must be a named class');
    }
    const name = toSnakeCase(m.name);
    if (messageNames.has(name)) {
      throw new AppDefinitionError(
        RuntimeErrorCode.InvalidMessageClass,
        m.name,
        undefined,
        `its wire name "${name}" is used by another message class; rename one`,
      );
    }
    messageNames.add(name);
    const description = (m as { description?: unknown }).description;
    messages.set(m, { name, schema: { name, ...(typeof description === 'string' ? { description } : {}), schema: messageSchema(m) } });
  }

  // commands: generated setters, then events (an event replaces the setter of its name)
  const commands = new Map<string, CommandSpec>();
  for (const f of state.publicFields) {
    const name = `set_${f.wire}`;
    const params = state.objectSchema([f], [f.wire]);
    commands.set(name, {
      name,
      kind: 'setter',
      field: f,
      schema: { name, description: f.options.description ?? `Sets ${f.wire}.`, kind: 'setter', field: f.wire, params },
    });
  }
  const seenEvents = new Map<string, string>();
  for (const e of readEvents(appClass)) {
    const name = e.options.name ?? toSnakeCase(e.method);
    if (typeof name !== 'string' || !WIRE_NAME_PATTERN.test(name)) {
      throw new AppDefinitionError(
        RuntimeErrorCode.InvalidCommandName,
        appName,
        e.method,
        `command name ${JSON.stringify(name)} must be snake_case ([a-z][a-z0-9_]*)`,
      );
    }
    const other = seenEvents.get(name);
    if (other !== undefined) {
      throw new AppDefinitionError(
        RuntimeErrorCode.DuplicateCommand,
        appName,
        e.method,
        `declares command "${name}", already declared by ${other}; give one a different name`,
      );
    }
    seenEvents.set(name, e.method);
    let params: FieldSet | undefined;
    if (e.options.params !== undefined) {
      try {
        params = FieldSet.compile(e.options.params);
      } catch (err) {
        if (err instanceof AppDefinitionError) throw err;
        throw new AppDefinitionError(
          RuntimeErrorCode.InvalidStateField,
          e.options.params.name,
          undefined,
          `cannot be used as params of ${appName}.${e.method}: ${(err as Error).message}`,
        );
      }
    }
    const paramsSchema: JsonSchema = params ? params.objectSchema() : { type: 'object', properties: {}, additionalProperties: false };
    commands.set(name, {
      name,
      kind: 'event',
      method: e.method,
      params,
      schema: { name, description: e.options.description ?? '', kind: 'event', params: paramsSchema },
    });
  }

  const hooks: Record<HookKind, string[]> = { sessionStarted: [], sessionEnded: [], connected: [], disconnected: [] };
  for (const h of readHooks(appClass)) hooks[h.kind].push(h.method);

  const schema: AppSchema = {
    protocol: PROTOCOL_VERSION,
    app: {
      name: options.name ?? appClass.name,
      version: options.version ?? '0.0.0',
      ...(options.description !== undefined ? { description: options.description } : {}),
    },
    state: state.objectSchema(),
    commands: [...commands.values()].map((c) => c.schema),
    messages: [...messages.values()].map((m) => m.schema),
    tracks: tracks.map((t): TrackSchema => ({ name: t.name, kind: 'video', ...(t.fps !== undefined ? { fps: t.fps } : {}) })),
  };

  return {
    appClass: appClass as new () => ReactorApp<any, any, any, any>,
    state,
    outputClass,
    tracks,
    trackByProperty: new Map(tracks.map((t) => [t.property, t])),
    fps: options.fps,
    bufferSize,
    commands,
    hooks,
    messages,
    schema,
  };
}

/**
 * JSON Schema of a message class: its fields with their types from class-validator constraints
 * (wire names), and the fields its constructor assigns (`constructor(readonly text: string)`),
 * typed by their constraints or left open (`{}`) when they have none. Never a bare `object`:
 * a class without fields publishes `properties: {}`.
 */
function messageSchema(cls: AnyClass): JsonSchema {
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
