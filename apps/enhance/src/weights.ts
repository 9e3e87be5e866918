/**
 * Reads an ESRGAN model (`@upscalerjs/esrgan-{slim,medium,thick}`, `models/x<N>/`) from the
 * installed package at load: `model.json` and its weight shards, each hashed (SHA-256) and
 * checked against the sizes the manifest declares, then handed to tfjs's `loadLayersModel`
 * through an in-process IO handler (no fetch, no network). A missing or corrupt file is a
 * {@link WeightsMissingError} / {@link WeightsCorruptError} that names the file.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type * as tf from '@tensorflow/tfjs-core';
import * as tfl from '@tensorflow/tfjs-layers';
import { PUBLISHED_SHA256 } from './checksums.js';
import { WeightsCorruptError, WeightsMissingError } from './errors.js';
import { registerEsrganLayers } from './layers.js';

/** The three ESRGAN sizes on npm. */
export const MODEL_NAMES = ['slim', 'medium', 'thick'] as const;
export type ModelName = (typeof MODEL_NAMES)[number];

/** What each model is: architecture and the value range its input and output use. */
export const MODEL_FACTS: Readonly<Record<ModelName, { architecture: 'rdn' | 'rrdn'; range: number; convolutions: number }>> = {
  slim: { architecture: 'rdn', range: 255, convolutions: 12 },
  medium: { architecture: 'rdn', range: 255, convolutions: 28 },
  thick: { architecture: 'rrdn', range: 1, convolutions: 154 },
};

/** One file of a model, as read at load. */
export interface ModelFile {
  path: string;
  bytes: number;
  sha256: string;
}

/** A model's files read from disk, ready for {@link loadModel}. */
export interface ModelArtifactsOnDisk {
  model: ModelName;
  scale: number;
  dir: string;
  files: ModelFile[];
  /** SHA-256 over every file's hash, in order: one fingerprint of the model. */
  sha256: string;
  /** Stored weight type (`float32`, or `float16` for a quantized copy). */
  weightDtype: string;
  /** Input rows of context an output row needs (receptive radius, from the topology). */
  radius: number;
  artifacts: tf.io.ModelArtifacts;
}

interface WeightEntry {
  name: string;
  shape: number[];
  dtype: string;
  quantization?: { dtype: string };
}
interface ModelJson {
  modelTopology?: unknown;
  /** Written by `scripts/quantize-weights.mjs` into a quantized copy: the SHA-256 of each shard. */
  reactorShardSha256?: Record<string, string>;
  format?: string;
  generatedBy?: string;
  convertedBy?: string | null;
  weightsManifest?: { paths: string[]; weights: WeightEntry[] }[];
}

const BYTES: Record<string, number> = { float32: 4, int32: 4, float16: 2, uint16: 2, uint8: 1, bool: 1 };

/**
 * The folder of the installed package `@upscalerjs/esrgan-<model>`, found where Node would look
 * for it from `from` (its `package.json` is read, not its entry points: the GPU bundle keeps only
 * the model files).
 * @param from - where to resolve from (default: this module)
 */
export function modelPackageDir(model: ModelName, from: string = import.meta.url): string {
  const pkg = `@upscalerjs/esrgan-${model}`;
  const places = createRequire(from).resolve.paths(pkg) ?? [];
  for (const dir of places) {
    const pj = join(dir, pkg, 'package.json');
    if (existsSync(pj)) return dirname(pj);
  }
  throw new WeightsMissingError(
    `the model package ${pkg} is not installed (looked in ${places.slice(0, 3).join(', ')}${places.length > 3 ? ', ...' : ''}). ` +
      'Run pnpm install in the repository (apps/enhance depends on it).',
  );
}

/** `models/x<scale>` of a model package (where `model.json` lives). */
export function modelDir(model: ModelName, scale: number, root?: string): string {
  return join(root ?? modelPackageDir(model), 'models', `x${scale}`);
}

