/**
 * `TinyWorldApp`: the world model trained here (issue 40), played with the keyboard. Its model
 * half (`python/reactor_world/tiny`) is the causal Wan DiT of `WorldApp` at 5 M parameters on
 * 64x64 pixels, with each frame's held keys added to its timestep embedding; it was trained on
 * one H200 from the project's own raycaster (`apps/world/train/train.py`) and its weights ship in
 * `apps/world/weights/`. A session starts from the renderer's frames at a seeded pose; each step
 * is the next chunk of 3 frames under the keys held when it starts (4 flow-matching steps over
 * the rolling KV cache), so a key shows within one chunk.
 *
 * Held keys: `keys` is an action field (`@InputField({ keys })`, published as `x-reactor-keys`):
 * the viewer sends the set of held actions on every key down and up. An unknown action is refused
 * (`invalid_params`), nothing applied. When a client leaves, the keys are released: a held key
 * does not walk the world on while nobody watches, and a client that reconnects finds `[]` and
 * sends what it holds again.
 */
import 'reflect-metadata';
import { existsSync } from 'node:fs';
import { dirname, isAbsolute, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ArrayMaxSize, IsArray, IsIn, IsInt, IsOptional, IsString, Max, Min } from 'class-validator';
import { DistributedRunner, SelfHealingRunner, detectGpuCount, pythonWorker } from '@reactor/distributed';
import {
  type AppReadiness,
  ApplicationError,
  type Client,
  connected,
  disconnected,
  event,
  Frames,
  InputField,
  InputState,
  type LoadContext,
  loadAppConfig,
  Output,
  ReactorApp,
  reactorApp,
  runnerReadiness,
  runnerRestartingReason,
  sessionEnded,
  type StepOutcome,
  TrackPayload,
  Video,
} from '@reactor/runtime';
import { MAX_SEED, RunnerRestarting, WORLD_PYTHON_DIR } from './app.js';
import { CheckpointError, ConfigError, WorldConfigError, WorldInputInvalid } from './errors.js';

export const TINY_WORLD_WORKER = 'reactor_world.tiny.worker:TinyWorldWorker';
/** The shipped weights (`apps/world/weights/tiny-world.safetensors`; its sha256 in `tiny-world.json`). */
export const TINY_WORLD_WEIGHTS = fileURLToPath(new URL('../weights/tiny-world.safetensors', import.meta.url));

/** The actions, in the model's order (`reactor_world/tiny/render.py`'s `ACTION_KEYS`). */
export const TINY_WORLD_ACTIONS = ['forward', 'back', 'turn_left', 'turn_right', 'strafe_left', 'strafe_right'] as const;
export type TinyWorldAction = (typeof TINY_WORLD_ACTIONS)[number];
/** The keyboard: `KeyboardEvent.key` (lower case) -> the action it holds. */
export const TINY_WORLD_KEYS: Readonly<Record<string, TinyWorldAction>> = Object.freeze({
  w: 'forward',
  s: 'back',
  a: 'turn_left',
  d: 'turn_right',
  q: 'strafe_left',
  e: 'strafe_right',
  arrowup: 'forward',
  arrowdown: 'back',
  arrowleft: 'turn_left',
  arrowright: 'turn_right',
});

export class TinyWorldState extends InputState {
  @InputField({
    default: Object.freeze([]) as unknown as TinyWorldAction[],
    keys: TINY_WORLD_KEYS,
    description: 'The held keys: W/S forward and back, A/D (or the arrows) turn, Q/E strafe. Each chunk of 3 frames follows the keys held when it starts.',
  })
  @IsArray()
  @ArrayMaxSize(TINY_WORLD_ACTIONS.length)
  @IsIn(TINY_WORLD_ACTIONS, { each: true })
  keys!: TinyWorldAction[];

  @InputField({ default: 0, description: 'The noise seed of the denoising: the same seed, start and keys replay the same frames.' })
  @IsInt()
  @Min(0)
  @Max(MAX_SEED)
  seed!: number;

  @InputField({ default: 0, description: 'Where the camera starts (a seed of the start pose); takes effect at the next reset.' })
  @IsInt()
  @Min(0)
  @Max(MAX_SEED)
  start!: number;
}

export class TinyWorldOutput extends Output {
  @Video({ description: 'The generated world: 3 frames a chunk (the first chunk drawn by the renderer), 64x64 upscaled.' })
  mainVideo?: Video;
}

/** What runs, sent when a session starts and to each client that joins. */
export class TinyWorldInfo {
  constructor(
    readonly model: 'tiny-world',
    readonly weights: string,
    readonly width: number,
    readonly height: number,
    readonly keys: Readonly<Record<string, string>>,
  ) {}
}

export class TinyWorldConfig {
  /** The weights (relative to the config file). Default: the shipped `weights/tiny-world.safetensors`. */
  @IsOptional() @IsString() weights?: string;
  /** `auto`: bf16 on GPU and CPU (Debian's torch multiplies fp32 on a generic BLAS, 50x slower). */
  @IsIn(['auto', 'bf16', 'fp16', 'fp32']) dtype: 'auto' | 'bf16' | 'fp16' | 'fp32' = 'auto';
  /** Output frames are the 64x64 model frames scaled up by this (nearest). */
  @IsInt() @Min(1) @Max(16) upscale = 4;
  @IsIn(['auto', 'cpu']) devices: 'auto' | 'cpu' = 'auto';
  /** CPU threads of the rank (default: torch's). */
  @IsOptional() @IsInt() @Min(1) @Max(256) threads?: number;
  @IsOptional() @IsString() python?: string;
  @IsInt() @Min(100) callTimeoutMs = 60_000;
  @IsInt() @Min(1000) startTimeoutMs = 300_000;
}

