/**
 * `EnhanceApp`: live super-resolution. Each step takes a few frames (the published camera, or
 * the built-in scene when none is published), upscales them with a pretrained ESRGAN model
 * (`@upscalerjs/esrgan-{slim,medium,thick}`) on every rank of a `DistributedRunner`, and streams
 * the result, optionally side by side with the input.
 */
import 'reflect-metadata';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { IsBoolean, IsIn, IsInt, IsOptional, IsString, Max, Min, ValidateIf } from 'class-validator';
import { DistributedRunner, SelfHealingRunner, detectGpuCount, pythonInterpreter, pythonWorker } from '@reactor/distributed';
import {
  type AppReadiness,
  type AppRequirements,
  ApplicationError,
  type Client,
  connected,
  Frames,
  Input,
  type InputBuffer,
  InputField,
  type InputFrame,
  InputState,
  type LoadContext,
  loadAppConfig,
  Output,
  ReactorApp,
  reactorApp,
  ReactorError,
  runnerReadiness,
  runnerRestartingReason,
  type RequirementCheck,
  type RequirementsContext,
  sessionStarted,
  type StepOutcome,
  TrackPayload,
  Video,
} from '@reactor/runtime';
import { backendFramework, planBackends, requestGpuAdapter } from './backend.js';
import { PUBLISHED_SHA256 } from './checksums.js';
import { EnhanceErrorCode, InputInvalidError, WeightsCorruptError, WeightsMissingError } from './errors.js';
import { EnhanceWorker, type EnhanceInput, type EnhanceLoadArgs, type EnhanceResult, type RankReport } from './enhance-worker.js';
import { SCALES } from './layers.js';
import { SPLITS, type Split } from './partition.js';
import { resizeRgb, sceneFrames } from './source.js';
import { MODEL_FACTS, MODEL_NAMES, type ModelName, modelPackageDir } from './weights.js';

/** The enhance app's Python package (`reactor_enhance`: the PyTorch backend), on the Python ranks' import path. */
export const TORCH_PYTHON_DIR = fileURLToPath(new URL('../python/', import.meta.url));
/** The Python worker of `backend: torch`. */
export const TORCH_WORKER = 'reactor_enhance.worker:EnhanceTorchWorker';

/** `load()` arguments of the Python worker (`EnhanceTorchWorker.load`). */
export interface EnhanceTorchLoadArgs {
  model: ModelName;
  scale: number;
  /** Each model's package folder, resolved here as the tfjs backend resolves it. */
  package_dirs: Record<string, string>;
  /** The published files' SHA-256s (`src/checksums.ts`): one table for both backends. */
  published_sha256: Readonly<Record<string, string>>;
  /** A step of the first model as the ranks will get it (full input height, the split chosen): compiled and warmed in load(). */
  warmup?: { n: number; width: number; height: number; split: Split };
  /** `compile` of the app config (reactor_worker.compile: auto, off, compile, graphs, both). */
  compile: Compile;
}

/** `compile` (backend: torch): `torch.compile`, CUDA graphs of the fixed batch, both, or eager; `auto`: both on CUDA, eager on CPU. */
export const COMPILE_MODES = ['auto', 'off', 'compile', 'graphs', 'both'] as const;
export type Compile = (typeof COMPILE_MODES)[number];

/**
 * Frames per second delivered at 1280x720 output through the whole serving path, measured on
 * H200s with pipelined steps (docs/benchmarks.md, 2026-12-01): `[one GPU, two GPUs, frames
 * split]`; slim and medium at 4 frames a step, thick at 8. Slim and medium are bound by the
 * serving path, not the GPU, so a second GPU adds little; thick is GPU-bound and scales.
 */
export const H200_FPS_720P: Readonly<Record<ModelName, readonly [number, number]>> = { slim: [90.7, 83.1], medium: [75.3, 79.7], thick: [16.6, 32.3] };

