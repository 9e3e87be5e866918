/**
 * `@reactor/server`: serves a Reactor app over HTTP + WebSocket (viewer, schema, health,
 * metrics, the wire protocol of `@reactor/protocol`). See docs/protocol.md and docs/viewer.md.
 */
export { ReactorServer, serveHost, CLOSE_GRACE_MS, type ServerCloseOptions } from './reactor-server.js';
export type { ServableHost, StepSample, HealthReport } from './reactor-server.js';
export {
  resolveServerOptions,
  resolveVideoOptions,
  LOOPBACK_HOSTS,
  isLoopbackHost,
  VIDEO_CODECS,
  DEFAULT_VIDEO_TIERS,
  DEFAULT_KEY_FRAME_INTERVAL,
} from './options.js';
export type { ServerOptions, ResolvedServerOptions, VideoOptions } from './options.js';
export type { WebRtcOptions, IceServerOptions, ResolvedWebRtcOptions } from './webrtc/rtc-options.js';
export type { RtcInfo } from './webrtc/rtc-session.js';
export type { RtcMediaStats } from './webrtc/rtc-media.js';
export { MAX_CLIP_SECONDS, resolveRecordingOptions } from './recording/recording-options.js';
export type { RecordingOptions, ResolvedRecordingOptions } from './recording/recording-options.js';
export { webCodecsEncoderFactory } from './video/video-encoder.js';
export { RgbMp4File } from './recording/recording-rgb-mp4.js';
export type { VideoEncoderFactory, CodedVideoEncoder, CodedEncoderConfig, CodedChunk, CodedVideoCodec } from './video/video-encoder.js';
export type { ResolvedVideoOptions, VideoEncoderInfo, KeyFrameReason } from './video/video-streams.js';
export { ServerErrorCode } from './base/errors.js';
export { ServerMetrics } from './base/metrics.js';
export type { DropReason } from './base/metrics.js';
export type { ConnectionInfo } from './connection.js';
export type { VideoSelectionInfo } from './video/video-sender.js';
export { MAX_FRAMES_IN_FLIGHT, HARD_BUFFER_FACTOR, AUDIO_QUEUE_FACTOR } from './ws/outbound-queue.js';
export { MAX_COMMAND_ID_LENGTH } from './ws/client-message.js';
export { MAX_FRAMES_PENDING_PER_TRACK } from './intake/frame-intake.js';
export { FRAME_ERROR_INTERVAL_MS, FRAME_RATE_BURST_SECONDS } from './base/drop-report.js';
export type { FrameIntakeInfo, InputDropReason } from './intake/frame-intake.js';
export { installShutdownHandlers, SHUTDOWN_SIGNALS } from './shutdown.js';
export type { ShutdownOptions } from './shutdown.js';
export { serve } from './serve.js';
export {
  TokenMinter,
  TokenVerifier,
  mintToken,
  mayPublish,
  mayRecord,
  RECORDING_GRANTS,
  DEFAULT_TOKEN_TTL_S,
  MAX_TOKEN_TTL_S,
  TOKEN_CLOCK_TOLERANCE_S,
  ROLES,
  FULL_GRANT,
} from '@reactor/access';
export type { Grant, RecordingGrant, Role, SigningKey, TokenAuthOptions, TokenCheck, TokenErrorCode, TokenRequest } from '@reactor/access';
export { DEFAULT_RESUME_GRACE_MS } from './options.js';
export type { ServeOptions } from './serve.js';
export { HostSwitch, serveSwitchable, sameTracks, hostOptionsOf } from './host-switch.js';
export type { SwitchableHost, ReplaceOptions, GenerationAwareSink } from './host-switch.js';
