/**
 * `WorldApp`: a world model of the field's shape. Its model half (Python ranks, `python/
 * reactor_world`) is Wan2.1-T2V's DiT in its block-causal form, as Self-Forcing, CausVid and
 * LongLive run it: each step is one chunk of 3 latent frames (12 video frames; the first chunk
 * 9), denoised in 4 flow-matching steps over a rolling KV cache that lives in the rank between
 * calls and is the session's state. `reset` clears it; a prompt change re-caches it (LongLive);
 * commands take effect at the next chunk.
 */
import 'reflect-metadata';
import { fileURLToPath } from 'node:url';
import { IsIn, IsInt, IsString, Max, MaxLength, Min } from 'class-validator';
import { DistributedRunner, SelfHealingRunner, detectGpuCount, pythonWorker } from '@reactor/distributed';
import {
  type AppReadiness,
  ApplicationError,
  type Client,
  connected,
  event,
  Frames,
  InputField,
  InputState,
  type LoadContext,
  Output,
  ReactorApp,
  reactorApp,
  runnerReadiness,
  runnerRestartingReason,
  sessionEnded,
  sessionStarted,
  type StepOutcome,
  TrackPayload,
  Video,
} from '@reactor/runtime';
import { type ModelName, type WorldConfig, type WorldPlan, loadWorldConfig, planWorld } from './config.js';
import { CheckpointError, ConfigError, TextEncoderError, WorldInputInvalid, WorldOutOfMemory } from './errors.js';

/** The model package (`reactor_world`), on the ranks' import path. */
export const WORLD_PYTHON_DIR = fileURLToPath(new URL('../python/', import.meta.url));
export const WORLD_WORKER = 'reactor_world.worker:WorldWorker';
export const MAX_SEED = 2 ** 31 - 1;
/** What the viewer and the session status say while the weights are generated. */
export const GENERATED_NOTICE = "generated weights: the picture is noise; the speed is the real model's";

/** `WorldWorker.generate`'s input. */
export interface WorldInput {
  prompt: string;
  seed: number;
  quality: 'full' | 'fast';
}

/** `WorldWorker.generate`'s result: `n x height x width x 3` RGB frames of one chunk, and what made them. */
export interface WorldResult {
  frames: Uint8Array;
  n: number;
  width: number;
  height: number;
  chunk: number;
  startFrame: number;
  recached: boolean;
  /** 16 hex digits of the SHA-256 of the chunk's clean latents: the same inputs give the same hash. */
  latentHash: string;
  steps: number;
  timings: { recacheMs: number; ditMs: number; decodeMs: number; totalMs: number };
  cacheFrames: number;
  cacheBytes: number;
  gpuPeakBytes: number;
  weights: { kind: 'generated' | 'checkpoint'; source: string; decoder: string };
  model: ModelName;
  compiled: string;
  /** Chunks in flight when this one's call was sent, this one included (set by the app, not the worker). */
  inFlight?: number;
}

export class WorldState extends InputState {
  @InputField({
    default: 'A walk through a forest.',
    description: 'What the world shows; a change restarts the chunk in flight with it (urgent) and re-encodes the KV cache.',
    urgent: true,
  })
  @IsString()
  @MaxLength(500)
  prompt!: string;

  @InputField({ default: 0, description: 'The noise seed: the same seed and prompts replay the same frames.' })
  @IsInt()
  @Min(0)
  @Max(MAX_SEED)
  seed!: number;

  @InputField({ default: 'full', description: 'full: the 4 denoising steps the model was distilled for; fast: 2 (about twice the speed, blurrier).' })
  @IsIn(['full', 'fast'])
  quality!: 'full' | 'fast';
}

export class WorldOutput extends Output {
  @Video({ description: 'The generated world, a chunk of 12 frames a step.' })
  mainVideo?: Video;
}

/** What runs, sent when a session starts and to each client that joins. */
export class WorldInfo {
  constructor(
    readonly model: ModelName,
    readonly weights: 'generated' | 'checkpoint',
    readonly weightsSource: string,
    readonly notice: string | null,
    readonly width: number,
    readonly height: number,
    readonly compiled: string,
  ) {}
}

/** Sent when a rank died between calls: a new runner is starting, clients stay connected. */
export class RunnerRestarting {
  constructor(readonly reason: string) {}
}

const round1 = (x: number): number => Math.round(x * 10) / 10;

