/**
 * `EnhanceWorker`: one rank of the enhance app's `DistributedRunner`. Every rank loads the
 * ESRGAN model on its own backend (one GPU each, or wasm/cpu), upscales its share of each step
 * (a band of rows of every frame, or some whole frames), and rank 0 gathers the shares into
 * the step's frames in its result block.
 */
import { DistributedWorker } from '@reactor/distributed';
import { consoleLogger, levelFromEnv } from '@reactor/log';
import { type BackendChoice, planBackends, selectBackend } from './backend.js';
import { InputInvalidError } from './errors.js';
import { type Split, frameShare, rowTile } from './partition.js';
import { type UpscaleJob, Upscaler } from './upscaler.js';
import { type ModelName, loadModel, readModelFiles } from './weights.js';

// Error classes a rank may throw, exported from the worker module so the runner rebuilds them
// in the parent as instances of these classes.
export { WeightsMissingError, WeightsCorruptError, BackendConfigError, BackendUnavailableError, InputInvalidError } from './errors.js';

const log = consoleLogger({ name: 'enhance', level: levelFromEnv() });

/** `loadArgs` of a runner of {@link EnhanceWorker}. */
export interface EnhanceLoadArgs {
  /** Model and scale loaded at start (others load on first use). */
  model: ModelName;
  scale: number;
  /** `auto` | `webgpu` | `wasm` | `cpu` | an order such as `webgpu,wasm` (`REACTOR_BACKEND` overrides). */
  backend?: string;
  /** Model package folders by model name, instead of the installed packages (tests). */
  modelRoots?: Partial<Record<ModelName, string>>;
  /** A warm-up step at this input size (frames, height, width) so the first real step does not compile shaders. */
  warmup?: { n: number; width: number; height: number };
}

/** One step: the same on every rank. */
export interface EnhanceInput {
  /** `n · height · width · 3` RGB bytes. */
  frames: Uint8Array;
  n: number;
  width: number;
  height: number;
  model: ModelName;
  scale: number;
  split: Split;
  /** Output the input (nearest-neighbour upscaled) left of the enhanced picture. */
  sideBySide: boolean;
  /**
   * Pipelined steps: this call queues its frames on the backend and returns the previous
   * call's frames (the first returns none), so one step's readback, gather and hand-back
   * overlap the next step's compute. One step more latency, more throughput on GPUs.
   */
  pipeline?: boolean;
}

/** One step's share on this rank, as planned when it was queued. */
interface StepPlan {
  input: EnhanceInput;
  f0: number;
  f1: number;
  band: { y0: number; y1: number; in0: number; in1: number };
  mineBytes: number;
  meta: { model: ModelName; scale: number; weightsSha256: string; radius: number };
}

/** What one rank runs on. */
export interface RankReport {
  rank: number;
  backend: string;
  adapter: string | null;
  pci: string | null;
  /** What runs the model (torch ranks: `reactor_worker.compile`'s words, with the fall back's reason). */
  compile?: string;
}

/** One step's result: on rank 0 the frames, elsewhere an empty `frames`. */
export interface EnhanceResult {
  frames: Uint8Array;
  n: number;
  width: number;
  height: number;
  model: ModelName;
  scale: number;
  /** Model fingerprint (SHA-256 over its files' hashes). */
  weightsSha256: string;
  /** Rank 0: every rank's backend, on the first step; else empty. */
  ranks: RankReport[];
  timings: { computeMs: number; gatherMs: number };
}

const REPORT_BYTES = 1024;

/**
 * One rank of the enhance model.
 * @example
 * ```ts
 * const runner = new DistributedRunner(EnhanceWorker, { worldSize: 2, loadArgs: { model: 'slim', scale: 2 } });
 * await runner.start();
 * const r = await runner.generate({ frames, n: 1, width: 64, height: 36, model: 'slim', scale: 2, split: 'tiles', sideBySide: false });
 * ```
 */
export class EnhanceWorker extends DistributedWorker<EnhanceInput, EnhanceResult, EnhanceLoadArgs> {
  static override moduleUrl = import.meta.url;

  private args!: EnhanceLoadArgs;
  private choice!: BackendChoice;
  private readonly models = new Map<string, Upscaler>();
  private reports: RankReport[] | null = null;
  private scratch = new Uint8Array(0);
  /** Pipelined runs: the step queued on the backend by the previous call. */
  private pending: { step: StepPlan; job: UpscaleJob | undefined } | null = null;

