/**
 * The one seeded PRNG of the video model: splitmix32, integer arithmetic only, so every
 * machine draws the same numbers. The model uses it for seed-derived offsets; the weights
 * generator (`scripts/generate-weights.mjs`, through `dist/`) seeds its sfc32 stream with it.
 */

/** A splitmix32 stream from `seed`: each call returns the next unsigned 32-bit integer. */
export function splitmix32(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
}
