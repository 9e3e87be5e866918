/**
 * The transport-agnostic face of a running app: what the WebSocket server, the in-process
 * tests and any other transport use. A transport turns each remote client into a
 * {@link ClientSink} and calls {@link AppHostApi.connect}; everything the app says to that
 * client arrives through the sink, as protocol messages and frames.
 *
 * This file is the contract between the app model (issue: runtime) and the server
 * (issue: transport). Change it only together with both sides.
 */
import type {
  AppSchema,
  CommandMessage,
  ErrorMessage,
  ReplyMessage,
  ServerMessage,
  SessionStatus,
  StatsMessage,
  UploadInfo,
  UploadTicket,
  WelcomeMessage,
} from '@reactor/protocol';
import type { UploadOptions } from '../upload/upload-options.js';

/** One played-out frame of one track, delivered to every sink at its due time. */
export interface OutputFrame {
  /** Track name (as declared on the app's Output class). */
  readonly track: string;
  /** Index of the track in `schema.tracks`. */
  readonly trackIndex: number;
  /**
   * Frame number in the session: one counter across every track (not one per track), strictly
   * increasing within a session. `flush.nextSeq` cuts on it for every track at once.
   */
  readonly seq: number;
  /** Presentation time, ms since the session started. */
  readonly ptsMs: number;
  /** `performance.now()` at which playout scheduled this frame (for latency figures). */
  readonly dueAt: number;
  readonly width: number;
  readonly height: number;
  /**
   * RGB24 pixels, `height * width * 3` bytes. The same object is handed to every sink:
   * treat it as read-only; it stays valid after the call (sinks may encode it later).
   */
  readonly rgb: Uint8Array;
  /** The metadata entry for this frame, if the payload carried any. */
  readonly metadata?: unknown;
}

/** One played-out chunk of one audio track, due at the same clock as the video frames it belongs to. */
export interface OutputAudio {
  readonly track: string;
  /** Index of the track in `schema.tracks`. */
  readonly trackIndex: number;
  /** Session-wide sequence number, shared with video frames (see {@link OutputFrame.seq}). */
  readonly seq: number;
  readonly ptsMs: number;
  readonly dueAt: number;
  readonly sampleRate: number;
  /** Mono signed 16-bit PCM. The same object goes to every sink: read-only. */
  readonly pcm: Int16Array;
}

/** What `AppHost.onMedia` calls with every played-out frame and audio chunk (must not block or throw). */
export interface MediaListener {
  frame(frame: OutputFrame): void;
  audio(chunk: OutputAudio): void;
}

/**
 * A decoded inbound frame as a transport hands it to the host: video as RGB24, audio as mono
 * PCM at the track's sample rate. The transport has already checked it against the track's
 * declared kind, limits and rate.
 */
export interface InboundFrame {
  /** Video: RGB24, `height * width * 3` bytes. Audio: mono signed 16-bit PCM. The host keeps it: do not reuse. */
  readonly data: Uint8Array | Int16Array;
  /** Video only. */
  readonly width?: number;
  readonly height?: number;
  /** Audio only. */
  readonly sampleRate?: number;
  /** The client's capture time, ms, on the client's clock (as sent in the frame header). */
  readonly ptsMs: number;
  /** `performance.now()` on the server when the frame's message arrived. */
  readonly receivedAtMs: number;
  /** The client's metadata for this frame, if any. */
  readonly metadata?: unknown;
}

/** What a transport gives the host for one client. Calls must not block or throw. */
export interface ClientSink {
  /** A protocol message for this client (welcome, reply, error, message, state, session, stats, flush). */
  message(msg: ServerMessage): void;
  /**
   * A frame due now. The sink owns pacing from here on: a slow client drops its own late
   * frames (newest wins) and counts them; it must never make the host wait.
   */
  frame(frame: OutputFrame): void;
  /** An audio chunk due now, paced like frames. A transport that carries no audio leaves it out. */
  audio?(chunk: OutputAudio): void;
  /** The host is closing this client (shutdown). */
  close(reason: string): void;
  /**
   * The fields this connection adds to its `welcome` (the server's video offer, resume secret,
   * `resumed: false`, the `client_stats` it takes, its WebRTC setup), appended after the host's own in this order; `resumed`: the welcome is
   * a resumed client's (it carries `resumed: true` already); `clientId`: the welcome's. Called while the host builds it.
   */
  welcomeFields?(resumed: boolean, clientId: string): Pick<WelcomeMessage, 'video' | 'resume' | 'resumed' | 'clientStats' | 'webrtc' | 'recording'> | undefined;
  /** The fields this connection adds to its `stats` (the server's video figures), appended after the host's own. */
  statsFields?(): Pick<StatsMessage, 'video' | 'webrtc'> | undefined;
}

/** Optional facts about a client, kept for hooks (`@connected(client)`). */
export interface ClientInfo {
  remoteAddress?: string;
  userAgent?: string;
  /**
   * The client's role, from its token: `controller` (the default) may steer, `spectator` watches
   * (video, audio, state, messages), an app's own role runs the commands whose `roles` name it.
   */
  role?: string;
  /** Inbound tracks it may publish (its token's `pub`); default: `*` for a controller, none for any other role. */
  publish?: '*' | readonly string[];
  /**
   * The id the session takes if this client starts it: a session router's id for the session
   * (`X-Reactor-Session-Id` on the socket), so that the id a viewer sees is the router's.
   * Ignored when a session runs already. Label-safe (1-63 of `[A-Za-z0-9_.-]`) or ignored.
   */
  sessionId?: string;
  /** The client asked to resume an identity this server does not hold (it is coming back, e.g. after a restart): its welcome says `resumed: false`. */
  returning?: boolean;
}

