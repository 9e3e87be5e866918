/**
 * `ParallelVideoModel`: a prompt-conditioned compositional pattern-producing network (CPPN)
 * rendered with tfjs, each chunk split by pixel rows across the ranks of a runner and gathered
 * on rank 0. See `docs/video-model.md` for the network and `cppn.ts` for its math.
 */
import * as tf from '@tensorflow/tfjs-core';
import { type BackendSelection, gpuIndexFromEnv, planBackends, selectBackend } from './backend.js';
import type { ModelCollectives } from './collectives.js';
import { CppnField, smoothstep, type FrameParams } from './cppn.js';
import { ModelNotLoadedError, RolloutExhausted } from './errors.js';
import { FRAME_SUM_FIELDS, STEER_MAX, channelStats, frameSums, statsFromSums, steerRows, steerWeight } from './image-steer.js';
import { type FrameSegment, type RowShare, frameSegments, rowShare } from './partition.js';
import { Soundtrack, type SoundtrackSnapshot } from './soundtrack.js';
import type { RankBackend, VideoInput, VideoModelInfo, VideoResult } from './types.js';
import { type LoadedWeights, loadWeights } from './weights.js';

/** Options of {@link ParallelVideoModel}. */
export interface ParallelVideoModelOptions {
  /** Folder holding `manifest.json` and the weights file (`apps/video/weights` in this repository). */
  weightsRoot: string;
  /** This rank (default 0). */
  rank?: number;
  /** Ranks that share each chunk (default 1). */
  worldSize?: number;
  /** Collectives across the ranks; required when `worldSize > 1` (a `DistributedWorker`'s `this.comm`). */
  comm?: ModelCollectives;
  /**
   * Rank 0: where to put a chunk's frames (`n · height · width · 3` bytes). A worker passes
   * `(n) => this.resultArray(Uint8Array, n)` so rank 0 renders into the runner's result block:
   * no fresh allocation per chunk and no copy on the way out. Default: a new `Uint8Array`.
   */
  allocFrames?: (bytes: number) => Uint8Array;
  /**
   * Backend preference: `auto` (webgpu, wasm, cpu), `webgpu`, `wasm`, `cpu`, or a comma-separated
   * fallback order. The `REACTOR_BACKEND` environment variable overrides it.
   */
  backend?: string;
  /** The runner's device for this rank (`cpu` or `gpu:<n>`); with `cpu`, `auto` skips webgpu. */
  device?: string;
  /** Frame width in pixels (default 256). */
  width?: number;
  /** Frame height in pixels (default 256). */
  height?: number;
  /** Frames in one chunk, i.e. one `generate()` (default 4). */
  framesPerChunk?: number;
  /** Chunks in one rollout; the next `generate()` throws {@link RolloutExhausted} (default 900). */
  rolloutChunks?: number;
  /** Seed: same prompt and seed give the same frames (default 0). */
  seed?: number;
  /** Seconds of model time per frame (default 1/24): how fast the patterns move. */
  timeStep?: number;
  /** Frames over which a new prompt blends in smoothly (default 24; 0 switches at once). */
  promptTransitionFrames?: number;
  /** Frames over which a picture (`input.image`) steers in, or out once cleared (default 72: 3 s at 24 frames/s). */
  imageTransitionFrames?: number;
  /**
   * Samples per second of the soundtrack rank 0 renders with each chunk (`result.audio`), or 0
   * for none (default). `audioSampleRate · timeStep` must be a whole number of samples per frame.
   */
  audioSampleRate?: number;
  /** Environment read for `REACTOR_BACKEND` and `REACTOR_GPU_INDEX` (default `process.env`). */
  env?: Readonly<Record<string, string | undefined>>;
  /** Folder of tfjs-backend-wasm's `.wasm` files (default: the installed package's `dist/`). */
  wasmPath?: string;
  /**
   * Where the float → byte conversion runs. `true`: on the backend, exactly (see
   * {@link quantizeRgb}), with the chunk read back once as one int32 per pixel; `false`: each
   * frame segment is read back as float32 and converted in JavaScript. Both give the same bytes.
   * Default: `true` on `webgpu` (readback and host work dominate there), `false` on `wasm` and
   * `cpu` (where the extra element-wise passes cost more than the JavaScript loop). The
   * `REACTOR_VIDEO_DEVICE_QUANTIZE` environment variable (`1` / `0`) overrides it, and
   * `REACTOR_VIDEO_BATCH_FRAMES=0` turns off the batched pass over whole frames (for A/B
   * measurements and checks on a GPU).
   */
  quantizeOnDevice?: boolean;
}

/** Defaults of {@link ParallelVideoModelOptions}. */
export const VIDEO_MODEL_DEFAULTS = Object.freeze({
  width: 256,
  height: 256,
  framesPerChunk: 4,
  rolloutChunks: 900,
  seed: 0,
  timeStep: 1 / 24,
  promptTransitionFrames: 24,
  imageTransitionFrames: 72,
  audioSampleRate: 0,
});

