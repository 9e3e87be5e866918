// A cheap moving picture for the network tests and benchmarks, served with
// `reactor run --manifest` (runtime.import: <this file>:PatternApp): a textured still background
// with a box that moves one step a frame, at the size and rate in the environment
// (REACTOR_PATTERN_WIDTH / _HEIGHT / _FPS; default 1280x720 at 30 fps). Its cost is a copy of the
// background and the box per frame, so the encoder and the network are what a run measures.
import { Frames, Output, ReactorApp, Video, reactorApp } from '../../packages/runtime/dist/index.js';

const W = Number(process.env.REACTOR_PATTERN_WIDTH ?? 1280);
const H = Number(process.env.REACTOR_PATTERN_HEIGHT ?? 720);
const FPS = Number(process.env.REACTOR_PATTERN_FPS ?? 30);
const BOX = Math.round(Math.min(W, H) / 4);

const background = new Uint8Array(W * H * 3);
for (let y = 0; y < H; y++) {
  for (let x = 0; x < W; x++) {
    const i = (y * W + x) * 3;
    const check = ((x >> 5) + (y >> 5)) & 1 ? 40 : 0;
    background[i] = ((x * 255) / W + check) & 255;
    background[i + 1] = ((y * 255) / H + check) & 255;
    background[i + 2] = (128 + ((x ^ y) & 63)) & 255;
  }
}

class PatternOutput extends Output {}
Video({ width: W, height: H })(PatternOutput.prototype, 'main');

export class PatternApp extends ReactorApp {
  i = 0;
  generate() {
    const rgb = new Uint8Array(background);
    const t = this.i++;
    const bx = Math.round(((Math.sin(t / 20) + 1) / 2) * (W - BOX));
    const by = Math.round(((Math.cos(t / 27) + 1) / 2) * (H - BOX));
    for (let y = by; y < by + BOX; y++) {
      const row = (y * W + bx) * 3;
      for (let x = 0; x < BOX * 3; x += 3) {
        rgb[row + x] = 250;
        rgb[row + x + 1] = (t * 4 + x) & 255;
        rgb[row + x + 2] = 30;
      }
    }
    return new PatternOutput({ main: new Frames(rgb, [1, H, W, 3]) });
  }
}
reactorApp({ output: PatternOutput, fps: FPS, bufferSize: 4, name: 'net-pattern' })(PatternApp);
