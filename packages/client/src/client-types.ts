/**
 * The types of the client SDK's surface: its options, connection status, received frames and
 * audio, upload inputs and the events of a {@link ReactorClient}.
 */
import type { AllocationRetryOptions, QueuePlace } from './session-route.js';
import type { WebRtcLinkOptions } from './rtc-link.js';
import type {
  AppMessage,
  ControlStatus,
  DecodedFrame,
  FlushMessage,
  SessionStatus,
  StatsMessage,
  TrackReleasedMessage,
  VideoConfigMessage,
  WelcomeMessage,
  RtcAnswerMessage,
  RtcCandidateMessage,
  RtcStateMessage,
} from './protocol.js';

/** The subset of the WHATWG `WebSocket` this client uses (browsers, `ws`, Node 22+). */
export interface WebSocketLike {
  readonly readyState: number;
  /** Bytes queued but not yet sent; publishing skips camera frames while it is high. */
  readonly bufferedAmount?: number;
  binaryType: string;
  send(data: string | Uint8Array): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: 'open' | 'message' | 'close' | 'error', listener: (event: any) => void): void;
}

/** A `WebSocket` constructor: `globalThis.WebSocket` or `import { WebSocket } from 'ws'`. */
export type WebSocketConstructor = new (url: string) => WebSocketLike;

/** Back-off policy for automatic reconnection. */
export interface ReconnectOptions {
  /** Delay before the first attempt, ms (default 250). */
  initialDelayMs?: number;
  /** Upper bound of the delay, ms (default 5000). */
  maxDelayMs?: number;
  /** Multiplier per attempt (default 2). */
  factor?: number;
  /** Give up after this many failed attempts in a row (default: never). */
  maxAttempts?: number;
}

/** Options of {@link connect}. */
export interface ConnectOptions {
  /** Access token, when the server requires one (sent as the `token` query parameter). */
  token?: string;
  /** Aborts the initial connection; once connected, aborting closes the client. */
  signal?: AbortSignal;
  /** WebSocket implementation; defaults to `globalThis.WebSocket`. In Node 20 pass `ws`'s class. */
  WebSocket?: WebSocketConstructor;
  /** Reconnect with back-off after the connection drops (default `true`). `false` disables it. */
  reconnect?: boolean | ReconnectOptions;
  /**
   * On a reconnect, take this client's identity back with the welcome's resume secret (default
   * `true`): within the server's grace it keeps its id, role, publications and uploads (a `resumed`
   * event); after it, it starts over as a new client (a `new_identity` event; publish again).
   */
  resume?: boolean;
  /** Default reply timeout of {@link ReactorClient.send}, ms (default 30000; 0 = none). */
  commandTimeoutMs?: number;
  /**
   * Connect through a session router (`reactor route`): `url` is then the router's. `'new'`
   * starts a session on a free instance; a session id (`client.route.sessionId` of another
   * client) joins the instance that holds it. Left out: `url` is the instance's own.
   */
  session?: 'new' | string;
  /** With `session: 'new'`: keep asking while no instance is free (429), waiting `Retry-After` between requests (default: fail at once). */
  allocationRetry?: AllocationRetryOptions;
  /** With `session: 'new'`: wait in the router's line up to this many seconds when no instance is free (see `requestSession`). */
  waitS?: number;
  /** The place in the router's line, at once and on every change. */
  onQueue?: (place: QueuePlace) => void;
  /** Through a router that mints instance tokens: the role to ask for (default `controller`). */
  role?: 'controller' | 'spectator';
  /**
   * Where outbound media comes (docs/protocol.md "WebRTC"): `websocket` (the default), `webrtc`
   * (connect fails with `webrtc_failed` when WebRTC does not connect), or `auto` (WebRTC when it
   * connects within `webrtc.timeoutMs`, else the WebSocket). The link is `client.rtc`.
   */
  transport?: 'auto' | 'webrtc' | 'websocket';
  /** Options of the WebRTC link (the `RTCPeerConnection` to use in Node, ICE servers, timeout). */
  webrtc?: WebRtcLinkOptions;
}

/** Options of one {@link ReactorClient.send} call. */
export interface SendOptions {
  /** Stops waiting for the reply (the command may still run on the server). */
  signal?: AbortSignal;
  /** Reply timeout, ms; overrides `ConnectOptions.commandTimeoutMs`; 0 = none. */
  timeoutMs?: number;
}

/** Connection state of a client. */
export type ConnectionState = 'connecting' | 'open' | 'reconnecting' | 'closed';