const MAX_SIDE = 4096;
/**
 * Frames larger than this go through the per-frame path: the batched matMul's grid is
 * pixels / 32 workgroups in one dimension, and WebGPU allows 65 535.
 */
const MAX_BATCHED_FRAME_PIXELS = 1 << 20;
const MAX_FRAMES_PER_CHUNK = 1024;
/** Bytes of each rank's backend report in the one-off gather (JSON, zero-padded). */
const BACKEND_REPORT_BYTES = 2048;

/** Environment variable that overrides `options.quantizeOnDevice` (`1` / `0`). */
export const DEVICE_QUANTIZE_ENV = 'REACTOR_VIDEO_DEVICE_QUANTIZE';
/** Environment variable that, set to `0`, renders each frame segment in its own pass. */
export const BATCH_FRAMES_ENV = 'REACTOR_VIDEO_BATCH_FRAMES';

/** `1`/`true` → true, `0`/`false` → false, unset or empty → undefined; anything else is a RangeError. */
function envFlag(env: Readonly<Record<string, string | undefined>>, name: string): boolean | undefined {
  const v = env[name]?.trim().toLowerCase();
  if (v === undefined || v === '') return undefined;
  if (v === '1' || v === 'true') return true;
  if (v === '0' || v === 'false') return false;
  throw new RangeError(`${name} must be 1 or 0, got ${JSON.stringify(env[name])}`);
}

function checkInt(name: string, v: unknown, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v)) throw new TypeError(`options.${name} must be an integer, got ${JSON.stringify(v)}`);
  if (v < min || v > max) throw new RangeError(`options.${name} must be between ${min} and ${max}, got ${v}`);
  return v;
}

/** The picture steering the video (see `image-steer.ts`): its weight ramps from `from` to `to` starting at rollout frame `start`. */
interface SteerState {
  /** The picture's id (`input.image.id`); null once cleared (ramping out). */
  id: number | null;
  target: Uint8Array;
  stats: ReturnType<typeof channelStats>;
  from: number;
  to: number;
  start: number;
}

/** {@link ParallelVideoModel.snapshot}: the rollout's state between chunks, as plain data and typed arrays. */
export interface VideoModelSnapshot {
  chunk: number;
  prompt: { prompt: string; code: Float64Array; from: Float64Array | null; start: number } | null;
  steer: {
    id: number | null;
    target: Uint8Array;
    stats: { mean: [number, number, number]; std: [number, number, number] };
    from: number;
    to: number;
    start: number;
  } | null;
  soundtrack: SoundtrackSnapshot | null;
}

/** The prompt being shown and, during a transition, the code it blends from. */
interface PromptState {
  prompt: string;
  code: Float64Array;
  from: Float64Array | null;
  /** Rollout frame index of the first frame of the transition. */
  start: number;
}

/**
 * A prompt-conditioned generative video network. Every rank of a runner builds one with its
 * `rank`, `worldSize` and `comm`, calls {@link load} once, then {@link generate} with the same
 * input on every rank: each rank renders its rows of the chunk and rank 0 gathers the chunk.
 * Output is byte-identical for any world size (same prompt, seed and backend kind).
 *
 * @example
 * ```ts
 * const model = new ParallelVideoModel({ weightsRoot: 'apps/video/weights', backend: 'wasm' });
 * await model.load();
 * const { frames, n, width, height } = await model.generate({ prompt: 'a neon reef' });
 * // frames: n × height × width × 3 RGB bytes
 * ```
 */
export class ParallelVideoModel {
  readonly rank: number;
  readonly worldSize: number;
  readonly width: number;
  readonly height: number;
  readonly framesPerChunk: number;
  readonly rolloutChunks: number;
  readonly seed: number;
  readonly timeStep: number;
  readonly promptTransitionFrames: number;
  readonly imageTransitionFrames: number;
  /** Soundtrack samples per second (0: none). */
  readonly audioSampleRate: number;

  private readonly options: ParallelVideoModelOptions;
  private readonly comm: ModelCollectives | null;
  private readonly env: Readonly<Record<string, string | undefined>>;
  private readonly share: RowShare;
  private readonly segments: FrameSegment[];

  private weights: LoadedWeights | null = null;
  private field: CppnField | null = null;
  private selection: BackendSelection | null = null;
  private features = new Map<string, tf.Tensor2D>();
  private hiddenW: tf.Tensor2D | null = null;
  private rgbW: tf.Tensor2D | null = null;
  /** `[3, 1]` = `[1, 256, 65536]`: packs a pixel's three bytes into one integer. */
  private deviceQuantize = false;
  /** Whole frames go through one batched pass (not on wasm: its fused matMul takes only a rank-1 bias). */
  private batchFrames = false;
  /** Ranks other than 0: the buffer their rows are rendered into, reused chunk after chunk. */
  private shareBuffer: Uint8Array | null = null;
  private loading: Promise<void> | null = null;

  private chunk = 0;
  private promptState: PromptState | null = null;
  private steer: SteerState | null = null;
  private readonly soundtrack: Soundtrack | null;
  private rankBackends: RankBackend[] | null = null;

