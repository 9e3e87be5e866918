/**
 * The types of the WebRTC link (`rtc-link.ts`, which re-exports them): what it uses of its client
 * and of an `RTCPeerConnection`, its options, tracks, stats and events.
 */
import type {
  AppSchema,
  RequestKeyFrameMessage,
  RtcAnswerMessage,
  RtcCandidateMessage,
  RtcClientMessage,
  RtcState,
  RtcStateMessage,
  RtcWelcome,
} from '../base/protocol.js';

/**
 * What the link uses of its client (`ReactorClient` has all of it): a structural type, so this
 * module does not import `client.ts`, which imports it.
 */
export interface RtcLinkClient {
  readonly schema: AppSchema;
  /** `welcome.webrtc` of the current connection: the server's ICE servers, policy and connect window. */
  readonly webrtcSetup?: RtcWelcome | undefined;
  on(type: 'rtc', listener: (m: RtcAnswerMessage | RtcCandidateMessage | RtcStateMessage) => void): () => void;
  on(type: 'error', listener: (e: Error) => void): () => void;
  on(type: 'welcome', listener: () => void): () => void;
  signal(msg: RequestKeyFrameMessage | RtcClientMessage): void;
  /** Its latency tracker: told where the video comes from (`client_stats.transport`). */
  readonly latency?: { transport: 'websocket' | 'webrtc' } | undefined;
}

/** The parts of `RTCPeerConnection` the link uses (the browser's, or werift's in Node). */
export interface RtcPeerConnectionLike {
  readonly connectionState: string;
  addTransceiver(kind: 'video' | 'audio', init: { direction: 'recvonly' }): unknown;
  createOffer(): Promise<{ sdp?: string | undefined; type: string }>;
  setLocalDescription(d: { sdp?: string | undefined; type: string }): Promise<unknown>;
  setRemoteDescription(d: { sdp: string; type: 'answer' }): Promise<unknown>;
  addIceCandidate(c: { candidate: string; sdpMid?: string | null; sdpMLineIndex?: number | null }): Promise<unknown>;
  getStats(): Promise<{ forEach(cb: (s: Record<string, unknown>) => void): void }>;
  close(): unknown;
  onicecandidate: ((e: { candidate: { candidate: string; sdpMid?: string | null; sdpMLineIndex?: number | null } | null }) => void) | null;
  ontrack: ((e: { track: { kind: string; id: string }; transceiver?: { mid: string | null }; streams?: readonly unknown[] }) => void) | null;
  onconnectionstatechange: (() => void) | null;
  /** A STUN/TURN server that answered with an error or could not be reached (a browser's `icecandidateerror`; werift has none). */
  onicecandidateerror?: ((e: { errorCode?: number; errorText?: string; url?: string }) => void) | null;
}

export type RtcPeerConnectionConstructor = new (config: {
  iceServers?: { urls: string | string[]; username?: string; credential?: string }[];
  iceTransportPolicy?: 'all' | 'relay';
}) => RtcPeerConnectionLike;

/** Options of {@link WebRtcLink.open} (and of `connect(url, { transport })`). */
export interface WebRtcLinkOptions {
  /** Default: `globalThis.RTCPeerConnection` (a browser's). */
  RTCPeerConnection?: RtcPeerConnectionConstructor;
  /**
   * STUN/TURN servers of the client side. Default: the server's (`welcome.webrtc.iceServers`,
   * `server.webrtc.client_ice_servers` or `ice_servers` in reactor.yaml); given, they replace them.
   */
  iceServers?: { urls: string | string[]; username?: string; credential?: string }[];
  /** `relay`: TURN relay candidates only. Default: the server's (`welcome.webrtc.iceTransportPolicy`), or `all` with your own {@link iceServers}. */
  iceTransportPolicy?: 'all' | 'relay';
  /**
   * How long the link waits for the connection from the server's answer on (and twice that for
   * the answer itself) before it gives up. Default: the server's window (`welcome.webrtc.connectTimeoutMs`,
   * `server.webrtc.connect_timeout_ms`, 10 s by default) plus 1 s, or 5000 ms against a server
   * that does not say.
   */
  timeoutMs?: number;
  /** Receive the outbound audio tracks too (default true). */
  audio?: boolean;
}

/** One received track. */
export interface RtcTrack {
  /** Schema track name. */
  name: string;
  kind: 'video' | 'audio';
  /** The `MediaStreamTrack` (browser) or the implementation's track object. */
  track: unknown;
}

/** What {@link WebRtcLink.stats} measures, from the peer connection's `getStats()`. */
export interface RtcLinkStats {
  /** Round-trip time of the selected candidate pair, ms. */
  rttMs: number | undefined;
  /** Video bits per second received since the previous call. */
  bitrate: number | undefined;
  /**
   * Candidate types of the selected pair (`host`, `srflx`, `prflx`, `relay`): `local: 'relay'`
   * when this side goes through TURN; `protocol`, how this side's packets travel (`udp`, `tcp`:
   * for a relay, to the TURN server, `tls` included).
   */
  candidates: { local: string; remote: string; protocol: string } | undefined;
  /** Frames per second decoded (the browser's figure). */
  fps: number | undefined;
  framesDecoded: number;
  framesDropped: number;
  /** Freezes and their total duration (the browser's count, cumulative). */
  freezes: number;
  freezeMs: number;
  packetsLost: number;
  nacks: number;
  plis: number;
}

export interface WebRtcLinkEvents {
  state: { state: RtcState; reason?: string };
  track: RtcTrack;
}
