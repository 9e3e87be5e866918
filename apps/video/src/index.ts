/**
 * The sample app: a prompt-controlled parallel video model (`VideoWorker`, one process per
 * rank) behind `VideoApp`. `reactor.yaml` at the repository root points `reactor run` here.
 */
export {
  VideoApp,
  VideoState,
  VideoOutput,
  SetImageParams,
  ImageSet,
  SOUNDTRACK_SAMPLE_RATE,
  VIDEO_FPS,
  BackendInfo,
  RolloutRestarted,
  RunnerRestarting,
  VideoConfig,
  VideoConfigError,
  loadVideoConfig,
  planRanks,
} from './app.js';
export { VideoWorker, RolloutExhausted } from './video-worker.js';
export { VideoErrorCode } from './model/index.js';
export type { VideoLoadArgs, VideoInput, VideoResult, VideoModelInfo, RankBackend } from './video-worker.js';
