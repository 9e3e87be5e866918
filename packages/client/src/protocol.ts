/**
 * The wire protocol between a Reactor server and its clients, version 1.
 *
 * Implemented once, here: the server imports these types and codecs, so the two sides
 * cannot drift. Control messages are JSON text frames; video frames are binary frames
 * with a fixed 32-byte header (see {@link encodeFrameHeader}). `docs/protocol.md` is the
 * prose version of this module.
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
   * The instance that serves this session, when the server runs as one of many (scale-out: the
   * Agones GameServer name, once the instance knows it). Absent for a lone server.
   */
  instance?: string;
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

// ---- client -> server -------------------------------------------------------------------

export interface CommandMessage {
  type: 'command';
  /** Chosen by the client; echoed in the reply. At most 64 characters. */
  id: string;
  name: string;
  params?: Record<string, unknown>;
}

/**
 * Asks to publish an inbound track (`direction: 'in'`). The first publisher of a track holds it
 * for the session; anyone else gets `publish_refused`. Reply: `reply` with the same `id`.
 */
export interface PublishMessage {
  type: 'publish';
  id: string;
  /** Track wire name from `schema.tracks`. */
  track: string;
}

/** Releases a track this client publishes; its buffer in the app closes. Reply: `reply`. */
export interface UnpublishMessage {
  type: 'unpublish';
  id: string;
  track: string;
}

/** Stops sending this connection the frames of one outbound track (the model is not affected). Reply: `reply`. */
export interface PauseTrackMessage {
  type: 'pause_track';
  id: string;
  track: string;
}

/** Resumes an outbound track paused with `pause_track`. Reply: `reply`. */
export interface ResumeTrackMessage {
  type: 'resume_track';
  id: string;
  track: string;
}

/**
 * Chooses how this connection receives outbound video: a codec the server offers
 * (`welcome.video.codecs`) and, optionally, a tier of its ladder (`welcome.video.tiers`, default:
 * the first). Sent again to change tier. Reply: `reply` with a {@link VideoSelection}; then, for
 * each outbound video track, a `video_config` precedes the first frame in the new codec or tier,
 * and that frame is a key frame. A client that never sends it receives JPEG, as before.
 */
export interface SelectVideoMessage {
  type: 'select_video';
  id: string;
  codec: VideoCodecName;
  /** Tier name from `welcome.video.tiers`. */
  tier?: string;
}

/**
 * Asks for a key frame on an outbound video track (the decoder lost its reference: a gap, a
 * decode error). No reply. The server forces at most one key frame per track every
 * {@link KEY_FRAME_MIN_INTERVAL_MS}; until it arrives, this client receives none of the track's
 * delta frames.
 */
export interface RequestKeyFrameMessage {
  type: 'request_key_frame';
  track: string;
}

/**
 * Asks for a clip: the last `seconds` of the session's outbound video (and audio) as an MP4.
 * Reply: `reply` with a {@link ClipResult} (its `url` downloads under the server's access rules
 * until `expiresAt`). Needs `recording.clips` on the server (`clips_disabled` otherwise).
 */
export interface ClipMessage {
  type: 'clip';
  id: string;
  /** Seconds to keep, 1 to the server's ring length (`recording.clip_seconds`, default 30); default: the whole ring. */
  seconds?: number;
  /** Outbound video track name; default: the first. */
  track?: string;
}

/** Starts or stops recording the session to the server's recording folder. Reply: `reply` with a {@link RecordingInfo}. */
export interface RecordingMessage {
  type: 'recording';
  id: string;
  action: 'start' | 'stop';
}

/** What a `clip` answers: where the MP4 is, and what it holds. */
export interface ClipResult {
  /** Path of the MP4 on the server (`/clips/<unguessable id>.mp4`); `Client.clip()` makes it absolute. */
  url: string;
  /** When the URL stops answering (ISO 8601). */
  expiresAt: string;
  /** Duration of the clip's video, seconds (it starts on a key frame, so it may be longer than asked by up to one key-frame interval). */
  durationS: number;
  /** Video frames in the file. */
  frames: number;
  bytes: number;
  /** Codecs in the file, e.g. `['avc1.42c01f', 'mp4a.40.2']`. */
  codecs: string[];
}

