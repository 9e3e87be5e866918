// Worker of bench/runner.bench.mjs: rank 0 returns a ready payload of the asked size (reused
// across steps, as a model's output buffer would be); other ranks return nothing.
import { DistributedWorker } from '../packages/distributed/dist/index.js';

export class BenchWorker extends DistributedWorker {
  static moduleUrl = import.meta.url;
  load() {
    this.payload = null;
  }
  generate(input) {
    if (input.hang) return new Promise(() => {});
    if (!this.isLeader) return null;
    if (!this.payload || this.payload.byteLength !== input.payloadBytes) this.payload = new Uint8Array(input.payloadBytes);
    return { frames: this.payload };
  }
  reset() {}
}
