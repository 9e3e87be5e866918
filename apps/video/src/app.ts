/**
 * `VideoApp`: the sample app, a complete example of an app. The application half owns the
 * session state (`prompt`, `paused`), the `reset` command and the lifecycle; the model half
 * ({@link VideoWorker}) runs in one process per rank behind a `DistributedRunner`.
 */
import 'reflect-metadata';
import { Type } from 'class-transformer';
import { IsBoolean, IsIn, IsInt, IsOptional, IsString, Max, MaxLength, Min, ValidateIf } from 'class-validator';
import { DistributedRunner, SelfHealingRunner, detectGpuCount } from '@reactor/distributed';
import {
  type AppReadiness,
  type AppRequirements,
  ApplicationError,
  Audio,
  type Client,
  connected,
  event,
  Frames,
  InputField,
  InputState,
  Output,
  ReactorApp,
  reactorApp,
  ReactorError,
  runnerReadiness,
  runnerRestartingReason,
  type LoadContext,
  loadAppConfig,
  type RequirementCheck,
  type RequirementsContext,
  sessionEnded,
  sessionStarted,
  SnapshotError,
  SnapshotErrorCode,
  type StepOutcome,
  TrackPayload,
  UploadedFile,
  UploadField,
  Video,
} from '@reactor/runtime';
import { VIDEO_MODEL_DEFAULTS, VideoErrorCode, planBackends, requestGpuAdapter, adapterProblem, steerTarget } from './model/index.js';
import {
  RolloutExhausted,
  VideoWorker,
  type RankBackend,
  type VideoImage,
  type VideoInput,
  type VideoLoadArgs,
  type VideoModelSnapshot,
  type VideoResult,
} from './video-worker.js';

/** Samples per second of the soundtrack. */
export const SOUNDTRACK_SAMPLE_RATE = 48_000;
/** Frames per second the video plays at: the model's time step (1/24 s), so the soundtrack plays in real time. */
export const VIDEO_FPS = Math.round(1 / VIDEO_MODEL_DEFAULTS.timeStep);

/** The session state every client shares: `set_prompt` and `set_paused` commands. */
export class VideoState extends InputState {
  @InputField({ default: 'A walk through a forest.', description: 'What the video shows.' })
  @IsString()
  @MaxLength(500)
  prompt!: string;

  @InputField({ default: false, description: 'Stop generating new frames (playout of queued frames finishes).' })
  @IsBoolean()
  paused!: boolean;
}

/** The video track and its soundtrack. */
export class VideoOutput extends Output {
  @Video({ description: 'The generated video.' })
  mainVideo?: Video;

  @Audio({ sampleRate: SOUNDTRACK_SAMPLE_RATE, description: 'A soundtrack generated from the same prompt: a chord of sine partials that changes with it.' })
  soundtrack?: Audio;
}

/** Parameters of `set_image`. */
export class SetImageParams {
  @UploadField({
    maxBytes: 20_000_000,
    mimeTypes: ['image/png', 'image/jpeg', 'image/webp', 'image/gif'],
    description: "A picture (PNG, JPEG, WebP or GIF): the video's colours and layout move towards it over a few seconds.",
  })
  image!: UploadedFile;
}

/** Sent when a picture starts steering the video (`image_set`), or stops (`name` null). */
export class ImageSet {
  constructor(
    /** The picture's file name, or null once cleared. */
    readonly name: string | null,
    /** Its size in pixels (0 once cleared). */
    readonly width: number,
    readonly height: number,
  ) {}
}

/** Sent to clients when a session starts or a new runner comes up: what each rank runs on. */
export class BackendInfo {
  constructor(
    readonly worldSize: number,
    readonly backends: RankBackend[],
    readonly width: number,
    readonly height: number,
    readonly framesPerChunk: number,
  ) {}
}

/** Sent when a rollout ran out and the model started a new one. */
export class RolloutRestarted {
  constructor(readonly chunks: number) {}
}

/** Sent when a rank died while no call ran: the app is building a new runner; clients stay connected. */
export class RunnerRestarting {
  constructor(readonly reason: string) {}
}

/** What {@link VideoApp.snapshot} keeps: the model config it was taken with and the ranks' rollout state. */
interface VideoSnapshot {
  model: string;
  ranks: VideoModelSnapshot;
}