/** A `status` event: the connection state and, while reconnecting, the attempt. */
export interface ConnectionStatus {
  state: ConnectionState;
  /** Reconnect attempt number (1-based), while `reconnecting`. */
  attempt?: number;
  /** Delay before that attempt, ms. */
  delayMs?: number;
  /** Why the connection dropped or the client closed, if known. */
  reason?: string;
}

/**
 * A received frame: the decoded header, the payload view, and when it arrived. `encoding` says
 * what `payload` holds: a JPEG file, raw RGB24, or, after {@link ReactorClient.selectVideo}, one
 * coded frame: `FrameEncoding.H264` (an Annex B access unit) or `FrameEncoding.Vp8`, with `key`
 * true on a key frame. Feed coded payloads in order to a decoder configured from the track's
 * last `video_config` event (in a browser, `EncodedVideoChunk({ type: key ? 'key' : 'delta',
 * timestamp, data: payload })`); the payload is a view into the received message, valid after
 * the event.
 */
export interface ClientFrame extends DecodedFrame {
  /** Name of the frame's track (`schema.tracks[track].name`). */
  trackName: string;
  /** `performance.now()` when the message arrived. */
  receivedAt: number;
}

/**
 * A chunk of an outbound audio track (a binary frame with PCM encoding): mono s16 samples at
 * `sampleRate`, on the same `ptsMs` clock as the video frames.
 */
export interface ClientAudio {
  /** Index of the track in `schema.tracks`. */
  track: number;
  trackName: string;
  seq: number;
  ptsMs: number;
  sampleRate: number;
  samples: Int16Array;
  /** `performance.now()` when the message arrived. */
  receivedAt: number;
}

/** Options of {@link ReactorClient.upload}. */
export interface UploadOptions {
  /** The file's name, for display (default: the `File`'s name, else `upload`). */
  name?: string;
  /** The type the client believes it is (`image/png`); the server checks the bytes. Default: the `Blob`'s type. */
  type?: string;
  /**
   * The command the file is for (its wire name) and, when it has several, its upload parameter:
   * the server then holds the file to that field's `maxBytes` and types before and while the
   * bytes stream (`upload_too_large`, `upload_type_not_allowed`) instead of at the command.
   */
  command?: string;
  field?: string;
  signal?: AbortSignal;
}

/** A `Blob`/`File` as `upload()` reads it (typed structurally: the Node entry needs no DOM types). */
export interface BlobLike {
  readonly size: number;
  readonly type: string;
  readonly name?: string;
  arrayBuffer(): Promise<ArrayBuffer>;
}

/** Events of a {@link ReactorClient}. */
export interface ReactorClientEvents {
  /** A welcome arrived (first connection and every re-join). */
  welcome: WelcomeMessage;
  frame: ClientFrame;
  /** An app message (`send()` broadcast or `client.send()`). */
  message: AppMessage;
  /** The public state changed. */
  state: Record<string, unknown>;
  session: SessionStatus;
  stats: StatsMessage;
  /** Playout was cut: clear what is shown. */
  flush: FlushMessage;
  /** A chunk of an outbound audio track. */
  audio: ClientAudio;
  /** The server released a track this client published (the session ended); publish again to keep sending. */
  track_released: TrackReleasedMessage;
  /**
   * How an outbound video track is encoded from the next frame on (after {@link ReactorClient.selectVideo},
   * a tier change, or the server's fall-back to JPEG): (re)configure the track's decoder from it.
   */
  video_config: VideoConfigMessage;
  status: ConnectionStatus;
  /** The connection dropped; the client tries again after `delayMs` (as the `status` event with state `reconnecting`). */
  reconnecting: ConnectionStatus;
  /** The connection came back within the server's grace: same `clientId`, role and publications (they carry on); the state follows. */
  resumed: ResumeEvent;
  /** The connection came back too late to resume (or the server lost the client): a new `clientId`, the publications ended. */
  new_identity: ResumeEvent;
  /** Single-controller mode: who steers now. */
  control: ControlStatus;
  /** WebRTC signalling from the server (`WebRtcLink` reads it). */
  rtc: RtcAnswerMessage | RtcCandidateMessage | RtcStateMessage;
  /** A server error not tied to a command, or an undecodable message. */
  error: Error;
}

/** A `resumed` or `new_identity` event. */
export interface ResumeEvent {
  clientId: string;
  previousClientId: string;
  /** From the drop to the welcome, ms. */
  downMs: number;
}

/** Options of the async iterators. */
export interface IterateOptions {
  /** Ends the iteration. */
  signal?: AbortSignal;
  /** Unread items kept; the oldest is dropped beyond it. */
  bufferSize?: number;
}
