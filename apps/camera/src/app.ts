/**
 * `CameraApp`: the camera sample. A client publishes its webcam (`webcam`, an inbound video
 * track); every step takes the newest camera frame, the ranks of a `DistributedRunner` of
 * {@link CameraWorker} apply the chosen effect (each rank its band of rows), and the result
 * streams out on `processed`. Until a camera publishes, the stream shows a "waiting for camera"
 * card instead.
 */
import 'reflect-metadata';
import { IsIn, IsInt, IsNumber, Max, Min } from 'class-validator';
import { DistributedRunner } from '@reactor/distributed';
import {
  type AppReadiness,
  BufferClosedError,
  BufferTimeoutError,
  type Client,
  connected,
  Frames,
  Input,
  type InputBuffer,
  InputField,
  InputState,
  type LoadContext,
  loadAppConfig,
  Output,
  ReactorApp,
  reactorApp,
  ReadinessCode,
  sessionEnded,
  type StepOutcome,
  TrackPayload,
  Video,
} from '@reactor/runtime';
import { CameraWorker, type CameraLoadArgs, type EffectInput, type EffectResult } from './camera-worker.js';
import { EFFECTS, type EffectName } from './effects.js';
import { CameraConfigError } from './errors.js';
import { waitingCard } from './waiting-card.js';

/** Capture size and rate asked of the clients that publish the webcam. */
export const CAMERA_CAPTURE = Object.freeze({ width: 320, height: 240, fps: 30 });
/** How long a step waits for a camera frame while a camera was sending within this time (ms). */
const CAMERA_GRACE_MS = 1000;
/** How long a step waits for a first camera frame before it shows the waiting card (ms). */
const CARD_POLL_MS = Math.round(1000 / 30);

/** The camera the app asks clients to publish. */
export class CameraInput extends Input {
  @Video({ ...CAMERA_CAPTURE, maxWidth: 640, maxHeight: 480, description: 'Your camera: its frames are transformed and streamed back.' })
  webcam!: InputBuffer<Uint8Array>;
}

/** The session state every client shares: `set_effect` and `set_strength`. */
export class CameraState extends InputState {
  @InputField({ default: 'cartoon', description: 'The effect: cartoon (flat colours, dark outlines), blur, edges, or none.' })
  @IsIn([...EFFECTS])
  effect!: EffectName;

  @InputField({ default: 0.5, description: 'How strong the effect is, from 0 to 1.' })
  @IsNumber()
  @Min(0)
  @Max(1)
  strength!: number;
}

/** The one outbound track. */
export class CameraOutput extends Output {
  @Video({ description: 'Your camera, transformed (a "waiting for camera" card until a camera publishes).' })
  processed?: Video;
}

/** Sent to every client when the camera comes or goes (`camera_status`), and to each client that connects. */
export class CameraStatus {
  constructor(
    /** `waiting`: no camera frames (the card is showing); `live`: camera frames are being transformed. */
    readonly camera: 'waiting' | 'live',
    /** Size of the last camera frame (0 while waiting). */
    readonly width: number,
    readonly height: number,
    /** Ranks that share each frame. */
    readonly worldSize: number,
  ) {}
}

/** The app's config file (`runtime.config` in `reactor.yaml`; YAML or JSON). */
export class CameraConfig {
  /** Ranks that share each frame (each computes its band of rows on CPU). */
  @IsInt() @Min(1) @Max(16) worldSize = 2;
  @IsInt() @Min(100) callTimeoutMs = 10_000;
}

/** Reads and checks the app config; every problem is named by its key. */
export function loadCameraConfig(path: string | undefined): CameraConfig {
  return loadAppConfig(CameraConfig, path, { name: 'camera app', error: (message) => new CameraConfigError(message) });
}

/** One step: a camera frame to transform, or the waiting card. */
export type CameraStep = { kind: 'frame'; input: EffectInput } | { kind: 'waiting' };