/** The session state: `set_model`, `set_scale`, `set_paused`, `set_side_by_side`. */
export class EnhanceState extends InputState {
  @InputField({ default: 'auto', description: 'ESRGAN model: slim, medium, thick, or auto (the one that runs in real time here).' })
  @IsIn(['auto', ...MODEL_NAMES])
  model!: ModelName | 'auto';

  @InputField({ default: 4, description: 'Upscaling factor (the models ship x2, x3, x4, x8); the output size stays, the input shrinks.' })
  @IsIn([...SCALES])
  scale!: number;

  @InputField({ default: false, description: 'Stop upscaling (queued frames still play).' })
  @IsBoolean()
  paused!: boolean;

  @InputField({ default: false, description: 'Show the input (pixels enlarged) left of the upscaled picture.' })
  @IsBoolean()
  sideBySide!: boolean;
}

/** The camera a client may publish: upscaled instead of the built-in scene while published. */
export class EnhanceInputTracks extends Input {
  @Video({ width: 640, height: 360, fps: 30, description: 'A camera to upscale (downscaled to the model input first).' })
  webcam!: InputBuffer;
}

/** The upscaled video. */
export class EnhanceOutput extends Output {
  @Video({ description: 'The upscaled video (input | upscaled when side_by_side is on).' })
  enhanced?: Video;
}

/** Sent when a session starts and whenever what runs changes: model, sizes, ranks. */
export class EnhanceInfo {
  constructor(
    readonly model: ModelName,
    readonly scale: number,
    readonly inputWidth: number,
    readonly inputHeight: number,
    readonly outputWidth: number,
    readonly outputHeight: number,
    readonly split: Split,
    readonly source: 'camera' | 'scene',
    readonly ranks: RankReport[],
    readonly weightsSha256: string,
  ) {}
}

/** Sent when the chosen model or scale cannot load (its files are missing or corrupt): steps wait until another is chosen. */
export class ModelUnavailable {
  constructor(
    readonly model: ModelName,
    readonly scale: number,
    readonly code: string,
    readonly reason: string,
  ) {}
}

/** Sent when a rank died between calls: a new runner is starting, clients stay connected. */
export class RunnerRestarting {
  constructor(readonly reason: string) {}
}

/** The app config (`runtime.config` in the manifest; YAML or JSON). Absent keys are planned for the machine. */
export class EnhanceConfig {
  /** `auto`: medium on GPUs, slim on CPU (what runs in real time on each). */
  @IsIn(['auto', ...MODEL_NAMES]) model: ModelName | 'auto' = 'auto';
  /** Output size in pixels; the model input is this divided by the scale. Default: 1280x720 on GPUs, 256x144 on CPU. */
  @IsOptional() @IsInt() @Min(16) @Max(4096) outputWidth?: number;
  @IsOptional() @IsInt() @Min(16) @Max(4096) outputHeight?: number;
  /**
   * Frames per step (a batch on each rank). Default: 2 on CPU; on GPUs 4, and 8 for thick (its
   * fixed cost per call, tfjs dispatching some thousand ops, then spreads over twice the frames).
   */
  @IsOptional() @IsInt() @Min(1) @Max(64) framesPerStep?: number;
  /** `tiles` (bands of rows), `frames` (frames of a step per rank), or `auto` (tiles when their overlap costs under 25 %). */
  @IsIn(['auto', ...SPLITS]) split: Split | 'auto' = 'auto';
  /** `auto`: one rank per GPU declared in the manifest (capped by those present), or 2 CPU ranks. */
  @ValidateIf((c: EnhanceConfig) => c.worldSize !== 'auto') @IsInt() @Min(1) @Max(64) worldSize: number | 'auto' = 'auto';
  @IsIn(['auto', 'cpu']) devices: 'auto' | 'cpu' = 'auto';
  /**
   * `auto` | `webgpu` | `wasm` | `cpu` | an order such as `webgpu,wasm` (tfjs in TypeScript
   * ranks), or `torch` (PyTorch in Python ranks: CUDA float16 on GPUs, float32 on CPU).
   * `REACTOR_BACKEND` overrides.
   */
  @IsString() backend = 'auto';
  /** The Python interpreter of `backend: torch` (default: `REACTOR_PYTHON`, else `python3`); it needs NumPy and torch. */
  @IsOptional() @IsString() python?: string;
  @IsInt() @Min(100) callTimeoutMs = 60_000;
  @IsOptional() @IsInt() @Min(1) startTimeoutMs?: number;
  /**
   * Pipelined steps: the ranks compute step N+1 while step N is read back, gathered and played
   * (one step more latency). `auto`: on when every rank runs on a GPU (webgpu), off on wasm/cpu,
   * where nothing would overlap.
   */
  @IsIn(['auto', 'on', 'off']) pipeline: 'auto' | 'on' | 'off' = 'auto';
  /**
   * `backend: torch` only: `compile` (torch.compile), `graphs` (CUDA graphs of the fixed batch),
   * `both`, or `off` (eager); `auto`: both on a CUDA rank, eager on CPU. What cannot be had falls
   * back to eager with a warning naming why (`reactor_worker.compile`, docs/runner.md).
   */
  @IsIn(COMPILE_MODES) compile: Compile = 'auto';
}

