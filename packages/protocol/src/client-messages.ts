/** The messages a client sends a server (JSON text frames), and what two of them answer. */
import type { VideoCodecName } from './video.js';
import type { RtcClientMessage } from './rtc.js';

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
  /**
   * How the frames come: `websocket` (the default: binary frames on this socket) or `webrtc`
   * (RTP on this connection's peer connection, on the sendonly transceiver `mid` of its offer).
   */
  transport?: PublishTransportName;
  /** With `transport: 'webrtc'`: the `mid` of the sendonly transceiver that carries the track (required then, refused otherwise). */
  mid?: string;
}

/** How a published track's frames reach the server. */
export type PublishTransportName = 'websocket' | 'webrtc';

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
  /** Its `.frames.jsonl` (each frame's time, seq and metadata; `recording.frame_metadata`), when one was written. */
  frames?: string;
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

/**
 * The client's own measure of what its user sees, at most once a second per connection (fire and
 * forget: no `id`, no reply; a refused one is answered `invalid_client_stats`). Checked by
 * `parseClientStats` (its shape) and the server (its bounds per client); the server exports it as
 * `reactor_command_to_pixel_seconds` and the other `reactor_client_*` metrics.
 */
export interface ClientStatsMessage {
  type: 'client_stats';
  /** How this connection receives its video. */
  transport: 'websocket' | 'webrtc';
  /** Command-to-pixel samples since the last report, at most {@link MAX_CLIENT_STATS_SAMPLES}. */
  samples: ClientStatsSample[];
  /** Connect -> the first frame presented, ms; once per connection. */
  firstFrameMs?: number;
  /** Gaps over 200 ms between presented frames (while streaming and not paused) since the last report. */
  freezes: number;
  /** Milliseconds those gaps lasted. */
  freezeMs: number;
  /** Frames received and never presented (a newer one replaced them, a decode failed) since the last report. */
  dropped: number;
  /** Frames presented per second over the last report's window. */
  fps?: number;
}

/** One command's latency: send -> presentation of the frame named by its `applied` acknowledgement. */
export interface ClientStatsSample {
  /** The command's wire name. */
  command: string;
  /** Milliseconds, 0 to {@link MAX_CLIENT_STATS_MS}. */
  ms: number;
}

/** Most samples one `client_stats` carries. */
export const MAX_CLIENT_STATS_SAMPLES = 64;
/** Longest command-to-pixel sample a `client_stats` may carry, ms. */
export const MAX_CLIENT_STATS_MS = 120_000;
/** Longest time to first frame a `client_stats` may carry, ms (an app may load its model for minutes). */
export const MAX_FIRST_FRAME_MS = 600_000;

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
  | ReleaseControlMessage
  | ClientStatsMessage
  | RtcClientMessage;

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
  'client_stats',
  'rtc_offer',
  'rtc_candidate',
  'rtc_close',
] as const;