/** What a {@link ClientInfo.sessionId} must look like (a Kubernetes label value). */
export const CHOSEN_SESSION_ID = /^[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;

/** A connected client as the transport holds it. */
export interface ClientHandle {
  readonly id: string;
  /**
   * Runs one command (validated, between steps, in arrival order). The reply or error is
   * returned (the transport sends it), never written to the sink. Never rejects.
   */
  command(msg: CommandMessage): Promise<ReplyMessage | ErrorMessage>;
  /**
   * Asks to publish an inbound track for this client (`publish` message). The reply or error
   * (`publish_refused`, `unknown_track`, `wrong_track_direction`, `no_session`) is returned,
   * never written to the sink.
   */
  publish(id: string, track: string): ReplyMessage | ErrorMessage;
  /** Releases a track this client publishes (`unpublish` message); reply or error returned. */
  unpublish(id: string, track: string): ReplyMessage | ErrorMessage;
  /** Whether this client publishes the inbound track now: a transport checks it before decoding a frame. */
  publishes(track: string): boolean;
  /**
   * A decoded frame of an inbound track this client publishes, into the track's buffer.
   * Returns `false` (frame dropped) when the client does not publish the track (any more).
   */
  pushFrame(track: string, frame: InboundFrame): boolean;
  /** The client left (socket closed). Idempotent. */
  disconnect(): void;
  /**
   * The same client on a new connection (it resumed after a drop): everything the host says to it
   * goes to `sink` from now on, starting with a welcome (`resumed: true`, the current state).
   * Its role, publications and uploads carry on.
   */
  rebind(sink: ClientSink): void;
  /** Single-controller mode: `request_control`; the reply (or error) is returned. */
  requestControl(id: string): ReplyMessage | ErrorMessage;
  /** Single-controller mode: `release_control`; the reply (or error) is returned. */
  releaseControl(id: string): ReplyMessage | ErrorMessage;
  /**
   * Single-controller mode: the `not_controller` answer (to request `id`, named `what` in its
   * message) when this client is a controller that does not hold control; `undefined` when it
   * holds it, when the host is not in that mode, and for other roles (the transport checks those).
   * For what a transport gates itself on control (recording start and stop).
   */
  controlError(id: string, what: string): ErrorMessage | undefined;
  /** Frames dropped for this client, as counted by its transport; included in its stats. */
  reportDropped(count: number): void;
}

/** Why an instance cannot take users now; one entry per cause. */
export interface NotReadyReason {
  /**
   * Stable, machine-readable cause, a `ReadinessCode` (`loading`, `load_failed`, `closing`,
   * `session_closing`, `app_not_ready`, `runner_unhealthy`, `runner_restarting`, `rank_stalled`,
   * `readiness_failed`) or an app's own snake_case code; every one is in `docs/errors.md`.
   */
  readonly code: string;
  /** What is wrong and, where it helps, what to do. */
  readonly message: string;
  /** For `loading`: how far it is (0..1) and what it is doing, once the app or its ranks reported progress. */
  readonly progress?: { readonly ratio: number; readonly stage: string };
}

/** Readiness as a load balancer needs it: ready only when a new user would get a stream. */
export interface Readiness {
  readonly ready: boolean;
  /** Empty when ready. */
  readonly reasons: readonly NotReadyReason[];
}

/**
 * The uploads of a host's current session, for a transport that receives files (the server's
 * `POST /uploads` and `PUT /uploads/{id}`). Errors are `UploadError`s whose `code` is the HTTP
 * answer's (`upload_no_session`, `upload_too_large`, ...).
 */
export interface UploadsApi {
  /**
   * Sets the limits (`maxFileBytes`, `quotaBytes`), the waits (`resolveWaitMs`, `expiryMs`), the
   * parent folder and the image decoder; unset options keep their value.
   * @throws HostOptionError (`invalid_host_option`) for a bad value.
   */
  configure(options: UploadOptions): void;
  /**
   * Announces a file (`POST /uploads` body, checked here) for the current session. A body that
   * names the upload field it is for (`command`, `field`) is held to that field's `maxBytes` and
   * types here and while its bytes stream in; one that names none, to what the app's upload
   * fields take together.
   * @throws UploadError `upload_no_session`, `upload_invalid_request`, `upload_too_large`, `upload_quota_exceeded`.
   */
  announce(request: unknown): UploadTicket;
  /**
   * Stores an announced upload's bytes, checked as they stream in; stops reading `body` at the
   * first byte over a limit. Resolves once the file is stored (`@fileUploaded` hooks follow).
   * @throws UploadError `upload_not_found`, `upload_already_written`, `upload_too_large`,
   *   `upload_length_mismatch`, `upload_type_not_allowed`.
   */
  write(uploadId: string, body: AsyncIterable<Uint8Array>, options?: { contentLength?: number }): Promise<UploadInfo>;
  /**
   * Removes the upload folders (and the files in them) that processes now gone left in the
   * configured parent folder: a server killed with SIGKILL. The server calls it when it starts.
   * Resolves with the number of folders removed.
   */
  sweep?(): Promise<number>;
}

/** The host's surface for transports. */
export interface AppHostApi {
  readonly schema: AppSchema;
  readonly status: SessionStatus;
  /** Whether a new user would get a stream now, and if not, why (the host's state and the app's own report). */
  readiness(): Readiness;
  /** Registers a client; the welcome message goes to the sink before this returns. */
  connect(sink: ClientSink, info?: ClientInfo): ClientHandle;
  /** File uploads into the current session (absent: the host takes none). */
  readonly uploads?: UploadsApi;
}
