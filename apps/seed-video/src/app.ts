/**
 * The seed page's whole example (`multi-gpu-inference.md`), in TypeScript with this framework's
 * API: `VideoApp` owns the session state, the `reset` command and the lifecycle; its model half is
 * the page's `video_worker.py`, unchanged, running as Python ranks behind a `DistributedRunner`
 * (`worker/video_worker.py` wraps the sequence-parallel `worker/video_model.py`).
 *
 * As on the page: `RolloutExhausted` (raised by every rank when a rollout ends) resets the
 * rollout and skips that output; any other error shuts the runner down and ends the session; the
 * session-ended hook resets a healthy runner and shuts a broken one down. One addition: a new
 * session on a broken runner starts a new one, so the server serves again after a failure.
 */
import 'reflect-metadata';
import { fileURLToPath } from 'node:url';
import { IsBoolean, IsString, MaxLength } from 'class-validator';
import { DistributedRunner, pythonWorker } from '@reactor/distributed';
import { CodedError } from '@reactor/protocol';
import {
  ApplicationError,
  Frames,
  InputField,
  InputState,
  type LoadContext,
  Output,
  ReactorApp,
  SnapshotError,
  SnapshotErrorCode,
  type StepOutcome,
  TrackPayload,
  Video,
  event,
  reactorApp,
  sessionEnded,
  sessionStarted,
} from '@reactor/runtime';

/** The folder of `video_worker.py` and `video_model.py` (the ranks' import path). */
export const WORKER_DIR = fileURLToPath(new URL('../worker/', import.meta.url));

/** Ranks when `reactor.yaml` declares no GPUs (a machine without GPUs runs them on CPU). */
export const DEFAULT_WORLD_SIZE = 2;

/** `video_model.VideoInput` as it travels (a dataclass on the Python side). */
export interface VideoInput {
  prompt: string;
}

/** `video_model.VideoResult` as it arrives: frames are `count x height x width x 3` RGB bytes. */
export interface VideoResult {
  frames: Uint8Array;
  width: number;
  height: number;
  count: number;
  chunk: number;
  prompt: string;
}

/** The model's recoverable error (`video_model.RolloutExhausted`): every rank raises it when a rollout ends. */
export class RolloutExhausted extends CodedError {
  /** Chunks the rollout made. */
  declare readonly chunks: number;
}

export class VideoState extends InputState {
  @InputField({ default: 'A walk through a forest.', description: 'What the video shows.' })
  @IsString()
  @MaxLength(500)
  prompt!: string;

  @InputField({ default: false, description: 'Stop generating new frames.' })
  @IsBoolean()
  paused!: boolean;
}

export class VideoOutput extends Output {
  @Video({ description: 'The generated video.' })
  mainVideo?: Video;
}

/** What {@link VideoApp.snapshot} keeps: the world size it was taken at and the ranks' state (`VideoWorker.snapshot()`). */
interface VideoSnapshot {
  worldSize: number;
  ranks: unknown;
}

@reactorApp({ state: VideoState, output: VideoOutput, name: 'seed-video', version: '0.1.0', fps: 24, snapshot: { everySteps: 4 } })
export class VideoApp extends ReactorApp<VideoState, VideoInput, VideoResult> {
  private runner!: DistributedRunner<VideoInput, VideoResult>;
  private worldSize = DEFAULT_WORLD_SIZE;

  override async load(context: LoadContext): Promise<void> {
    // Match the runner's world size to the GPU count in reactor.yaml.
    this.worldSize = context.manifestGpuCount || DEFAULT_WORLD_SIZE;
    await this.startRunner();
  }

  private async startRunner(): Promise<void> {
    this.runner = new DistributedRunner(
      pythonWorker<VideoInput, VideoResult>('snapshot_worker:SnapshotVideoWorker', { path: [WORKER_DIR], errors: { RolloutExhausted } }),
      {
        worldSize: this.worldSize,
        loadArgs: { weights_root: this.getWeightsPath() },
        logger: this.logger,
      },
    );
    await this.runner.start();
  }

  override processInput(): VideoInput {
    if (this.state.paused) throw new ApplicationError('paused');
    return { prompt: this.state.prompt };
  }

  override generate(input: VideoInput): Promise<VideoResult> {
    return this.runner.generate(input);
  }

  override async processOutput(outcome: StepOutcome<VideoResult>): Promise<VideoOutput | null> {
    if (outcome.error instanceof RolloutExhausted) {
      await this.reset();
      return null;
    }
    if (outcome.error !== undefined) {
      // Shut the runner down and end the session; the clients hear of it at once, while the
      // remaining ranks are stopped (onSessionEnded awaits that teardown).
      void this.runner.shutdown();
      throw outcome.error;
    }
    const r = outcome.result!;
    return new VideoOutput({ mainVideo: new TrackPayload(new Frames(r.frames, [r.count, r.height, r.width, 3])) });
  }

  /** The rollout's state (every rank holds the same one): rank 0's `VideoWorker.snapshot()`. */
  override async snapshot(): Promise<VideoSnapshot> {
    return { worldSize: this.worldSize, ranks: await this.runner.snapshot() };
  }

  /** Refuses a snapshot of another world size: the ranks' slices would not line up (docs/snapshots.md). */
  override async restore(model: unknown): Promise<void> {
    const snap = model as VideoSnapshot;
    if (snap.worldSize !== this.worldSize) {
      throw new SnapshotError(
        SnapshotErrorCode.WorldSize,
        `the snapshot was taken with ${snap.worldSize} ranks and this runner has ${this.worldSize}: restore it where reactor.yaml declares ${snap.worldSize} GPUs`,
      );
    }
    await this.runner.restore(snap.ranks);
  }

  @event({ name: 'reset', description: 'Start a new rollout.' })
  async reset(): Promise<void> {
    await this.runner.reset();
    this.output.flush();
  }

  /** Our addition to the page: a session after a failure gets a new runner (the page's app stays down). */
  @sessionStarted
  async onSessionStarted(): Promise<void> {
    if (!this.runner.healthy) await this.startRunner();
  }

  @sessionEnded
  async onSessionEnded(): Promise<void> {
    if (this.runner.healthy) await this.reset();
    else await this.runner.shutdown();
  }

  override async unload(): Promise<void> {
    // A load that failed before its runner existed (no weights path, say) leaves nothing to shut down.
    if (this.runner !== undefined) await this.runner.shutdown();
  }
}
