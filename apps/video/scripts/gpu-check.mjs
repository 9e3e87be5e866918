#!/usr/bin/env node
// Checks the video model's WebGPU path on a machine with a GPU (the test suite runs without
// one): renders on webgpu and wasm and compares them, times both, and checks that 1 and 2
// ranks give byte-identical chunks through a real DistributedRunner on each backend. Runs the
// compiled dist/ (build first). Exits 1 when a check fails.
//   node apps/video/scripts/gpu-check.mjs
// On the H200 machines: unpack libvulkan1 + the glvnd libraries (libglvnd0 libgl1 libglx0
// libegl1 libopengl0 libgles2; the NVIDIA ICD needs them), run ldconfig, and set
// VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json.
import { fileURLToPath } from 'node:url';
import { DistributedRunner } from '@reactor/distributed';
import { ParallelVideoModel } from '../dist/model/index.js';
import { VideoWorker } from '../dist/video-worker.js';

const weightsRoot = fileURLToPath(new URL('../weights', import.meta.url));
const log = (...a) => console.log(...a);
const same = (a, b) => a.length === b.length && Buffer.from(a).equals(Buffer.from(b));
function diff(a, b) {
  let s = 0;
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i] - b[i]);
    s += d;
    if (d > m) m = d;
  }
  return { mean: s / a.length, max: m };
}
let failed = false;
const check = (ok, what) => {
  log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failed = true;
};

const opts = { weightsRoot, width: 256, height: 256, framesPerChunk: 4, env: {} };
const prompt = 'A walk through a forest.';
async function timed(backend) {
  const m = new ParallelVideoModel({ ...opts, backend });
  const t0 = performance.now();
  await m.load();
  const loadMs = performance.now() - t0;
  const first = (await m.generate({ prompt })).frames;
  const t1 = performance.now();
  let n = 0;
  for (let i = 0; i < 20; i++) n += (await m.generate({ prompt })).n;
  log(`${backend}: load ${loadMs.toFixed(0)} ms, ${((performance.now() - t1) / n).toFixed(2)} ms/frame (model alone, readback included)`);
  log(`${backend}: info ${JSON.stringify(m.info())}`);
  return first;
}
const onGpu = await timed('webgpu');
const onWasm = await timed('wasm');
const d = diff(onGpu, onWasm);
check(d.max <= 2, `webgpu vs wasm frames: mean ${d.mean.toFixed(5)}, max ${d.max} levels`);

const runnerLog = { debug() {}, info() {}, warn: (m) => log(`  [runner] ${m}`), error: (m) => log(`  [runner] ${m}`), child: () => runnerLog };
for (const backend of ['webgpu', 'wasm']) {
  const make = (worldSize) =>
    new DistributedRunner(VideoWorker, {
      worldSize,
      loadArgs: { ...opts, width: 64, height: 64, framesPerChunk: 3, backend },
      logger: runnerLog,
    });
  const one = make(1);
  const two = make(2);
  try {
    await Promise.all([one.start(), two.start()]);
    let equal = true;
    for (const p of [prompt, prompt, 'neon city at night']) {
      const [a, b] = [await one.generate({ prompt: p }), await two.generate({ prompt: p })];
      equal &&= same(a.frames, b.frames);
    }
    const r = await two.generate({ prompt });
    check(equal, `${backend}: 1 vs 2 ranks byte-identical; ranks ran on ${JSON.stringify(r.backends)}`);
  } finally {
    await Promise.all([one.shutdown(), two.shutdown()]);
  }
}
process.exit(failed ? 1 : 0);