interface WorldLoadArgs {
  model: ModelName;
  checkpoint: string | null;
  checkpoint_key: string | null;
  decoder_checkpoint: string | null;
  dtype: string;
  overrides: Record<string, number>;
  text_encoder: string | null;
  weights_seed: number;
  compile: string;
  warmup: boolean;
  pipeline: string;
  threads?: number;
}

@reactorApp({
  state: WorldState,
  output: WorldOutput,
  messages: [WorldInfo, RunnerRestarting],
  name: 'reactor-world',
  version: '0.1.0',
  bufferSize: 24,
  // The KV cache is the session: a snapshot every 2 chunks for rewind (docs/snapshots.md). At
  // wan-1.3b's 832x480 one is far larger than at `small` (scripts/gpu/world.sh snapshot measures it).
  snapshot: { everySteps: 2, maxBytes: 1024 * 1024 * 1024, ringBytes: 2 * 1024 * 1024 * 1024 },
})
export class WorldApp extends ReactorApp<WorldState, WorldInput, WorldResult, WorldInfo | RunnerRestarting> {
  private readonly runners = new SelfHealingRunner<WorldInput, WorldResult, WorldLoadArgs>({
    name: 'the world runner',
    logger: this.logger,
    create: () => this.createRunner(),
    onRestarting: (reason) => this.send(new RunnerRestarting(runnerRestartingReason(reason))),
  });
  private config!: WorldConfig;
  private plan!: WorldPlan;
  private info: WorldInfo | undefined;
  /** Runner calls sent and not settled (more than one with `inFlight` > 1). */
  private callsInFlight = 0;

  override async load(context: LoadContext): Promise<void> {
    this.config = loadWorldConfig(context.configPath);
    // urgent: false measures the app without it (the prompt then shows after the chunk in flight).
    // A pipeline's stages finish a cancelled chunk together (the worker stops only on one rank):
    // its prompt changes show after the chunks in flight, as urgent: false.
    this.urgent = this.config.urgent && this.config.pipeline === 'none';
    // Chunks in flight (issue 39): the step loop and the runner keep the same number.
    this.inFlight = this.config.inFlight;
    await this.runners.start();
  }

  private createRunner(): DistributedRunner<WorldInput, WorldResult, WorldLoadArgs> {
    const cfg = this.config;
    this.plan = planWorld(cfg, detectGpuCount());
    this.logger.info(`${this.plan.note}; starting the runner`);
    const overrides: Record<string, number> = {};
    if (cfg.width !== undefined) overrides['width'] = cfg.width;
    if (cfg.height !== undefined) overrides['height'] = cfg.height;
    if (cfg.windowFrames !== undefined) overrides['window_frames'] = cfg.windowFrames;
    if (cfg.sinkFrames !== undefined) overrides['sink_frames'] = cfg.sinkFrames;
    const worker = pythonWorker<WorldInput, WorldResult, WorldLoadArgs>(WORLD_WORKER, {
      path: [WORLD_PYTHON_DIR, ...(cfg.pythonPath ?? [])],
      ...(cfg.python !== undefined && { interpreter: cfg.python }),
      errors: { CheckpointError, ConfigError, TextEncoderError, WorldInputInvalid, WorldOutOfMemory },
    });
    const pipeline = this.plan.ranks > 1 ? cfg.pipeline : 'none';
    return new DistributedRunner(worker, {
      worldSize: this.plan.ranks,
      maxInFlight: cfg.inFlight,
      // A pipeline's frames come from its last stage.
      ...(this.plan.ranks > 1 && { outputRank: this.plan.ranks - 1 }),
      devices: this.plan.devices,
      logger: this.logger,
      callTimeoutMs: cfg.callTimeoutMs,
      startTimeoutMs: cfg.startTimeoutMs,
      loadArgs: {
        model: this.plan.model,
        checkpoint: cfg.checkpoint ?? null,
        checkpoint_key: cfg.checkpointKey ?? null,
        decoder_checkpoint: cfg.decoderCheckpoint ?? null,
        dtype: cfg.dtype,
        overrides,
        text_encoder: cfg.textEncoder ?? null,
        weights_seed: cfg.weightsSeed,
        compile: cfg.compile,
        warmup: true,
        pipeline,
        ...(cfg.threads !== undefined && { threads: cfg.threads }),
      },
    });
  }

  override readiness(): AppReadiness {
    return runnerReadiness(this.runners, { name: 'the world runner' });
  }

