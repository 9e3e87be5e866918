// The model's worker module of the example in docs/runtime.md: a tiny stand-in for a video
// model that runs on CPU ranks. Each call draws `FRAMES_PER_CALL` frames of `size`x`size` RGB
// into rank 0's shared-memory result block (zero-copy, as a real model's output buffer would
// be), every byte of frame n set to n % 256 and its first four bytes holding n, so a test can
// tell exactly which frame it received.
import { DistributedWorker } from '@reactor/distributed';

export const FRAMES_PER_CALL = 4;

/** Thrown by every rank when a rollout has made `args.rolloutFrames` frames. */
export class RolloutExhausted extends Error {
  constructor(message = 'rollout exhausted') {
    super(message);
    this.name = 'RolloutExhausted';
  }
}

export class VideoWorker extends DistributedWorker {
  static moduleUrl = import.meta.url;

  load(args) {
    this.size = args.size ?? 8;
    this.rolloutFrames = args.rolloutFrames ?? Infinity;
    this.made = 0;
  }

  async generate(input) {
    if (this.made >= this.rolloutFrames) throw new RolloutExhausted(`rollout exhausted after ${this.made} frames`);
    await this.comm.barrier();
    const { size } = this;
    const frameBytes = size * size * 3;
    const frames = this.resultArray(Uint8Array, FRAMES_PER_CALL * frameBytes);
    for (let i = 0; i < FRAMES_PER_CALL; i++) {
      const n = this.made + i;
      const frame = frames.subarray(i * frameBytes, (i + 1) * frameBytes);
      frame.fill(n % 256);
      new DataView(frame.buffer, frame.byteOffset, 4).setUint32(0, n, true);
    }
    this.made += FRAMES_PER_CALL;
    return { frames, height: size, width: size, prompt: input.prompt };
  }

  reset() {
    this.made = 0;
  }
}
