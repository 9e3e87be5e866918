export {
  GENERATED_NOTICE,
  MAX_SEED,
  RunnerRestarting,
  WORLD_PYTHON_DIR,
  WORLD_WORKER,
  WorldApp,
  WorldInfo,
  type WorldInput,
  WorldOutput,
  type WorldResult,
  WorldState,
} from './app.js';
export { MODEL_NAMES, type ModelName, WorldConfig, type WorldPlan, loadWorldConfig, planWorld } from './config.js';
export { CheckpointError, ConfigError, TextEncoderError, WorldConfigError, WorldErrorCode, WorldInputInvalid, WorldOutOfMemory } from './errors.js';
export {
  TINY_WORLD_ACTIONS,
  TINY_WORLD_KEYS,
  TINY_WORLD_WEIGHTS,
  TINY_WORLD_WORKER,
  type TinyWorldAction,
  TinyWorldApp,
  TinyWorldConfig,
  TinyWorldInfo,
  TinyWorldOutput,
  TinyWorldState,
  loadTinyWorldConfig,
} from './tiny.js';