  async load(args: EnhanceLoadArgs): Promise<void> {
    if (typeof args !== 'object' || args === null) throw new TypeError('EnhanceWorker needs loadArgs { model, scale, ... }');
    this.args = args;
    const plan = planBackends(args.backend, process.env, this.device);
    this.choice = await selectBackend(plan, this.rank);
    const up = await this.upscaler(args.model, args.scale);
    if (this.isLeader) {
      log.info(
        `rank 0 of ${this.worldSize}: backend ${this.choice.backend}${this.choice.adapter ? ` on ${this.choice.adapter}` : ''}` +
          `${this.choice.skipped.length ? `; not used: ${this.choice.skipped.join(', ')}` : ''}; ESRGAN ${args.model} x${args.scale} (receptive radius ${up.radius} rows)`,
      );
    }
    const w = args.warmup;
    if (w) {
      const frames = new Uint8Array(w.n * w.width * w.height * 3);
      const src = { data: frames, n: w.n, width: w.width, height: w.height };
      const out = new Uint8Array(w.n * w.width * w.height * 3 * up.scale * up.scale);
      await up.run(src, 0, w.n, { y0: 0, y1: w.height, in0: 0, in1: w.height }, out);
    }
  }

  /** The model for `model` x`scale`, loaded (files read, hashed, logged) on first use. */
  private async upscaler(model: ModelName, scale: number): Promise<Upscaler> {
    const key = `${model}x${scale}`;
    const have = this.models.get(key);
    if (have) return have;
    const t0 = performance.now();
    const files = readModelFiles(model, scale, this.args.modelRoots?.[model]);
    const up = new Upscaler(files, await loadModel(files));
    // Keep at most two models: switching back and forth stays cheap, memory stays bounded.
    if (this.models.size >= 2) {
      const [oldest] = this.models.keys();
      this.models.get(oldest as string)?.dispose();
      this.models.delete(oldest as string);
    }
    this.models.set(key, up);
    if (this.isLeader) {
      const mib = files.files.reduce((a, f) => a + f.bytes, 0) / 2 ** 20;
      log.info(
        `weights ESRGAN ${model} x${scale} (${files.weightDtype}, ${mib.toFixed(1)} MiB, read in ${(performance.now() - t0).toFixed(0)} ms) ` +
          `from ${files.dir}: sha256 ${files.sha256}; files: ${files.files.map((f) => `${f.path.slice(files.dir.length + 1)}=${f.sha256}`).join(' ')}`,
      );
    }
    return up;
  }

  async generate(input: EnhanceInput): Promise<EnhanceResult> {
    const { n, width: W, height: H } = input;
    if (!(input.frames instanceof Uint8Array) || input.frames.length !== n * W * H * 3) {
      throw new InputInvalidError(`Rank ${this.rank}: a step of ${n} frames of ${W}x${H} needs ${n * W * H * 3} bytes, got ${input.frames?.length}`);
    }
    const up = await this.upscaler(input.model, input.scale);
    const reports = this.reports ?? (await this.gatherReports());
    const step = this.planStep(input, up);
    if (!input.pipeline) {
      this.dropPending();
      return this.complete(step, up.dispatch({ data: input.frames, n, width: W, height: H }, step.f0, step.f1, step.band), reports);
    }
    // Pipelined: queue this step on the backend, then finish the previous one while the backend
    // works on this one. Every rank sees the same inputs, so every rank has a previous step or
    // none, and they gather together.
    const prev = this.pending;
    const kept: StepPlan = input.sideBySide ? { ...step, input: { ...input, frames: input.frames.slice() } } : step;
    this.pending = { step: kept, job: up.dispatch({ data: input.frames, n, width: W, height: H }, step.f0, step.f1, step.band) };
    if (!prev) {
      return {
        frames: new Uint8Array(0),
        n: 0,
        width: 0,
        height: 0,
        model: input.model,
        scale: up.scale,
        weightsSha256: up.files.sha256,
        ranks: [],
        timings: { computeMs: 0, gatherMs: 0 },
      };
    }
    return this.complete(prev.step, prev.job, reports);
  }

  /** What one step asks of this rank: its frames or band, and the output geometry. */
  private planStep(input: EnhanceInput, up: Upscaler): StepPlan {
    const { n, width: W, height: H } = input;
    const s = up.scale;
    let f0 = 0;
    let f1 = n;
    let band = { y0: 0, y1: H, in0: 0, in1: H };
    if (this.worldSize > 1 && input.split === 'tiles') band = rowTile(H, this.worldSize, this.rank, up.radius);
    else if (this.worldSize > 1) ({ f0, f1 } = frameShare(n, this.worldSize, this.rank));
    const meta = { model: input.model, scale: s, weightsSha256: up.files.sha256, radius: up.radius };
    return { input, f0, f1, band, meta, mineBytes: (f1 - f0) * (band.y1 - band.y0) * s * W * s * 3 };
  }