  /**
   * Checks the options; loads nothing (see {@link load}).
   * @throws TypeError / RangeError naming the option at fault
   */
  constructor(options: ParallelVideoModelOptions) {
    if (typeof options !== 'object' || options === null) throw new TypeError('ParallelVideoModel needs an options object');
    if (typeof options.weightsRoot !== 'string' || options.weightsRoot.length === 0) {
      throw new TypeError(`options.weightsRoot must be a non-empty path string, got ${JSON.stringify(options.weightsRoot)}`);
    }
    const d = VIDEO_MODEL_DEFAULTS;
    this.options = options;
    this.worldSize = checkInt('worldSize', options.worldSize ?? 1, 1, 1024);
    this.rank = checkInt('rank', options.rank ?? 0, 0, this.worldSize - 1);
    this.width = checkInt('width', options.width ?? d.width, 1, MAX_SIDE);
    this.height = checkInt('height', options.height ?? d.height, 1, MAX_SIDE);
    this.framesPerChunk = checkInt('framesPerChunk', options.framesPerChunk ?? d.framesPerChunk, 1, MAX_FRAMES_PER_CHUNK);
    this.rolloutChunks = checkInt('rolloutChunks', options.rolloutChunks ?? d.rolloutChunks, 1, Number.MAX_SAFE_INTEGER);
    this.seed = checkInt('seed', options.seed ?? d.seed, 0, 0xffffffff);
    this.promptTransitionFrames = checkInt('promptTransitionFrames', options.promptTransitionFrames ?? d.promptTransitionFrames, 0, 100_000);
    const timeStep = options.timeStep ?? d.timeStep;
    if (typeof timeStep !== 'number' || !Number.isFinite(timeStep) || timeStep <= 0) {
      throw new RangeError(`options.timeStep must be a positive number of seconds, got ${JSON.stringify(timeStep)}`);
    }
    this.timeStep = timeStep;
    this.imageTransitionFrames = checkInt('imageTransitionFrames', options.imageTransitionFrames ?? d.imageTransitionFrames, 0, 100_000);
    this.audioSampleRate = checkInt('audioSampleRate', options.audioSampleRate ?? d.audioSampleRate, 0, 384_000);
    const samplesPerFrame = this.audioSampleRate * timeStep;
    if (Math.abs(samplesPerFrame - Math.round(samplesPerFrame)) > 1e-6) {
      throw new RangeError(
        `options.audioSampleRate × options.timeStep must be a whole number of samples per frame, got ${this.audioSampleRate} × ${timeStep} = ${samplesPerFrame}`,
      );
    }
    this.soundtrack = this.audioSampleRate > 0 ? new Soundtrack(this.audioSampleRate, Math.round(samplesPerFrame)) : null;
    const comm = options.comm ?? null;
    if (this.worldSize > 1 && !comm) {
      throw new TypeError(`options.comm is required when options.worldSize is ${this.worldSize}: pass the worker's collectives (this.comm)`);
    }
    if (comm && (comm.rank !== this.rank || comm.worldSize !== this.worldSize)) {
      throw new RangeError(
        `options.comm is rank ${comm.rank} of ${comm.worldSize} but options say rank ${this.rank} of ${this.worldSize}; pass the same rank and worldSize`,
      );
    }
    this.comm = comm;
    this.env = options.env ?? process.env;
    // Read the backend preference now so a bad value fails before anything loads.
    planBackends(options.backend, this.env, options.device);
    gpuIndexFromEnv(this.env);
    envFlag(this.env, DEVICE_QUANTIZE_ENV);
    envFlag(this.env, BATCH_FRAMES_ENV);
    const totalRows = this.framesPerChunk * this.height;
    this.share = rowShare(totalRows, this.worldSize, this.rank);
    this.segments = frameSegments(this.share, this.height);
  }

  /** True once {@link load} has finished. */
  get loaded(): boolean {
    return this.selection !== null && this.field !== null;
  }

  /**
   * Loads and checks the weights, picks the backend, and prepares this rank's share of the
   * pixel grid. Idempotent: a second call returns the first call's promise.
   * @throws WeightsNotFoundError (`weights_not_found`) / WeightsInvalidError (`weights_invalid`)
   * @throws BackendConfigError (`backend_config`) / BackendUnavailableError (`backend_unavailable`)
   */
  load(): Promise<void> {
    this.loading ??= this.doLoad().catch((e: unknown) => {
      this.loading = null;
      throw e;
    });
    return this.loading;
  }

