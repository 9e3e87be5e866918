/**
 * The world app's config (`runtime.config` in the manifest): which model, its checkpoint, its
 * cache window, how it runs. Absent keys are planned for the machine ({@link planWorld}).
 */
import { dirname, isAbsolute, resolve } from 'node:path';
import { IsArray, IsBoolean, IsIn, IsInt, IsOptional, IsString, Max, Min } from 'class-validator';
import { loadAppConfig } from '@reactor/runtime';
import { WorldConfigError } from './errors.js';

/** The model configs of `python/reactor_world/configs.py`. */
export const MODEL_NAMES = ['small', 'wan-1.3b', 'wan-14b'] as const;
export type ModelName = (typeof MODEL_NAMES)[number];
/** The pipeline shapes of `python/reactor_world/staged.py`. */
export const PIPELINE_SHAPES = ['blocks', 'steps'] as const;
export type PipelineShape = (typeof PIPELINE_SHAPES)[number];

export class WorldConfig {
  /** `auto`: wan-1.3b (832x480) on a GPU, small (64x48) on CPU. */
  @IsIn(['auto', ...MODEL_NAMES]) model: ModelName | 'auto' = 'auto';
  /** A checkpoint in the reference's key layout (relative to the config file). Absent: generated weights. */
  @IsOptional() @IsString() checkpoint?: string;
  /** The state dict inside a `.pt` (Self-Forcing: `generator`, the default, or `generator_ema`). */
  @IsOptional() @IsString() checkpointKey?: string;
  /** TAEHV's Wan2.1 decoder (`taew2_1.pth`). Absent: generated. */
  @IsOptional() @IsString() decoderCheckpoint?: string;
  /** `module:callable` returning `[tokens, text_dim]` for a prompt (a real text encoder). */
  @IsOptional() @IsString() textEncoder?: string;
  /** Folders added to the ranks' import path (the text encoder's module), relative to the config file. */
  @IsOptional() @IsArray() @IsString({ each: true }) pythonPath?: string[];
  /** Output size in pixels (multiples of 16). Default: the config's (832x480 for wan-*, 64x48 for small). */
  @IsOptional() @IsInt() @Min(16) @Max(4096) width?: number;
  @IsOptional() @IsInt() @Min(16) @Max(4096) height?: number;
  /** Latent frames of KV cache the attention reads (the chunk included); default 12 (9 for small). */
  @IsOptional() @IsInt() @Min(2) @Max(256) windowFrames?: number;
  /** Latent frames of the session's start kept in the cache for good (LongLive's sink); default 3. */
  @IsOptional() @IsInt() @Min(0) @Max(64) sinkFrames?: number;
  @IsIn(['auto', 'bf16', 'fp16', 'fp32']) dtype: 'auto' | 'bf16' | 'fp16' | 'fp32' = 'auto';
  /**
   * `torch.compile` of the DiT blocks' fixed-shape parts: `auto` (on CUDA: 1.5x the DiT's speed
   * on an H200, traced by the warm-up chunks in `load()`), `on`, `off`. A compile that fails, or a
   * torch without it, runs eager and says why in the log.
   */
  @IsIn(['auto', 'on', 'off']) compile: 'auto' | 'on' | 'off' = 'auto';
  /** The seed of generated weights. */
  @IsInt() @Min(0) weightsSeed = 0;
  @IsIn(['auto', 'cpu']) devices: 'auto' | 'cpu' = 'auto';
  /** The Python interpreter (default: `REACTOR_PYTHON`, else `python3`); it needs NumPy and torch. */
  @IsOptional() @IsString() python?: string;
  @IsInt() @Min(100) callTimeoutMs = 120_000;
  /** A prompt change restarts the chunk in flight (issue 39; default true); false: it shows after that chunk. */
  @IsBoolean() urgent = true;
  /**
   * The model over ranks (issue 39, `python/reactor_world/staged.py`): `none` (one rank),
   * `blocks` (the DiT's blocks split into one stage a rank), `steps` (one denoising step a rank).
   * Each gives the one-rank frames bit for bit (with `threads` set alike).
   */
  @IsIn(['none', ...PIPELINE_SHAPES]) pipeline: 'none' | PipelineShape = 'none';
  /** Ranks of a pipeline (its stages; the last one's frames are the answer); 1 without one. Default: 2 with a pipeline. */
  @IsOptional() @IsInt() @Min(1) @Max(64) ranks?: number;
  /**
   * Chunks in flight: the step loop dispatches the next chunk before the previous returns
   * (`ReactorApp.inFlight`) and the runner keeps that many calls (`maxInFlight`, 1..8: out of
   * range is the runner's `runner_option` at start). Default 1; 2 keeps a 2-stage pipeline busy.
   */
  @IsInt() inFlight = 1;
  /** torch threads a CPU rank uses (default: torch's); equal on every run for bit-equal frames. */
  @IsOptional() @IsInt() @Min(1) @Max(256) threads?: number;
  /** Loading a 14B model takes minutes. */
  @IsInt() @Min(1000) startTimeoutMs = 1_800_000;
}