/** A recording, as `recording` replies and `GET /recordings` lists it. */
export interface RecordingInfo {
  /** File name in the recording folder (`GET /recordings/<name>` downloads it). */
  name: string;
  sessionId: string;
  /** `recording` while it is written; `stopped` when done; or why it stopped early (`max_bytes`, `max_duration`, `disk_full`, `write_failed`); `interrupted`: the server died while writing it (it plays up to its last fragment). */
  state: 'recording' | 'stopped' | 'max_bytes' | 'max_duration' | 'disk_full' | 'write_failed' | 'interrupted';
  startedAt: string;
  bytes: number;
  durationS: number;
  /** When retention deletes it (ISO 8601). */
  deleteAt: string;
}

/**
 * Single-controller mode: asks to steer. Answered at once: `{ controller: true }` when control was
 * free (now yours), else `{ controller: false, position }` (your place in the queue); a `control`
 * message follows every change.
 */
export interface RequestControlMessage {
  type: 'request_control';
  id: string;
}

/** Single-controller mode: gives control up (to the first client waiting for it, if any). */
export interface ReleaseControlMessage {
  type: 'release_control';
  id: string;
}

export type ClientMessage =
  | CommandMessage
  | PublishMessage
  | UnpublishMessage
  | PauseTrackMessage
  | ResumeTrackMessage
  | SelectVideoMessage
  | RequestKeyFrameMessage
  | ClipMessage
  | RecordingMessage
  | RequestControlMessage
  | ReleaseControlMessage;

/** The client message types (`type` values) a server accepts. */
export const CLIENT_MESSAGE_TYPES = [
  'command',
  'publish',
  'unpublish',
  'pause_track',
  'resume_track',
  'select_video',
  'request_key_frame',
  'clip',
  'recording',
  'request_control',
  'release_control',
] as const;

// ---- video codecs -----------------------------------------------------------------------

/** A video encoding a server can stream: `jpeg` (every frame a picture), `h264` or `vp8`. */
export type VideoCodecName = 'jpeg' | 'h264' | 'vp8';

/** The shortest time between two key frames forced on one track (by joins and `request_key_frame`). */
export const KEY_FRAME_MIN_INTERVAL_MS = 500;

/** One rung of the quality ladder a server encodes (one encoder per track and tier, shared by every client on it). */
export interface VideoTierSchema {
  /** `full`, `half`, `low`, ...: unique in the ladder. */
  name: string;
  /** Output size as a fraction of the track's frames (1, 0.5); sides are rounded down to even numbers. */
  scale: number;
  /** Target bits per second of one track at this tier (codecs other than `jpeg`). */
  bitrate: number;
}

/** What the server offers, in `welcome.video`. Absent from older servers: JPEG only. */
export interface VideoOffer {
  /** Codecs a client may select, preferred first (the server's configured codec, then `jpeg`). */
  codecs: VideoCodecName[];
  /** The ladder, best first. */
  tiers: VideoTierSchema[];
  /** Frames between two scheduled key frames (joins and requests force more). */
  keyFrameInterval: number;
}

/** `select_video`'s reply result: what this connection receives from now on. */
export interface VideoSelection {
  codec: VideoCodecName;
  tier: string;
}

/**
 * A command parameter (or state field) of upload type carries a reference to a file uploaded
 * over HTTP (`POST /uploads`, then `PUT /uploads/{uploadId}`): `{"image": {"uploadId": "..."}}`.
 */
export interface UploadRef {
  uploadId: string;
}

/** `POST /uploads` body: announces a file; the answer (201) is an {@link UploadTicket}. */
export interface UploadRequest {
  /** The file's name, for display only (never used as a path). At most 255 characters. */
  name: string;
  /** Exact byte size of the body the `PUT` will carry. */
  size: number;
  /** What the client believes the type is; the server checks the bytes and keeps what they are. */
  mimeType?: string;
  /** The uploading client's `clientId` (from `welcome`), so the app's `@fileUploaded` hook knows who sent it. */
  clientId?: string;
  /**
   * The command the file is for (wire name): the server holds it to that command's upload
   * field (`x-reactor-upload` `maxBytes`, `mimeTypes`) before and while the bytes stream.
   * Without it, to what the app's upload fields take together.
   */
  command?: string;
  /** The command's upload parameter the file is for, when it has several (needs `command`). */
  field?: string;
}

/** `POST /uploads` answer (201). */
export interface UploadTicket {
  uploadId: string;
  /** Where to `PUT` the bytes (a path on the same server). */
  url: string;
  /** Milliseconds from now after which an upload that was not written is forgotten. */
  expiresInMs: number;
}