  private async doLoad(): Promise<void> {
    const weights = await loadWeights(this.options.weightsRoot);
    const plan = planBackends(this.options.backend, this.env, this.options.device);
    const selection = await selectBackend(plan, {
      rank: this.rank,
      gpuIndex: gpuIndexFromEnv(this.env),
      ...(this.options.wasmPath !== undefined ? { wasmPath: this.options.wasmPath } : {}),
    });
    const field = new CppnField(weights, this.seed);
    const { mixUnits: M, hiddenUnits: H } = weights.config;
    const consts = field.constantParams();
    this.disposeTensors();
    this.hiddenW = tf.tensor2d(consts.hiddenW, [M, H]);
    this.rgbW = tf.tensor2d(consts.rgbW, [H, 3]);
    this.deviceQuantize = envFlag(this.env, DEVICE_QUANTIZE_ENV) ?? this.options.quantizeOnDevice ?? selection.backend === 'webgpu';
    this.batchFrames = selection.backend !== 'wasm' && envFlag(this.env, BATCH_FRAMES_ENV) !== false;
    for (const s of this.segments) {
      const key = `${s.y0}:${s.y1}`;
      if (this.features.has(key)) continue;
      const data = field.coordinateFeatures(this.width, this.height, s.y0, s.y1);
      this.features.set(key, tf.tensor2d(data, [(s.y1 - s.y0) * this.width, field.featureDim]));
    }
    this.weights = weights;
    this.field = field;
    this.selection = selection;
    // One throw-away frame so the first real chunk does not pay for kernel compilation
    // (WebGPU shaders, wasm warm-up).
    const first = this.segments[0];
    if (first) {
      const params = field.frameParams(field.promptCode(''), field.timeOrigin);
      const out = this.deviceQuantize
        ? tf.tidy(() => this.packBytes(this.launchShare(this.segments.map(() => params))))
        : this.launchRows(params, first.y0, first.y1);
      try {
        await out.data();
      } finally {
        out.dispose();
      }
    }
  }

  /** What the model runs on and with (for logs and for clients). */
  info(): VideoModelInfo {
    const sel = this.selection;
    const w = this.weights;
    if (!sel || !w) throw new ModelNotLoadedError(this.rank, 'info');
    return {
      rank: this.rank,
      worldSize: this.worldSize,
      width: this.width,
      height: this.height,
      framesPerChunk: this.framesPerChunk,
      rolloutChunks: this.rolloutChunks,
      seed: this.seed,
      backend: sel.backend,
      requestedBackend: sel.requested,
      backendSource: sel.source,
      adapter: sel.adapter,
      gpuIndex: sel.gpuIndex,
      simd: sel.simd,
      backendAttempts: sel.attempts,
      weights: { root: w.root, sha256: w.sha256, parameters: w.parameterCount },
    };
  }

  /** Chunks generated in the current rollout. */
  get chunkIndex(): number {
    return this.chunk;
  }

