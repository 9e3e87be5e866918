import { DistributedWorker } from '@reactor/distributed';

/** Frames each `generate()` call makes. */
export declare const FRAMES_PER_CALL: number;

/** What the worker's `load()` takes. */
export interface VideoLoadArgs {
  /** Ignored by this stand-in; a real model reads its weights from here. */
  weightsRoot?: string;
  /** Frame width and height in pixels (default 8). */
  size?: number;
  /** Frames a rollout makes before `generate()` throws {@link RolloutExhausted} (default: no limit). */
  rolloutFrames?: number;
}

/** What rank 0 returns: `frames` is `n` RGB frames of `height`x`width`. */
export interface VideoResult {
  frames: Uint8Array;
  height: number;
  width: number;
  prompt: string;
}

/** Thrown by every rank when a rollout runs out. */
export declare class RolloutExhausted extends Error {}

export declare class VideoWorker extends DistributedWorker<{ prompt: string }, VideoResult, VideoLoadArgs> {
  static moduleUrl: string;
  load(args: VideoLoadArgs): void;
  generate(input: { prompt: string }): Promise<VideoResult>;
  reset(): void;
}
