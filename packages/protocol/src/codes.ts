/**
 * The code registries of the wire: WebSocket close codes, the error codes of `error` messages and
 * of HTTP answers, and the readiness codes of `/health/ready`. `docs/errors.md` lists each code
 * with its fix (test/error-codes.test.ts checks it).
 */

/**
 * WebSocket close codes of a session limit: the session ended for good, so the client does not
 * reconnect (the close's reason starts with the matching `WireErrorCode`).
 */
export const CloseCode = {
  /** The session reached its longest time (the token's `mst`, or the server's `maxSessionMs`). */
  SessionTimeLimit: 4001,
  /** No command, publication or frame from any client for the server's `idleTimeoutMs`. */
  IdleTimeout: 4002,
  /** The instance was draining (SIGTERM: its pod deleted, evicted, its node drained) and the session outlived the drain's deadline. */
  DrainDeadline: 4003,
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
  /** A new session was refused: every session slot of the instance's GPU (`gpu.sessions_per_gpu`) is taken; the socket then closes (1001). */
  GpuFull: 'gpu_full',
  /** A new session was refused: a session already on the instance's GPU misses its frame deadline (`gpu.admit: deadline`); the socket then closes (1001). */
  GpuBusy: 'gpu_busy',
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
  /** `clip`/`recording`: the client's token does not grant it (its `rec` claim lists neither `clip` nor `record`, or not the one asked for). */
  RecordingNotGranted: 'recording_not_granted',
  /** Single-controller mode: another client holds control; send `request_control` and wait for a `control` message naming you. */
  NotController: 'not_controller',
  /** `release_control` from a client that does not hold control. */
  NotHoldingControl: 'not_holding_control',
  /** Close reason: the session reached the longest time the token allows (`mst`), or the server's `maxSessionMs`. */
  SessionTimeLimit: 'session_time_limit',
  /** Close reason: no command, publication or frame from any controller for the idle timeout. */
  IdleTimeout: 'idle_timeout',
  /** Close reason (close code 4003): the instance was shutting down and the session outlived its drain deadline (`agones.drainSeconds`). */
  DrainDeadline: 'drain_deadline',
  /** `reactor dev` reloaded the app and its state class changed: the session started again from the new defaults (no id; the socket stays open). */
  StateReset: 'state_reset',
  /** A `client_stats` report out of bounds (its shape, a value's range, an unknown command, more samples than commands replied to, more than 2 a second): nothing of it counted. */
  InvalidClientStats: 'invalid_client_stats',
  /** `rtc_offer` to a server whose WebRTC transport is off (`server.webrtc.enabled: false`, or werift did not load): media stays on the WebSocket. */
  RtcDisabled: 'rtc_disabled',
  /** `rtc_offer` whose SDP the server cannot use (not an offer, unparsable, no media section, a renegotiation it cannot apply). */
  RtcBadOffer: 'rtc_bad_offer',
  /** `rtc_offer` without a codec the server sends (video: H.264 packetization-mode 1 or VP8, as configured; audio: Opus). */
  RtcNoCodec: 'rtc_no_codec',
  /** `rtc_candidate` the server cannot use (unparsable, or no `rtc_offer` came first). */
  RtcBadCandidate: 'rtc_bad_candidate',
  /** `rtc_state failed` reason: ICE/DTLS did not connect in time (UDP blocked, no usable candidate, a TURN server that refused); media stays on the WebSocket. */
  RtcIceTimeout: 'rtc_ice_timeout',
  /** `rtc_state failed` reason: the peer connection was up and went away (the peer vanished, consent expired); media went back to the WebSocket. */
  RtcPeerLost: 'rtc_peer_lost',
  /** `rewind` to a frame seq or a time that no snapshot of the session's ring covers (too old, or none taken yet). */
  RewindOutOfRange: 'rewind_out_of_range',
  /** `rewind` past the session's rate limit (`snapshot.rewindsPerSecond`, bursts of 3). */
  RewindRateLimited: 'rewind_rate_limited',
  /** `rewind` whose restore failed (the app's `restore()` refused or threw): the session goes on from where it was. */
  RewindFailed: 'rewind_failed',
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
  /** 403 from an instance's `GET` / `PUT /snapshot`: only the instance's static token (the router's) may read or seed a session's whole state. */
  SnapshotForbidden: 'snapshot_forbidden',
  /** 404 from `/snapshot` or `POST /sessions/{id}/fork`: the app takes no snapshots (`@reactorApp({ snapshot })`). */
  SnapshotUnsupported: 'snapshot_unsupported',
  /** 400 from `PUT /snapshot` (and a fork): the bytes are not a whole snapshot (magic, SHA-256, header). */
  SnapshotCorrupt: 'snapshot_corrupt',
  /** 400 from `PUT /snapshot`: the bytes are shorter than their header says. */
  SnapshotTruncated: 'snapshot_truncated',
  /** 409 from `PUT /snapshot`: a snapshot of another app. */
  SnapshotAppMismatch: 'snapshot_app_mismatch',
  /** 409 from `PUT /snapshot`: a snapshot of another version, format or state shape of this app. */
  SnapshotVersionMismatch: 'snapshot_version_mismatch',
  /** 413 from `/snapshot`: over the app's `snapshot.maxBytes`. */
  SnapshotTooBig: 'snapshot_too_big',
  /** 502 from `POST /sessions/{id}/fork`: the snapshot could not be taken from the session's instance or handed to the fork's. */
  ForkFailed: 'fork_failed',
  /** Close code 4307 from a session router: the session moved to another instance (a drain); the reason is `session_moved: /s/{instance}`, where the client reconnects. */
  SessionMoved: 'session_moved',
} as const;
export type HttpErrorCode = (typeof HttpErrorCode)[keyof typeof HttpErrorCode];

