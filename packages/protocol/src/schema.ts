/**
 * An app as the wire describes it: the protocol version, the published schema (state, commands,
 * messages, tracks), the session status and the error body every error answer carries.
 */

/** Protocol version spoken by this package. Bumped on any incompatible change. */
export const PROTOCOL_VERSION = 1;

/** A JSON Schema document (draft 2020-12 subset: what class-validator constraints map to). */
export type JsonSchema = { [key: string]: unknown };

/** One command a client may send: a generated `set_<field>` setter or an `@event`. */
export interface CommandSchema {
  /** Wire name, snake_case (`set_prompt`, `reset`). */
  name: string;
  description: string;
  /** `setter` for a generated state setter, `event` for an `@event` method. */
  kind: 'setter' | 'event';
  /** For setters: the state field it sets (wire name). */
  field?: string;
  /** JSON Schema of the `params` object (`type: object`, `additionalProperties: false`). */
  params: JsonSchema;
  /** Roles whose clients may send it; absent: `controller` only. */
  roles?: string[];
  /**
   * `true`: the command is urgent (`@InputField({ urgent: true })`, `@event({ urgent: true })`,
   * with the app's urgency on): it supersedes the work in flight, so its `applied` names the first
   * frame made with it rather than one after the chunk in flight. Absent: it waits its turn.
   */
  urgent?: true;
}

/** A message type the app may send (broadcast or to one client). */
export interface MessageSchema {
  /** Wire name: the snake_case class name (`StateUpdate` -> `state_update`). */
  name: string;
  description?: string;
  schema?: JsonSchema;
}

/** Kind of a media track. */
export type TrackKind = 'video' | 'audio';
/** `in`: the client publishes it to the app (camera, microphone); `out`: the app streams it. */
export type TrackDirection = 'in' | 'out';

/**
 * One media track: declared on the app's `Input` class (`direction: 'in'`) or `Output` class
 * (`direction: 'out'`). `schema.tracks` lists inbound tracks first, then outbound ones; a binary
 * frame's `track` is an index into that list, in both directions.
 */
export interface TrackSchema {
  name: string;
  kind: TrackKind;
  direction: TrackDirection;
  /**
   * Outbound video: the declared playout rate, when the app pins one (otherwise playout follows
   * measured step time). Inbound video: the capture rate the app asks clients for.
   */
  fps?: number;
  /** Inbound video: the capture size the app asks clients for (frames of another size are accepted within the limits). */
  width?: number;
  height?: number;
  /** Inbound video: the largest frame accepted, in pixels per side (bigger frames are refused with `frame_too_large`). */
  maxWidth?: number;
  maxHeight?: number;
  /** Inbound tracks: frames (audio: chunks) per second accepted from the publisher; more are dropped and counted (`frame_rate_limited`). */
  maxFps?: number;
  /** Audio tracks (both directions): samples per second of the mono s16le PCM. */
  sampleRate?: number;
  description?: string;
}

/** The whole published schema of an app: `GET /schema` and the welcome message carry it. */
export interface AppSchema {
  protocol: number;
  app: { name: string; version: string; description?: string };
  /** JSON Schema of the public session state (field wire names). */
  state: JsonSchema;
  commands: CommandSchema[];
  messages: MessageSchema[];
  tracks: TrackSchema[];
}

/** Session lifecycle as clients see it. */
export type SessionState =
  | 'loading' // the app is loading its model
  | 'ready' // loaded, no session
  | 'waiting' // session started, no client yet
  | 'streaming' // session live, at least one client
  | 'orphaned' // last client gone, grace period running
  | 'closing' // session ending
  | 'failed'; // load failed: nothing will run

export interface SessionStatus {
  state: SessionState;
  /** Present while a session exists. */
  sessionId?: string;
  clients: number;
  /** Why the last session ended with an error, or why loading failed. */
  error?: ErrorBody;
  /**
   * While `streaming`: why the app is not stepping now, so no frame comes (its `processInput`
   * refused with an `ApplicationError`: `paused`, `the video runner could not be restarted: ...`,
   * an input track nobody publishes). Absent once steps run again.
   */
  refused?: string;
  /**
   * While `loading`: how far the app's `load()` is (0..1) and what it is doing (`reading
   * weights`, `rank 1: compiling`), once the app (`context.reportProgress`) or its runner's
   * ranks (`reportProgress` / `report_progress`) reported it. Absent before the first report.
   */
  progress?: { ratio: number; stage: string };
  /**
   * The instance that serves this session, when the server runs as one of many (scale-out: the
   * Agones GameServer name, once the instance knows it). Absent for a lone server.
   */
  instance?: string;
  /**
   * A standing notice from the app while it is loaded (the app's `notice()`):
   * what a viewer should know about what it sees, e.g. `generated weights: the picture is noise;
   * the speed is the real model's`. Absent when the app has none.
   */
  notice?: string;
}

/** Per-field validation failure, as carried in `error.details`. */
export interface FieldError {
  /** Wire name of the field (or `params` for the object as a whole). */
  field: string;
  /** The broken constraint (class-validator's name: `maxLength`, `isBoolean`, `whitelistValidation`, `required`). */
  constraint: string;
  message: string;
}

export interface ErrorBody {
  code: string;
  message: string;
  details?: FieldError[];
}