const TINY_KEYS = ['weights', 'dtype', 'upscale', 'devices', 'threads', 'python', 'callTimeoutMs', 'startTimeoutMs'];

export function loadTinyWorldConfig(path: string | undefined): TinyWorldConfig {
  const cfg = loadAppConfig(TinyWorldConfig, path, { name: 'tiny world app', keys: TINY_KEYS, error: (message) => new WorldConfigError(message) });
  const base = path ? dirname(path) : process.cwd();
  cfg.weights = cfg.weights === undefined ? TINY_WORLD_WEIGHTS : isAbsolute(cfg.weights) ? cfg.weights : resolve(base, cfg.weights);
  if (!existsSync(cfg.weights))
    throw new WorldConfigError(
      `tiny world app: weights ${cfg.weights} do not exist; give weights: the path of a tiny-world.safetensors (apps/world/train/train.py makes one)`,
    );
  return cfg;
}

interface TinyInput {
  keys: TinyWorldAction[];
  seed: number;
  start: number;
}

interface TinyResult {
  frames: Uint8Array;
  n: number;
  width: number;
  height: number;
  chunk: number;
  fromRenderer: boolean;
  keys: TinyWorldAction[];
  modelMs: number;
  weights: string;
}

interface TinyLoadArgs {
  weights: string;
  dtype: string;
  upscale: number;
  threads: number | null;
  warmup: boolean;
}

@reactorApp({
  state: TinyWorldState,
  output: TinyWorldOutput,
  messages: [TinyWorldInfo, RunnerRestarting],
  name: 'reactor-tiny-world',
  version: '0.1.0',
  bufferSize: 6,
})
export class TinyWorldApp extends ReactorApp<TinyWorldState, TinyInput, TinyResult, TinyWorldInfo | RunnerRestarting> {
  private readonly runners = new SelfHealingRunner<TinyInput, TinyResult, TinyLoadArgs>({
    name: 'the tiny world runner',
    logger: this.logger,
    create: () => this.createRunner(),
    onRestarting: (reason) => this.send(new RunnerRestarting(runnerRestartingReason(reason))),
  });
  private config!: TinyWorldConfig;
  private info: TinyWorldInfo | undefined;

  override async load(context: LoadContext): Promise<void> {
    this.config = loadTinyWorldConfig(context.configPath);
    await this.runners.start();
  }

  private createRunner(): DistributedRunner<TinyInput, TinyResult, TinyLoadArgs> {
    const cfg = this.config;
    const onCpu = cfg.devices === 'cpu' || detectGpuCount() === 0;
    this.logger.info(`tiny world on ${onCpu ? 'one CPU rank' : 'one GPU rank'}, weights ${cfg.weights}; starting the runner`);
    const worker = pythonWorker<TinyInput, TinyResult, TinyLoadArgs>(TINY_WORLD_WORKER, {
      path: [WORLD_PYTHON_DIR],
      ...(cfg.python !== undefined && { interpreter: cfg.python }),
      errors: { CheckpointError, ConfigError, WorldInputInvalid },
    });
    return new DistributedRunner(worker, {
      worldSize: 1,
      devices: onCpu ? 'cpu' : 'auto',
      logger: this.logger,
      callTimeoutMs: cfg.callTimeoutMs,
      startTimeoutMs: cfg.startTimeoutMs,
      loadArgs: { weights: cfg.weights!, dtype: cfg.dtype, upscale: cfg.upscale, threads: cfg.threads ?? null, warmup: true },
    });
  }

  override readiness(): AppReadiness {
    return runnerReadiness(this.runners, { name: 'the tiny world runner' });
  }

  override processInput(): TinyInput {
    const refusal = this.runners.refusal();
    if (refusal !== undefined) throw new ApplicationError(refusal);
    return { keys: [...this.state.keys], seed: this.state.seed, start: this.state.start };
  }

  override generate(input: TinyInput): Promise<TinyResult> {
    return this.runners.generate(input);
  }

  override processOutput(outcome: StepOutcome<TinyResult>): TinyWorldOutput | null {
    if (outcome.error !== undefined) {
      void this.runners.rebuild();
      throw outcome.error;
    }
    const r = outcome.result!;
    if (this.info === undefined) {
      this.info = new TinyWorldInfo('tiny-world', r.weights, r.width, r.height, TINY_WORLD_KEYS);
      this.send(this.info);
    }
    // Each frame says its chunk, the keys that made it, and what the chunk cost the model.
    const metadata = { chunk: r.chunk, keys: r.keys, fromRenderer: r.fromRenderer, modelMs: Math.round(r.modelMs * 10) / 10 };
    return new TinyWorldOutput({ mainVideo: new TrackPayload(new Frames(r.frames, [r.n, r.height, r.width, 3]), { metadata }) });
  }

  @event({ name: 'reset', description: 'Start again from the renderer’s frames at the start pose (`start`).' })
  async reset(): Promise<void> {
    await this.runners.runner?.reset();
    this.output.flush();
  }

  @connected
  onConnected(client: Client): void {
    if (this.info) client.send(this.info);
  }

  /** Keys are held by a person at a keyboard: when a client leaves, they are let go. */
  @disconnected
  onDisconnected(): void {
    if (this.state.keys.length === 0) return;
    this.state.keys = [];
    this.broadcastState();
  }

  @sessionEnded
  async onSessionEnded(): Promise<void> {
    const runner = this.runners.runner;
    if (runner?.healthy) await runner.reset();
  }

  override async unload(): Promise<void> {
    await this.runners.shutdown();
  }
}