/** `PUT /uploads/{uploadId}` answer (200): the stored file. */
export interface UploadInfo {
  uploadId: string;
  name: string;
  /** The type found in the bytes (magic numbers), not the client's claim. */
  mimeType: string;
  size: number;
}

// ---- server -> client -------------------------------------------------------------------

export interface WelcomeMessage {
  type: 'welcome';
  protocol: number;
  clientId: string;
  app: AppSchema['app'];
  schema: AppSchema;
  state: Record<string, unknown>;
  session: SessionStatus;
  /** The codecs and tiers this server streams (see `select_video`); absent: JPEG only. */
  video?: VideoOffer;
  /** This client's role (`controller`, `spectator`, or the app's own), from its token; `controller` without one. */
  role?: string;
  /** Single-controller mode: who steers now (see `control`). */
  control?: ControlStatus;
  /**
   * The secret that lets this client take its identity back after a dropped connection: reconnect
   * with `?resume=<secret>` within `graceMs`. Keep it like the token; it changes with every welcome.
   */
  resume?: { secret: string; graceMs: number };
  /**
   * Present when the client asked to resume: `true` when it kept its identity (same `clientId`,
   * role, publications, uploads), `false` when the grace had run out or the secret was unknown
   * (a new identity: publish again).
   */
  resumed?: boolean;
}

/** Who steers a single-controller session. */
export interface ControlStatus {
  /** The client holding control; `null`: nobody (the next `request_control` takes it). */
  controller: string | null;
  /** Clients waiting for control, first first. */
  queue: string[];
}

/** Single-controller mode: control changed hands (or the queue changed). Sent to every client of the session. */
export interface ControlMessage extends ControlStatus {
  type: 'control';
}

/**
 * Precedes the first frame of an outbound video track in a new codec or tier for this
 * connection (after `select_video`, or after the server fell back to `jpeg` because its encoder
 * failed). Configure the decoder from it; the next frame of the track is a key frame.
 */
export interface VideoConfigMessage {
  type: 'video_config';
  /** Track wire name. */
  track: string;
  codec: VideoCodecName;
  /** The WebCodecs codec string for `VideoDecoder.configure` (`avc1.42E01F`, `vp8`); absent for `jpeg`. */
  codecString?: string;
  /** Coded size of this tier's frames. */
  width: number;
  height: number;
  tier: string;
  /** Target bits per second (absent for `jpeg`). */
  bitrate?: number;
  /**
   * Base64 decoder configuration record (H.264 `avcC`), when the stream is in AVC format.
   * Absent: H.264 frames are Annex B with SPS/PPS in every key frame.
   */
  description?: string;
}

/** Successful command: `result` is the handler's return value (absent for an acknowledgement). */
export interface ReplyMessage {
  type: 'reply';
  id: string;
  result?: unknown;
}

/** A failed command (`id` set) or a bad message that could not be tied to a command. */
export interface ErrorMessage extends ErrorBody {
  type: 'error';
  id?: string;
}

/** An app message: `send()` to all or `client.send()` to one. */
export interface AppMessage {
  type: 'message';
  name: string;
  data: unknown;
}

/** The full public state, broadcast after it changes through a generated setter. */
export interface StateMessage {
  type: 'state';
  state: Record<string, unknown>;
}

export interface SessionMessage {
  type: 'session';
  session: SessionStatus;
}

/** Step statistics, at most a few times a second. */
export interface StatsMessage {
  type: 'stats';
  steps: number;
  /** Mean model time (generate) over the last window, ms. */
  stepMs: number;
  /** Frames per second played out over the last window. */
  fps: number;
  /** Frames dropped for this client so far (slow connection). */
  dropped: number;
  /** This connection's video, when it selected a codec other than the default. */
  video?: {
    codec: VideoCodecName;
    tier: string;
    /** Bits per second sent to this client over the last window (video frames only). */
    bitrate: number;
    /** Key frames this client asked for so far. */
    keyFrameRequests: number;
  };
}

/** Playout was cut: drop every frame of these tracks with `seq < nextSeq`. */
export interface FlushMessage {
  type: 'flush';
  nextSeq: number;
}

/**
 * Sent to a track's publisher when the server releases the track without being asked (the
 * session ended): publish again to keep sending.
 */
export interface TrackReleasedMessage {
  type: 'track_released';
  track: string;
  reason: string;
}