/** Thrown by {@link loadEnhanceConfig} for an unreadable or invalid config file. */
export class EnhanceConfigError extends ReactorError {
  constructor(message: string) {
    super(EnhanceErrorCode.ConfigInvalid, message);
  }
}

const CONFIG_KEYS = [
  'model',
  'outputWidth',
  'outputHeight',
  'framesPerStep',
  'split',
  'worldSize',
  'devices',
  'backend',
  'callTimeoutMs',
  'startTimeoutMs',
  'pipeline',
  'python',
  'compile',
];

/** Reads and validates the app config; every problem is named by its key. */
export function loadEnhanceConfig(path: string | undefined): EnhanceConfig {
  return loadAppConfig(EnhanceConfig, path, { name: 'enhance app', keys: CONFIG_KEYS, error: (message) => new EnhanceConfigError(message) });
}

/** What the app runs with on this machine. */
export interface EnhancePlan {
  worldSize: number;
  devices: 'auto' | 'cpu';
  /** The model `auto` stands for. */
  model: ModelName;
  outputWidth: number;
  outputHeight: number;
  /** Frames per step for each model (the configured number, or the default for CPU or GPU ranks). */
  framesPerStep: Readonly<Record<ModelName, number>>;
  note: string;
}

/**
 * Resolves the config's `auto`s against the machine: GPU ranks get medium at 1280x720 (one
 * H200 runs it at ~50 fps); CPU ranks get slim at 256x144 (wasm).
 * @param gpus     GPUs visible to this process (`detectGpuCount()`)
 * @param declared GPUs the manifest declares, when started from one
 */
export function planEnhance(cfg: EnhanceConfig, gpus: number, declared: number | undefined): EnhancePlan {
  const onCpu = cfg.devices === 'cpu' || gpus === 0;
  const worldSize = cfg.worldSize !== 'auto' ? cfg.worldSize : onCpu ? 2 : Math.max(1, Math.min(declared ?? gpus, gpus));
  const model: ModelName = cfg.model !== 'auto' ? cfg.model : onCpu ? 'slim' : 'medium';
  const outputWidth = cfg.outputWidth ?? (onCpu ? 256 : 1280);
  const outputHeight = cfg.outputHeight ?? (onCpu ? 144 : 720);
  const per = (m: ModelName): number => cfg.framesPerStep ?? (onCpu ? 2 : m === 'thick' ? 8 : 4);
  const framesPerStep = { slim: per('slim'), medium: per('medium'), thick: per('thick') };
  const where = onCpu ? `${worldSize} CPU rank(s)${gpus === 0 ? ' (no GPU on this machine)' : ''}` : `${worldSize} rank(s), one GPU each (${gpus} present)`;
  return {
    worldSize,
    devices: onCpu ? 'cpu' : 'auto',
    model,
    outputWidth,
    outputHeight,
    framesPerStep,
    note: `${where}; ESRGAN ${model}${cfg.model === 'auto' ? ' (auto)' : ''} at ${outputWidth}x${outputHeight}`,
  };
}

