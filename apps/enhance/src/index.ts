/**
 * The enhance app: live super-resolution with pretrained ESRGAN models (`@upscalerjs/esrgan-*`)
 * on every rank of a `DistributedRunner`. `apps/enhance/reactor.yaml` serves it.
 */
export {
  EnhanceApp,
  EnhanceState,
  EnhanceInputTracks,
  EnhanceOutput,
  EnhanceInfo,
  ModelUnavailable,
  RunnerRestarting,
  EnhanceConfig,
  EnhanceConfigError,
  loadEnhanceConfig,
  planEnhance,
  chooseSplit,
  H200_FPS_720P,
  H200_TORCH_FPS_720P,
  TORCH_WORKER,
  TORCH_PYTHON_DIR,
  type EnhanceTorchLoadArgs,
  type EnhancePlan,
} from './app.js';
export { EnhanceWorker, type EnhanceInput, type EnhanceLoadArgs, type EnhanceResult, type RankReport } from './enhance-worker.js';
export {
  EnhanceErrorCode,
  EnhanceError,
  WeightsMissingError,
  WeightsCorruptError,
  BackendConfigError,
  BackendUnavailableError,
  InputInvalidError,
} from './errors.js';
export { MultiplyBeta, PixelShuffle, pixelShuffleClass, registerEsrganLayers, MULTIPLY_BETA, SCALES, type Scale } from './layers.js';
export {
  readModelFiles,
  loadModel,
  modelDir,
  modelPackageDir,
  receptiveRadius,
  MODEL_NAMES,
  MODEL_FACTS,
  type ModelName,
  type ModelFile,
  type ModelArtifactsOnDisk,
} from './weights.js';
export { rowTile, frameShare, SPLITS, type Split, type RowTile } from './partition.js';
export { Upscaler, type RgbFrames } from './upscaler.js';
export { sceneFrames, resizeRgb } from './source.js';
export { planBackends, backendFramework, type BackendName, type Framework } from './backend.js';
export { writeFloat16Copy, float16Bits } from './quantize.js';
