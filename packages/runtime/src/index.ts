/**
 * `@reactor/runtime`: the app model (state, commands, step loop, output, sessions). The
 * transport is `@reactor/server`, the `reactor` command `@reactor/cli`. See `docs/runtime.md`.
 */
export { MAX_IN_FLIGHT, ReactorApp } from './app/reactor-app.js';
export type { OutputControl, ClipOptions, AppReadiness, AppNotReadyReason } from './app/reactor-app.js';
export type { AppOptions, SnapshotOptions } from './app/app-options.js';
export { SnapshotError, SnapshotErrorCode } from './snapshot/snapshot-errors.js';
export { REWIND_COMMAND } from './app/snapshot-spec.js';
export type { RewindResult, SnapshotsApi, TakeOptions } from './session/snapshots.js';
export { SESSION_LOG_FORMAT } from './session/session-log.js';
export type { LoggedCommand, SessionLogJson } from './session/session-log.js';
export { StepOutcome } from './app/step-outcome.js';
export { getWeightsPath, WEIGHTS_PATH_ENV } from './app/weights.js';
export { loadAppConfig, configKeys, AppConfigError } from './app/app-config.js';
export type { AppConfigOptions } from './app/app-config.js';
export { runnerReadiness, runnerRestartingReason } from './session/runner-readiness.js';
export type { RunnerHealth, RunnerReadinessOptions } from './session/runner-readiness.js';
export { DEFAULT_BUFFER_SIZE } from './app/registry.js';
export { DEFAULT_SAMPLE_RATE, DEFAULT_INPUT_CAPACITY, DEFAULT_INPUT_VIDEO, DEFAULT_INPUT_AUDIO_MAX_FPS } from './app/track-specs.js';
export { InputState } from './state/input-state.js';
export { InputField } from './decorators/input-field.decorator.js';
export { event } from './decorators/event.decorator.js';
export type { EventHandler } from './decorators/event.decorator.js';
export { sessionStarted, sessionEnded, connected, disconnected, trackPublished, trackUnpublished, fileUploaded } from './decorators/hooks.decorator.js';
export { UploadField } from './decorators/upload-field.decorator.js';
export { UploadedFile } from './upload/uploaded-file.js';
export type { ImageFrame, ImageDecoder } from './upload/uploaded-file.js';
export {
  DEFAULT_MAX_UPLOAD_BYTES,
  DEFAULT_UPLOAD_QUOTA_BYTES,
  DEFAULT_UPLOAD_WAIT_MS,
  DEFAULT_UPLOAD_EXPIRY_MS,
  MAX_UPLOAD_NAME_LENGTH,
  UPLOAD_PATH,
} from './upload/upload-options.js';
export type { UploadOptions } from './upload/upload-options.js';
export { UPLOAD_MIME_TYPES, IMAGE_MIME_TYPES, sniffMimeType } from './upload/sniff.js';
export type { UploadMimeType } from './upload/sniff.js';
export { reactorApp } from './decorators/reactor-app.decorator.js';
export type { InputFieldOptions, EventOptions, VideoTrackOptions, AudioTrackOptions, UploadFieldOptions } from './metadata/keys.js';
export { Output, Video, Audio, Frames, TrackPayload } from './output/output.js';
export { Input } from './input/input.js';
export type { InputBuffers } from './input/input.js';
export { InputBuffer } from './input/input-buffer.js';
export type { ReadMode, ReadOptions, TryReadOptions, InputBufferOptions } from './input/input-buffer.js';
export { InputFrame } from './input/input-frame.js';
export type { InputData, InputFrameInit } from './input/input-frame.js';
export type { TrackPayloadOptions, OutputInit } from './output/output.js';
export {
  RuntimeErrorCode,
  ReactorError,
  AppDefinitionError,
  DecoratorMisuseError,
  HostOptionError,
  ApplicationError,
  CommandError,
  FrameShapeError,
  UnknownTrackError,
  InvalidOutputError,
  MessageNotDeclaredError,
  NoSessionError,
  WeightsPathNotSetError,
  AppLoadError,
  HostClosedError,
  IllegalTransitionError,
  UploadError,
  BufferClosedError,
  BufferTimeoutError,
  InvalidReadError,
} from './errors/errors.js';
export type { UploadErrorCode } from './errors/errors.js';
export { AppHost, DEFAULT_GRACE_PERIOD_MS, DEFAULT_REFUSAL_BACKOFF_MS, DEFAULT_STATS_INTERVAL_MS } from './session/host.js';
export type { AppHostOptions, HostCounters, SnapshotRingOptions } from './session/host.js';
export type { RunnerStages, StepSample } from './session/step-stages.js';
export type { LoadProgressReport } from './session/runner-signals.js';
export type { Client } from './session/client.js';
export type { Logger } from '@reactor/log';
export { ReadinessCode } from './session/readiness.js';
export type { SessionAdmission } from './session/admission.js';
export type { SessionFrameHealth } from './session/frame-health.js';
export { FRAME_HEALTH_MIN_INTERVALS, FRAME_HEALTH_REPORT_MS, FRAME_HEALTH_WINDOW_MS } from './session/frame-health.js';
export type {
  AppHostApi,
  ClientHandle,
  ClientInfo,
  ClientSink,
  OutputFrame,
  OutputAudio,
  MediaListener,
  InboundFrame,
  Readiness,
  NotReadyReason,
  UploadsApi,
} from './session/transport.js';
export type { LoadContext, RequirementsContext, RequirementCheck, AppRequirements, AppStatics } from './app/contract.js';
