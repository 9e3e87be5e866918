import { IsBoolean, IsString, MaxLength } from 'class-validator';
import { DistributedRunner } from '@reactor/distributed';
import {
  ApplicationError,
  event,
  Frames,
  getWeightsPath,
  InputField,
  InputState,
  type LoadContext,
  Output,
  ReactorApp,
  reactorApp,
  sessionEnded,
  type StepOutcome,
  Video,
} from '@reactor/runtime';
// Your model's worker module (`docs/runner.md`): the worker class, its result type and the
// error its ranks throw when a rollout runs out.
import { RolloutExhausted, VideoWorker, type VideoResult } from './video-worker.js';

export class VideoState extends InputState {
  @InputField({ default: 'A walk through a forest.', description: 'What the video shows.' })
  @IsString()
  @MaxLength(500)
  prompt!: string;

  @InputField({ default: false, description: 'Pause the video.' })
  @IsBoolean()
  paused!: boolean;

  @InputField({ default: 0 })
  _chunks!: number; // private: never exposed, never settable
}

export class VideoOutput extends Output {
  @Video() mainVideo?: Video; // track "main_video"
}

export class Notice {
  // a message type: wire name "notice"
  constructor(readonly text: string) {}
}

@reactorApp({ state: VideoState, output: VideoOutput, messages: [Notice], fps: 16, bufferSize: 32 })
export class VideoApp extends ReactorApp<VideoState, { prompt: string }, VideoResult, Notice> {
  private runner!: DistributedRunner<{ prompt: string }, VideoResult>;

  override async load(context: LoadContext) {
    // context.configPath, .manifestGpuCount, .logger
    this.runner = new DistributedRunner(VideoWorker, {
      worldSize: 2,
      loadArgs: { weightsRoot: getWeightsPath() },
      logger: context.logger, // the ranks' output goes through the host's logger
    });
    await this.runner.start();
  }
  override async unload() {
    await this.runner.shutdown();
  }
  override processInput() {
    if (this.state.paused) throw new ApplicationError('paused');
    return { prompt: this.state.prompt };
  }
  generate(input: { prompt: string }) {
    return this.runner.generate(input); // a result the app owns: playout may keep it
  }
  override async processOutput(outcome: StepOutcome<VideoResult>) {
    if (outcome.error instanceof RolloutExhausted) {
      await this.reset();
      return null;
    }
    if (outcome.error) {
      await this.runner.shutdown();
      throw outcome.error;
    }
    const { frames, height, width } = outcome.result!;
    this.state._chunks++;
    return new VideoOutput({ mainVideo: new Frames(frames, [frames.length / (height * width * 3), height, width, 3]) });
  }
  @event({ name: 'reset', description: 'Start a new rollout.' })
  async reset() {
    await this.runner.reset();
    this.output.flush();
    this.send(new Notice('new rollout'));
  }
  @sessionEnded
  async onSessionEnded() {
    if (this.runner.healthy) await this.reset();
    else await this.runner.shutdown();
  }
}
