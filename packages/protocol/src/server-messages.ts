/** The messages a server sends its clients (JSON text frames), and the client's parse of them. */
import type { AppSchema, ErrorBody, SessionStatus } from './schema.js';
import type { VideoCodecName, VideoOffer } from './video.js';
import type { RtcAnswerMessage, RtcCandidateMessage, RtcStateMessage, RtcWelcome } from './rtc.js';

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
  /**
   * The server takes `client_stats` reports from this client, at most one every `intervalMs`
   * (a client sends none to a server whose welcome lacks it).
   */
  clientStats?: { intervalMs: number };
  /**
   * The server's WebRTC transport is on: the ICE servers, policy and connect window this client's
   * peer connection should use (docs/protocol.md "WebRTC"); absent: the transport is off (`rtc_offer` answers `rtc_disabled`).
   */
  webrtc?: RtcWelcome;
  /**
   * Present when the server keeps clips and recordings (a `recording:` section): what this
   * client's token grants (its `rec` claim): `clip` takes clips and downloads them, `record`
   * starts and stops recordings and lists and downloads them.
   */
  recording?: { clip: boolean; record: boolean };
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
  /**
   * While this connection's WebRTC link is connected: the codec it carries and the tier the
   * server picked for it from its own feedback (there is no `video_config` on WebRTC).
   */
  webrtc?: { codec: VideoCodecName; tier: string };
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

/** The outcomes of an {@link AppliedMessage}: `applied` names a frame; the others say why no frame will show the command. */
export const APPLIED_OUTCOMES = ['applied', 'superseded', 'paused', 'ended'] as const;
export type AppliedOutcome = (typeof APPLIED_OUTCOMES)[number];

/**
 * Which frame first reflects a command that changed state (a generated setter, an event), sent
 * to its sender after the command's `reply` (issue 26). `applied`: `seq` is the header `seq` of
 * the first frame of `track` (the first outbound video track in schema order; an app without
 * video: its first audio track) whose step read the new state; with a WebRTC peer also
 * `rtpTimestamp`, the RTP timestamp that frame carries on the WebRTC video. Otherwise no frame will show it:
 * `superseded` (a later command on the same field or event replaced it before a step made a
 * frame of it), `paused` (the step that read it was refused, or this client paused `track`
 * when that frame played), `ended` (the session ended first). One per command; a command
 * answered with an `error` gets none.
 */
export type AppliedMessage =
  | {
      type: 'applied';
      id: string;
      outcome: 'applied';
      seq: number;
      track: string;
      /** While this connection has a WebRTC peer: the RTP timestamp (90 kHz) the frame `seq` carries on its WebRTC video. */
      rtpTimestamp?: number;
    }
  | { type: 'applied'; id: string; outcome: Exclude<AppliedOutcome, 'applied'> };

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
  | ControlMessage
  | AppliedMessage
  | RtcAnswerMessage
  | RtcCandidateMessage
  | RtcStateMessage;

/** Parses one JSON text message from a server; throws on anything that is not a server message. */
export function parseServerMessage(text: string): ServerMessage {
  const msg: unknown = JSON.parse(text);
  if (typeof msg !== 'object' || msg === null || typeof (msg as { type?: unknown }).type !== 'string') {
    throw new TypeError('server message is not a JSON object with a string "type"');
  }
  if ((msg as { type: string }).type === 'applied') checkApplied(msg as Record<string, unknown>);
  return msg as ServerMessage;
}

/** @throws TypeError when an `applied` message lacks its id, has an unknown outcome, or a `seq`/`track` that does not fit its outcome. */
function checkApplied(msg: Record<string, unknown>): void {
  const { id, outcome, seq, track, rtpTimestamp } = msg;
  if (typeof id !== 'string' || id === '') throw new TypeError('applied message: "id" must be a non-empty string');
  if (!(APPLIED_OUTCOMES as readonly unknown[]).includes(outcome)) {
    throw new TypeError(`applied message: "outcome" must be one of ${APPLIED_OUTCOMES.join(', ')}, got ${JSON.stringify(outcome)}`);
  }
  if (outcome === 'applied') {
    if (typeof seq !== 'number' || !Number.isInteger(seq) || seq < 0) throw new TypeError('applied message: "seq" must be a non-negative integer');
    if (typeof track !== 'string' || track === '') throw new TypeError('applied message: "track" must be a non-empty string');
    if (rtpTimestamp !== undefined && (typeof rtpTimestamp !== 'number' || !Number.isInteger(rtpTimestamp) || rtpTimestamp < 0 || rtpTimestamp > 0xffffffff)) {
      throw new TypeError('applied message: "rtpTimestamp" must be a 32-bit unsigned integer');
    }
  } else if (seq !== undefined || track !== undefined || rtpTimestamp !== undefined) {
    throw new TypeError(`applied message: outcome ${outcome as string} carries no "seq", "track" or "rtpTimestamp"`);
  }
}
