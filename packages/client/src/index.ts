/** `@reactor/client`: the wire protocol of Reactor apps (types, codes, frame codec) and the client SDK. */
export {
  PROTOCOL_VERSION,
  FRAME_HEADER_BYTES,
  FrameEncoding,
  CLIENT_MESSAGE_TYPES,
  MAX_CLIENT_STATS_SAMPLES,
  MAX_CLIENT_STATS_MS,
  KEY_FRAME_MIN_INTERVAL_MS,
  WireErrorCode,
  CloseCode,
  HttpErrorCode,
  FrameDecodeError,
  encodeFrameHeader,
  encodeFrame,
  decodeFrame,
  parseServerMessage,
} from './base/protocol.js';
export type {
  JsonSchema,
  CommandSchema,
  MessageSchema,
  TrackSchema,
  TrackKind,
  TrackDirection,
  PublishMessage,
  UnpublishMessage,
  PauseTrackMessage,
  ResumeTrackMessage,
  TrackReleasedMessage,
  SelectVideoMessage,
  ClipMessage,
  ClipResult,
  RecordingMessage,
  RecordingInfo,
  RequestKeyFrameMessage,
  VideoCodecName,
  VideoTierSchema,
  VideoOffer,
  VideoSelection,
  VideoConfigMessage,
  UploadRef,
  UploadRequest,
  UploadTicket,
  UploadInfo,
  AppSchema,
  SessionState,
  SessionStatus,
  FieldError,
  ErrorBody,
  CommandMessage,
  ClientMessage,
  WelcomeMessage,
  ControlStatus,
  ControlMessage,
  RequestControlMessage,
  ReleaseControlMessage,
  ClientStatsMessage,
  ClientStatsSample,
  ReplyMessage,
  ErrorMessage,
  AppMessage,
  StateMessage,
  SessionMessage,
  StatsMessage,
  FlushMessage,
  AppliedMessage,
  AppliedOutcome,
  ServerMessage,
  FrameHeader,
  DecodedFrame,
} from './base/protocol.js';
export { connect } from './connect.js';
export { WebRtcLink, WebRtcFailedError, RTC_LINK_TRANSITIONS } from './rtc/rtc-link.js';
export type { WebRtcLinkOptions, RtcTrack, RtcLinkStats, RtcPeerConnectionLike, RtcPeerConnectionConstructor, WebRtcLinkEvents } from './rtc/rtc-link.js';
export { toWebSocketUrl } from './base/socket-url.js';
export { ReactorClient } from './client.js';
export type {
  WebSocketLike,
  WebSocketConstructor,
  ReconnectOptions,
  ConnectOptions,
  PresentationMode,
  SendOptions,
  ConnectionState,
  ConnectionStatus,
  ResumeEvent,
  ClientFrame,
  ReactorClientEvents,
  IterateOptions,
  ClientAudio,
  UploadOptions,
  BlobLike,
} from './client-types.js';
export type { AppliedInfo, CommandPromise } from './applied-waiters.js';
export { requestSession } from './session-route.js';
export type { SessionRoute, AllocationRetryOptions, RequestSessionOptions, QueuePlace } from './session-route.js';
export { Publication } from './media/publication.js';
export type {
  PublishSource,
  PublishOptions,
  PublicationEnd,
  PublicationEvents,
  VideoSourceFrame,
  AudioSourceChunk,
  MediaStreamTrackLike,
} from './media/publication.js';
export type { AppTypes, UntypedApp, CommandName, MessageName, CommandParams, MessageData, CommandArgs } from './app-types.js';
export { LatencyTracker, FREEZE_THRESHOLD_MS } from './latency/latency-tracker.js';
export type { LatencySummary, AppliedFrame } from './latency/latency-tracker.js';
export { TypedEmitter } from './base/emitter.js';
export type { Listener } from './base/emitter.js';
export {
  ClientErrorCode,
  ReactorClientError,
  CommandFailedError,
  CommandTimeoutError,
  ConnectionError,
  ProtocolMismatchError,
  SessionRouteError,
} from './base/errors.js';
export { KeyFrameGate } from './video/key-frame-gate.js';
export type { ReferenceLoss, GateDecision, GateFrame, KeyFrameGateOptions } from './video/key-frame-gate.js';
export { TierController } from './video/tier-controller.js';
export type { TierControllerOptions, TierDecision, TierWindow } from './video/tier-controller.js';
