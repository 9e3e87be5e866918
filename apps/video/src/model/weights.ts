/**
 * Loads and checks the model's weights folder: `manifest.json` (format, sizes, tensor table,
 * SHA-256 of the weights file) and the little-endian float32 weights file it names.
 */
import { createHash } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { WeightsInvalidError, WeightsNotFoundError } from './errors.js';

/** The manifest's `format` this loader reads. */
export const WEIGHTS_FORMAT = 'reactor-video-cppn';
/** The manifest's `version` this loader reads. */
export const WEIGHTS_FORMAT_VERSION = 1;
/** Name of the manifest inside the weights folder. */
export const MANIFEST_FILE = 'manifest.json';

/** Architecture sizes recorded in the manifest. */
export interface CppnConfig {
  /** Buckets of the hashed character n-gram prompt embedding table. */
  embeddingBuckets: number;
  /** Width of one embedding row. */
  embeddingDim: number;
  /** Width of the prompt code after the projection. */
  promptDim: number;
  /** Slow sin/cos clocks that make the conditioning drift over time. */
  timeHarmonics: number;
  /** Sinusoidal units over pixel coordinates. */
  fieldUnits: number;
  /** Units of the first tanh layer (weights modulated per frame). */
  mixUnits: number;
  /** Units of the second tanh layer. */
  hiddenUnits: number;
}

/** Loaded, checked weights. */
export interface LoadedWeights {
  /** Absolute path of the weights folder. */
  root: string;
  config: CppnConfig;
  /** SHA-256 of the weights file (hex), as checked. */
  sha256: string;
  /** Seed the generator used (informational). */
  seed: number;
  /** Every tensor by name, row-major. */
  tensors: ReadonlyMap<string, Float32Array>;
  /** Number of float parameters. */
  parameterCount: number;
}

const CONFIG_KEYS: readonly (keyof CppnConfig)[] = ['embeddingBuckets', 'embeddingDim', 'promptDim', 'timeHarmonics', 'fieldUnits', 'mixUnits', 'hiddenUnits'];

/** Width of the per-frame conditioning vector: prompt code plus a sin and a cos per clock. */
export function conditioningDim(c: CppnConfig): number {
  return c.promptDim + 2 * c.timeHarmonics;
}

/** The shape every tensor must have for `config`. */
export function expectedShapes(c: CppnConfig): Record<string, number[]> {
  const cond = conditioningDim(c);
  return {
    'prompt.table': [c.embeddingBuckets, c.embeddingDim],
    'prompt.empty': [c.embeddingDim],
    'prompt.proj.w': [c.embeddingDim, c.promptDim],
    'prompt.proj.b': [c.promptDim],
    'time.freq': [c.timeHarmonics],
    'time.phase': [c.timeHarmonics],
    'field.coord.w': [4, c.fieldUnits],
    'field.speed': [c.fieldUnits],
    'field.phase.w': [cond, c.fieldUnits],
    'field.amp.w': [cond, c.fieldUnits],
    'mix.w': [c.fieldUnits, c.mixUnits],
    'mix.b': [c.mixUnits],
    'mix.hyper': [cond, c.fieldUnits * c.mixUnits],
    'mix.bias.w': [cond, c.mixUnits],
    'hidden.w': [c.mixUnits, c.hiddenUnits],
    'hidden.b': [c.hiddenUnits],
    'hidden.bias.w': [cond, c.hiddenUnits],
    'rgb.w': [c.hiddenUnits, 3],
    'rgb.b': [3],
    'rgb.bias.w': [cond, 3],
  };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isPositiveInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v > 0;
}

/**
 * Reads and verifies the weights in `weightsRoot`.
 * @param weightsRoot - folder holding `manifest.json` and the weights file it names
 * @throws WeightsNotFoundError (`weights_not_found`) when the folder or a file is missing
 * @throws WeightsInvalidError (`weights_invalid`) when a file is malformed, truncated or modified
 * @example
 * ```ts
 * const w = await loadWeights('apps/video/weights');
 * w.tensors.get('rgb.w'); // Float32Array(48)
 * ```
 */
