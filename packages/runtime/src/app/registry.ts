import { type AppSchema, type CommandSchema, type JsonSchema, type MessageSchema, PROTOCOL_VERSION, type TrackSchema } from '@reactor/protocol';
import { getMetadataStorage } from 'class-validator';
import { targetConstructorToSchema } from 'class-validator-jsonschema';
import { AppDefinitionError, RuntimeErrorCode } from '../errors/errors.js';
import { type AnyClass, type HookKind, type TrackRecord, readAppOptions, readEvents, readHooks, readTracks } from '../metadata/keys.js';
import { WIRE_NAME_PATTERN, toSnakeCase } from '../metadata/naming.js';
import { Input } from '../input/input.js';
import { DEFAULT_INPUT_CAPACITY } from '../input/input-buffer.js';
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
  /** Roles whose clients may send it (default `['controller']`). */
  readonly roles: readonly string[];
  readonly schema: CommandSchema;
}

/** Roles that may send a command whose declaration names none. */
export const DEFAULT_COMMAND_ROLES: readonly string[] = Object.freeze(['controller']);

/** A command's `roles` option, checked: a non-empty list of snake_case role names (undefined: the default). */
function checkRoles(roles: unknown, appName: string, member: string): readonly string[] | undefined {
  if (roles === undefined) return undefined;
  if (!Array.isArray(roles) || roles.length === 0 || roles.some((r) => typeof r !== 'string' || !/^[a-z][a-z0-9_]{0,31}$/.test(r))) {
    throw new AppDefinitionError(
      RuntimeErrorCode.InvalidRoles,
      appName,
      member,
      `roles must be a non-empty list of snake_case role names such as ['controller', 'spectator'], got ${JSON.stringify(roles)}`,
    );
  }
  return Object.freeze([...new Set(roles as string[])]);
}

/** Default sample rate of audio tracks, both directions (Hz). */
export const DEFAULT_SAMPLE_RATE = 48_000;
export { DEFAULT_INPUT_CAPACITY };
/** Defaults of an inbound video track: the capture size and rate asked of clients, and the limits. */
export const DEFAULT_INPUT_VIDEO = { width: 640, height: 480, fps: 30, maxWidth: 1920, maxHeight: 1080 } as const;
/** Default rate limit of an inbound audio track (chunks per second; a browser sends about 50). */
export const DEFAULT_INPUT_AUDIO_MAX_FPS = 100;

/** A declared output track, compiled. */
export interface TrackSpec {
  readonly name: string;
  readonly property: string;
  /** Index in `schema.tracks` (inbound tracks come first), as carried in binary frame headers. */
  readonly index: number;
  readonly kind: 'video' | 'audio';
  readonly fps: number | undefined;
  readonly width: number | undefined;
  readonly height: number | undefined;
  /** Audio tracks: samples per second. */
  readonly sampleRate: number | undefined;
}

