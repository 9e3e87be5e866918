/**
 * The one place where decorator metadata lives. Decorators only write here; the registry
 * (`app/registry.ts`) reads it back once per app class and caches the result.
 */
import 'reflect-metadata';
import { DecoratorMisuseError } from '../errors/errors.js';

/** Any class (constructor), abstract or not. */
export type AnyClass = abstract new (...args: any[]) => any;

/** Metadata keys (symbols: nothing outside this module can collide with them). */
export const MetadataKey = {
  InputFields: Symbol('reactor:input-fields'),
  Events: Symbol('reactor:events'),
  Hooks: Symbol('reactor:hooks'),
  Tracks: Symbol('reactor:tracks'),
  AppOptions: Symbol('reactor:app-options'),
} as const;

/** Options of {@link InputField}. */
export interface InputFieldOptions<T = unknown> {
  /** Initial value in a fresh session's state. Absent: the field is required. Must be a primitive or a frozen value. */
  default?: T;
  /** For mutable initial values (arrays, objects): called once per session. */
  defaultFactory?: () => T;
  /** Shown in the schema and the viewer. */
  description?: string;
  /** Marks the field for content moderation in the published schema (`x-moderate: true`); nothing else. */
  moderate?: boolean;
  /**
   * Roles whose clients may run this field's setter (`set_<field>`); default `['controller']`.
   * A client's role comes from its token (`controller`, `spectator`, or the app's own).
   */
  roles?: readonly string[];
  /**
   * Marks the field as held keys (an action field): `KeyboardEvent.key` (lower case) -> the value
   * the field's array holds while that key is down, e.g. `{ w: 'forward', a: 'turn_left' }`.
   * Published as `x-reactor-keys`; the viewer then sends the held set on every key down and up
   * (and `[]` when its window loses focus). The field should be a string array whose values the
   * constraints allow (`@IsIn([...], { each: true })`).
   */
  keys?: Readonly<Record<string, string>>;
  /**
   * Marks the field urgent (issue 39): a change supersedes the work in flight for frames not yet
   * shown. When its setter arrives during a step, the step's {@link ReactorApp.restartSignal}
   * aborts (an app that passes it to its runner call gets that call cancelled, and the step runs
   * again with the new value), and the frames still queued from the old value are dropped as
   * `this.output.flush()` drops them; its `applied` names the first frame of the new one.
   * Rate-limited: at most one urgent change (one restart) per chunk; a later one in the same chunk
   * applies as an ordinary change, at the next step.
   */
  urgent?: boolean;
}

/** Options of `@UploadField`: what a file must be for this field or parameter to take it. */
export interface UploadFieldOptions {
  /** Largest accepted file, bytes (default: whatever the server accepts, `maxUploadBytes`). */
  maxBytes?: number;
  /**
   * Accepted types, as found in the bytes (`image/png`, or a whole family: `image/*`). Default:
   * every type the server accepts.
   */
  mimeTypes?: readonly string[];
  /** Shown in the schema and the viewer. */
  description?: string;
}

/** One `@InputField` (or `@UploadField`) as recorded. */
export interface InputFieldRecord {
  readonly property: string;
  readonly options: InputFieldOptions;
  readonly hasDefault: boolean;
  /** Present for an `@UploadField`: the field takes an uploaded file. */
  readonly upload?: { readonly maxBytes: number | undefined; readonly mimeTypes: readonly string[] | undefined };
}

/** Options of {@link event}. */
export interface EventOptions<P extends object = object> {
  /** Wire name of the command; default: the method name in snake_case. */
  name?: string;
  description?: string;
  /** Class of the parameters object, its fields declared with `@InputField` + class-validator. */
  params?: new () => P;
  /**
   * Roles whose clients may send this command; default `['controller']`. Others get
   * `forbidden_role`. A client's role comes from its token (`controller`, `spectator`, or the app's own).
   * @example @event({ roles: ['controller', 'spectator'] }) like() { ... }
   */
  roles?: readonly string[];
  /**
   * Marks the command urgent (issue 39), as `@InputField({ urgent: true })` marks a field: when it
   * arrives during a step, the step's {@link ReactorApp.restartSignal} aborts before the command
   * queues for the lock, the step is dropped, the handler runs, the frames still queued from before
   * it are dropped as `this.output.flush()` drops them (once: a handler that flushed itself is not
   * flushed again), and its `applied` names the first frame of the step after it. With steps in
   * flight (`inFlight` > 1) it cancels them instead of draining them: the handler runs with nothing
   * in flight and nothing of them processed. Rate-limited with the urgent fields: at most one
   * urgent change (one restart) per chunk; a later one in the same chunk runs as an ordinary event.
   * @example @event({ name: 'reset', urgent: true }) async reset() { await this.runner.reset(); }
   */
  urgent?: boolean;
}

export interface EventRecord {
  readonly method: string;
  readonly options: EventOptions;
}

/** Lifecycle hook kinds. */
export type HookKind = 'sessionStarted' | 'sessionEnded' | 'connected' | 'disconnected' | 'trackPublished' | 'trackUnpublished' | 'fileUploaded';

export interface HookRecord {
  readonly kind: HookKind;
  readonly method: string;
}

/**
 * Options of the `@Video()` track decorator. On an `Output` (outbound): `fps`, `width`,
 * `height`. On an `Input` (inbound): `width`, `height` and `fps` are what clients are asked to
 * capture (default 640x480 at 30), `maxWidth`/`maxHeight` the largest frame accepted (default
 * 1920x1080), `maxFps` the publisher's rate limit (default twice `fps`), `capacity` the
 * buffer's size (default 128).
 */
