/**
 * `@reactor/protocol`: the wire protocol between a Reactor server and its clients, version 1.
 *
 * Implemented once, here: the server, the app model and the client SDK import these types and
 * codecs, so the sides cannot drift. Control messages are JSON text frames; video frames are
 * binary frames with a fixed 32-byte header (see {@link encodeFrameHeader}). `docs/protocol.md`
 * is the prose version of this package. No dependency and no `node:` import: it runs in
 * browsers as it is.
 */
export { PROTOCOL_VERSION } from './schema.js';
export type {
  JsonSchema,
  CommandSchema,
  MessageSchema,
  TrackKind,
  TrackDirection,
  TrackSchema,
  AppSchema,
  SessionState,
  SessionStatus,
  FieldError,
  ErrorBody,
} from './schema.js';
export { CLIENT_MESSAGE_TYPES, MAX_CLIENT_STATS_SAMPLES, MAX_CLIENT_STATS_MS, MAX_FIRST_FRAME_MS } from './client-messages.js';
export type {
  CommandMessage,
  PublishMessage,
  PublishTransportName,
  UnpublishMessage,
  PauseTrackMessage,
  ResumeTrackMessage,
  SelectVideoMessage,
  RequestKeyFrameMessage,
  ClipMessage,
  RecordingMessage,
  ClipResult,
  RecordingInfo,
  RequestControlMessage,
  ReleaseControlMessage,
  ClientStatsMessage,
  ClientStatsSample,
  ClientMessage,
} from './client-messages.js';
export { parseClientStats } from './client-stats.js';
export type { ParsedClientStats } from './client-stats.js';
export { MAX_RTC_SDP_LENGTH, MAX_RTC_CANDIDATE_LENGTH } from './rtc.js';
export type {
  RtcOfferMessage,
  RtcCandidateMessage,
  RtcCloseMessage,
  RtcAnswerMessage,
  RtcStateMessage,
  RtcState,
  RtcTrackMapping,
  RtcClientMessage,
  RtcIceServer,
  RtcWelcome,
} from './rtc.js';
export { KEY_FRAME_MIN_INTERVAL_MS, h264CodecString } from './video.js';
export type { VideoCodecName, VideoTierSchema, VideoOffer, VideoSelection } from './video.js';
export { UPLOAD_PATH } from './uploads.js';
export type { UploadRef, UploadRequest, UploadTicket, UploadInfo } from './uploads.js';
export { parseServerMessage, APPLIED_OUTCOMES } from './server-messages.js';
export type {
  WelcomeMessage,
  ControlStatus,
  ControlMessage,
  VideoConfigMessage,
  ReplyMessage,
  ErrorMessage,
  AppMessage,
  StateMessage,
  SessionMessage,
  StatsMessage,
  FlushMessage,
  TrackReleasedMessage,
  AppliedOutcome,
  AppliedMessage,
  ServerMessage,
} from './server-messages.js';
export { parseClientMessage, validId, MAX_COMMAND_ID_LENGTH } from './client-message-parser.js';
export type { ParsedClientMessage, ClientMessageRefusal } from './client-message-parser.js';
export { CloseCode, WireErrorCode, HttpErrorCode, ReadinessCode, ProtocolErrorCode } from './codes.js';
export { FrameEncoding, FRAME_HEADER_BYTES, FrameDecodeError, encodeFrameHeader, encodeFrame, decodeFrame } from './frame.js';
export type { FrameHeader, DecodedFrame } from './frame.js';
export { httpErrorEnvelope, encodeHttpError, readHttpError, parseHttpError, parseJsonText } from './http-error.js';
export type { HttpErrorEnvelope, HttpErrorInfo } from './http-error.js';
export { CodedError } from './coded-error.js';
export { canTransition, transition, IllegalTransitionError } from './transitions.js';
export type { TransitionTable } from './transitions.js';
export { TierHysteresis } from './tier-hysteresis.js';
export type { TierHysteresisOptions, TierWindowVerdict, TierStep } from './tier-hysteresis.js';
export type { DashboardClient, DashboardData, DashboardEvent, DashboardEventSource } from './dashboard.js';