  /** Waits for this rank's share of a step, gathers the shares on rank 0 and assembles the frames there. */
  private async complete(step: StepPlan, job: UpscaleJob | undefined, reports: RankReport[]): Promise<EnhanceResult> {
    const { input, mineBytes, meta } = step;
    const { n, width: W, height: H } = input;
    const s = meta.scale;
    const oW = W * s;
    const oH = H * s;
    const t0 = performance.now();
    const side = input.sideBySide ? 2 : 1;
    const outW = oW * side;
    // Whole frames, no side-by-side: rank 0's frames come first in the result, so it upscales
    // straight into its result block (no scratch copy, no copy at assembly).
    const inPlace = this.isLeader && !input.sideBySide && (this.worldSize === 1 || input.split !== 'tiles');
    let frames: Uint8Array | null = null;
    let mine: Uint8Array;
    if (inPlace) {
      frames = this.resultArray(Uint8Array, n * oH * outW * 3);
      mine = frames.subarray(0, mineBytes);
    } else {
      if (this.scratch.length !== mineBytes) this.scratch = new Uint8Array(mineBytes);
      mine = this.scratch;
    }
    if (job) await job.finish(mine);
    const t1 = performance.now();
    const parts = this.worldSize > 1 ? await this.comm.gather(mine, 0) : [mine];
    const t2 = performance.now();
    const base = { n: 0, width: 0, height: 0, model: meta.model, scale: s, weightsSha256: meta.weightsSha256, ranks: [] as RankReport[] };
    if (!this.isLeader || !parts) return { ...base, frames: new Uint8Array(0), timings: { computeMs: t1 - t0, gatherMs: t2 - t1 } };

    frames ??= this.resultArray(Uint8Array, n * oH * outW * 3);
    const rowBytes = oW * 3;
    const outRow = outW * 3;
    const left = input.sideBySide ? 0 : -1;
    const right = input.sideBySide ? rowBytes : 0;
    for (let r = 0; r < parts.length; r++) {
      const part = parts[r] as Uint8Array;
      let g0 = 0;
      let g1 = n;
      let b = { y0: 0, y1: H };
      if (this.worldSize > 1 && input.split === 'tiles') b = rowTile(H, this.worldSize, r, meta.radius);
      else if (this.worldSize > 1) ({ f0: g0, f1: g1 } = frameShare(n, this.worldSize, r));
      const bandRows = (b.y1 - b.y0) * s;
      if (part.length !== (g1 - g0) * bandRows * rowBytes)
        throw new InputInvalidError(`Rank 0: rank ${r} sent ${part.length} bytes, expected ${(g1 - g0) * bandRows * rowBytes}`);
      if (inPlace) {
        // Whole frames, rows back to back: one copy per rank (rank 0's part is already in place).
        if (r > 0) frames.set(part, g0 * oH * outRow);
        continue;
      }
      for (let f = g0; f < g1; f++) {
        for (let y = 0; y < bandRows; y++) {
          const src = ((f - g0) * bandRows + y) * rowBytes;
          const dst = (f * oH + b.y0 * s + y) * outRow + right;
          frames.set(part.subarray(src, src + rowBytes), dst);
        }
      }
    }
    if (left === 0) nearestInto(input, s, frames, outRow);
    return { ...base, frames, n, width: outW, height: oH, ranks: reports, timings: { computeMs: t1 - t0, gatherMs: t2 - t1 } };
  }

  /** Forgets a queued step (its frames are never returned). */
  private dropPending(): void {
    this.pending?.job?.drop();
    this.pending = null;
  }

  /** A reset drops the queued step of a pipelined run: what follows starts afresh. */
  reset(): void {
    this.dropPending();
  }

  /** Every rank's backend, gathered once so rank 0 can report them. */
  private async gatherReports(): Promise<RankReport[]> {
    const mine: RankReport = {
      rank: this.rank,
      backend: this.choice.backend,
      adapter: this.choice.adapter,
      pci: this.choice.backend === 'webgpu' ? (process.env['REACTOR_GPU_PCI'] ?? null) : null,
    };
    if (this.worldSize === 1) return (this.reports = [mine]);
    const buf = new Uint8Array(REPORT_BYTES);
    buf.set(new TextEncoder().encode(JSON.stringify(mine)).subarray(0, REPORT_BYTES));
    const parts = await this.comm.gather(buf, 0);
    if (!parts) return (this.reports = []);
    const dec = new TextDecoder();
    return (this.reports = parts.map((p, r) => {
      const end = p.indexOf(0);
      try {
        return JSON.parse(dec.decode(end >= 0 ? p.subarray(0, end) : p)) as RankReport;
      } catch {
        return { rank: r, backend: '?', adapter: null, pci: null };
      }
    }));
  }
}

/** The input, nearest-neighbour upscaled by `s`, into the left half of each output row. */
function nearestInto(input: EnhanceInput, s: number, out: Uint8Array, outRow: number): void {
  const { n, width: W, height: H, frames } = input;
  const oH = H * s;
  const line = new Uint8Array(W * s * 3);
  for (let f = 0; f < n; f++) {
    for (let y = 0; y < H; y++) {
      const src = (f * H + y) * W * 3;
      for (let x = 0, o = 0; x < W; x++) {
        const i = src + x * 3;
        for (let k = 0; k < s; k++, o += 3) {
          line[o] = frames[i] as number;
          line[o + 1] = frames[i + 1] as number;
          line[o + 2] = frames[i + 2] as number;
        }
      }
      for (let k = 0; k < s; k++) out.set(line, (f * oH + y * s + k) * outRow);
    }
  }
}