/** The app's config file (`runtime.config` in `reactor.yaml`; YAML or JSON). */
export class VideoConfig {
  @IsInt() @Min(16) @Max(4096) width: number = VIDEO_MODEL_DEFAULTS.width;
  @IsInt() @Min(16) @Max(4096) height: number = VIDEO_MODEL_DEFAULTS.height;
  @IsInt() @Min(1) @Max(256) framesPerChunk: number = VIDEO_MODEL_DEFAULTS.framesPerChunk;
  @IsInt() @Min(1) rolloutChunks: number = VIDEO_MODEL_DEFAULTS.rolloutChunks;
  /** `auto`: the GPU count in `reactor.yaml` (capped by the GPUs present) on a GPU machine, else 2 CPU ranks. */
  @ValidateIf((c: VideoConfig) => c.worldSize !== 'auto') @IsInt() @Min(1) @Max(64) worldSize: number | 'auto' = 'auto';
  /** Ranks on GPUs (`auto`, one per rank) or on CPU (`cpu`). */
  @IsIn(['auto', 'cpu']) devices: 'auto' | 'cpu' = 'auto';
  /** `auto` | `webgpu` | `wasm` | `cpu` | an order such as `webgpu,wasm` (`REACTOR_BACKEND` overrides). */
  @IsString() backend = 'auto';
  @IsInt() @Min(0) seed: number = VIDEO_MODEL_DEFAULTS.seed;
  @IsInt() @Min(100) callTimeoutMs = 30_000;
  @IsOptional() @Type(() => Number) @IsInt() @Min(1) startTimeoutMs?: number;
}

/** Thrown by {@link loadVideoConfig} for an unreadable or invalid config file. */
export class VideoConfigError extends ReactorError {
  constructor(message: string) {
    super(VideoErrorCode.ConfigInvalid, message);
  }
}

/** Reads and validates the app config; every problem is named by its key. */
export function loadVideoConfig(path: string | undefined): VideoConfig {
  return loadAppConfig(VideoConfig, path, { name: 'video app', error: (message) => new VideoConfigError(message) });
}

/**
 * Resolves `worldSize: auto` and `devices` against the machine.
 * @param gpus     GPUs visible to this process (the runner's count, `detectGpuCount()`)
 * @param declared GPUs the manifest declares (`LoadContext.manifestGpuCount`), when started from one
 */
export function planRanks(cfg: VideoConfig, gpus: number, declared: number | undefined): { worldSize: number; devices: 'auto' | 'cpu'; note: string } {
  if (cfg.devices === 'cpu' || gpus === 0) {
    const worldSize = cfg.worldSize === 'auto' ? 2 : cfg.worldSize;
    return {
      worldSize,
      devices: 'cpu',
      note: gpus === 0 ? `no GPU on this machine: ${worldSize} rank(s) on CPU` : `${worldSize} rank(s) on CPU (devices: cpu)`,
    };
  }
  const worldSize = cfg.worldSize === 'auto' ? Math.max(1, Math.min(declared ?? gpus, gpus)) : cfg.worldSize;
  return {
    worldSize,
    devices: 'auto',
    note: `${worldSize} rank(s), one GPU each (${gpus} present${declared !== undefined ? `, ${declared} declared in reactor.yaml` : ''})`,
  };
}

/** The WebGPU check of `requirements()`: is there a real GPU adapter for the ranks to use? */
async function webgpuCheck(): Promise<RequirementCheck> {
  const fix = 'install the Vulkan loader (libvulkan1) and set VK_DRIVER_FILES to the NVIDIA ICD json (docs/deploy.md), or set backend: wasm in the app config';
  try {
    const { adapter, reason } = await requestGpuAdapter(null);
    if (!adapter) return { name: 'webgpu', status: 'fail', detail: reason ?? 'no WebGPU adapter', fix };
    const info =
      (adapter as { info?: { vendor?: string; device?: string; description?: string; architecture?: string; isFallbackAdapter?: boolean } }).info ?? {};
    const problem = adapterProblem({
      vendor: info.vendor ?? '',
      device: info.device ?? '',
      description: info.description ?? '',
      architecture: info.architecture ?? '',
      isFallbackAdapter: info.isFallbackAdapter ?? false,
    });
    if (problem) return { name: 'webgpu', status: 'fail', detail: problem, fix };
    return { name: 'webgpu', status: 'ok', detail: `WebGPU adapter: vendor ${info.vendor ?? '?'}, device ${info.device ?? '?'}` };
  } catch (err) {
    return { name: 'webgpu', status: 'fail', detail: `WebGPU failed to initialise: ${(err as Error).message}`, fix };
  }
}

/**
 * The sample app. Its model half runs in `worldSize` processes; rank 0 returns each chunk.
 */
