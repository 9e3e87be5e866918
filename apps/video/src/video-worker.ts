/**
 * `VideoWorker`: the sample app's model half, one instance per rank of a `DistributedRunner`.
 * It wraps {@link ParallelVideoModel}; the runner finds it through `moduleUrl` and rebuilds the
 * error classes exported here (`RolloutExhausted` above all) as instances in the parent.
 */
import { DistributedWorker } from '@reactor/distributed';
import { consoleLogger, levelFromEnv } from '@reactor/log';
import { ParallelVideoModel, type VideoInput, type VideoModelInfo, type VideoModelSnapshot, type VideoResult } from './model/index.js';

// Error classes a rank may throw, exported from the worker module so that the runner rebuilds
// them in the parent as instances of these classes (`outcome.error instanceof RolloutExhausted`).
export {
  RolloutExhausted,
  VideoModelError,
  WeightsNotFoundError,
  WeightsInvalidError,
  BackendConfigError,
  BackendUnavailableError,
  ModelNotLoadedError,
} from './model/index.js';
export type { VideoInput, VideoImage, VideoResult, VideoModelInfo, VideoModelSnapshot, RankBackend } from './model/index.js';

// A rank is a process of its own: its lines go to its stdout, which the runner relays with the rank.
const log = consoleLogger({ name: 'video', level: levelFromEnv() });

/** `loadArgs` of a runner of {@link VideoWorker}. Everything but `weightsRoot` has a CPU-friendly default. */
export interface VideoLoadArgs {
  /** Folder holding the model's `manifest.json` and weights file (`getWeightsPath()`). */
  weightsRoot: string;
  /** Frame width (default 256). */
  width?: number;
  /** Frame height (default 256). */
  height?: number;
  /** Frames per `generate()` (default 4). */
  framesPerChunk?: number;
  /** Chunks per rollout before `RolloutExhausted` (default 900). */
  rolloutChunks?: number;
  /** `auto` | `webgpu` | `wasm` | `cpu` | a comma-separated order (default `auto`; `REACTOR_BACKEND` overrides). */
  backend?: string;
  /** Same prompt and seed give the same frames (default 0). */
  seed?: number;
  /** Seconds of model time per frame (default 1/24). */
  timeStep?: number;
  /** Frames over which a new prompt blends in (default 24). */
  promptTransitionFrames?: number;
  /** Frames over which a picture (`input.image`) steers in or out (default 72). */
  imageTransitionFrames?: number;
  /** Soundtrack samples per second rank 0 renders with each chunk (default 0: none). */
  audioSampleRate?: number;
}

/**
 * One rank of the parallel video model. Every rank renders its rows of each chunk; rank 0
 * gathers them and returns the chunk (other ranks return an empty `frames`).
 *
 * @example
 * ```ts
 * const runner = new DistributedRunner(VideoWorker, { worldSize: 2, loadArgs: { weightsRoot: getWeightsPath() } });
 * await runner.start();
 * const { frames, n } = await runner.generate({ prompt: 'a neon reef' });
 * ```
 */
export class VideoWorker extends DistributedWorker<VideoInput, VideoResult, VideoLoadArgs> {
  static override moduleUrl = import.meta.url;

  private model: ParallelVideoModel | null = null;

  /** Loads the weights and picks this rank's backend; rank 0 logs what it runs on. */
  async load(args: VideoLoadArgs): Promise<void> {
    if (typeof args !== 'object' || args === null) {
      throw new TypeError('VideoWorker needs loadArgs { weightsRoot: string, ... }');
    }
    const model = new ParallelVideoModel({
      ...args,
      rank: this.rank,
      worldSize: this.worldSize,
      comm: this.comm,
      device: this.device,
      // Rank 0 renders into the runner's result block: no per-chunk allocation, no copy out.
      ...(this.isLeader && { allocFrames: (bytes: number) => this.resultArray(Uint8Array, bytes) }),
    });
    await model.load();
    this.model = model;
    const info = model.info();
    if (this.isLeader) {
      const adapter = info.adapter
        ? ` on ${info.adapter.vendor} ${info.adapter.device}${info.adapter.isFallbackAdapter ? ' (fallback adapter)' : ''}`
        : info.simd !== null
          ? ` (SIMD ${info.simd ? 'on' : 'off'})`
          : '';
      const tried = info.backendAttempts.length ? `; not used: ${info.backendAttempts.map((a) => `${a.backend} (${a.reason})`).join(', ')}` : '';
      log.info(
        `rank 0 of ${info.worldSize}: backend ${info.backend}${adapter} [${info.backendSource}=${info.requestedBackend}]${tried}; ` +
          `${info.width}x${info.height}, ${info.framesPerChunk} frames/chunk, ${info.rolloutChunks} chunks/rollout, ` +
          `weights ${info.weights.sha256.slice(0, 12)} (${info.weights.parameters} parameters)`,
      );
    }
  }

  /** Renders the next chunk (rank 0 returns it whole). Throws `RolloutExhausted` at the end of a rollout. */
  generate(input: VideoInput): Promise<VideoResult> {
    return this.requireModel('generate').generate(input);
  }

  /** Starts a new rollout; the weights stay loaded. */
  reset(): void {
    this.requireModel('reset').reset();
  }

  /** The rollout's state between chunks (every rank holds the same one; the runner returns rank 0's). */
  override snapshot(): VideoModelSnapshot {
    return this.requireModel('snapshot').snapshot();
  }

  /** Puts a snapshot's rollout state back on this rank (the same value on every rank). */
  override restore(value: unknown): void {
    this.requireModel('restore').restore(value as VideoModelSnapshot);
  }

  /** What this rank runs on (after `load()`). */
  info(): VideoModelInfo {
    return this.requireModel('info').info();
  }

  private requireModel(op: string): ParallelVideoModel {
    if (!this.model) throw new TypeError(`VideoWorker.${op}() was called before load()`);
    return this.model;
  }
}
