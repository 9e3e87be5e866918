/**
 * The sample app's video model: a prompt-conditioned CPPN rendered with tfjs, split across the
 * ranks of a `DistributedRunner` by pixel rows and gathered on rank 0.
 */
export {
  ParallelVideoModel,
  VIDEO_MODEL_DEFAULTS,
  quantizeRgb,
  unpackRgb,
  DEVICE_QUANTIZE_ENV,
  BATCH_FRAMES_ENV,
  type ParallelVideoModelOptions,
} from './parallel-video-model.js';
export type { VideoInput, VideoImage, VideoResult, VideoModelInfo, RankBackend } from './types.js';
export {
  steerTarget,
  channelStats,
  steerRows,
  steerWeight,
  frameSums,
  statsFromSums,
  STEER_GRID,
  STEER_COMPOSITION,
  STEER_MAX,
  type RgbImage,
} from './image-steer.js';
export { Soundtrack, soundtrackPartials, SOUNDTRACK_PARTIALS, type Partial } from './soundtrack.js';
export {
  VideoErrorCode,
  VideoModelError,
  RolloutExhausted,
  WeightsNotFoundError,
  WeightsInvalidError,
  BackendConfigError,
  BackendUnavailableError,
  ModelNotLoadedError,
  type BackendAttempt,
} from './errors.js';
export {
  BACKEND_ENV,
  BACKEND_NAMES,
  GPU_INDEX_ENV,
  planBackends,
  requestGpuAdapter,
  adapterProblem,
  type BackendName,
  type BackendPlan,
  type BackendSelection,
  type GpuAdapterInfo,
} from './backend.js';
export type { ModelCollectives, TypedArray } from './collectives.js';
export { loadWeights, WEIGHTS_FORMAT, WEIGHTS_FORMAT_VERSION, type CppnConfig, type LoadedWeights } from './weights.js';
export { embedPrompt, normalizePrompt, promptFeatures } from './prompt-embedding.js';
export { rowShare, frameSegments, maxShareRows, type RowShare, type FrameSegment } from './partition.js';
