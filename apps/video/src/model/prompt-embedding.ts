/**
 * Prompt -> deterministic text embedding: hashed character trigrams, whole words and word
 * pairs, each looked up (with a hashed sign) in the weights' embedding table and summed.
 * Similar prompts share n-grams and so get similar embeddings; nothing depends on a
 * vocabulary, so any text (any script, typos included) has an embedding.
 */

/** One hashed feature of a prompt: a table row and a sign. */
export interface PromptFeature {
  bucket: number;
  sign: 1 | -1;
  weight: number;
}

/** Lower-cases, applies Unicode NFKC, keeps letters and digits, and collapses whitespace. */
export function normalizePrompt(text: string): string {
  return text
    .normalize('NFKC')
    .toLowerCase()
    .replace(/[^\p{L}\p{N}]+/gu, ' ')
    .trim();
}

/** 32-bit FNV-1a over the UTF-16 code units of `s`. */
export function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  // Final avalanche so that the low bits (the bucket) depend on every character.
  h ^= h >>> 15;
  h = Math.imul(h, 0x2c1b3c6d) >>> 0;
  h ^= h >>> 12;
  return h >>> 0;
}

/** The hashed features of `prompt` for a table of `buckets` rows. Empty for an empty prompt. */
export function promptFeatures(prompt: string, buckets: number): PromptFeature[] {
  const words = normalizePrompt(prompt)
    .split(' ')
    .filter((w) => w.length > 0);
  const out: PromptFeature[] = [];
  const push = (key: string, weight: number): void => {
    const h = fnv1a(key);
    out.push({ bucket: h % buckets, sign: h & 0x80000000 ? -1 : 1, weight });
  };
  for (let i = 0; i < words.length; i++) {
    const w = words[i] as string;
    push(`w:${w}`, 1);
    const padded = `<${w}>`;
    for (let j = 0; j + 3 <= padded.length; j++) push(`c:${padded.slice(j, j + 3)}`, 0.5);
    if (i + 1 < words.length) push(`b:${w} ${words[i + 1] as string}`, 0.7);
  }
  return out;
}

/**
 * The embedding of `prompt`: the signed, weighted sum of its features' table rows, scaled to
 * norm `sqrt(dim)` (entries of about unit size whatever the prompt's length). An empty prompt
 * uses `empty` instead.
 * @param table - row-major `[buckets, dim]`
 * @param empty - the `[dim]` vector used for an empty prompt
 */
export function embedPrompt(prompt: string, table: Float32Array, empty: Float32Array, dim: number): Float64Array {
  const buckets = table.length / dim;
  const e = new Float64Array(dim);
  const features = promptFeatures(prompt, buckets);
  if (features.length === 0) {
    for (let d = 0; d < dim; d++) e[d] = empty[d] as number;
  } else {
    for (const f of features) {
      const row = f.bucket * dim;
      for (let d = 0; d < dim; d++) e[d] = (e[d] as number) + f.sign * f.weight * (table[row + d] as number);
    }
  }
  let norm = 0;
  for (let d = 0; d < dim; d++) norm += (e[d] as number) ** 2;
  norm = Math.sqrt(norm);
  const scale = norm > 1e-12 ? Math.sqrt(dim) / norm : 0;
  for (let d = 0; d < dim; d++) e[d] = (e[d] as number) * scale;
  return e;
}