/** Tiles when the context rows they read twice cost under 25 % more work, else whole frames per rank. */
export function chooseSplit(configured: Split | 'auto', inputHeight: number, radius: number, worldSize: number, framesPerStep: number): Split {
  if (configured !== 'auto') return configured;
  if (worldSize === 1) return 'tiles';
  const band = inputHeight / worldSize;
  const tilesOverhead = Math.min(inputHeight, band + 2 * radius) / band - 1;
  return tilesOverhead < 0.25 || framesPerStep < worldSize ? 'tiles' : 'frames';
}

/** Input rows of context per model (x4; the graphs of other scales differ only after the upsampling). */
const RADIUS: Readonly<Record<ModelName, number>> = { slim: 10, medium: 18, thick: 154 };

/**
 * Live super-resolution on a `DistributedRunner`: rank 0 returns each step's upscaled frames.
 * A published camera replaces the built-in scene.
 */
@reactorApp({
  state: EnhanceState,
  input: EnhanceInputTracks,
  output: EnhanceOutput,
  messages: [EnhanceInfo, ModelUnavailable, RunnerRestarting],
  name: 'reactor-enhance',
  version: '0.1.0',
  bufferSize: 8,
})
export class EnhanceApp extends ReactorApp<EnhanceState, EnhanceInput, EnhanceResult, EnhanceInfo | ModelUnavailable | RunnerRestarting, EnhanceInputTracks> {
  /** The runner, rebuilt when it breaks between calls (a rank that died). */
  private readonly runners = new SelfHealingRunner<EnhanceInput, EnhanceResult, EnhanceLoadArgs | EnhanceTorchLoadArgs>({
    name: 'the enhance runner',
    logger: this.logger,
    create: () => this.createRunner(),
    onRestarting: (reason) => this.send(new RunnerRestarting(runnerRestartingReason(reason))),
    onRebuild: () => (this.ranks = []),
  });
  private config = new EnhanceConfig();
  private plan!: EnhancePlan;
  private manifestGpuCount: number | undefined;
  private ranks: RankReport[] = [];
  private frameIndex = 0;
  /** Model/scale pairs that failed to load, with why: steps wait until another is chosen. */
  private readonly unavailable = new Map<string, string>();
  /** What the last info message said, to send a new one only on a change. */
  private lastInfo = '';
  /** The last `EnhanceInfo` sent to the session, for late joiners. */
  private latestInfo: EnhanceInfo | undefined;
  /** The input of the step in flight (for the info message). */
  private lastInput: EnhanceInput | undefined;
  /** Where the last step's pictures came from. */
  private source: 'camera' | 'scene' = 'scene';
  /** The newest camera frame taken, repeated while the camera sends nothing newer. */
  private lastCamera: InputFrame | undefined;

  /** What `reactor doctor` checks: shared memory, ranks, GPUs, WebGPU, and what frame rate to expect. */
  static async requirements(context: RequirementsContext): Promise<AppRequirements> {
    const cfg = loadEnhanceConfig(context.configPath);
    const plan = planEnhance(cfg, context.gpuCount, context.manifestGpuCount);
    const outBytes = plan.outputWidth * plan.outputHeight * 3 * Math.max(...Object.values(plan.framesPerStep)) * 2;
    const checks: RequirementCheck[] = [];
    const torch = backendFramework(cfg.backend, process.env) === 'torch';
    const gpuRanks = !torch && plan.devices === 'auto' && planBackends(cfg.backend, process.env, 'gpu:0').order.includes('webgpu');
    if (gpuRanks) checks.push(await webgpuCheck());
    if (torch) checks.push(await torchCheck(pythonInterpreter(cfg.python, process.env), plan.devices === 'auto' && context.gpuCount > 0));
    checks.push(torch ? torchExpectation(plan, context.gpuCount > 0) : expectation(plan, gpuRanks));
    return { shmBytes: outBytes * (plan.worldSize + 1), worldSize: plan.worldSize, usesGpu: plan.devices === 'auto', checks };
  }

