#!/usr/bin/env node
// Writes a float16 copy of an ESRGAN model folder (used by scripts/bundle/make.sh for the thick
// model, whose float32 weights would not fit the 64 MiB bundle):
//   node apps/enhance/scripts/quantize-weights.mjs <models/x4 folder> <destination folder>
import { writeFloat16Copy } from '../dist/quantize.js';

const [src, dst] = process.argv.slice(2);
if (!src || !dst) {
  console.error('usage: quantize-weights.mjs <source model folder> <destination folder>');
  process.exit(2);
}
const { bytes, sha256 } = writeFloat16Copy(src, dst);
console.error(`[quantize] ${src} -> ${dst}: ${(bytes / 2 ** 20).toFixed(1)} MiB float16, sha256 ${sha256}`);
