/**
 * The sample app's video model: a prompt-conditioned CPPN rendered with tfjs, split across the
 * ranks of a `DistributedRunner` by pixel rows and gathered on rank 0.
 */
export {
  ParallelVideoModel,
  VIDEO_MODEL_DEFAULTS,
  quantizeRgb,
  unpackRgb,
  type ParallelVideoModelOptions,
  type VideoModelSnapshot,
} from './parallel-video-model.js';
export type { VideoInput, VideoImage, VideoResult, VideoModelInfo, RankBackend } from './types.js';
export { steerTarget, channelStats, STEER_GRID } from './image-steer.js';
export { soundtrackPartials } from './soundtrack.js';
export {
  VideoErrorCode,
  VideoModelError,
  RolloutExhausted,
  WeightsNotFoundError,
  WeightsInvalidError,
  BackendConfigError,
  BackendUnavailableError,
  ModelNotLoadedError,
} from './errors.js';
export { planBackends, requestGpuAdapter, adapterProblem } from './backend.js';
export type { ModelCollectives } from './collectives.js';
export { loadWeights } from './weights.js';
export { normalizePrompt } from './prompt-embedding.js';
export { rowShare, frameSegments } from './partition.js';
