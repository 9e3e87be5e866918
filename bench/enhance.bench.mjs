#!/usr/bin/env node
// enhance.fps on CPU (wasm ranks): the enhance app's worker on a DistributedRunner, slim x4 at
// 256x144 output (the CPU default), 1 and 2 ranks, tiles and frames. One JSON object per line.
// ENHANCE_BENCH_SECONDS (default 6) per configuration. The GPU figures: scripts/gpu/enhance.sh.
import { loadavg } from 'node:os';
import { DistributedRunner } from '../packages/distributed/dist/index.js';
import { silentLogger } from '../packages/log/dist/index.js';
import { EnhanceWorker } from '../apps/enhance/dist/enhance-worker.js';
import { sceneFrames } from '../apps/enhance/dist/source.js';

const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const seconds = Number(process.env.ENHANCE_BENCH_SECONDS ?? 6);
const [W, H, n, scale, model] = [64, 36, 2, 4, 'slim'];
for (const [worldSize, split] of [
  [1, 'tiles'],
  [2, 'tiles'],
  [2, 'frames'],
]) {
  const runner = new DistributedRunner(EnhanceWorker, {
    worldSize,
    devices: 'cpu',
    logger: silentLogger,
    callTimeoutMs: 120_000,
    loadArgs: { model, scale, backend: 'wasm', warmup: { n: 1, width: W, height: H } },
  });
  await runner.start();
  try {
    let frame = 0;
    const step = () => runner.generate({ frames: sceneFrames(frame, n, W, H), n, width: W, height: H, model, scale, split, sideBySide: false });
    await step();
    const t0 = performance.now();
    let frames = 0;
    while (performance.now() - t0 < seconds * 1000) {
      frames += (await step()).n;
      frame += n;
    }
    const s = (performance.now() - t0) / 1000;
    emit({
      bench: 'enhance.fps',
      backend: 'wasm',
      model,
      scale,
      worldSize,
      split,
      outputWidth: W * scale,
      outputHeight: H * scale,
      framesPerStep: n,
      fps: Math.round((frames / s) * 100) / 100,
      loadavg: loadavg()[0],
    });
  } finally {
    await runner.shutdown();
  }
}