  override async load(context: LoadContext): Promise<void> {
    this.config = loadEnhanceConfig(context.configPath);
    this.manifestGpuCount = context.manifestGpuCount;
    await this.runners.start();
  }

  private createRunner(): DistributedRunner<EnhanceInput, EnhanceResult, EnhanceLoadArgs | EnhanceTorchLoadArgs> {
    const plan = planEnhance(this.config, detectGpuCount(), this.manifestGpuCount);
    this.plan = plan;
    this.logger.info(`${plan.note}; starting the runner`);
    const scale = 4;
    const common = {
      logger: this.logger,
      worldSize: plan.worldSize,
      devices: plan.devices,
      callTimeoutMs: this.config.callTimeoutMs,
      ...(this.config.startTimeoutMs !== undefined && { startTimeoutMs: this.config.startTimeoutMs }),
    };
    const warmup = { n: 1, width: Math.floor(plan.outputWidth / scale), height: Math.ceil(Math.floor(plan.outputHeight / scale) / plan.worldSize) };
    if (backendFramework(this.config.backend, process.env) === 'torch') {
      // The model packages are found here, where Node finds them (the tfjs backend's rule), and
      // handed to the Python ranks with the published hashes: one lookup, one table.
      const packageDirs: Record<string, string> = {};
      for (const m of MODEL_NAMES) {
        try {
          packageDirs[m] = modelPackageDir(m);
        } catch {
          // Not installed: the Python rank names the model as missing when it is chosen.
        }
      }
      const worker = pythonWorker<EnhanceInput, EnhanceResult, EnhanceTorchLoadArgs>(TORCH_WORKER, {
        path: [TORCH_PYTHON_DIR],
        ...(this.config.python !== undefined && { interpreter: this.config.python }),
        errors: { WeightsMissingError, WeightsCorruptError, InputInvalidError },
      });
      const n = plan.framesPerStep[plan.model];
      const [width, height] = [warmup.width, Math.floor(plan.outputHeight / scale)];
      const step = { n, width, height, split: chooseSplit(this.config.split, height, RADIUS[plan.model], plan.worldSize, n) };
      return new DistributedRunner(worker, {
        ...common,
        loadArgs: { model: plan.model, scale, package_dirs: packageDirs, published_sha256: PUBLISHED_SHA256, warmup: step, compile: this.config.compile },
      });
    }
    return new DistributedRunner(EnhanceWorker, {
      ...common,
      loadArgs: { model: plan.model, scale, backend: this.config.backend, warmup },
    });
  }

  override readiness(): AppReadiness {
    return runnerReadiness(this.runners, { name: 'the enhance runner' });
  }

  /** The model and scale the state asks for (`auto` resolved). */
  private selected(): { model: ModelName; scale: number } {
    return { model: this.state.model === 'auto' ? this.plan.model : this.state.model, scale: this.state.scale };
  }

