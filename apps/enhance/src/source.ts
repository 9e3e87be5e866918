/**
 * Where the enhance app's pictures come from when no camera is published: a procedural scene
 * (sky, sun, hills, a brick wall, fine stripes and lettering-like marks: detail an upscaler
 * shows) panned slowly, rendered at the model's input size. And the one resize the camera path
 * needs (camera frames to the model's input size).
 */

/** RGB bytes of `n` frames of the built-in scene, frames `first .. first+n-1`, `width`x`height`. */
export function sceneFrames(first: number, n: number, width: number, height: number, out?: Uint8Array): Uint8Array {
  const frames = out ?? new Uint8Array(n * width * height * 3);
  const strip = sceneStrip(width, height);
  for (let f = 0; f < n; f++) {
    const frame = frames.subarray(f * width * height * 3, (f + 1) * width * height * 3);
    if (strip) stripFrame(strip, first + f, width, height, frame);
    else renderScene(first + f, width, height, frame);
  }
  return frames;
}

/**
 * The whole 1024-unit world at one frame size, rendered once, when a pan of one unit is a whole
 * number of pixels and the arithmetic is exact (a power-of-two number of pixels per unit, as at
 * 320x180 and 640x360): every frame is then rows copied out of it, the same bytes as rendering
 * it (`test/source.test.ts`), at a fraction of the cost (the scene is the app's input at up to
 * 120+ frames a second).
 */
interface SceneStrip {
  width: number;
  height: number;
  /** Pixels per world unit. */
  perUnit: number;
  columns: number;
  data: Uint8Array;
}

const strips = new Map<string, SceneStrip | null>();

function sceneStrip(width: number, height: number): SceneStrip | undefined {
  const key = `${width}x${height}`;
  const have = strips.get(key);
  if (have !== undefined) return have ?? undefined;
  const perUnit = width / 320;
  // 2^k pixels per unit (k >= 0): (x + pan·perUnit + 0.5)·sx is exactly (x + 0.5)·sx + pan.
  const exact = Number.isInteger(perUnit) && perUnit >= 1 && (perUnit & (perUnit - 1)) === 0 && 320 / width === 1 / perUnit;
  if (!exact || strips.size >= 4) {
    strips.set(key, null);
    return undefined;
  }
  const columns = 1024 * perUnit + width;
  const data = new Uint8Array(columns * height * 3);
  const sx = 320 / width;
  const sy = 180 / height;
  for (let y = 0, o = 0; y < height; y++) {
    const wy = (y + 0.5) * sy;
    for (let c = 0; c < columns; c++, o += 3) scenePixel(((c + 0.5) * sx) % 1024, wy, data, o);
  }
  const strip = { width, height, perUnit, columns, data };
  strips.set(key, strip);
  return strip;
}

function stripFrame(strip: SceneStrip, frame: number, width: number, height: number, out: Uint8Array): void {
  const x0 = (frame % 1024) * strip.perUnit;
  const row = strip.columns * 3;
  for (let y = 0; y < height; y++) out.set(strip.data.subarray(y * row + x0 * 3, y * row + (x0 + width) * 3), y * width * 3);
}

/**
 * One frame of the scene, rendered pixel by pixel (no strip; what {@link sceneFrames} must equal):
 * a 1024-unit-wide world panned one unit per frame (about 34 s a lap at 30 fps).
 */
export function renderScene(frame: number, width: number, height: number, out: Uint8Array): void {
  // World units: the frame shows 320 x 180 of them whatever its pixel size, so every input size sees the same picture.
  const sx = 320 / width;
  const sy = 180 / height;
  const pan = frame % 1024;
  let o = 0;
  for (let y = 0; y < height; y++) {
    const wy = (y + 0.5) * sy;
    for (let x = 0; x < width; x++, o += 3) scenePixel(((x + 0.5) * sx + pan) % 1024, wy, out, o);
  }
}

/** The scene's colour at world point (`wx`, `wy`), written as 3 bytes at `out[o]`. */
function scenePixel(wx: number, wy: number, out: Uint8Array, o: number): void {
  let r: number;
  let g: number;
  let b: number;
  const hill = 110 + 18 * Math.sin(wx / 53) + 9 * Math.sin(wx / 17 + 1.3);
  if (wy < hill) {
    // sky with a sun
    const t = wy / 180;
    r = 90 + 120 * t;
    g = 150 + 70 * t;
    b = 235 - 20 * t;
    const dx = wx - 700;
    const dy = wy - 40;
    const d = Math.sqrt(dx * dx + dy * dy);
    if (d < 22) {
      r = 255;
      g = 230;
      b = 120;
    } else if (d < 30) {
      const k = (30 - d) / 8;
      r += (255 - r) * k;
      g += (230 - g) * k;
      b += (120 - b) * k;
    }
  } else if (wx > 200 && wx < 420 && wy > 120) {
    // a brick wall with mortar lines and a sign of fine marks
    const row = Math.floor((wy - 120) / 7);
    const bx = (wx + (row % 2) * 9) % 18;
    const by = (wy - 120) % 7;
    const mortar = bx < 1.2 || by < 1.2;
    r = mortar ? 200 : 150 + ((row * 37) % 40);
    g = mortar ? 195 : 70 + ((row * 11) % 25);
    b = mortar ? 185 : 50;
    if (wx > 250 && wx < 370 && wy > 135 && wy < 160) {
      const ink = Math.sin(wx * 1.9) > 0.2 && Math.sin(wy * 2.3 + Math.floor(wx / 7)) > -0.3;
      r = ink ? 20 : 240;
      g = ink ? 20 : 240;
      b = ink ? 30 : 230;
    }
  } else {
    // grass with fine stripes
    const stripe = Math.sin(wx * 2.1 + wy * 0.7) * 0.5 + 0.5;
    r = 40 + 40 * stripe;
    g = 120 + 60 * stripe - (wy - hill) * 0.4;
    b = 40 + 20 * stripe;
  }
  out[o] = r < 0 ? 0 : r > 255 ? 255 : r;
  out[o + 1] = g < 0 ? 0 : g > 255 ? 255 : g;
  out[o + 2] = b < 0 ? 0 : b > 255 ? 255 : b;
}

/** `src` (`sw`x`sh` RGB) resized to `dw`x`dh` by averaging the source pixels each target pixel covers (nearest when enlarging). */
export function resizeRgb(src: Uint8Array, sw: number, sh: number, dw: number, dh: number, out?: Uint8Array): Uint8Array {
  const dst = out ?? new Uint8Array(dw * dh * 3);
  if (sw === dw && sh === dh) {
    dst.set(src.subarray(0, dw * dh * 3));
    return dst;
  }
  let o = 0;
  for (let y = 0; y < dh; y++) {
    const y0 = Math.floor((y * sh) / dh);
    const y1 = Math.max(y0 + 1, Math.floor(((y + 1) * sh) / dh));
    for (let x = 0; x < dw; x++, o += 3) {
      const x0 = Math.floor((x * sw) / dw);
      const x1 = Math.max(x0 + 1, Math.floor(((x + 1) * sw) / dw));
      let r = 0;
      let g = 0;
      let b = 0;
      for (let yy = y0; yy < y1; yy++) {
        for (let xx = x0, i = (yy * sw + x0) * 3; xx < x1; xx++, i += 3) {
          r += src[i] as number;
          g += src[i + 1] as number;
          b += src[i + 2] as number;
        }
      }
      const k = (y1 - y0) * (x1 - x0);
      dst[o] = Math.round(r / k);
      dst[o + 1] = Math.round(g / k);
      dst[o + 2] = Math.round(b / k);
    }
  }
  return dst;
}