export type ServerMessage =
  | WelcomeMessage
  | ReplyMessage
  | ErrorMessage
  | AppMessage
  | StateMessage
  | SessionMessage
  | StatsMessage
  | FlushMessage
  | TrackReleasedMessage
  | VideoConfigMessage
  | ControlMessage;

/**
 * WebSocket close codes of a session limit: the session ended for good, so the client does not
 * reconnect (the close's reason starts with the matching `WireErrorCode`).
 */
export const CloseCode = {
  /** The session reached its longest time (the token's `mst`, or the server's `maxSessionMs`). */
  SessionTimeLimit: 4001,
  /** No command, publication or frame from any client for the server's `idleTimeoutMs`. */
  IdleTimeout: 4002,
} as const;
export type CloseCode = (typeof CloseCode)[keyof typeof CloseCode];

/**
 * Error codes the framework itself sends in `error` messages on the WebSocket; apps add their
 * own via `CommandError`. `docs/protocol.md` and `docs/errors.md` list each.
 */
export const WireErrorCode = {
  MalformedMessage: 'malformed_message',
  UnknownMessageType: 'unknown_message_type',
  UnknownCommand: 'unknown_command',
  InvalidParams: 'invalid_params',
  RateLimited: 'rate_limited',
  NoSession: 'no_session',
  InternalError: 'internal_error',
  UnexpectedBinary: 'unexpected_binary',
  /** `publish`: another client holds the track for this session (the message names it). */
  PublishRefused: 'publish_refused',
  /** `publish`/`unpublish`/`pause_track`/`resume_track` or a binary frame names no track of the schema. */
  UnknownTrack: 'unknown_track',
  /** Published or sent to an outbound track, or paused an inbound one: the direction is wrong. */
  WrongTrackDirection: 'wrong_track_direction',
  /** A binary frame for a track this client does not publish (publish first). */
  NotPublisher: 'not_publisher',
  /** A frame's encoding does not fit its track's kind (JPEG or RGB for video, PCM for audio). */
  WrongEncoding: 'wrong_encoding',
  /** A frame's payload cannot be decoded (a broken JPEG). */
  UndecodableFrame: 'undecodable_frame',
  /** A frame larger than the track's declared limit (`maxWidth`/`maxHeight`, or too many samples). */
  FrameTooLarge: 'frame_too_large',
  /** Frames beyond the track's `maxFps`: dropped and counted. */
  FrameRateLimited: 'frame_rate_limited',
  /** A frame's header disagrees with its payload (an RGB size that is not width x height x 3, a JPEG of another size, an odd PCM length). */
  FrameHeaderMismatch: 'frame_header_mismatch',
  /** A command refers to an upload that is unknown, expired, or not written within 10 s. */
  UnresolvedUpload: 'unresolved_upload',
  /** A resolved upload does not fit its parameter (its size or type is not what the field accepts). */
  UploadRejected: 'upload_rejected',
  /** `select_video` names a codec the server does not offer (`welcome.video.codecs`). */
  UnsupportedCodec: 'unsupported_codec',
  /** `select_video` names a tier that is not in `welcome.video.tiers`. */
  UnknownTier: 'unknown_tier',
  /** The server's video encoder failed; it switched this track to `jpeg` (a `video_config` follows). */
  EncoderFailed: 'encoder_failed',
  /** `clip`/`recording`: the server keeps no clip ring / no recording folder (set `recording:` in reactor.yaml). */
  ClipsDisabled: 'clips_disabled',
  /** `clip`: the app streams no video, or no key frame has been played yet in this session. */
  ClipUnavailable: 'clip_unavailable',
  /** `clip`: this connection's previous clip is still being made. */
  ClipBusy: 'clip_busy',
  /** `clip`: the MP4 could not be made or stored (the message says why: disk full, write error). */
  ClipFailed: 'clip_failed',
  /** `recording`: the server has no recording folder configured (`recording.dir`). */
  RecordingDisabled: 'recording_disabled',
  /** `recording start` while this session is already recorded, or `stop` while it is not. */
  RecordingState: 'recording_state',
  /** `recording start`: the recording folder's disk has less free space than `recording.min_free_bytes`. */
  DiskFull: 'disk_full',
  /** A command, publication or control request the client's role may not make (a spectator's command, or a command whose `roles` leave its role out). */
  ForbiddenRole: 'forbidden_role',
  /** `publish`: the client's token does not list this track (its `pub` claim). */
  PublishNotGranted: 'publish_not_granted',
  /** Single-controller mode: another client holds control; send `request_control` and wait for a `control` message naming you. */
  NotController: 'not_controller',
  /** `release_control` from a client that does not hold control. */
  NotHoldingControl: 'not_holding_control',
  /** Close reason: the session reached the longest time the token allows (`mst`), or the server's `maxSessionMs`. */
  SessionTimeLimit: 'session_time_limit',
  /** Close reason: no command, publication or frame from any controller for the idle timeout. */
  IdleTimeout: 'idle_timeout',
  /** `reactor dev` reloaded the app and its state class changed: the session started again from the new defaults (no id; the socket stays open). */
  StateReset: 'state_reset',
} as const;
export type WireErrorCode = (typeof WireErrorCode)[keyof typeof WireErrorCode];