  override processInput(): EnhanceInput {
    if (this.state.paused) throw new ApplicationError('paused');
    const refusal = this.runners.refusal();
    if (refusal !== undefined) throw new ApplicationError(refusal);
    const { model, scale } = this.selected();
    const why = this.unavailable.get(`${model}x${scale}`);
    if (why !== undefined) throw new ApplicationError(`ESRGAN ${model} x${scale} is not available (${why}); choose another model or scale`);
    const width = Math.floor(this.plan.outputWidth / scale);
    const height = Math.floor(this.plan.outputHeight / scale);
    const n = this.plan.framesPerStep[model];
    // The scene advances when its frames are taken (a pipelined step returns them one call later).
    const frames = this.cameraFrames(n, width, height) ?? sceneFrames((this.frameIndex += n) - n, n, width, height);
    this.source = this.lastCamera ? 'camera' : 'scene';
    const split = chooseSplit(this.config.split, height, RADIUS[model], this.runners.runner!.worldSize, n);
    const pipeline =
      this.config.pipeline === 'on' ||
      (this.config.pipeline === 'auto' && this.ranks.length > 0 && this.ranks.every((r) => r.backend === 'webgpu' || r.backend === 'torch-cuda'));
    return { frames, n, width, height, model, scale, split, sideBySide: this.state.sideBySide, pipeline };
  }

  /**
   * `n` frames from the camera resized to the model input (the newest ones it sent, the last one
   * repeated when it sent fewer), or undefined when no camera is published: the scene plays then.
   */
  private cameraFrames(n: number, width: number, height: number): Uint8Array | undefined {
    const cam = this.input.webcam;
    if (cam.closed && cam.available === 0) {
      this.lastCamera = undefined;
      return undefined;
    }
    const k = Math.min(n, cam.available);
    const got = k > 0 ? (cam.tryRead({ n: k, mode: 'latest' }) ?? []) : [];
    const picked = got.filter((f): f is InputFrame<Uint8Array> => f.data instanceof Uint8Array && f.width !== undefined && f.height !== undefined);
    if (picked.length > 0) this.lastCamera = picked[picked.length - 1];
    const last = this.lastCamera;
    if (!last) return undefined;
    const out = new Uint8Array(n * width * height * 3);
    for (let i = 0; i < n; i++) {
      const f = (picked[i] ?? last) as InputFrame<Uint8Array>;
      resizeRgb(f.data, f.width!, f.height!, width, height, out.subarray(i * width * height * 3, (i + 1) * width * height * 3));
    }
    return out;
  }

  override generate(input: EnhanceInput): Promise<EnhanceResult> {
    this.lastInput = input;
    return this.runners.generate(input);
  }

  override processOutput(outcome: StepOutcome<EnhanceResult>): EnhanceOutput | null {
    const err = outcome.error;
    if (err instanceof WeightsMissingError || err instanceof WeightsCorruptError) {
      // Every rank failed to load the chosen model: the runner is fine, the choice is not.
      const { model, scale } = this.selected();
      this.unavailable.set(`${model}x${scale}`, err.message);
      this.logger.error({ err }, `ESRGAN ${model} x${scale} cannot load`);
      this.send(new ModelUnavailable(model, scale, err.code, err.message));
      return null;
    }
    if (err !== undefined) {
      void this.runners.rebuild();
      throw err;
    }
    const r = outcome.result!;
    // A pipelined run's first step queues its frames and returns none.
    if (r.n === 0) return null;
    if (r.ranks.length > 0) this.ranks = r.ranks;
    const input = this.lastInput;
    this.sendInfo(
      new EnhanceInfo(
        r.model,
        r.scale,
        input?.width ?? 0,
        input?.height ?? 0,
        r.width,
        r.height,
        input?.split ?? 'tiles',
        this.source,
        this.ranks,
        r.weightsSha256,
      ),
    );
    const out = new EnhanceOutput({ enhanced: new TrackPayload(new Frames(r.frames, [r.n, r.height, r.width, 3])) });
    // A pipelined call returns the previous call's frames: they show the previous step's input,
    // so a command's `applied` names the first frame that really shows it.
    if (input?.pipeline) out.inputStep = outcome.step - 1;
    return out;
  }

  private sendInfo(info: EnhanceInfo): void {
    const key = JSON.stringify(info);
    if (key === this.lastInfo) return;
    this.lastInfo = key;
    this.latestInfo = info;
    this.send(info);
  }