function sha256(b: Uint8Array): string {
  return createHash('sha256').update(b).digest('hex');
}

function readOrThrow(path: string, model: ModelName, scale: number): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw WeightsMissingError.forFile(path, model, scale, e.code === 'ENOENT' ? 'no such file' : e.message);
  }
}

/**
 * Input rows an output row depends on, at most: the longest chain of convolution radii from the
 * input to the output of the layer graph (a `k`x`k` convolution adds `(k-1)/2`). Counting layers
 * after the upsampling in input rows too over-estimates, which is safe.
 */
export function receptiveRadius(topology: unknown): number {
  const t = topology as { model_config?: { config?: unknown }; config?: unknown };
  const cfg = (t.model_config?.config ?? t.config) as
    | { layers?: { name: string; class_name: string; config: { kernel_size?: number[]; dilation_rate?: number[] }; inbound_nodes?: unknown[][][] }[] }
    | undefined;
  const layers = cfg?.layers;
  if (!Array.isArray(layers)) throw new TypeError('model topology has no layer list');
  const radius = new Map<string, number>();
  for (const l of layers) {
    let base = 0;
    for (const node of l.inbound_nodes ?? []) for (const inbound of node) base = Math.max(base, radius.get(String(inbound[0])) ?? 0);
    let own = 0;
    if (l.class_name === 'Conv2D' || l.class_name === 'DepthwiseConv2D' || l.class_name === 'SeparableConv2D') {
      const k = Math.max(...(l.config.kernel_size ?? [1]));
      const d = Math.max(...(l.config.dilation_rate ?? [1]));
      own = ((k - 1) * d) / 2;
    } else if (
      !['InputLayer', 'Activation', 'Concatenate', 'Add', 'UpSampling2D', 'MultiplyBeta', 'LeakyReLU', 'ReLU', 'PReLU'].includes(l.class_name) &&
      !/^PixelShuffle\d+x$/.test(l.class_name)
    ) {
      throw new TypeError(`layer ${l.name} (${l.class_name}) has no known receptive field; tiles cannot be cut for this model`);
    }
    radius.set(l.name, base + Math.ceil(own));
  }
  return Math.max(0, ...radius.values());
}

/**
 * Reads `model.json` and its shards for `model` x`scale`, hashes every file and checks each
 * shard's size against the manifest. Synchronous file reads: this runs once per model at load.
 * @param root - the package folder (default: the installed package); tests point it at a copy
 * @throws WeightsMissingError (`enhance_weights_missing`) naming a file that cannot be read
 * @throws WeightsCorruptError (`enhance_weights_corrupt`) naming a file that is wrong
 */