/**
 * Why an instance is not ready (`NotReadyReason.code` of `AppHost.readiness()`, served as
 * `/health/ready` and the `reactor_not_ready{reason}` metric). The host gives the first five;
 * an app's own `readiness()` may give any code, the runner codes below for the usual causes.
 */
export const ReadinessCode = {
  /** The app's `load()` has not finished. */
  Loading: 'loading',
  /** The app's `load()` threw; nothing will run (the same code as the load error). */
  LoadFailed: 'load_failed',
  /** The host (or the server in front of it) is shutting down. */
  Closing: 'closing',
  /** The current session is ending; a new client waits until it has. */
  SessionClosing: 'session_closing',
  /** The app's own `readiness()` gave a reason without a code (a string), or threw. */
  AppNotReady: 'app_not_ready',
  /** The app's model runner is broken (a rank died, it could not start) or not running. */
  RunnerUnhealthy: 'runner_unhealthy',
  /** The app is replacing its model runner (after a rank died); ready again once the new one is up. */
  RunnerRestarting: 'runner_restarting',
  /** A rank of the app's runner has made no progress during a call for the runner's `stallMs`. */
  RankStalled: 'rank_stalled',
  /** The server asked the host for its readiness and the host threw (a bug: see the server log). */
  ReadinessFailed: 'readiness_failed',
  /** Every session slot of this instance's GPU (`gpu.sessions_per_gpu`) is held by other instances; ready again when one frees. */
  GpuFull: 'gpu_full',
  /** A session on this instance's GPU misses its frame deadline (`gpu.admit: deadline`): no new session until its frame-time p99 is back under the admission bound. */
  GpuBusy: 'gpu_busy',
} as const;
export type ReadinessCode = (typeof ReadinessCode)[keyof typeof ReadinessCode];

/** Codes of the errors this package raises itself, beside the wire's own lists. */
export const ProtocolErrorCode = {
  /** A lifecycle was asked for a transition its table does not have: a bug ({@link IllegalTransitionError}). */
  IllegalTransition: 'illegal_transition',
} as const;
export type ProtocolErrorCode = (typeof ProtocolErrorCode)[keyof typeof ProtocolErrorCode];
