/**
 * Float16 copies of a model's weights, for the GPU bundle (which must stay under 64 MiB with
 * the thick model's 28 MB of float32 weights): every weight is stored as IEEE half precision
 * (round to nearest, ties to even) and tfjs expands it back to float32 at load (`quantization:
 * { dtype: 'float16' }` in the manifest). The copy's `model.json` records the SHA-256 of its
 * shard, so a damaged copy is found at load like a damaged original.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The IEEE 754 half-precision bits of `value` (rounded to nearest, ties to even). */
export function float16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0] as number;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    if (rem > mid || (rem === mid && half & 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  // A carry out of the mantissa rounds up into the exponent, which is what IEEE rounding does.
  if (rem > 0x1000 || (rem === 0x1000 && half & 1)) half++;
  return sign | half;
}

interface Manifest {
  weightsManifest: { paths: string[]; weights: { name: string; shape: number[]; dtype: string; quantization?: unknown }[] }[];
  [key: string]: unknown;
}

/**
 * Writes a float16 copy of the float32 model in `srcDir` (`model.json` + shards) to `dstDir`:
 * one shard `group1-shard1of1.bin`, the same topology.
 * @returns the bytes written and the shard's SHA-256
 * @throws Error when a weight is not float32
 */
export function writeFloat16Copy(srcDir: string, dstDir: string): { bytes: number; sha256: string } {
  const json = JSON.parse(readFileSync(join(srcDir, 'model.json'), 'utf8')) as Manifest;
  const weights = json.weightsManifest.flatMap((g) => g.weights);
  const data = Buffer.concat(json.weightsManifest.flatMap((g) => g.paths.map((p) => readFileSync(join(srcDir, p)))));
  const src = new Float32Array(data.buffer, data.byteOffset, data.byteLength / 4);
  const out = new Uint16Array(src.length);
  for (const w of weights)
    if (w.dtype !== 'float32' || w.quantization) throw new Error(`weight ${w.name} is ${w.dtype}${w.quantization ? ' (quantized)' : ''}, not plain float32`);
  for (let i = 0; i < src.length; i++) out[i] = float16Bits(src[i] as number);
  const bytes = Buffer.from(out.buffer, out.byteOffset, out.byteLength);
  const shard = 'group1-shard1of1.bin';
  const sha256 = createHash('sha256').update(bytes).digest('hex');
  const copy: Manifest = {
    ...json,
    weightsManifest: [{ paths: [shard], weights: weights.map((w) => ({ ...w, quantization: { dtype: 'float16' } })) }],
    reactorShardSha256: { [shard]: sha256 },
  };
  mkdirSync(dstDir, { recursive: true });
  writeFileSync(join(dstDir, shard), bytes);
  writeFileSync(join(dstDir, 'model.json'), JSON.stringify(copy));
  return { bytes: bytes.length, sha256 };
}