export function readModelFiles(model: ModelName, scale: number, root?: string): ModelArtifactsOnDisk {
  const dir = modelDir(model, scale, root);
  const jsonPath = join(dir, 'model.json');
  const jsonBytes = readOrThrow(jsonPath, model, scale);
  let json: ModelJson;
  try {
    json = JSON.parse(jsonBytes.toString('utf8')) as ModelJson;
  } catch (err) {
    throw WeightsCorruptError.forFile(jsonPath, model, scale, `not valid JSON (${(err as Error).message})`, err);
  }
  if (typeof json !== 'object' || json === null || !json.modelTopology || !Array.isArray(json.weightsManifest)) {
    throw WeightsCorruptError.forFile(jsonPath, model, scale, 'not a tfjs layers model (modelTopology or weightsManifest missing)');
  }
  let radius: number;
  try {
    radius = receptiveRadius(json.modelTopology);
  } catch (err) {
    throw WeightsCorruptError.forFile(jsonPath, model, scale, (err as Error).message, err);
  }
  const files: ModelFile[] = [{ path: jsonPath, bytes: jsonBytes.length, sha256: sha256(jsonBytes) }];
  // The published files' hashes are known; a quantized copy names its shards' hashes itself.
  const published = PUBLISHED_SHA256[`${model}/x${scale}/model.json`];
  const own = json.reactorShardSha256;
  const expectedHash = (file: string): string | undefined =>
    own ? own[file] : published === (files[0] as ModelFile).sha256 ? PUBLISHED_SHA256[`${model}/x${scale}/${file}`] : undefined;
  if (!own && published !== undefined && published !== (files[0] as ModelFile).sha256) {
    throw WeightsCorruptError.forFile(jsonPath, model, scale, `its SHA-256 is ${(files[0] as ModelFile).sha256}, the published file's is ${published}`);
  }
  const specs: tf.io.WeightsManifestEntry[] = [];
  const shards: Buffer[] = [];
  const dtypes = new Set<string>();
  for (const group of json.weightsManifest) {
    const groupShards = group.paths.map((p) => {
      const path = join(dir, p);
      const b = readOrThrow(path, model, scale);
      const hash = sha256(b);
      files.push({ path, bytes: b.length, sha256: hash });
      return { path, b, hash, file: p };
    });
    let expected = 0;
    for (const w of group.weights) {
      const dt = w.quantization?.dtype ?? w.dtype;
      dtypes.add(dt);
      const per = BYTES[dt];
      if (per === undefined) throw WeightsCorruptError.forFile(jsonPath, model, scale, `weight ${w.name} has an unknown dtype ${dt}`);
      expected += w.shape.reduce((a, b) => a * b, 1) * per;
      specs.push(w as tf.io.WeightsManifestEntry);
    }
    const got = groupShards.reduce((a, s) => a + s.b.length, 0);
    if (got !== expected) {
      // Name the shard at fault: shards are filled in order, each full but the last.
      const full = groupShards[0]?.b.length ?? 0;
      let culprit = groupShards[groupShards.length - 1]?.path ?? jsonPath;
      for (let i = 0; i < groupShards.length - 1; i++)
        if ((groupShards[i] as { b: Buffer }).b.length !== full) culprit = (groupShards[i] as { path: string }).path;
      throw WeightsCorruptError.forFile(culprit, model, scale, `the weights need ${expected} bytes but the shards of ${jsonPath} hold ${got}`);
    }
    for (const sh of groupShards) {
      const want = expectedHash(sh.file);
      if (want !== undefined && want !== sh.hash) throw WeightsCorruptError.forFile(sh.path, model, scale, `its SHA-256 is ${sh.hash}, expected ${want}`);
    }
    shards.push(...groupShards.map((s) => s.b));
  }
  const all = Buffer.concat(shards);
  const weightData = all.buffer.slice(all.byteOffset, all.byteOffset + all.byteLength);
  const fingerprint = createHash('sha256');
  for (const f of files) fingerprint.update(f.sha256);
  return {
    model,
    scale,
    dir,
    files,
    sha256: fingerprint.digest('hex'),
    weightDtype: [...dtypes].join(','),
    radius,
    artifacts: {
      modelTopology: json.modelTopology as tf.io.ModelArtifacts['modelTopology'],
      weightSpecs: specs,
      weightData,
      format: json.format ?? 'layers-model',
      generatedBy: json.generatedBy ?? '',
      convertedBy: json.convertedBy ?? null,
    },
  };
}

/**
 * Builds the tfjs model from files read by {@link readModelFiles} (the custom layers of the
 * thick model registered first).
 * @throws WeightsCorruptError (`enhance_weights_corrupt`) when tfjs refuses the topology or weights
 */
export async function loadModel(files: ModelArtifactsOnDisk): Promise<tfl.LayersModel> {
  registerEsrganLayers();
  const handler: tf.io.IOHandler = { load: () => Promise.resolve(files.artifacts) };
  try {
    return await tfl.loadLayersModel(handler);
  } catch (err) {
    const jsonPath = files.files[0]?.path ?? files.dir;
    throw WeightsCorruptError.forFile(jsonPath, files.model, files.scale, `tfjs could not build the model: ${(err as Error).message}`, err);
  }
}