  /**
   * Renders the next chunk: this rank's rows, gathered on rank 0. Call it on every rank with
   * the same input.
   * @returns on rank 0 the whole chunk; on other ranks a result with empty `frames`
   * @throws RolloutExhausted (`rollout_exhausted`) on every rank once `rolloutChunks` chunks were generated
   * @throws ModelNotLoadedError (`model_not_loaded`) before {@link load}
   */
  async generate(input: VideoInput): Promise<VideoResult> {
    const field = this.field;
    if (!field || !this.selection) throw new ModelNotLoadedError(this.rank, 'generate');
    if (typeof input !== 'object' || input === null || typeof input.prompt !== 'string') {
      throw new TypeError(`generate(input) needs { prompt: string }, got ${JSON.stringify(input)}`);
    }
    const image = input.image ?? null;
    if (image !== null && (!(image.target instanceof Uint8Array) || image.target.length !== this.width * this.height * 3 || !Number.isInteger(image.id))) {
      throw new TypeError(
        `generate(input): input.image must be { id: integer, target: Uint8Array of ${this.width}x${this.height}x3 = ${this.width * this.height * 3} bytes }, got ${image.target?.length ?? 'no'} bytes`,
      );
    }
    if (this.chunk >= this.rolloutChunks) throw RolloutExhausted.afterChunks(this.rolloutChunks, this.rank);

    const firstFrame = this.chunk * this.framesPerChunk;
    const nextPrompt = this.nextPromptState(field, input.prompt, firstFrame);
    const nextSteer = this.nextSteerState(image, firstFrame);
    const backends = this.rankBackends ?? (await this.gatherBackends());

    const t0 = performance.now();
    const W = this.width;
    const rowBytes = W * 3;
    const shareBytes = (this.share.end - this.share.start) * rowBytes;
    const totalBytes = this.framesPerChunk * this.height * rowBytes;
    // Rank 0 renders its rows (the first ones) straight into the chunk's frames; other ranks
    // reuse one buffer (the gather copies it out before the next chunk).
    let frames: Uint8Array;
    let local: Uint8Array;
    if (this.rank === 0) {
      frames = this.options.allocFrames?.(totalBytes) ?? new Uint8Array(totalBytes);
      if (frames.length !== totalBytes) throw new RangeError(`allocFrames(${totalBytes}) returned ${frames.length} bytes`);
      local = frames.subarray(0, shareBytes);
    } else {
      frames = new Uint8Array(0);
      if (this.shareBuffer?.length !== shareBytes) this.shareBuffer = new Uint8Array(shareBytes);
      local = this.shareBuffer;
    }
    const params = new Map<number, FrameParams>();
    const pending: { rgb: tf.Tensor; offset: number }[] = [];
    let packed: tf.Tensor | null = null;
    try {
      // Launch every segment first and read them back after, so an asynchronous backend
      // (WebGPU) queues the whole chunk before the first readback waits on it.
      const paramsOf = (frame: number): FrameParams => {
        let p = params.get(frame);
        if (!p) {
          const f = firstFrame + frame;
          p = field.frameParams(this.codeAt(nextPrompt, f), field.timeOrigin + f * this.timeStep);
          params.set(frame, p);
        }
        return p;
      };
      if (this.deviceQuantize) {
        // The whole share in one pass and one readback of one int32 per pixel.
        const ps = this.segments.map((s) => paramsOf(s.frame));
        if (ps.length > 0) {
          packed = tf.tidy(() => this.packBytes(this.launchShare(ps)));
          unpackRgb((await packed.data()) as Int32Array, local);
        }
      } else {
        for (const s of this.segments) {
          const globalRow = s.frame * this.height + s.y0;
          pending.push({ rgb: this.launchRows(paramsOf(s.frame), s.y0, s.y1), offset: (globalRow - this.share.start) * rowBytes });
        }
        const values = await Promise.all(pending.map((x) => x.rgb.data() as Promise<Float32Array>));
        for (let i = 0; i < pending.length; i++) toBytes(values[i] as Float32Array, local, (pending[i] as { offset: number }).offset);
      }
    } finally {
      for (const x of pending) x.rgb.dispose();
      packed?.dispose();
    }

    // The picture, on this rank's rows, with each frame's statistics summed over every rank
    // (exact integer sums), so any split gives the same bytes.
    if (nextSteer) {
      const rowsOf = (s: FrameSegment): Uint8Array => {
        const offset = (s.frame * this.height + s.y0 - this.share.start) * rowBytes;
        return local.subarray(offset, offset + (s.y1 - s.y0) * rowBytes);
      };
      const mine = new Float64Array(this.framesPerChunk * FRAME_SUM_FIELDS);
      for (const s of this.segments) frameSums(rowsOf(s), mine, s.frame * FRAME_SUM_FIELDS);
      let sums = mine;
      if (this.worldSize > 1) {
        // allGather hands back `mine` itself as this rank's part: sum into a new array.
        const all = await (this.comm as ModelCollectives).allGather(mine);
        sums = new Float64Array(mine.length);
        for (const part of all) for (let i = 0; i < sums.length; i++) sums[i] = (sums[i] as number) + (part[i] as number);
      }
      for (const s of this.segments) {
        const w = this.steerWeightAt(nextSteer, firstFrame + s.frame);
        steerRows(rowsOf(s), nextSteer.target, nextSteer.stats, statsFromSums(sums, s.frame * FRAME_SUM_FIELDS), W, s.y0, w);
      }
    }

    const tRendered = performance.now();
    if (this.worldSize > 1) {
      // Shares differ by at most one row; the collectives accept arrays of different lengths.
      const parts = await (this.comm as ModelCollectives).gather(local, 0);
      if (this.rank === 0) {
        if (!parts || parts.length !== this.worldSize) {
          throw new Error(`Rank 0: gather returned ${parts ? parts.length : 'null'} parts for ${this.worldSize} ranks`);
        }
        const totalRows = this.framesPerChunk * this.height;
        // Rank 0's own rows are already in place (parts[0] is `local`, a view of `frames`).
        for (let r = 1; r < this.worldSize; r++) {
          const s = rowShare(totalRows, this.worldSize, r);
          const part = parts[r] as Uint8Array;
          const bytes = (s.end - s.start) * rowBytes;
          if (part.length !== bytes) throw new Error(`Rank 0: rank ${r} sent ${part.length} bytes, expected ${bytes}`);
          frames.set(part, s.start * rowBytes);
        }
      }
    }

    // Rank 0's soundtrack for the chunk, frame by frame from the same prompt codes as the picture.
    const leader = this.rank === 0;
    let audio = new Int16Array(0);
    if (leader && this.soundtrack) {
      const spf = this.soundtrack.samplesPerFrame;
      audio = new Int16Array(this.framesPerChunk * spf);
      for (let f = 0; f < this.framesPerChunk; f++) this.soundtrack.renderFrame(this.codeAt(nextPrompt, firstFrame + f), audio, f * spf);
    }

    // Only a chunk that was produced counts: commit the state last.
    const chunk = this.chunk;
    this.chunk += 1;
    this.promptState = nextPrompt;
    this.steer = nextSteer;
    return {
      audio,
      sampleRate: this.audioSampleRate,
      frames,
      n: leader ? this.framesPerChunk : 0,
      width: W,
      height: this.height,
      chunk,
      rolloutChunks: this.rolloutChunks,
      backends: leader ? backends : [],
      timings: { renderMs: tRendered - t0, gatherMs: performance.now() - tRendered },
    };
  }

