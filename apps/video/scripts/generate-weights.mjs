#!/usr/bin/env node
// Writes the sample video model's weights (apps/video/weights/) from a fixed seed, so the
// committed files can be rebuilt byte for byte: `node apps/video/scripts/generate-weights.mjs
// [outDir]`. The weights are not trained: like every compositional pattern-producing network
// (CPPN) used for art, the patterns come from random weights drawn at hand-tuned scales. What
// each tensor does is described in docs/video-model.md.
//
// Determinism: a 32-bit PRNG (sfc32 seeded through splitmix32) and Box-Muller normals use only
// integer arithmetic, Math.log, Math.sqrt and Math.cos/sin, which V8 implements identically on
// every platform (fdlibm ports), so every machine writes the same bytes.
import { createHash } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
// The model's own splitmix32 (one implementation): run `pnpm build` before this script.
import { splitmix32 } from '../dist/model/prng.js';

export const FORMAT = 'reactor-video-cppn';
export const FORMAT_VERSION = 1;
export const SEED = 20261129;
export const WEIGHTS_FILE = 'cppn-v1.bin';

/** Architecture sizes; the model reads them back from the manifest and checks every shape. */
export const CONFIG = Object.freeze({
  embeddingBuckets: 2048, // hashed character n-gram buckets of the prompt embedding table
  embeddingDim: 16, // width of one embedding row
  promptDim: 24, // the prompt code after the learned projection
  timeHarmonics: 4, // slow sin/cos clocks that make the conditioning drift over time
  fieldUnits: 16, // sinusoidal units over pixel coordinates (x, y, r, 1)
  mixUnits: 32, // first tanh layer (its weights are modulated per frame by a hypernetwork)
  hiddenUnits: 16, // second tanh layer
});

function sfc32(seed) {
  const init = splitmix32(seed);
  let a = init(),
    b = init(),
    c = init(),
    d = init();
  const next = () => {
    const t = (((a + b) >>> 0) + d) >>> 0;
    d = (d + 1) >>> 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) >>> 0;
    c = ((c << 21) | (c >>> 11)) >>> 0;
    c = (c + t) >>> 0;
    return t;
  };
  for (let i = 0; i < 16; i++) next();
  return next;
}

/** Builds every tensor of the model, in file order, from `seed`. */
export function buildTensors(seed = SEED) {
  const next = sfc32(seed);
  const uniform = () => (next() + 0.5) / 4294967296; // (0, 1), never 0
  let spare = null;
  const normal = () => {
    if (spare !== null) {
      const v = spare;
      spare = null;
      return v;
    }
    const r = Math.sqrt(-2 * Math.log(uniform()));
    const th = 2 * Math.PI * uniform();
    spare = r * Math.sin(th);
    return r * Math.cos(th);
  };
  const C = CONFIG;
  const cond = C.promptDim + 2 * C.timeHarmonics;
  const tensors = [];
  const add = (name, shape, fill) => {
    const n = shape.reduce((a, b) => a * b, 1);
    const data = new Float32Array(n);
    for (let i = 0; i < n; i++) data[i] = fill(i);
    tensors.push({ name, shape, data });
  };
  const gauss =
    (std, mean = 0) =>
    () =>
      mean + std * normal();
  const signedRange = (lo, hi) => () => (uniform() < 0.5 ? -1 : 1) * (lo + (hi - lo) * uniform());

  // Prompt: hashed n-gram table and the code used for an empty prompt, then a learned-style
  // projection (random here) into the prompt code.
  add('prompt.table', [C.embeddingBuckets, C.embeddingDim], gauss(1));
  add('prompt.empty', [C.embeddingDim], gauss(1));
  add('prompt.proj.w', [C.embeddingDim, C.promptDim], gauss(1.6 / Math.sqrt(C.embeddingDim)));
  add('prompt.proj.b', [C.promptDim], gauss(0.2));
  // Clocks: angular speeds (per second of video) and phases of the slow drift.
  add('time.freq', [C.timeHarmonics], () => 0.12 + 0.5 * uniform());
  add('time.phase', [C.timeHarmonics], () => 2 * Math.PI * uniform());
  // Field: spatial frequencies over (x, y, r, 1), phase speeds, and how the conditioning
  // moves the phases and amplitudes of the sinusoidal units.
  add('field.coord.w', [4, C.fieldUnits], (i) => (i >= 3 * C.fieldUnits ? 2 * Math.PI * uniform() : 3.0 * normal()));
  add('field.speed', [C.fieldUnits], signedRange(0.4, 1.6));
  add('field.phase.w', [cond, C.fieldUnits], gauss(2.2 / Math.sqrt(cond)));
  add('field.amp.w', [cond, C.fieldUnits], gauss(1.2 / Math.sqrt(cond)));
  // Mix layer (tanh): base weights, a hypernetwork that adds conditioning-dependent weights,
  // and a conditioning-dependent bias.
  add('mix.w', [C.fieldUnits, C.mixUnits], gauss(1.7 / Math.sqrt(C.fieldUnits)));
  add('mix.b', [C.mixUnits], gauss(0.3));
  add('mix.hyper', [cond, C.fieldUnits * C.mixUnits], gauss(1.1 / Math.sqrt(cond * C.fieldUnits)));
  add('mix.bias.w', [cond, C.mixUnits], gauss(0.8 / Math.sqrt(cond)));
  // Hidden layer (tanh).
  add('hidden.w', [C.mixUnits, C.hiddenUnits], gauss(2.1 / Math.sqrt(C.mixUnits)));
  add('hidden.b', [C.hiddenUnits], gauss(0.2));
  add('hidden.bias.w', [cond, C.hiddenUnits], gauss(0.8 / Math.sqrt(cond)));
  // RGB head (sigmoid).
  add('rgb.w', [C.hiddenUnits, 3], gauss(2.5 / Math.sqrt(C.hiddenUnits)));
  add('rgb.b', [3], gauss(0.1));
  add('rgb.bias.w', [cond, 3], gauss(1.4 / Math.sqrt(cond)));
  return tensors;
}

/** Writes `manifest.json` and the weights file into `outDir`; returns the manifest. */
export function writeWeights(outDir, seed = SEED) {
  const tensors = buildTensors(seed);
  const total = tensors.reduce((n, t) => n + t.data.byteLength, 0);
  const bin = Buffer.alloc(total);
  let offset = 0;
  const entries = [];
  for (const t of tensors) {
    for (let i = 0; i < t.data.length; i++) bin.writeFloatLE(t.data[i], offset + 4 * i);
    entries.push({ name: t.name, shape: t.shape, dtype: 'float32', byteOffset: offset });
    offset += t.data.byteLength;
  }
  const manifest = {
    format: FORMAT,
    version: FORMAT_VERSION,
    description: 'Prompt-conditioned CPPN for the reactor sample video app (random weights from a fixed seed).',
    generator: 'apps/video/scripts/generate-weights.mjs',
    seed,
    config: CONFIG,
    weightsFile: WEIGHTS_FILE,
    byteLength: total,
    sha256: createHash('sha256').update(bin).digest('hex'),
    tensors: entries,
  };
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, WEIGHTS_FILE), bin);
  writeFileSync(join(outDir, 'manifest.json'), JSON.stringify(manifest, null, 2) + '\n');
  return manifest;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const here = dirname(fileURLToPath(import.meta.url));
  const outDir = resolve(process.argv[2] ?? join(here, '..', 'weights'));
  const m = writeWeights(outDir);
  console.log(`wrote ${m.tensors.length} tensors, ${m.byteLength} bytes, sha256 ${m.sha256} to ${outDir}`);
}