@reactorApp({
  state: VideoState,
  output: VideoOutput,
  messages: [BackendInfo, RolloutRestarted, RunnerRestarting, ImageSet],
  name: 'reactor-video',
  version: '0.1.0',
  bufferSize: 16,
  // The model's clock: one frame is 1/24 s of model time, and the soundtrack is rendered for it.
  fps: VIDEO_FPS,
  // Rewind (docs/snapshots.md): the rollout's state is a few KiB; the picture steering it is the app's.
  snapshot: { fields: ['image', 'imageCount'], everySteps: 6 },
})
export class VideoApp extends ReactorApp<VideoState, VideoInput, VideoResult, BackendInfo | RolloutRestarted | RunnerRestarting | ImageSet> {
  /** The runner, rebuilt when it breaks between calls (a rank that died). */
  private readonly runners = new SelfHealingRunner<VideoInput, VideoResult, VideoLoadArgs>({
    name: 'the video runner',
    logger: this.logger,
    create: () => this.createRunner(),
    onRestarting: (reason) => this.send(new RunnerRestarting(runnerRestartingReason(reason))),
    onRebuild: () => (this.backends = []),
  });
  private config = new VideoConfig();
  private manifestGpuCount: number | undefined;
  private backends: RankBackend[] = [];
  /** The picture steering the video (`set_image`), made ready for the model; null for none. */
  private image: VideoImage | null = null;
  private imageCount = 0;

  /**
   * What `reactor doctor` checks before any weights load: shared memory for one chunk in and
   * out, ranks, GPUs, and (where the ranks will use GPUs with WebGPU) a real WebGPU adapter.
   */
  static async requirements(context: RequirementsContext): Promise<AppRequirements> {
    const cfg = loadVideoConfig(context.configPath);
    const plan = planRanks(cfg, context.gpuCount, context.manifestGpuCount);
    const chunk = cfg.width * cfg.height * 3 * cfg.framesPerChunk;
    const checks: RequirementCheck[] = [];
    // Only where ranks will use GPUs: without one, Dawn only prints that it found no Vulkan.
    if (plan.devices === 'auto' && planBackends(cfg.backend, process.env, 'gpu:0').order.includes('webgpu')) checks.push(await webgpuCheck());
    // rank 0's result block plus every rank's share in the gather area, with doubling headroom
    return { shmBytes: chunk * 2 * (plan.worldSize + 1), worldSize: plan.worldSize, usesGpu: plan.devices === 'auto', checks };
  }

  override async load(context: LoadContext): Promise<void> {
    this.config = loadVideoConfig(context.configPath);
    this.manifestGpuCount = context.manifestGpuCount;
    await this.runners.start();
  }

  private createRunner(): DistributedRunner<VideoInput, VideoResult, VideoLoadArgs> {
    const plan = planRanks(this.config, detectGpuCount(), this.manifestGpuCount);
    this.logger.info(`${plan.note}; starting the runner`);
    return new DistributedRunner(VideoWorker, {
      logger: this.logger,
      worldSize: plan.worldSize,
      devices: plan.devices,
      callTimeoutMs: this.config.callTimeoutMs,
      ...(this.config.startTimeoutMs !== undefined && { startTimeoutMs: this.config.startTimeoutMs }),
      loadArgs: {
        weightsRoot: this.getWeightsPath(),
        width: this.config.width,
        height: this.config.height,
        framesPerChunk: this.config.framesPerChunk,
        rolloutChunks: this.config.rolloutChunks,
        backend: this.config.backend,
        seed: this.config.seed,
        audioSampleRate: SOUNDTRACK_SAMPLE_RATE,
      },
    });
  }

  /**
   * Not ready while a rank is stuck in a call (named first: while the runner that has it is being
   * replaced too, a stalled rank is not a passing state), the runner restarts, or is broken.
   */
  override readiness(): AppReadiness {
    return runnerReadiness(this.runners, { name: 'the video runner', unhealthy: 'the video runner is unusable' });
  }

  private backendInfo(): BackendInfo {
    return new BackendInfo(this.runners.runner?.worldSize ?? 0, this.backends, this.config.width, this.config.height, this.config.framesPerChunk);
  }

  override processInput(): VideoInput {
    if (this.state.paused) throw new ApplicationError('paused');
    const refusal = this.runners.refusal();
    if (refusal !== undefined) throw new ApplicationError(refusal);
    return { prompt: this.state.prompt, image: this.image };
  }

  override generate(input: VideoInput): Promise<VideoResult> {
    return this.runners.generate(input);
  }