  /**
   * The rollout's state between chunks (docs/snapshots.md): the chunk counter, the prompt and
   * its transition, the picture's steering and the soundtrack's phases. Every rank holds the same
   * one (each renders its rows from it), so rank 0's restores into any world size. Copies.
   */
  snapshot(): VideoModelSnapshot {
    const p = this.promptState;
    const st = this.steer;
    return {
      chunk: this.chunk,
      prompt: p && { prompt: p.prompt, code: p.code.slice(), from: p.from?.slice() ?? null, start: p.start },
      steer: st && {
        id: st.id,
        target: st.target.slice(),
        stats: { mean: [...st.stats.mean], std: [...st.stats.std] },
        from: st.from,
        to: st.to,
        start: st.start,
      },
      soundtrack: this.soundtrack?.snapshot() ?? null,
    };
  }

  /** Puts {@link snapshot}'s state back; the next chunk is the one that followed it. Copies what it keeps. */
  restore(s: VideoModelSnapshot): void {
    if (!Number.isInteger(s.chunk) || s.chunk < 0 || s.chunk > this.rolloutChunks) {
      throw new RangeError(`a video snapshot's chunk ${String(s.chunk)} is outside this rollout (0..${this.rolloutChunks})`);
    }
    const p = s.prompt;
    const st = s.steer;
    if (s.soundtrack && this.soundtrack) this.soundtrack.restore(s.soundtrack);
    else this.soundtrack?.reset();
    this.chunk = s.chunk;
    this.promptState = p && { prompt: p.prompt, code: Float64Array.from(p.code), from: p.from === null ? null : Float64Array.from(p.from), start: p.start };
    this.steer = st && {
      id: st.id,
      target: Uint8Array.from(st.target),
      stats: { mean: [...st.stats.mean] as [number, number, number], std: [...st.stats.std] as [number, number, number] },
      from: st.from,
      to: st.to,
      start: st.start,
    };
  }

  /** Starts a new rollout at frame 0 (the prompt transition is dropped); weights stay loaded. */
  reset(): void {
    this.chunk = 0;
    this.promptState = null;
    this.steer = null;
    this.soundtrack?.reset();
  }

  /** Frees the tensors; the model must be loaded again before use. */
  dispose(): void {
    this.disposeTensors();
    this.field = null;
    this.selection = null;
    this.weights = null;
    this.loading = null;
  }

  private disposeTensors(): void {
    for (const t of this.features.values()) t.dispose();
    this.features.clear();
    this.hiddenW?.dispose();
    this.rgbW?.dispose();
    this.hiddenW = null;
    this.rgbW = null;
  }

  /** The prompt state for a chunk starting at rollout frame `frame` with prompt `prompt`. */
  private nextPromptState(field: CppnField, prompt: string, frame: number): PromptState {
    const cur = this.promptState;
    if (cur && cur.prompt === prompt) return cur;
    const code = field.promptCode(prompt);
    if (!cur || this.promptTransitionFrames === 0) return { prompt, code, from: null, start: frame };
    // Blend from whatever was on screen at the previous frame (mid-transition included).
    return { prompt, code, from: this.codeAt(cur, frame - 1), start: frame };
  }

  /**
   * The steering for a chunk starting at rollout frame `frame`: a new picture ramps in from 0,
   * a cleared one ramps out from wherever it was; null when no picture is or was showing.
   */
  private nextSteerState(image: VideoInput['image'], frame: number): SteerState | null {
    const cur = this.steer;
    if (image) {
      if (cur && cur.id === image.id) return cur;
      // The input is a view into shared memory, valid for this call only: keep a copy.
      const target = image.target.slice();
      return { id: image.id, target, stats: channelStats(target), from: 0, to: STEER_MAX, start: frame };
    }
    if (!cur) return null;
    if (cur.id === null) return this.steerWeightAt(cur, frame) <= 0 ? null : cur;
    return { ...cur, id: null, from: this.steerWeightAt(cur, frame - 1), to: 0, start: frame };
  }

  /** The steering weight at rollout frame `frame`. */
  private steerWeightAt(state: SteerState, frame: number): number {
    return steerWeight(state.from, state.to, frame - state.start + 1, this.imageTransitionFrames);
  }

  /** The prompt code at rollout frame `frame`. */
  private codeAt(state: PromptState, frame: number): Float64Array {
    if (!state.from) return state.code;
    const w = smoothstep((frame - state.start + 1) / this.promptTransitionFrames);
    if (w >= 1) return state.code;
    const out = new Float64Array(state.code.length);
    for (let i = 0; i < out.length; i++) out[i] = (state.from[i] as number) * (1 - w) + (state.code[i] as number) * w;
    return out;
  }

