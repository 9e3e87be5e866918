import { type AppSchema, type MessageSchema, PROTOCOL_VERSION } from '@reactor/protocol';
import { AppDefinitionError, RuntimeErrorCode } from '../errors/errors.js';
import { type AnyClass, type HookKind, readAppOptions, readHooks, readTracks } from '../metadata/keys.js';
import { toSnakeCase } from '../metadata/naming.js';
import { Input } from '../input/input.js';
import { Output } from '../output/output.js';
import { FieldSet } from '../state/field-set.js';
import { InputState } from '../state/input-state.js';
import type { AppOptions } from './app-options.js';
import { type CommandSpec, compileCommands } from './command-specs.js';
import { messageSchema } from './message-schema.js';
import { REWIND_COMMAND, type SnapshotSpec, compileSnapshot } from './snapshot-spec.js';
import { ReactorApp } from './reactor-app.js';
import { type InputTrackSpec, type TrackSpec, checkSampleRate, compileInputTrack, inputTrackSchema, outputTrackSchema } from './track-specs.js';

/** Default frames the model may run ahead of playout, per track. */
export const DEFAULT_BUFFER_SIZE = 16;

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
  /** When each step starts (see `AppOptions.pacing`). */
  readonly pacing: 'just-in-time' | 'ahead';
  readonly commands: ReadonlyMap<string, CommandSpec>;
  readonly hooks: Readonly<Record<HookKind, readonly string[]>>;
  readonly messages: ReadonlyMap<AnyClass, MessageSpec>;
  readonly schema: AppSchema;
  /** `@reactorApp({ snapshot })`, checked; undefined: the app takes no snapshots. */
  readonly snapshot: SnapshotSpec | undefined;
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
    if (!['state', 'input', 'output', 'messages', 'fps', 'bufferSize', 'pacing', 'name', 'version', 'description', 'snapshot'].includes(key)) {
      throw new AppDefinitionError(
        RuntimeErrorCode.InvalidAppOption,
        appName,
        key,
        'is not an @reactorApp option (state, input, output, messages, fps, bufferSize, pacing, name, version, description, snapshot)',
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
  const pacing = options.pacing ?? 'just-in-time';
  if (pacing !== 'just-in-time' && pacing !== 'ahead') {
    throw new AppDefinitionError(
      RuntimeErrorCode.InvalidAppOption,
      appName,
      'pacing',
      `must be 'just-in-time' or 'ahead', got ${JSON.stringify(options.pacing)}`,
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
  const commands = compileCommands(appClass, appName, state);

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
  const snapshot = compileSnapshot(appName, appClass, options.snapshot, schema);
  if (snapshot) {
    if (commands.has(REWIND_COMMAND)) {
      throw new AppDefinitionError(
        RuntimeErrorCode.DuplicateCommand,
        appName,
        commands.get(REWIND_COMMAND)!.method ?? REWIND_COMMAND,
        `declares command "${REWIND_COMMAND}", which an app with snapshots gets built in; rename it`,
      );
    }
    commands.set(REWIND_COMMAND, snapshot.command);
    schema.commands.push(snapshot.command.schema);
  }

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
    pacing,
    commands,
    hooks,
    messages,
    schema,
    snapshot: snapshot?.spec,
  };
}