  @sessionStarted
  async onSessionStarted(): Promise<void> {
    await this.runners.healIfBroken();
    this.lastInfo = '';
    this.latestInfo = undefined;
    this.lastCamera = undefined;
  }

  /** Late joiners learn what runs. */
  @connected
  onConnected(client: Client): void {
    // The message itself, not a copy parsed back from JSON: only declared message classes can be sent.
    if (this.latestInfo) client.send(this.latestInfo);
  }

  override async unload(): Promise<void> {
    await this.runners.shutdown();
  }
}

/** The WebGPU check: is there a real GPU adapter for the ranks? */
async function webgpuCheck(): Promise<RequirementCheck> {
  const fix = 'install the Vulkan loader (libvulkan1) and set VK_DRIVER_FILES to the NVIDIA ICD json (docs/deploy.md), or set backend: wasm in the app config';
  try {
    const { adapter, reason } = await requestGpuAdapter();
    if (!adapter) return { name: 'webgpu', status: 'fail', detail: reason ?? 'no WebGPU adapter', fix };
    return { name: 'webgpu', status: 'ok', detail: 'a WebGPU adapter on a real GPU' };
  } catch (err) {
    return { name: 'webgpu', status: 'fail', detail: `WebGPU failed to initialise: ${(err as Error).message}`, fix };
  }
}

/**
 * Frames per second delivered at 1280x720 with `backend: torch` on one H200 (whole serving path,
 * JPEG), `[lowest, highest]` of the runs docs/benchmarks.md records with this code. Empty: issue
 * 42 changed what runs (compiled models, the parallel JPEG encoder), so the earlier runs' figures
 * (medium 51-88.8, thick 155.3-157.7, eager) no longer say what to expect; `scripts/gpu/serve.sh`
 * measures it. Absent: not measured.
 */
export const H200_TORCH_FPS_720P: Readonly<Partial<Record<ModelName, readonly [low: number, high: number]>>> = {};

/** The torch check: does the interpreter import NumPy and torch, and (GPU ranks) does torch see CUDA? */
async function torchCheck(python: string, gpu: boolean): Promise<RequirementCheck> {
  const probe =
    'import json, sys, numpy, torch; c = torch.cuda.is_available(); ' +
    'print(json.dumps({"python": sys.version.split()[0], "numpy": numpy.__version__, "torch": torch.__version__, ' +
    '"cuda": torch.version.cuda, "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if c else []}))';
  const fix = `install NumPy and PyTorch for ${python} (Debian: apt-get install python3-numpy python3-torch; GPU hosts: a CUDA build of torch), or set python: (app config) / REACTOR_PYTHON to an interpreter that has them`;
  const got = await new Promise<{ out: string; err: string; failed: boolean }>((res) =>
    execFile(python, ['-c', probe], { timeout: 120_000 }, (e, out, err) => res({ out: String(out), err: String(err), failed: e !== null })),
  );
  if (got.failed) {
    const why = got.err.trim().split('\n').pop() ?? 'it did not run';
    return { name: 'torch', status: 'fail', detail: `${python} cannot run the PyTorch backend: ${why}`, fix };
  }
  const v = JSON.parse(got.out.trim().split('\n').pop() ?? '{}') as { python: string; numpy: string; torch: string; cuda: string | null; devices: string[] };
  const detail = `${python}: Python ${v.python}, NumPy ${v.numpy}, torch ${v.torch}${v.cuda ? ` (CUDA ${v.cuda})` : ' (CPU build)'}; CUDA devices: ${v.devices.join(', ') || 'none'}`;
  if (gpu && v.devices.length === 0)
    return { name: 'torch', status: 'fail', detail, fix: 'a CUDA build of torch and the NVIDIA driver are needed for GPU ranks; or set devices: cpu' };
  return { name: 'torch', status: 'ok', detail };
}