/**
 * Error codes of the server's HTTP answers (`{"error":{"code":...,"message":...}}`), the
 * refused WebSocket upgrade included: what a client sees before a socket opens.
 */
export const HttpErrorCode = {
  /** 400: the request target (or the request) cannot be parsed. */
  BadRequest: 'bad_request',
  /** 431: the request's headers are too large. */
  HeadersTooLarge: 'headers_too_large',
  /** 405: a method the route does not take (GET and HEAD everywhere; POST and PUT on the upload routes). */
  MethodNotAllowed: 'method_not_allowed',
  /** 404: no such route (or the WebSocket asked on another path). */
  NotFound: 'not_found',
  /** 401: the server has a token and the request did not present it. */
  Unauthorized: 'unauthorized',
  /** 403: a browser page of another origin. */
  OriginNotAllowed: 'origin_not_allowed',
  /** 403: the `Host` header is not one the server answers to (DNS-rebinding guard). */
  HostNotAllowed: 'host_not_allowed',
  /** 503: the server is shutting down (refused upgrade). */
  ServerClosing: 'server_closing',
  /** 503 from `GET /health/ready` and `GET /health`: the instance cannot take users now. */
  NotReady: 'not_ready',
  /** 500: the viewer's files are missing (run `pnpm build`). */
  ViewerNotBuilt: 'viewer_not_built',
  /** 409 from `POST /uploads`: no session exists, so there is nothing to upload to (connect first). */
  UploadNoSession: 'upload_no_session',
  /** 413: the file is larger than the server's per-file limit (checked on the declared size and while the body streams). */
  UploadTooLarge: 'upload_too_large',
  /** 413: the session's uploads would exceed its quota. */
  UploadQuotaExceeded: 'upload_quota_exceeded',
  /** 415: the bytes are not of a type the server accepts (checked from the bytes, not the `Content-Type`). */
  UploadTypeNotAllowed: 'upload_type_not_allowed',
  /** 400: the body is shorter or longer than the size announced in `POST /uploads` (a truncated upload). */
  UploadLengthMismatch: 'upload_length_mismatch',
  /** 404: no upload with this id (never announced, expired, or its session ended). */
  UploadNotFound: 'upload_not_found',
  /** 409: the upload's bytes were already written (or are being written). */
  UploadAlreadyWritten: 'upload_already_written',
  /** 400: the `POST /uploads` body is not a valid announcement (`{"name","size"}`). */
  UploadInvalidRequest: 'upload_invalid_request',
  /** 500: the server failed to answer; its log has the details. */
  InternalError: 'internal_error',
  /** 410 from `GET /clips/{id}.mp4`: the clip's URL expired (`recording.clip_expiry_s`) and its file is deleted; ask for a new clip. */
  ClipExpired: 'clip_expired',
  /** 429 from a session router's `POST /sessions`: every instance of the fleet holds a session; retry after `Retry-After` seconds. */
  NoFreeInstance: 'no_free_instance',
  /** 404 from a session router's `GET /sessions/{id}`: no instance holds that session (it ended, or never existed). */
  UnknownSession: 'unknown_session',
  /** 404 from a session router's `/s/{instance}/...`: no instance of that name holds a session. */
  UnknownInstance: 'unknown_instance',
  /** 503 from a session router's `POST /sessions`: the allocation kept meeting conflicts (409) past its retries; retry after `Retry-After`. */
  AllocationConflict: 'allocation_conflict',
  /** 502/503 from a session router: the Kubernetes API failed or refused its request (RBAC, network). */
  RegistryUnavailable: 'registry_unavailable',
  /** 502 from a session router: the instance's pod did not accept the proxied connection. */
  InstanceUnreachable: 'instance_unreachable',
  /** 429 from a session router's `POST /sessions?wait=`: the waiting line is full (`queueMaxLength`); retry after `Retry-After`. */
  QueueFull: 'queue_full',
  /** A session router's waiting line: the request waited its whole `wait` (or the router's `queueMaxWaitS`) without an instance; the stream's last line. */
  QueueTimeout: 'queue_timeout',
  /** 400 from a session router's `POST /sessions?wait=`: `wait` is not a whole number of seconds from 1 to the router's `queueMaxWaitS`. */
  BadWait: 'bad_wait',
  /** 401: the token's `exp` is past; get a new one. */
  TokenExpired: 'token_expired',
  /** 401: the token's `nbf` is in the future (or the clocks disagree). */
  TokenNotYetValid: 'token_not_yet_valid',
  /** 401: the token is signed with a key this server does not know (another secret, another key pair, a key the JWKS lacks). */
  TokenWrongKey: 'token_wrong_key',
  /** 401: the token names this server's key but its signature does not match its content: it was changed after signing. */
  TokenTampered: 'token_tampered',
  /** 401: the token's `alg` is not one this server takes (`none`, or another algorithm than its keys'). */
  TokenAlgNotAllowed: 'token_alg_not_allowed',
  /** 403: the token is for another session or instance (`sid`). */
  TokenWrongSession: 'token_wrong_session',
  /** 401: the credential looks like a JWT but cannot be read. */
  TokenMalformed: 'token_malformed',
  /** 401: a claim is wrong: a lifetime over the cap, a bad role, `iss`/`aud` other than the server requires. */
  TokenInvalidClaims: 'token_invalid_claims',
  /** 403 from `POST /uploads`: the token grants no uploads (a spectator's, or `upl: 0`). */
  UploadNotAllowed: 'upload_not_allowed',
  /** 413 from `POST /uploads`: the file would pass the bytes the token grants (`upl`). */
  UploadGrantExceeded: 'upload_grant_exceeded',
} as const;
export type HttpErrorCode = (typeof HttpErrorCode)[keyof typeof HttpErrorCode];

