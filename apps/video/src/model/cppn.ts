/**
 * The network's math that does not depend on the tfjs backend: the prompt code, the per-frame
 * conditioning, the per-frame weights of the pixel network (folded for the fused kernels), and
 * the fixed coordinate features. All of it is plain float64 JavaScript, so every rank computes
 * exactly the same per-frame parameters whatever its backend.
 *
 * The network, per pixel p = (x, y, r) and frame time t, with conditioning c(prompt, t):
 *
 * ```
 * a      = [x, y, r, 1] · Wcoord                                 (fieldUnits)
 * f_j    = amp_j(c) · sin(a_j + speed_j·t + (c · Wphase)_j)       sinusoidal field units
 * h      = tanh(f · (Wmix + hyper(c)) + bmix(c))                   (mixUnits)
 * g      = tanh(h · Whidden + bhidden(c))                          (hiddenUnits)
 * rgb    = sigmoid(g · Wrgb + brgb(c))                             (3)
 * ```
 *
 * How it runs: `sin(a + φ) = sin a · cos φ + cos a · sin φ`, so `[sin a, cos a]` is computed
 * once per pixel at load and the field layer and the mix layer's weights fold into one
 * `(2·fieldUnits × mixUnits)` matrix per frame: the per-pixel work is three matrix products.
 * `tanh(x) = 2·sigmoid(2x) − 1` turns each tanh into a sigmoid that the backends fuse into the
 * matrix product (tfjs-wasm has no fused tanh and its tanh is ~8x slower than a fused sigmoid),
 * with the affine parts folded into the next layer's weights and biases.
 */
import { embedPrompt } from './prompt-embedding.js';
import { type CppnConfig, type LoadedWeights, conditioningDim } from './weights.js';
import { splitmix32 } from './prng.js';

/** Per-frame weights of the pixel network, folded for `sigmoid(x · W + b)` kernels. */
export interface FrameParams {
  /** `[2·fieldUnits, mixUnits]` row-major. */
  mixW: Float32Array;
  /** `[mixUnits]` */
  mixB: Float32Array;
  /** `[hiddenUnits]` */
  hiddenB: Float32Array;
  /** `[3]` */
  rgbB: Float32Array;
}

/** Constant folded weights of the two later layers. */
export interface ConstantParams {
  /** `4 · hidden.w`, `[mixUnits, hiddenUnits]` */
  hiddenW: Float32Array;
  /** `2 · rgb.w`, `[hiddenUnits, 3]` */
  rgbW: Float32Array;
}

function get(w: LoadedWeights, name: string): Float32Array {
  const t = w.tensors.get(name);
  if (!t) throw new Error(`internal: tensor ${name} missing after validation`);
  return t;
}

/** Smooth 0 -> 1 over [0, 1] (zero slope at both ends). */
export function smoothstep(x: number): number {
  const t = Math.min(1, Math.max(0, x));
  return t * t * (3 - 2 * t);
}

/** The backend-independent half of the model. */
export class CppnField {
  readonly config: CppnConfig;
  readonly condDim: number;
  /** Input width of the pixel network: `[sin a, cos a]`. */
  readonly featureDim: number;
  private readonly w: LoadedWeights;
  private readonly seedOffset: Float64Array;
  /** Where the seed puts the start of every rollout on the time axis (seconds). */
  readonly timeOrigin: number;

  constructor(weights: LoadedWeights, seed: number) {
    this.w = weights;
    this.config = weights.config;
    this.condDim = conditioningDim(weights.config);
    this.featureDim = 2 * weights.config.fieldUnits;
    const next = splitmix32(seed ^ 0x5eed5eed);
    const rand = () => next() / 4294967296;
    this.timeOrigin = 600 * rand();
    this.seedOffset = new Float64Array(this.config.promptDim);
    // The seed moves the prompt code a little (same prompt, different seed: related but
    // distinct videos). Uniform in [-0.6, 0.6].
    for (let i = 0; i < this.seedOffset.length; i++) this.seedOffset[i] = 1.2 * rand() - 0.6;
  }

  /** The prompt code: `tanh(embed(prompt) · Wproj + bproj + seedOffset)`. */
  promptCode(prompt: string): Float64Array {
    const { embeddingDim: D, promptDim: P } = this.config;
    const e = embedPrompt(prompt, get(this.w, 'prompt.table'), get(this.w, 'prompt.empty'), D);
    const W = get(this.w, 'prompt.proj.w');
    const b = get(this.w, 'prompt.proj.b');
    const code = new Float64Array(P);
    for (let j = 0; j < P; j++) {
      let s = (b[j] as number) + (this.seedOffset[j] as number);
      for (let d = 0; d < D; d++) s += (e[d] as number) * (W[d * P + j] as number);
      code[j] = Math.tanh(s);
    }
    return code;
  }