  /** What the session status says while the weights are generated. */
  override notice(): string | undefined {
    return this.info?.weights === 'generated' || (this.info === undefined && this.config?.checkpoint === undefined) ? GENERATED_NOTICE : undefined;
  }

  override processInput(): WorldInput {
    const refusal = this.runners.refusal();
    if (refusal !== undefined) throw new ApplicationError(refusal);
    return { prompt: this.state.prompt, seed: this.state.seed, quality: this.state.quality };
  }

  override generate(input: WorldInput): Promise<WorldResult> {
    // An urgent prompt change cancels the chunk in flight (the worker stops between denoising
    // passes) and the step runs again with the new prompt.
    const inFlight = ++this.callsInFlight;
    const call = this.runners.generate(input, { signal: this.restartSignal });
    const settled = (): void => {
      this.callsInFlight--;
    };
    call.then(settled, settled);
    // Each chunk's frames say how many chunks were in flight when its call was sent (inFlight > 1).
    return call.then((r) => Object.assign(r, { inFlight }));
  }

  override processOutput(outcome: StepOutcome<WorldResult>): WorldOutput | null {
    const err = outcome.error;
    if (err !== undefined) {
      // An OOM (or any model failure) ends the session; the next one gets a new runner, so
      // nothing of this one's cache or allocator state is left behind.
      if (err instanceof WorldOutOfMemory) this.logger.error({ err }, 'the world model ran out of GPU memory; rebuilding the runner');
      void this.runners.rebuild();
      throw err;
    }
    const r = outcome.result!;
    if (r.chunk === 0 || this.info === undefined) this.announce(r);
    // Each frame says which chunk it is of and what that chunk cost the model: a client measures
    // model-only time beside delivered fps from it.
    const t = r.timings;
    const metadata = {
      chunk: r.chunk,
      frames: r.n,
      recached: r.recached,
      latentHash: r.latentHash,
      modelMs: round1(t.totalMs),
      ditMs: round1(t.ditMs),
      gpuPeakBytes: r.gpuPeakBytes,
      inFlight: r.inFlight ?? 1,
    };
    return new WorldOutput({ mainVideo: new TrackPayload(new Frames(r.frames, [r.n, r.height, r.width, 3]), { metadata }) });
  }

  private announce(r: WorldResult, to?: Client): void {
    const info = new WorldInfo(
      r.model,
      r.weights.kind,
      r.weights.source,
      r.weights.kind === 'generated' ? GENERATED_NOTICE : null,
      r.width,
      r.height,
      r.compiled,
    );
    const changed = JSON.stringify(info) !== JSON.stringify(this.info);
    this.info = info;
    if (to) to.send(info);
    else if (changed) this.send(info);
  }

  /** The session's model state: the KV cache, the decoder's memory, the prompt (`WorldWorker.snapshot()`). */
  override async snapshot(): Promise<unknown> {
    return this.healthyRunner().snapshot();
  }

  /** Puts a snapshot's KV cache back (the worker refuses another model config). */
  override async restore(model: unknown): Promise<void> {
    await this.healthyRunner().restore(model);
  }

  private healthyRunner(): NonNullable<SelfHealingRunner<WorldInput, WorldResult, WorldLoadArgs>['runner']> {
    const runner = this.runners.runner;
    if (!runner?.healthy) throw new Error('the world runner is not running (restarting or failed)');
    return runner;
  }

  // Urgent (issue 39): a reset lands inside the chunk in flight (the worker stops between DiT
  // passes) instead of after it; the frames of the old rollout still queued are flushed.
  @event({ name: 'reset', description: 'Start a new rollout: the KV cache is cleared (urgent: the chunk in flight is dropped).', urgent: true })
  async reset(): Promise<void> {
    await this.runners.runner?.reset();
    this.output.flush();
  }

  @sessionStarted
  async onSessionStarted(): Promise<void> {
    await this.runners.healIfBroken();
  }

  /** A late joiner learns what runs (the message class itself, not a parsed copy). */
  @connected
  onConnected(client: Client): void {
    if (this.info) client.send(this.info);
  }

  /** A new session never sees the previous one's cache. */
  @sessionEnded
  async onSessionEnded(): Promise<void> {
    const runner = this.runners.runner;
    if (runner?.healthy) await runner.reset();
  }

  override async unload(): Promise<void> {
    await this.runners.shutdown();
  }
}
