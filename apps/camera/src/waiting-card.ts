/**
 * The frame the camera app streams while no camera publishes: "WAITING FOR CAMERA" in a 5x7
 * bitmap font over a dark background, with a bar that sweeps across so a viewer sees the
 * stream is live. Drawn in the app process (no rank involved).
 */

/** 5x7 glyphs, one 5-bit row each, top to bottom (bit 4 is the leftmost pixel). */
const GLYPHS: Record<string, readonly number[]> = {
  ' ': [0, 0, 0, 0, 0, 0, 0],
  A: [0x0e, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11],
  B: [0x1e, 0x11, 0x11, 0x1e, 0x11, 0x11, 0x1e],
  C: [0x0e, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0e],
  E: [0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x1f],
  F: [0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x10],
  G: [0x0e, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0f],
  H: [0x11, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11],
  I: [0x0e, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e],
  K: [0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11],
  L: [0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1f],
  M: [0x11, 0x1b, 0x15, 0x15, 0x11, 0x11, 0x11],
  N: [0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11],
  O: [0x0e, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e],
  P: [0x1e, 0x11, 0x11, 0x1e, 0x10, 0x10, 0x10],
  R: [0x1e, 0x11, 0x11, 0x1e, 0x14, 0x12, 0x11],
  S: [0x0f, 0x10, 0x10, 0x0e, 0x01, 0x01, 0x1e],
  T: [0x1f, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04],
  U: [0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e],
  W: [0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0a],
};

/** Text the card can show: the letters {@link GLYPHS} has. */
export const CARD_TEXT = 'WAITING FOR CAMERA';

/** Background of the card (RGB). */
export const CARD_BACKGROUND = [24, 26, 34] as const;
const INK = [235, 235, 240] as const;
const BAR = [90, 160, 255] as const;

/** Draws `text` centred at row `top`, each font pixel a `scale`x`scale` block. */
function drawText(out: Uint8Array, width: number, height: number, text: string, top: number, scale: number): void {
  const advance = 6 * scale;
  const left = Math.floor((width - (text.length * advance - scale)) / 2);
  for (let i = 0; i < text.length; i++) {
    const glyph = GLYPHS[text[i]!] ?? GLYPHS[' ']!;
    for (let gy = 0; gy < 7; gy++) {
      for (let gx = 0; gx < 5; gx++) {
        if (!((glyph[gy]! >> (4 - gx)) & 1)) continue;
        for (let sy = 0; sy < scale; sy++) {
          const y = top + gy * scale + sy;
          if (y < 0 || y >= height) continue;
          for (let sx = 0; sx < scale; sx++) {
            const x = left + i * advance + gx * scale + sx;
            if (x < 0 || x >= width) continue;
            out.set(INK, (y * width + x) * 3);
          }
        }
      }
    }
  }
}

/**
 * The card for frame `tick` (the bar moves one step per frame): `height · width · 3` RGB bytes.
 * The text is as large as fits (at least one pixel per font pixel).
 */
export function waitingCard(width: number, height: number, tick: number): Uint8Array {
  const out = new Uint8Array(width * height * 3);
  for (let i = 0; i < out.length; i += 3) out.set(CARD_BACKGROUND, i);
  const scale = Math.max(1, Math.min(Math.floor(width / (CARD_TEXT.length * 6 + 2)), Math.floor(height / 20)));
  const top = Math.floor(height / 2 - 3.5 * scale);
  drawText(out, width, height, CARD_TEXT, top, scale);
  // The sweeping bar under the text: a quarter of the width, wrapping around.
  const barW = Math.max(1, Math.floor(width / 4));
  const y0 = Math.min(height - 1, top + 10 * scale);
  const y1 = Math.min(height, y0 + Math.max(1, scale));
  const start = (tick * Math.max(1, Math.floor(width / 60))) % width;
  for (let y = y0; y < y1; y++) for (let k = 0; k < barW; k++) out.set(BAR, (y * width + ((start + k) % width)) * 3);
  return out;
}
