/**
 * The types of the client SDK's surface: its options, connection status, received frames and
 * audio, upload inputs and the events of a {@link ReactorClient}.
 */
import type { AllocationRetryOptions, QueuePlace } from './session-route.js';
import type { WebRtcLinkOptions } from './rtc/rtc-link.js';
import type { ClientAudio, ClientFrame } from './media/media-types.js';

export type { BlobLike, ClientAudio, ClientFrame, UploadOptions } from './media/media-types.js';
import type {
  AppMessage,
  AppliedMessage,
  ControlStatus,
  FlushMessage,
  SessionStatus,
  StatsMessage,
  TrackReleasedMessage,
  VideoConfigMessage,
  WelcomeMessage,
  RtcAnswerMessage,
  RtcCandidateMessage,
  RtcStateMessage,
} from './base/protocol.js';

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

/** When a frame counts as presented for the latency tracker: handed to the app (`delivery`, the default), or told by the app (`manual`). */
export type PresentationMode = 'delivery' | 'manual';

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
   * Measure what the user sees and report it to the server as `client_stats` (default `true`):
   * command-to-pixel latency, time to first frame, freezes, dropped frames (`client.latency`).
   * `false` turns it off. `presentation: 'manual'`: the code that draws the frames calls
   * `client.latency.presented(track, seq)` when it shows one (and `dropped()` for one it skips);
   * by default a frame counts as presented when the `frame` event hands it to the app.
   */
  stats?: boolean | { presentation?: PresentationMode };
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
  /** Which frame first showed one of this client's commands, or why none will (also through the command's `.applied`). */
  applied: AppliedMessage;
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