/** What frame rate to expect from the PyTorch backend, from the measured H200 figures (or the CPU advice). */
function torchExpectation(plan: EnhancePlan, gpus: boolean): RequirementCheck {
  if (!gpus || plan.devices === 'cpu') {
    const detail = `ESRGAN ${plan.model} at ${plan.outputWidth}x${plan.outputHeight} on ${plan.worldSize} CPU rank(s) (torch, float32): a check of the path, not real time`;
    return { name: 'enhance', status: 'warn', detail, fix: 'run on a GPU machine for real time (torch float16 on CUDA)' };
  }
  const pixels = (plan.outputWidth * plan.outputHeight) / (1280 * 720);
  const measured = H200_TORCH_FPS_720P[plan.model];
  if (measured === undefined) {
    const detail = `ESRGAN ${plan.model} on ${plan.worldSize} GPU(s) with torch: no figure measured with this code yet (scripts/gpu/serve.sh measures it; docs/benchmarks.md)`;
    return { name: 'enhance', status: 'ok', detail };
  }
  // A measured range, scaled by the pixels, not a promise: the JPEG stage makes medium's rate vary from run to run.
  const [low, high] = measured.map((fps) => fps / pixels) as [number, number];
  const range = Math.round(low) === Math.round(high) ? `~${Math.round(low)}` : `${Math.round(low)}-${Math.round(high)}`;
  const detail = `ESRGAN ${plan.model} at ${plan.outputWidth}x${plan.outputHeight} with torch: ${range} fps on one H200 in the runs of docs/benchmarks.md (measured at 1280x720 through JPEG, one rank${pixels === 1 ? '' : '; scaled by the pixels'})`;
  return low >= 30 ? { name: 'enhance', status: 'ok', detail } : { name: 'enhance', status: 'warn', detail, fix: 'pick a lighter model (set_model)' };
}

/** What frame rate to expect with the plan, from the measured H200 figures (or the CPU advice). */
function expectation(plan: EnhancePlan, gpuRanks: boolean): RequirementCheck {
  if (!gpuRanks) {
    const light = plan.outputWidth * plan.outputHeight <= 256 * 144 && plan.model === 'slim';
    const detail = `ESRGAN ${plan.model} at ${plan.outputWidth}x${plan.outputHeight} on ${plan.worldSize} CPU rank(s) (wasm): slim at 256x144 runs near real time on 2 cores; larger sizes and models are slide shows without a GPU`;
    return light
      ? { name: 'enhance', status: 'ok', detail }
      : { name: 'enhance', status: 'warn', detail, fix: 'keep model: slim and the default 256x144 output on CPU, or run on a GPU machine' };
  }
  const pixels = (plan.outputWidth * plan.outputHeight) / (1280 * 720);
  // Measured on 1 and 2 GPUs; more GPUs are extrapolated from the 2-GPU figure (linear: an upper bound).
  const expected = (m: ModelName): number => {
    const [one, two] = H200_FPS_720P[m];
    return (plan.worldSize <= 1 ? one : (two * plan.worldSize) / 2) / pixels;
  };
  const fps = expected(plan.model);
  const realTime = MODEL_NAMES.filter((m) => expected(m) >= 30);
  const detail =
    `ESRGAN ${plan.model} (${MODEL_FACTS[plan.model].convolutions} convolutions) at ${plan.outputWidth}x${plan.outputHeight} on ${plan.worldSize} GPU(s): ` +
    `expect ~${Math.round(fps)} fps on H200s (measured at 1280x720 on 1 and 2 H200s${plan.worldSize > 2 ? '; more GPUs extrapolated' : ''}); real time (30 fps) here: ${realTime.join(', ') || 'none'}`;
  return fps >= 30
    ? { name: 'enhance', status: 'ok', detail }
    : {
        name: 'enhance',
        status: 'warn',
        detail,
        fix: `pick a lighter model (set_model) or add GPUs: thick needs ~${Math.ceil(30 / (H200_FPS_720P.thick[1] / 2 / pixels))} H200s for 30 fps`,
      };
}