  /** Every rank's backend, gathered once (first chunk) so rank 0 can report them. */
  private async gatherBackends(): Promise<RankBackend[]> {
    const sel = this.selection as BackendSelection;
    const mine: RankBackend = {
      rank: this.rank,
      backend: sel.backend,
      adapter: sel.adapter,
      pci: sel.backend === 'webgpu' ? (process.env['REACTOR_GPU_PCI'] ?? null) : null,
    };
    if (this.worldSize === 1 || !this.comm) {
      this.rankBackends = [mine];
      return this.rankBackends;
    }
    const buf = new Uint8Array(BACKEND_REPORT_BYTES);
    const json = new TextEncoder().encode(JSON.stringify(mine));
    buf.set(json.subarray(0, BACKEND_REPORT_BYTES));
    const parts = await this.comm.gather(buf, 0);
    if (this.rank !== 0 || !parts) {
      this.rankBackends = [];
      return this.rankBackends;
    }
    const dec = new TextDecoder();
    this.rankBackends = parts.map((p, r) => {
      const end = p.indexOf(0);
      try {
        return JSON.parse(dec.decode(end >= 0 ? p.subarray(0, end) : p)) as RankBackend;
      } catch {
        return { rank: r, backend: sel.backend, adapter: null };
      }
    });
    return this.rankBackends;
  }

  /** Queues the pixel network for rows `[y0, y1)` of one frame; returns `[rows · width, 3]` in (0, 1). */
  private launchRows(p: FrameParams, y0: number, y1: number): tf.Tensor {
    const feats = this.features.get(`${y0}:${y1}`);
    const field = this.field;
    if (!feats || !field || !this.hiddenW || !this.rgbW) throw new ModelNotLoadedError(this.rank, 'generate');
    const M = field.config.mixUnits;
    const hiddenW = this.hiddenW;
    const rgbW = this.rgbW;
    return tf.tidy(() => {
      const mixW = tf.tensor2d(p.mixW, [field.featureDim, M]);
      const h = tf.fused.matMul({ a: feats, b: mixW, bias: tf.tensor1d(p.mixB), activation: 'sigmoid' });
      const g = tf.fused.matMul({ a: h, b: hiddenW, bias: tf.tensor1d(p.hiddenB), activation: 'sigmoid' });
      return tf.fused.matMul({ a: g, b: rgbW, bias: tf.tensor1d(p.rgbB), activation: 'sigmoid' });
    });
  }

  /**
   * Queues the pixel network for this rank's whole share; returns `[shareRows · width, 3]` in
   * (0, 1), rows in share order. Runs of whole frames go through one batched pass each
   * (`[1, h·w, 2F] × [S, 2F, M]`, per-frame biases `[S, 1, ·]`: three dispatches and four
   * uploads for any number of frames); a frame cut by the share boundary is a segment of its
   * own. Each output element is the same sum in the same order as in {@link launchRows}.
   * On wasm (no rank-3 bias in its fused matMul) every segment is its own pass.
   * Call inside `tf.tidy`.
   * @param ps - the parameters of each of `this.segments`
   */
  private launchShare(ps: FrameParams[]): tf.Tensor {
    const parts: tf.Tensor[] = [];
    let run: FrameParams[] = [];
    const flush = (): void => {
      if (run.length === 1) parts.push(this.launchRows(run[0] as FrameParams, 0, this.height));
      else if (run.length > 1) parts.push(this.launchFrames(run));
      run = [];
    };
    this.segments.forEach((s, i) => {
      if (this.batchFrames && s.y0 === 0 && s.y1 === this.height && this.height * this.width <= MAX_BATCHED_FRAME_PIXELS) {
        run.push(ps[i] as FrameParams);
      } else {
        flush();
        parts.push(this.launchRows(ps[i] as FrameParams, s.y0, s.y1));
      }
    });
    flush();
    return parts.length === 1 ? (parts[0] as tf.Tensor) : tf.concat(parts, 0);
  }

  /** Whole frames, one per element of `ps`, in one batched pass; returns `[S · height · width, 3]`. */
  private launchFrames(ps: FrameParams[]): tf.Tensor {
    const feats = this.features.get(`0:${this.height}`);
    const field = this.field;
    if (!feats || !field || !this.hiddenW || !this.rgbW) throw new ModelNotLoadedError(this.rank, 'generate');
    const { mixUnits: M, hiddenUnits: H } = field.config;
    const F2 = field.featureDim;
    const S = ps.length;
    const P = this.height * this.width;
    const stack = (pick: (p: FrameParams) => Float32Array, n: number): Float32Array => {
      const out = new Float32Array(S * n);
      ps.forEach((p, i) => out.set(pick(p), i * n));
      return out;
    };
    return tf.tidy(() => {
      const mixW = tf.tensor3d(
        stack((p) => p.mixW, F2 * M),
        [S, F2, M],
      );
      const a = tf.reshape(feats, [1, P, F2]);
      const h = tf.fused.matMul({
        a,
        b: mixW,
        bias: tf.tensor3d(
          stack((p) => p.mixB, M),
          [S, 1, M],
        ),
        activation: 'sigmoid',
      });
      const g = tf.fused.matMul({
        a: h,
        b: tf.reshape(this.hiddenW as tf.Tensor, [1, M, H]),
        bias: tf.tensor3d(
          stack((p) => p.hiddenB, H),
          [S, 1, H],
        ),
        activation: 'sigmoid',
      });
      const rgb = tf.fused.matMul({
        a: g,
        b: tf.reshape(this.rgbW as tf.Tensor, [1, H, 3]),
        bias: tf.tensor3d(
          stack((p) => p.rgbB, 3),
          [S, 1, 3],
        ),
        activation: 'sigmoid',
      });
      return tf.reshape(rgb, [S * P, 3]);
    });
  }

