/**
 * How a step's work is split across ranks: horizontal tiles (every rank upscales a band of rows
 * of every frame, reading `radius` extra input rows above and below so each output row sees the
 * same input as in the whole frame) or whole frames (every rank upscales some of the frames).
 */

/** The two ways to split a step. */
export const SPLITS = ['tiles', 'frames'] as const;
export type Split = (typeof SPLITS)[number];

/** One rank's band of rows: it owns `[y0, y1)` and reads `[in0, in1)`. */
export interface RowTile {
  y0: number;
  y1: number;
  in0: number;
  in1: number;
}

/**
 * Rank `rank`'s band of `height` input rows out of `worldSize`, with `radius` rows of context
 * on each side (clipped at the frame's edges, where the model pads as it does for the whole frame).
 */
export function rowTile(height: number, worldSize: number, rank: number, radius: number): RowTile {
  const y0 = Math.floor((height * rank) / worldSize);
  const y1 = Math.floor((height * (rank + 1)) / worldSize);
  return { y0, y1, in0: Math.max(0, y0 - radius), in1: Math.min(height, y1 + radius) };
}

/** Rank `rank`'s frames `[f0, f1)` of `n` (a rank may get none when `n < worldSize`). */
export function frameShare(n: number, worldSize: number, rank: number): { f0: number; f1: number } {
  return { f0: Math.floor((n * rank) / worldSize), f1: Math.floor((n * (rank + 1)) / worldSize) };
}