// ---- binary frames ----------------------------------------------------------------------

/** Payload encoding of a binary frame. */
export const FrameEncoding = {
  /** Video: a JPEG image. */
  Jpeg: 0,
  /** Video: raw RGB24, `height * width * 3` bytes. */
  Rgb: 1,
  /** Audio: mono signed 16-bit little-endian PCM; `width` is the sample count, `height` is 1, the rate is the track's `sampleRate`. */
  PcmS16le: 2,
  /** Video: one H.264 access unit (Annex B unless `video_config` carried a `description`); `key` marks an IDR frame. Server to client only. */
  H264: 3,
  /** Video: one VP8 frame; `key` marks a key frame. Server to client only. */
  Vp8: 4,
} as const;
export type FrameEncoding = (typeof FrameEncoding)[keyof typeof FrameEncoding];

/** Byte size of the fixed binary frame header. */
export const FRAME_HEADER_BYTES = 32;
const FRAME_MAGIC = 0x52; // 'R'
const FRAME_FLAG_METADATA = 1;
const FRAME_FLAG_KEY = 2;

/** The decoded fixed header of a binary frame (metadata decoded from its JSON). */
export interface FrameHeader {
  encoding: FrameEncoding;
  /** Index into `schema.tracks` (inbound tracks first, then outbound). */
  track: number;
  /**
   * Frame number in the session: one counter across every track, strictly increasing within a
   * session (a track's frames are therefore increasing, not consecutive).
   */
  seq: number;
  /**
   * Presentation time in ms since the session started (server to client); for a client's
   * frame, its capture time in ms on the client's own clock.
   */
  ptsMs: number;
  /** Video: pixels. Audio: the number of samples in the payload. */
  width: number;
  /** Video: pixels. Audio: the channel count (1). */
  height: number;
  /**
   * Coded video (`H264`, `Vp8`): true on a key frame, which decodes without any earlier frame
   * (header flag bit 1). Always false for JPEG, RGB and PCM frames, which need no reference.
   */
  key?: boolean;
  metadata?: unknown;
}