  /** Conditioning vector: the prompt code, then `sin` and `cos` of each slow clock at `t`. */
  conditioning(code: Float64Array, t: number): Float64Array {
    const { promptDim: P, timeHarmonics: K } = this.config;
    const freq = get(this.w, 'time.freq');
    const phase = get(this.w, 'time.phase');
    const c = new Float64Array(this.condDim);
    c.set(code.subarray(0, P));
    for (let k = 0; k < K; k++) {
      const a = (freq[k] as number) * t + (phase[k] as number);
      c[P + k] = Math.sin(a);
      c[P + K + k] = Math.cos(a);
    }
    return c;
  }

  /** `out[j] = base[j] + Σ_i c[i] · W[i, j]` for `W` of shape `[c.length, out.length]`. */
  private affine(c: Float64Array, W: Float32Array, base: Float32Array | null, n: number): Float64Array {
    const out = new Float64Array(n);
    for (let j = 0; j < n; j++) out[j] = base ? (base[j] as number) : 0;
    for (let i = 0; i < c.length; i++) {
      const ci = c[i] as number;
      const row = i * n;
      for (let j = 0; j < n; j++) out[j] = (out[j] as number) + ci * (W[row + j] as number);
    }
    return out;
  }

  /** The constant folded weights (see the module comment). */
  constantParams(): ConstantParams {
    const hw = get(this.w, 'hidden.w');
    const rw = get(this.w, 'rgb.w');
    return { hiddenW: hw.map((v) => 4 * v), rgbW: rw.map((v) => 2 * v) };
  }

  /** The folded per-frame weights for prompt code `code` at time `t` (seconds). */
  frameParams(code: Float64Array, t: number): FrameParams {
    const { fieldUnits: F, mixUnits: M, hiddenUnits: H } = this.config;
    const c = this.conditioning(code, t);
    const speed = get(this.w, 'field.speed');
    const phase = this.affine(c, get(this.w, 'field.phase.w'), null, F);
    const ampPre = this.affine(c, get(this.w, 'field.amp.w'), null, F);
    const mix = this.affine(c, get(this.w, 'mix.hyper'), get(this.w, 'mix.w'), F * M);
    const mixB = this.affine(c, get(this.w, 'mix.bias.w'), get(this.w, 'mix.b'), M);
    const hiddenB = this.affine(c, get(this.w, 'hidden.bias.w'), get(this.w, 'hidden.b'), H);
    const rgbB = this.affine(c, get(this.w, 'rgb.bias.w'), get(this.w, 'rgb.b'), 3);
    const hw = get(this.w, 'hidden.w');
    const rw = get(this.w, 'rgb.w');

    const mixW = new Float32Array(2 * F * M);
    for (let j = 0; j < F; j++) {
      const phi = (speed[j] as number) * t + (phase[j] as number);
      const amp = 1 + 0.5 * Math.tanh(ampPre[j] as number);
      const cs = 2 * amp * Math.cos(phi);
      const sn = 2 * amp * Math.sin(phi);
      for (let k = 0; k < M; k++) {
        const wjk = mix[j * M + k] as number;
        mixW[j * M + k] = cs * wjk; // multiplies sin a_j
        mixW[(F + j) * M + k] = sn * wjk; // multiplies cos a_j
      }
    }
    const outMixB = new Float32Array(M);
    for (let k = 0; k < M; k++) outMixB[k] = 2 * (mixB[k] as number);
    const outHiddenB = new Float32Array(H);
    for (let k = 0; k < H; k++) {
      let colsum = 0;
      for (let i = 0; i < M; i++) colsum += hw[i * H + k] as number;
      outHiddenB[k] = 2 * ((hiddenB[k] as number) - colsum);
    }
    const outRgbB = new Float32Array(3);
    for (let k = 0; k < 3; k++) {
      let colsum = 0;
      for (let i = 0; i < H; i++) colsum += rw[i * 3 + k] as number;
      outRgbB[k] = (rgbB[k] as number) - colsum;
    }
    return { mixW, mixB: outMixB, hiddenB: outHiddenB, rgbB: outRgbB };
  }

  /**
   * `[sin a, cos a]` for the pixels of rows `[y0, y1)` of a `width × height` frame, row-major
   * `[(y1 − y0) · width, 2·fieldUnits]`. Coordinates keep the aspect ratio: the shorter side
   * spans [−1, 1].
   */
  coordinateFeatures(width: number, height: number, y0: number, y1: number): Float32Array {
    const F = this.config.fieldUnits;
    const Wc = get(this.w, 'field.coord.w');
    const short = Math.min(width, height);
    const out = new Float32Array((y1 - y0) * width * 2 * F);
    let o = 0;
    for (let yi = y0; yi < y1; yi++) {
      const y = ((2 * (yi + 0.5)) / height - 1) * (height / short);
      for (let xi = 0; xi < width; xi++) {
        const x = ((2 * (xi + 0.5)) / width - 1) * (width / short);
        const r = Math.sqrt(x * x + y * y);
        for (let j = 0; j < F; j++) {
          const a = x * (Wc[j] as number) + y * (Wc[F + j] as number) + r * (Wc[2 * F + j] as number) + (Wc[3 * F + j] as number);
          out[o + j] = Math.sin(a);
          out[o + F + j] = Math.cos(a);
        }
        o += 2 * F;
      }
    }
    return out;
  }
}
