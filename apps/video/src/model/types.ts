/** Public data types of the video model. */
import type { BackendName, GpuAdapterInfo } from './backend.js';
import type { BackendAttempt } from './errors.js';

/** What every rank receives for one chunk. */
export interface VideoInput {
  /** What the video shows. Any text; the empty string is allowed. */
  prompt: string;
  /**
   * A picture that steers the video (`set_image`), or null/absent for none. `target` is the
   * picture made ready by `steerTarget()` at the model's frame size (`height · width · 3`
   * bytes); a new `id` starts a new transition, and dropping the picture ramps it back out.
   */
  image?: VideoImage | null;
}

/** A picture steering the video: see {@link VideoInput.image}. */
export interface VideoImage {
  /** Changes when the picture changes. */
  id: number;
  target: Uint8Array;
}

/** One chunk of video. */
export interface VideoResult {
  /**
   * On rank 0: `n` frames of `height × width` RGB pixels, contiguous, frame-major
   * (`n · height · width · 3` bytes). On other ranks: empty (their share went to rank 0).
   */
  frames: Uint8Array;
  /** Frames in `frames` (0 on ranks other than 0). */
  n: number;
  width: number;
  height: number;
  /** Index of this chunk in the current rollout (0 after `reset()`). */
  chunk: number;
  /** Chunks a rollout has (`rolloutChunks`): after chunk `rolloutChunks − 1` comes `RolloutExhausted`. */
  rolloutChunks: number;
  /** The backend of every rank, in rank order (on rank 0; empty elsewhere). */
  backends: RankBackend[];
  /**
   * On rank 0 with `audioSampleRate > 0`: the chunk's soundtrack, mono PCM,
   * `n · audioSampleRate · timeStep` samples (one frame's worth per frame). Empty otherwise.
   */
  audio: Int16Array;
  /** Samples per second of `audio` (0: no soundtrack). */
  sampleRate: number;
  /** This rank's time for the chunk: rendering its rows (readback included) and the gather on rank 0. */
  timings: { renderMs: number; gatherMs: number };
}

/** Which backend one rank runs on. */
export interface RankBackend {
  rank: number;
  backend: BackendName;
  /** PCI address of the GPU this rank's Vulkan instance was bound to (`REACTOR_GPU_PCI`), or null. */
  pci?: string | null;
  /** The GPU adapter, for `webgpu`. */
  adapter: GpuAdapterInfo | null;
}

/** What {@link ParallelVideoModel.info} reports (for logs and for clients). */
export interface VideoModelInfo {
  rank: number;
  worldSize: number;
  width: number;
  height: number;
  framesPerChunk: number;
  rolloutChunks: number;
  seed: number;
  /** The backend this rank runs on. */
  backend: BackendName;
  /** The preference as configured (`auto`, `webgpu`, `webgpu,wasm`, ...). */
  requestedBackend: string;
  /** Where the preference came from: `REACTOR_BACKEND`, `options.backend`, or `default`. */
  backendSource: string;
  /** The GPU adapter for `webgpu`; null otherwise. */
  adapter: GpuAdapterInfo | null;
  /** The GPU index the runner assigned (`REACTOR_GPU_INDEX`), if any. */
  gpuIndex: number | null;
  /** For `wasm`: whether SIMD is on. */
  simd: boolean | null;
  /** Backends tried before the one in use, with the reason each was not used. */
  backendAttempts: BackendAttempt[];
  weights: {
    root: string;
    sha256: string;
    parameters: number;
  };
}