const CONFIG_KEYS = [
  'model',
  'checkpoint',
  'checkpointKey',
  'decoderCheckpoint',
  'textEncoder',
  'pythonPath',
  'width',
  'height',
  'windowFrames',
  'sinkFrames',
  'dtype',
  'compile',
  'weightsSeed',
  'devices',
  'python',
  'callTimeoutMs',
  'startTimeoutMs',
  'urgent',
  'pipeline',
  'ranks',
  'inFlight',
  'threads',
];

/** Reads and validates the app config, with its paths made absolute (relative to the file); every problem is named by its key. */
export function loadWorldConfig(path: string | undefined): WorldConfig {
  const cfg = loadAppConfig(WorldConfig, path, { name: 'world app', keys: CONFIG_KEYS, error: (message) => new WorldConfigError(message) });
  const base = path ? dirname(path) : process.cwd();
  const abs = (p: string): string => (isAbsolute(p) ? p : resolve(base, p));
  if (cfg.checkpoint !== undefined) cfg.checkpoint = abs(cfg.checkpoint);
  if (cfg.decoderCheckpoint !== undefined) cfg.decoderCheckpoint = abs(cfg.decoderCheckpoint);
  if (cfg.pythonPath !== undefined) cfg.pythonPath = cfg.pythonPath.map(abs);
  return cfg;
}

/** What the app runs with on this machine. */
export interface WorldPlan {
  model: ModelName;
  devices: 'auto' | 'cpu';
  /** Ranks (1, or a pipeline's stages). */
  ranks: number;
  note: string;
}

/** `auto` resolved against the machine: the real 1.3B on a GPU, the small config on CPU. */
export function planWorld(cfg: WorldConfig, gpus: number): WorldPlan {
  const onCpu = cfg.devices === 'cpu' || gpus === 0;
  const model: ModelName = cfg.model !== 'auto' ? cfg.model : onCpu ? 'small' : 'wan-1.3b';
  const ranks = cfg.ranks ?? (cfg.pipeline === 'none' ? 1 : 2);
  const kind = onCpu ? 'CPU' : 'GPU';
  const where =
    ranks === 1
      ? `one ${kind} rank`
      : `${ranks} ${kind} ranks, pipeline ${cfg.pipeline} (${cfg.pipeline === 'blocks' ? 'DiT blocks split' : 'denoising steps split'})`;
  const noGpu = onCpu && gpus === 0 ? ' (no GPU on this machine)' : '';
  const inFlight = cfg.inFlight > 1 ? `, ${cfg.inFlight} chunks in flight` : '';
  const weights = cfg.checkpoint ? `checkpoint ${cfg.checkpoint}` : `generated weights (seed ${cfg.weightsSeed})`;
  return {
    model,
    devices: onCpu ? 'cpu' : 'auto',
    ranks,
    note: `${where}${noGpu}${inFlight}; ${model}${cfg.model === 'auto' ? ' (auto)' : ''} with ${weights}`,
  };
}