/*
 * Layout (little-endian):
 *   0 u8  magic 0x52        1 u8  protocol version   2 u8 encoding   3 u8 flags (bit0: metadata, bit1: key frame)
 *   4 u16 track index       6 u16 reserved           8 u32 seq
 *  12 u32 width            16 u32 height            20 u32 metadata byte length
 *  24 f64 pts (ms)         32 metadata (UTF-8 JSON), then the payload
 */

/** Encodes a frame header (+ optional metadata JSON); the payload follows it on the wire. */
export function encodeFrameHeader(h: FrameHeader): Uint8Array {
  const meta = h.metadata === undefined ? undefined : new TextEncoder().encode(JSON.stringify(h.metadata));
  const out = new Uint8Array(FRAME_HEADER_BYTES + (meta?.byteLength ?? 0));
  const v = new DataView(out.buffer);
  v.setUint8(0, FRAME_MAGIC);
  v.setUint8(1, PROTOCOL_VERSION);
  v.setUint8(2, h.encoding);
  v.setUint8(3, (meta ? FRAME_FLAG_METADATA : 0) | (h.key ? FRAME_FLAG_KEY : 0));
  v.setUint16(4, h.track, true);
  v.setUint32(8, h.seq >>> 0, true);
  v.setUint32(12, h.width, true);
  v.setUint32(16, h.height, true);
  v.setUint32(20, meta?.byteLength ?? 0, true);
  v.setFloat64(24, h.ptsMs, true);
  if (meta) out.set(meta, FRAME_HEADER_BYTES);
  return out;
}

/**
 * Encodes a whole binary frame: the header (see {@link encodeFrameHeader}) followed by the
 * payload, in one buffer ready for `WebSocket.send`.
 * @example ws.send(encodeFrame({ encoding: FrameEncoding.PcmS16le, track: 1, seq, ptsMs, width: samples.length, height: 1 }, new Uint8Array(samples.buffer)));
 */
export function encodeFrame(h: FrameHeader, payload: Uint8Array): Uint8Array<ArrayBuffer> {
  const header = encodeFrameHeader(h);
  const out = new Uint8Array(header.byteLength + payload.byteLength);
  out.set(header);
  out.set(payload, header.byteLength);
  return out;
}

/** A decoded binary frame: header plus a view of the payload (no copy). */
export interface DecodedFrame extends FrameHeader {
  payload: Uint8Array;
}

/** Thrown by {@link decodeFrame} on bytes that are not a frame of this protocol version. */
export class FrameDecodeError extends Error {
  override name = 'FrameDecodeError';
}

/** Decodes a binary frame; the payload is a view into `bytes`. */
export function decodeFrame(bytes: Uint8Array): DecodedFrame {
  if (bytes.byteLength < FRAME_HEADER_BYTES)
    throw new FrameDecodeError(`binary frame of ${bytes.byteLength} bytes is shorter than its ${FRAME_HEADER_BYTES}-byte header`);
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (v.getUint8(0) !== FRAME_MAGIC) throw new FrameDecodeError('binary message is not a Reactor frame (bad magic byte)');
  const version = v.getUint8(1);
  if (version !== PROTOCOL_VERSION) throw new FrameDecodeError(`frame is protocol version ${version}; this client speaks ${PROTOCOL_VERSION}`);
  const metaLen = v.getUint32(20, true);
  const start = FRAME_HEADER_BYTES + metaLen;
  if (start > bytes.byteLength) throw new FrameDecodeError('frame metadata runs past the end of the message');
  const frame: DecodedFrame = {
    encoding: v.getUint8(2) as FrameEncoding,
    track: v.getUint16(4, true),
    seq: v.getUint32(8, true),
    width: v.getUint32(12, true),
    height: v.getUint32(16, true),
    ptsMs: v.getFloat64(24, true),
    key: (v.getUint8(3) & FRAME_FLAG_KEY) !== 0,
    payload: bytes.subarray(start),
  };
  if (metaLen > 0) frame.metadata = JSON.parse(new TextDecoder().decode(bytes.subarray(FRAME_HEADER_BYTES, start)));
  return frame;
}

/** Parses one JSON text message from a server; throws on anything that is not a server message. */
export function parseServerMessage(text: string): ServerMessage {
  const msg: unknown = JSON.parse(text);
  if (typeof msg !== 'object' || msg === null || typeof (msg as { type?: unknown }).type !== 'string') {
    throw new TypeError('server message is not a JSON object with a string "type"');
  }
  return msg as ServerMessage;
}