  override async processOutput(outcome: StepOutcome<VideoResult>): Promise<VideoOutput | null> {
    if (outcome.error instanceof RolloutExhausted) {
      await this.reset();
      this.send(new RolloutRestarted(this.config.rolloutChunks));
      return null;
    }
    if (outcome.error !== undefined) {
      // Rethrow at once so clients hear of the failure within milliseconds; the shutdown (a rank
      // holding a GPU context can take 100 ms to die) and a new runner's start run on in the
      // background, so readiness comes back without waiting for a new session.
      void this.runners.rebuild();
      throw outcome.error;
    }
    const r = outcome.result!;
    if (this.backends.length === 0 && r.backends.length > 0) {
      this.backends = r.backends;
      this.send(this.backendInfo());
    }
    // runner.generate() returns frames this app owns (the one copy out of shared memory), so
    // playout may keep them for up to bufferSize frames.
    return new VideoOutput({
      mainVideo: new TrackPayload(new Frames(r.frames, [r.n, r.height, r.width, 3])),
      ...(r.audio.length > 0 && { soundtrack: r.audio }),
    });
  }

  /**
   * Steers the video towards a picture: its colours and layout blend in over about 3 s
   * (`docs/video-model.md`). The picture is decoded and reduced to the model's frame size once,
   * here; the model gets it with every chunk until `clear_image` or the session's end.
   */
  @event({ name: 'set_image', params: SetImageParams, description: 'Steer the video towards a picture (its colours and layout).' })
  async setImage(params: SetImageParams): Promise<void> {
    const picture = await params.image.image();
    this.image = { id: ++this.imageCount, target: steerTarget(picture, this.config.width, this.config.height) };
    this.send(new ImageSet(params.image.name, picture.width, picture.height));
  }

  /** Lets the picture go: the video returns to the prompt alone over about 3 s. */
  @event({ name: 'clear_image', description: 'Stop steering the video towards the picture.' })
  clearImage(): void {
    if (this.image === null) return;
    this.image = null;
    this.send(new ImageSet(null, 0, 0));
  }

  /** Starts a new rollout: the model forgets its motion, the weights stay loaded. */
  @event({ name: 'reset', description: 'Start a new rollout.' })
  async reset(): Promise<void> {
    await this.runners.rebuilding;
    await this.runners.runner?.reset();
    this.output.flush();
  }

  /**
   * The rollout's state (`VideoWorker.snapshot()`: every rank holds the same one, so it restores
   * into any world size) and the model config it belongs to.
   */
  override async snapshot(): Promise<VideoSnapshot> {
    return { model: this.modelKey(), ranks: (await this.healthyRunner().snapshot()) as VideoModelSnapshot };
  }

  /** Refuses a snapshot of another model config (frame size, chunk, seed, rollout) before changing anything. */
  override async restore(value: unknown): Promise<void> {
    const snap = value as VideoSnapshot;
    const mine = this.modelKey();
    if (snap.model !== mine) {
      throw new SnapshotError(
        SnapshotErrorCode.VersionMismatch,
        `the snapshot is of the video model ${snap.model} and this app runs ${mine}: restore it where the app config (runtime.config) has the same width, height, framesPerChunk, seed and rolloutChunks`,
      );
    }
    await this.healthyRunner().restore(snap.ranks);
  }

  private modelKey(): string {
    const c = this.config;
    return `${c.width}x${c.height}, ${c.framesPerChunk} frames a chunk, seed ${c.seed}, ${c.rolloutChunks} chunks a rollout`;
  }

  private healthyRunner(): NonNullable<SelfHealingRunner<VideoInput, VideoResult, VideoLoadArgs>['runner']> {
    const runner = this.runners.runner;
    if (!runner?.healthy) throw new Error('the video runner is not running (restarting or failed)');
    return runner;
  }

  /** A new session on a runner that broke in the last one gets a new runner. */
  @sessionStarted
  async onSessionStarted(): Promise<void> {
    await this.runners.healIfBroken();
    if (this.backends.length > 0) this.send(this.backendInfo());
  }

  /** Late joiners learn what the ranks run on. */
  @connected
  onConnected(client: Client): void {
    if (this.backends.length > 0) client.send(this.backendInfo());
  }

  @sessionEnded
  async onSessionEnded(): Promise<void> {
    // The picture was the session's (its file is gone with it).
    this.image = null;
    // A runner being rebuilt is new: nothing to reset.
    if (this.runners.rebuilding) return;
    if (this.runners.runner?.healthy) await this.reset();
    else await this.runners.runner?.shutdown();
  }

  override async unload(): Promise<void> {
    await this.runners.shutdown();
  }
}
