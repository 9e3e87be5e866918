/**
 * `CameraWorker`: the camera app's model half, one instance per rank of a `DistributedRunner`.
 * Every rank receives the same camera frame (in shared memory, written once by the runner),
 * applies the effect to its band of rows, and rank 0 gathers the bands into the output frame.
 */
import { DistributedWorker } from '@reactor/distributed';
import { EFFECTS, type EffectName, applyEffectRows, effectParams, rowShare } from './effects.js';

/** What every rank gets for one frame (the app's `processInput()` builds it). */
export interface EffectInput {
  /** The camera frame: RGB24, `height · width · 3` bytes (a view into shared memory: read only). */
  frame: Uint8Array;
  width: number;
  height: number;
  effect: EffectName;
  /** 0..1: how strong the effect is. */
  strength: number;
}

/** Rank 0's answer: the transformed frame (other ranks return an empty `frame`). */
export interface EffectResult {
  frame: Uint8Array;
  width: number;
  height: number;
  /** Rank 0's time for its own band, ms. */
  bandMs: number;
}

/** The runner's `loadArgs` (none needed yet; kept for the shape every worker has). */
export type CameraLoadArgs = Record<string, never>;

/**
 * One rank of the effect. Rank `r` of `W` computes the rows `[⌊r·H/W⌋, ⌊(r+1)·H/W⌋)`.
 *
 * @example
 * ```ts
 * const runner = new DistributedRunner(CameraWorker, { worldSize: 2, devices: 'cpu', loadArgs: {} });
 * await runner.start();
 * const { frame } = await runner.generate({ frame: rgb, width: 320, height: 240, effect: 'cartoon', strength: 0.5 });
 * ```
 */
export class CameraWorker extends DistributedWorker<EffectInput, EffectResult, CameraLoadArgs> {
  static override moduleUrl = import.meta.url;

  load(): void {}

  async generate(input: EffectInput): Promise<EffectResult> {
    const { frame, width, height, effect, strength } = input;
    if (!(EFFECTS as readonly string[]).includes(effect)) throw new RangeError(`unknown effect ${JSON.stringify(effect)}; pick one of ${EFFECTS.join(', ')}`);
    const t0 = performance.now();
    const share = rowShare(height, this.worldSize, this.rank);
    const rowBytes = width * 3;
    const shareBytes = (share.end - share.start) * rowBytes;
    // Rank 0 writes its band straight into the result block (no copy on the way out).
    const out = this.isLeader ? this.resultArray(Uint8Array, height * rowBytes) : new Uint8Array(shareBytes);
    applyEffectRows(frame, width, height, effectParams(effect, strength), share.start, share.end, out.subarray(0, shareBytes));
    const bandMs = performance.now() - t0;
    if (this.worldSize === 1) return { frame: out, width, height, bandMs };
    const parts = await this.comm.gather(out.subarray(0, shareBytes), 0);
    if (!this.isLeader || !parts) return { frame: new Uint8Array(0), width, height, bandMs };
    // Rank 0's own band is already in place; the others' go after it, in rank order.
    for (let r = 1; r < this.worldSize; r++) out.set(parts[r] as Uint8Array, rowShare(height, this.worldSize, r).start * rowBytes);
    return { frame: out, width, height, bandMs };
  }

  reset(): void {}
}