  /**
   * `[pixels, 3]` values in [0, 1] → `[pixels]` int32 `r + 256·g + 65536·b` with each channel
   * quantised exactly as {@link toBytes} does (see {@link quantizeRgb}). Integers below 2^24
   * times powers of two, summed: exact in float32 in any order. Element-wise on purpose: a
   * `[pixels, 3] × [3, 1]` matMul exceeds WebGPU's 65 535 workgroups per dimension once a
   * share has more than ~2M pixels (1280x720 x 4 frames), while element-wise dispatches fold.
   * Call inside `tf.tidy`.
   */
  private packBytes(rgb: tf.Tensor): tf.Tensor {
    const q = quantizeRgb(tf.reshape(rgb, [-1, 3]) as tf.Tensor2D);
    const [r, g, b] = tf.split(q, 3, 1) as [tf.Tensor, tf.Tensor, tf.Tensor];
    return tf.cast(tf.reshape(tf.add(tf.add(r, tf.mul(g, 256)), tf.mul(b, 65536)), [-1]), 'int32');
  }
}

/**
 * `floor(v · 255 + 0.5)` for float32 `v` in [0, 1], computed with float32 tensor ops and exact
 * (equal to the float64 result of {@link toBytes}) on any backend whose `+ − ×` are correctly
 * rounded IEEE float32, fused multiply-add or not.
 *
 * `k = floor(v·255 + 0.5)` in float32 can be one off near a half-integer. The exact test
 * `v ≥ (k − 0.5)/255` is `510·v ≥ 2k − 1`, i.e. `512·v − (2k − 1) ≥ 2·v`: `512·v` and `2·v`
 * are exact (powers of two), and `512·v − (2k − 1)`, an integer subtracted from a float at
 * least as large, is exact whenever it is ≥ 0 (and keeps its sign otherwise). So
 * `down = [512v − (2k − 1) < 2v]` and `up = [512v − (2k + 1) ≥ 2v]` correct `k` to the exact
 * value; at `k = 0` and `k = 255` the tests are false by themselves.
 * @returns float32 integers in [0, 255], same shape as `v`
 */
export function quantizeRgb<T extends tf.Tensor>(v: T): T {
  return tf.tidy(() => {
    const k = tf.floor(tf.add(tf.mul(v, 255), 0.5));
    const a = tf.mul(v, 512);
    const t = tf.mul(v, 2);
    const twoK = tf.mul(k, 2);
    const down = tf.cast(tf.less(tf.sub(a, tf.sub(twoK, 1)), t), 'float32');
    const up = tf.cast(tf.greaterEqual(tf.sub(a, tf.add(twoK, 1)), t), 'float32');
    return tf.clipByValue(tf.sub(tf.add(k, up), down), 0, 255) as T;
  });
}

/**
 * Unpacks one int32 per pixel (`r + 256·g + 65536·b`, see `packBytes`) into RGB bytes: four
 * pixels (16 bytes, little-endian) become three 32-bit words, the rest byte by byte.
 */
export function unpackRgb(px: Int32Array, out: Uint8Array): void {
  const n = px.length;
  if (out.length < n * 3) throw new RangeError(`unpackRgb: ${n} pixels need ${n * 3} bytes, got ${out.length}`);
  let i = 0;
  if (LITTLE_ENDIAN && out.byteOffset % 4 === 0) {
    const groups = n >> 2;
    const o32 = new Uint32Array(out.buffer, out.byteOffset, groups * 3);
    for (let g = 0, o = 0; g < groups; g++, i += 4, o += 3) {
      const p0 = px[i] as number;
      const p1 = px[i + 1] as number;
      const p2 = px[i + 2] as number;
      const p3 = px[i + 3] as number;
      o32[o] = p0 | (p1 << 24);
      o32[o + 1] = (p1 >>> 8) | (p2 << 16);
      o32[o + 2] = (p2 >>> 16) | (p3 << 8);
    }
  }
  for (; i < n; i++) {
    const p = px[i] as number;
    out[3 * i] = p & 255;
    out[3 * i + 1] = (p >>> 8) & 255;
    out[3 * i + 2] = (p >>> 16) & 255;
  }
}

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/** Writes sigmoid outputs in (0, 1) as bytes (round half up) into `out` at `offset`. */
function toBytes(values: Float32Array, out: Uint8Array, offset: number): void {
  const n = values.length;
  for (let i = 0; i < n; i++) {
    const v = Math.floor((values[i] as number) * 255 + 0.5);
    out[offset + i] = v < 0 ? 0 : v > 255 ? 255 : v;
  }
}