/** The camera sample app. */
@reactorApp({
  input: CameraInput,
  state: CameraState,
  output: CameraOutput,
  messages: [CameraStatus],
  name: 'reactor-camera',
  version: '0.1.0',
  description: 'Your camera, transformed live by a per-frame effect split across worker processes.',
  fps: CAMERA_CAPTURE.fps,
  // Low latency: the step that reads the newest camera frame runs at most two frames ahead.
  bufferSize: 2,
})
export class CameraApp extends ReactorApp<CameraState, CameraStep, EffectResult | null, CameraStatus, CameraInput> {
  private runner: DistributedRunner<EffectInput, EffectResult, CameraLoadArgs> | undefined;
  private config = new CameraConfig();
  /** `performance.now()` of the last camera frame a step took. */
  private lastFrameAt = -Infinity;
  private status = new CameraStatus('waiting', 0, 0, 0);
  /** Frames of the waiting card shown so far (moves its bar). */
  private cardTick = 0;

  override async load(context: LoadContext): Promise<void> {
    this.config = loadCameraConfig(context.configPath);
    this.logger.info(`starting ${this.config.worldSize} rank(s) on CPU; each computes its band of rows of every frame`);
    this.runner = new DistributedRunner(CameraWorker, {
      logger: this.logger,
      worldSize: this.config.worldSize,
      devices: 'cpu',
      callTimeoutMs: this.config.callTimeoutMs,
      loadArgs: {},
    });
    await this.runner.start();
    this.status = new CameraStatus('waiting', 0, 0, this.config.worldSize);
  }

  /** Not ready while the runner is down (a rank died): a new session would get no frames. */
  override readiness(): AppReadiness {
    if (!this.runner?.healthy) return { code: ReadinessCode.RunnerUnhealthy, message: 'the camera runner is not running' };
    return true;
  }

  /**
   * The newest camera frame (older ones are dropped: latency over completeness), or the waiting
   * card when no camera sends. While a camera was sending within the last second, the step
   * waits for its next frame instead of flashing the card.
   */
  override async processInput(): Promise<CameraStep> {
    const webcam = this.input.webcam;
    const recent = performance.now() - this.lastFrameAt < CAMERA_GRACE_MS;
    try {
      const [frame] = await webcam.read({ n: 1, mode: 'latest', timeoutMs: recent ? CAMERA_GRACE_MS : CARD_POLL_MS });
      const { data, width, height } = frame!;
      this.lastFrameAt = performance.now();
      this.setStatus('live', width!, height!);
      return { kind: 'frame', input: { frame: data, width: width!, height: height!, effect: this.state.effect, strength: this.state.strength } };
    } catch (err) {
      if (!(err instanceof BufferTimeoutError || err instanceof BufferClosedError)) throw err;
      this.setStatus('waiting', 0, 0);
      return { kind: 'waiting' };
    }
  }

  override async generate(step: CameraStep): Promise<EffectResult | null> {
    if (step.kind === 'waiting') return null;
    return this.runner!.generate(step.input);
  }

  override processOutput(outcome: StepOutcome<EffectResult | null>): CameraOutput {
    if (outcome.error !== undefined) throw outcome.error;
    const r = outcome.result;
    if (!r) {
      const { width, height } = CAMERA_CAPTURE;
      return new CameraOutput({ processed: new TrackPayload(new Frames(waitingCard(width, height, this.cardTick++), [1, height, width, 3])) });
    }
    return new CameraOutput({ processed: new TrackPayload(new Frames(r.frame, [1, r.height, r.width, 3])) });
  }

  private setStatus(camera: 'waiting' | 'live', width: number, height: number): void {
    const s = this.status;
    if (s.camera === camera && s.width === width && s.height === height) return;
    this.status = new CameraStatus(camera, width, height, s.worldSize);
    this.send(this.status);
  }

  /** A client that connects learns whether the camera is live. */
  @connected
  onConnected(client: Client): void {
    client.send(this.status);
  }

  @sessionEnded
  onSessionEnded(): void {
    this.lastFrameAt = -Infinity;
    this.cardTick = 0;
    this.status = new CameraStatus('waiting', 0, 0, this.config.worldSize);
  }

  override async unload(): Promise<void> {
    await this.runner?.shutdown();
  }
}