/** A declared inbound track (on the app's `Input` class), compiled, with every default applied. */
export interface InputTrackSpec {
  readonly name: string;
  readonly property: string;
  /** Index in `schema.tracks` (inbound tracks come first). */
  readonly index: number;
  readonly kind: 'video' | 'audio';
  /** Buffer capacity (frames or chunks). */
  readonly capacity: number;
  /** Publisher rate limit, frames (audio: chunks) per second. */
  readonly maxFps: number;
  /** Video: capture size and rate asked of clients, and the largest accepted frame. */
  readonly width: number | undefined;
  readonly height: number | undefined;
  readonly fps: number | undefined;
  readonly maxWidth: number | undefined;
  readonly maxHeight: number | undefined;
  /** Audio: samples per second. */
  readonly sampleRate: number | undefined;
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
  /** Outbound tracks, in declaration order (`index` is their place in `schema.tracks`). */
  readonly tracks: readonly TrackSpec[];
  readonly inputClass: (new (...args: any[]) => Input) | undefined;
  /** Inbound tracks, in declaration order (`index` 0..n-1 in `schema.tracks`). */
  readonly inputTracks: readonly InputTrackSpec[];
  readonly inputTrackByName: ReadonlyMap<string, InputTrackSpec>;
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
    if (!['state', 'input', 'output', 'messages', 'fps', 'bufferSize', 'name', 'version', 'description'].includes(key)) {
      throw new AppDefinitionError(
        RuntimeErrorCode.InvalidAppOption,
        appName,
        key,
        'is not an @reactorApp option (state, input, output, messages, fps, bufferSize, name, version, description)',
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

  // input
  const inputClass = options.input;
  const inputTracks: InputTrackSpec[] = [];
  if (inputClass !== undefined) {
    if (typeof inputClass !== 'function' || !(inputClass.prototype instanceof Input)) {
      throw new AppDefinitionError(RuntimeErrorCode.InvalidInputClass, appName, 'input', 'the input class must extend Input');
    }
    const records = readTracks(inputClass);
    if (records.length === 0) {
      throw new AppDefinitionError(
        RuntimeErrorCode.InvalidInputClass,
        inputClass.name,
        undefined,
        'declares no track; add one, e.g. `@Video() webcam!: InputBuffer;`',
      );
    }
    for (const r of records) inputTracks.push(compileInputTrack(inputClass.name, r, inputTracks.length));
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
      const name = toSnakeCase(r.property);
      if (inputTracks.some((t) => t.name === name)) {
        throw new AppDefinitionError(
          RuntimeErrorCode.InvalidOutputClass,
          outputClass.name,
          r.property,
          `track "${name}" is also an inbound track of ${inputClass?.name ?? 'the input class'}; a track name has one direction, rename one of them`,
        );
      }
      const index = inputTracks.length + tracks.length;
      if (r.kind === 'audio') {
        const sampleRate = checkSampleRate(outputClass.name, r.property, r.options.sampleRate);
        for (const k of ['maxFps', 'capacity'] as const) {
          if (r.options[k] !== undefined)
            throw new AppDefinitionError(
              RuntimeErrorCode.InvalidOutputClass,
              outputClass.name,
              r.property,
              `${k} applies to inbound tracks only (declare it on an Input class)`,
            );
        }
        tracks.push({ name, property: r.property, index, kind: 'audio', fps: options.fps, width: undefined, height: undefined, sampleRate });
        continue;
      }
      const o = r.options;
      for (const k of ['maxWidth', 'maxHeight', 'maxFps', 'capacity'] as const) {
        if (o[k] !== undefined)
          throw new AppDefinitionError(
            RuntimeErrorCode.InvalidOutputClass,
            outputClass.name,
            r.property,
            `${k} applies to inbound tracks only (declare it on an Input class)`,
          );
      }
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
      tracks.push({ name, property: r.property, index, kind: 'video', fps: o.fps ?? options.fps, width: o.width, height: o.height, sampleRate: undefined });
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
    const roles = checkRoles(f.options.roles, appName, f.property);
    commands.set(name, {
      name,
      kind: 'setter',
      field: f,
      roles: roles ?? DEFAULT_COMMAND_ROLES,
      schema: { name, description: f.options.description ?? `Sets ${f.wire}.`, kind: 'setter', field: f.wire, params, ...(roles && { roles: [...roles] }) },
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
    const roles = checkRoles(e.options.roles, appName, e.method);
    commands.set(name, {
      name,
      kind: 'event',
      method: e.method,
      params,
      roles: roles ?? DEFAULT_COMMAND_ROLES,
      schema: { name, description: e.options.description ?? '', kind: 'event', params: paramsSchema, ...(roles && { roles: [...roles] }) },
    });
  }

  const hooks: Record<HookKind, string[]> = {
    sessionStarted: [],
    sessionEnded: [],
    connected: [],
    disconnected: [],
    trackPublished: [],
    trackUnpublished: [],
    fileUploaded: [],
  };
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
    tracks: [...inputTracks.map(inputTrackSchema), ...tracks.map(outputTrackSchema)],
  };

  return {
    appClass: appClass as new () => ReactorApp<any, any, any, any>,
    state,
    outputClass,
    tracks,
    inputClass,
    inputTracks,
    inputTrackByName: new Map(inputTracks.map((t) => [t.name, t])),
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

function checkSampleRate(owner: string, property: string, rate: number | undefined): number {
  if (rate === undefined) return DEFAULT_SAMPLE_RATE;
  if (!(Number.isInteger(rate) && rate >= 8_000 && rate <= 192_000)) {
    throw new AppDefinitionError(RuntimeErrorCode.InvalidTrack, owner, property, `sampleRate must be an integer from 8000 to 192000 (Hz), got ${String(rate)}`);
  }
  return rate;
}

function positiveInteger(owner: string, property: string, key: string, v: number | undefined, fallback: number): number {
  if (v === undefined) return fallback;
  if (!(Number.isInteger(v) && v > 0))
    throw new AppDefinitionError(RuntimeErrorCode.InvalidTrack, owner, property, `${key} must be a positive integer, got ${String(v)}`);
  return v;
}

function positiveNumber(owner: string, property: string, key: string, v: number | undefined, fallback: number): number {
  if (v === undefined) return fallback;
  if (!(Number.isFinite(v) && v > 0))
    throw new AppDefinitionError(RuntimeErrorCode.InvalidTrack, owner, property, `${key} must be a positive number, got ${String(v)}`);
  return v;
}

function compileInputTrack(owner: string, r: TrackRecord, index: number): InputTrackSpec {
  const name = toSnakeCase(r.property);
  const capacity = positiveInteger(owner, r.property, 'capacity', r.options.capacity, DEFAULT_INPUT_CAPACITY);
  if (r.kind === 'audio') {
    const sampleRate = checkSampleRate(owner, r.property, r.options.sampleRate);
    const maxFps = positiveNumber(owner, r.property, 'maxFps', r.options.maxFps, DEFAULT_INPUT_AUDIO_MAX_FPS);
    return {
      name,
      property: r.property,
      index,
      kind: 'audio',
      capacity,
      maxFps,
      sampleRate,
      width: undefined,
      height: undefined,
      fps: undefined,
      maxWidth: undefined,
      maxHeight: undefined,
    };
  }
  const o = r.options;
  const d = DEFAULT_INPUT_VIDEO;
  const maxWidth = positiveInteger(owner, r.property, 'maxWidth', o.maxWidth, Math.max(d.maxWidth, o.width ?? 0));
  const maxHeight = positiveInteger(owner, r.property, 'maxHeight', o.maxHeight, Math.max(d.maxHeight, o.height ?? 0));
  const width = positiveInteger(owner, r.property, 'width', o.width, Math.min(d.width, maxWidth));
  const height = positiveInteger(owner, r.property, 'height', o.height, Math.min(d.height, maxHeight));
  if (width > maxWidth || height > maxHeight) {
    throw new AppDefinitionError(
      RuntimeErrorCode.InvalidTrack,
      owner,
      r.property,
      `the capture size ${width}x${height} exceeds the limit ${maxWidth}x${maxHeight}`,
    );
  }
  const fps = positiveNumber(owner, r.property, 'fps', o.fps, d.fps);
  const maxFps = positiveNumber(owner, r.property, 'maxFps', o.maxFps, fps * 2);
  return { name, property: r.property, index, kind: 'video', capacity, maxFps, width, height, fps, maxWidth, maxHeight, sampleRate: undefined };
}

function inputTrackSchema(t: InputTrackSpec): TrackSchema {
  const base = { name: t.name, kind: t.kind, direction: 'in' as const, maxFps: t.maxFps };
  if (t.kind === 'audio') return { ...base, sampleRate: t.sampleRate! };
  return { ...base, width: t.width!, height: t.height!, fps: t.fps!, maxWidth: t.maxWidth!, maxHeight: t.maxHeight! };
}

function outputTrackSchema(t: TrackSpec): TrackSchema {
  if (t.kind === 'audio') return { name: t.name, kind: 'audio', direction: 'out', sampleRate: t.sampleRate! };
  return { name: t.name, kind: 'video', direction: 'out', ...(t.fps !== undefined ? { fps: t.fps } : {}) };
}