export interface VideoTrackOptions {
  /** Outbound: pins this track's playout rate (overrides the app's `fps`). Inbound: the capture rate asked of clients. */
  fps?: number;
  /** Outbound: fixed frame size, so payloads may be bare `Uint8Array`s. Inbound: the capture size asked of clients. */
  width?: number;
  height?: number;
  /** Inbound only: largest accepted frame side, pixels. */
  maxWidth?: number;
  maxHeight?: number;
  /** Inbound only: frames per second accepted from the publisher; more are dropped and counted. */
  maxFps?: number;
  /** Inbound only: frames the track's `InputBuffer` holds before the oldest is evicted (default 128). */
  capacity?: number;
  description?: string;
}

/**
 * Options of the `@Audio()` track decorator: mono signed 16-bit PCM at `sampleRate` (default
 * 48000), in either direction. Inbound only: `maxFps` (chunks per second accepted, default 100)
 * and `capacity` (chunks buffered, default 128).
 */
export interface AudioTrackOptions {
  sampleRate?: number;
  maxFps?: number;
  capacity?: number;
  description?: string;
}

/** What a track decorator records (`@Video()`/`@Audio()` on an `Input` or an `Output` subclass). */
export type TrackRecord =
  | { readonly property: string; readonly kind: 'video'; readonly options: VideoTrackOptions }
  | { readonly property: string; readonly kind: 'audio'; readonly options: AudioTrackOptions };

function ownList<T>(key: symbol, target: object): T[] {
  let list = Reflect.getOwnMetadata(key, target) as T[] | undefined;
  if (!list) {
    list = [];
    Reflect.defineMetadata(key, list, target);
  }
  return list;
}

/** Own records of one class (prototype) only; the registry walks the chain. */
function readOwn<T>(key: symbol, target: object): readonly T[] {
  return (Reflect.getOwnMetadata(key, target) as T[] | undefined) ?? [];
}

export function recordInputField(proto: object, record: InputFieldRecord): void {
  const list = ownList<InputFieldRecord>(MetadataKey.InputFields, proto);
  const prior = list.find((r) => r.property === record.property);
  if (prior) {
    const both = prior.upload !== undefined || record.upload !== undefined;
    throw new DecoratorMisuseError(
      both
        ? `@UploadField and @InputField on ${className(proto)}.${record.property}: an upload field takes @UploadField alone (once)`
        : `@InputField applied twice to ${className(proto)}.${record.property}`,
    );
  }
  list.push(record);
}

export function recordEvent(proto: object, record: EventRecord): void {
  const list = ownList<EventRecord>(MetadataKey.Events, proto);
  if (list.some((r) => r.method === record.method)) {
    throw new DecoratorMisuseError(`@event applied twice to ${className(proto)}.${record.method}`);
  }
  list.push(record);
}

export function recordHook(proto: object, record: HookRecord): void {
  const list = ownList<HookRecord>(MetadataKey.Hooks, proto);
  if (list.some((r) => r.method === record.method && r.kind === record.kind)) {
    throw new DecoratorMisuseError(`@${record.kind} applied twice to ${className(proto)}.${record.method}`);
  }
  list.push(record);
}

export function recordTrack(proto: object, record: TrackRecord): void {
  const list = ownList<TrackRecord>(MetadataKey.Tracks, proto);
  if (list.some((r) => r.property === record.property)) {
    throw new DecoratorMisuseError(`a track decorator is applied twice to ${className(proto)}.${record.property}`);
  }
  list.push(record);
}

export function recordAppOptions(ctor: object, options: object): void {
  if (Reflect.getOwnMetadata(MetadataKey.AppOptions, ctor) !== undefined) {
    throw new DecoratorMisuseError(`@reactorApp applied twice to ${(ctor as { name?: string }).name ?? 'a class'}`);
  }
  Reflect.defineMetadata(MetadataKey.AppOptions, options, ctor);
}

/** Collects records along the prototype chain, base class first; a subclass entry replaces the base's entry with the same key. */
function readChain<T>(key: symbol, ctor: AnyClass, id: (r: T) => string): T[] {
  const chain: object[] = [];
  for (let p: object | null = ctor.prototype as object; p && p !== Object.prototype; p = Object.getPrototypeOf(p) as object | null) chain.unshift(p);
  const byId = new Map<string, T>();
  for (const proto of chain)
    for (const r of readOwn<T>(key, proto)) {
      byId.delete(id(r));
      byId.set(id(r), r);
    }
  return [...byId.values()];
}

export const readInputFields = (ctor: AnyClass): InputFieldRecord[] => readChain<InputFieldRecord>(MetadataKey.InputFields, ctor, (r) => r.property);
export const readEvents = (ctor: AnyClass): EventRecord[] => readChain<EventRecord>(MetadataKey.Events, ctor, (r) => r.method);
export const readHooks = (ctor: AnyClass): HookRecord[] => readChain<HookRecord>(MetadataKey.Hooks, ctor, (r) => `${r.kind}:${r.method}`);
export const readTracks = (ctor: AnyClass): TrackRecord[] => readChain<TrackRecord>(MetadataKey.Tracks, ctor, (r) => r.property);
/** The nearest `@reactorApp` options up the class chain (a subclass inherits its base app's declaration). */
export function readAppOptions<T>(ctor: AnyClass): T | undefined {
  return Reflect.getMetadata(MetadataKey.AppOptions, ctor) as T | undefined;
}

function className(proto: object): string {
  return (proto as { constructor?: { name?: string } }).constructor?.name ?? 'a class';
}