export async function loadWeights(weightsRoot: string): Promise<LoadedWeights> {
  if (typeof weightsRoot !== 'string' || weightsRoot.length === 0) {
    throw new TypeError(`options.weightsRoot must be a non-empty path string, got ${JSON.stringify(weightsRoot)}`);
  }
  const root = resolve(weightsRoot);
  try {
    const s = await stat(root);
    if (!s.isDirectory()) throw new WeightsNotFoundError(root, 'weightsRoot is not a folder:');
  } catch (e) {
    if (e instanceof WeightsNotFoundError) throw e;
    throw new WeightsNotFoundError(root, 'no folder at', { cause: e });
  }
  const manifestPath = join(root, MANIFEST_FILE);
  let text: string;
  try {
    text = await readFile(manifestPath, 'utf8');
  } catch (e) {
    throw new WeightsNotFoundError(manifestPath, 'cannot read', { cause: e });
  }
  let manifest: unknown;
  try {
    manifest = JSON.parse(text);
  } catch (e) {
    throw new WeightsInvalidError(manifestPath, `it is not valid JSON (${(e as Error).message})`, { cause: e });
  }
  const bad = (problem: string): never => {
    throw new WeightsInvalidError(manifestPath, problem);
  };
  if (!isRecord(manifest)) return bad('the manifest is not a JSON object');
  if (manifest.format !== WEIGHTS_FORMAT) bad(`format is ${JSON.stringify(manifest.format)}, expected "${WEIGHTS_FORMAT}"`);
  if (manifest.version !== WEIGHTS_FORMAT_VERSION) bad(`version is ${JSON.stringify(manifest.version)}, this model reads version ${WEIGHTS_FORMAT_VERSION}`);
  const rawConfig = manifest.config;
  if (!isRecord(rawConfig)) return bad('"config" is missing');
  const config = {} as CppnConfig;
  for (const k of CONFIG_KEYS) {
    const v = rawConfig[k];
    if (!isPositiveInt(v)) bad(`config.${k} must be a positive integer, got ${JSON.stringify(v)}`);
    config[k] = v as number;
  }
  const file = manifest.weightsFile;
  if (typeof file !== 'string' || file.length === 0 || file.includes('/') || file.includes('\\')) {
    return bad(`weightsFile must be a file name inside the weights folder, got ${JSON.stringify(file)}`);
  }
  if (!isPositiveInt(manifest.byteLength)) return bad('byteLength must be a positive integer');
  if (typeof manifest.sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(manifest.sha256)) return bad('sha256 must be 64 hex digits');
  if (!Array.isArray(manifest.tensors)) return bad('"tensors" must be an array');

  const binPath = join(root, file);
  let bin: Buffer;
  try {
    bin = await readFile(binPath);
  } catch (e) {
    throw new WeightsNotFoundError(binPath, 'cannot read the weights file', { cause: e });
  }
  if (bin.byteLength !== manifest.byteLength) {
    throw new WeightsInvalidError(binPath, `the file is ${bin.byteLength} bytes but manifest.json says ${manifest.byteLength} (truncated or replaced)`);
  }
  const sha256 = createHash('sha256').update(bin).digest('hex');
  if (sha256 !== manifest.sha256) {
    throw new WeightsInvalidError(binPath, `its SHA-256 is ${sha256} but manifest.json says ${manifest.sha256} (the file was modified)`);
  }

  const shapes = expectedShapes(config);
  const view = new DataView(bin.buffer, bin.byteOffset, bin.byteLength);
  const tensors = new Map<string, Float32Array>();
  let parameterCount = 0;
  for (const entry of manifest.tensors as unknown[]) {
    if (!isRecord(entry) || typeof entry.name !== 'string') return bad('every tensor entry needs a "name"');
    const name = entry.name;
    const want = shapes[name];
    if (!want) continue; // tensors this version does not use are allowed (forward compatible)
    const shape = entry.shape;
    if (!Array.isArray(shape) || shape.length !== want.length || shape.some((d, i) => d !== want[i])) {
      bad(`tensor ${name} has shape ${JSON.stringify(shape)}, expected [${want.join(', ')}] for this config`);
    }
    if (entry.dtype !== 'float32') bad(`tensor ${name} has dtype ${JSON.stringify(entry.dtype)}, expected "float32"`);
    const offset = entry.byteOffset;
    const count = want.reduce((a, b) => a * b, 1);
    if (typeof offset !== 'number' || !Number.isInteger(offset) || offset < 0 || offset % 4 !== 0 || offset + 4 * count > bin.byteLength) {
      bad(`tensor ${name} has byteOffset ${JSON.stringify(offset)}, outside the ${bin.byteLength}-byte weights file`);
    }
    const data = new Float32Array(count);
    for (let i = 0; i < count; i++) data[i] = view.getFloat32((offset as number) + 4 * i, true);
    for (let i = 0; i < count; i++) {
      if (!Number.isFinite(data[i])) bad(`tensor ${name} holds a non-finite value at index ${i}`);
    }
    tensors.set(name, data);
    parameterCount += count;
  }
  const missing = Object.keys(shapes).filter((n) => !tensors.has(n));
  if (missing.length > 0) bad(`tensor${missing.length > 1 ? 's' : ''} ${missing.join(', ')} missing from the tensor table`);
  return { root, config, sha256, seed: typeof manifest.seed === 'number' ? manifest.seed : 0, tensors, parameterCount };
}
