#!/usr/bin/env node
// jpeg.encode (issue 42): JPEG encodes a second of 1280x720 RGB frames (the enhance app's output
// size) through sharp, as the server's FrameEncoder calls it, one configuration per child process
// (libuv's threadpool is sized when a process starts):
//   single   one encode at a time, libvips' default threads per image (what a frame got alone)
//   single1  one encode at a time, one libvips thread per image
//   pool     as many encodes in flight as the pool has threads (UV_THREADPOOL_SIZE = cores), one
//            libvips thread each: what the server does now (packages/server/src/video/frame-encoder.ts)
//   default4 8 in flight on Node's default pool (4 threads), libvips' default threads per image:
//            what the server did before
// One JSON object per line. JPEG_BENCH_SECONDS (3), JPEG_BENCH_WIDTH/HEIGHT (1280/720), JPEG_BENCH_QUALITY (80).
import { spawnSync } from 'node:child_process';
import { availableParallelism, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const env = process.env;
const W = Number(env.JPEG_BENCH_WIDTH ?? 1280);
const H = Number(env.JPEG_BENCH_HEIGHT ?? 720);
const SECONDS = Number(env.JPEG_BENCH_SECONDS ?? 3);
const QUALITY = Number(env.JPEG_BENCH_QUALITY ?? 80);
const cores = availableParallelism();

if (env.JPEG_BENCH_CHILD) {
  const require = createRequire(new URL('../packages/server/package.json', import.meta.url));
  const sharp = require('sharp');
  const [name, inFlight, vips] = env.JPEG_BENCH_CHILD.split(':');
  if (vips !== 'default') sharp.concurrency(Number(vips));
  // A picture like the enhance app's: gradients, blocks and noise (noise is what costs an encoder).
  const frames = [];
  for (let f = 0; f < 4; f++) {
    const rgb = Buffer.allocUnsafe(W * H * 3);
    for (let y = 0, i = 0; y < H; y++)
      for (let x = 0; x < W; x++, i += 3) {
        const n = (Math.imul(x * 7919 + y * 104729 + f * 31, 2654435761) >>> 24) & 15;
        rgb[i] = ((x * 255) / W + n) & 255;
        rgb[i + 1] = ((y * 255) / H + n) & 255;
        rgb[i + 2] = (((x >> 4) + (y >> 4) + f) & 1 ? 220 : 20) + n;
      }
    frames.push(rgb);
  }
  const encode = (rgb) =>
    sharp(rgb, { raw: { width: W, height: H, channels: 3 } })
      .jpeg({ quality: QUALITY, optimiseCoding: false })
      .toBuffer();
  for (let i = 0; i < 8; i++) await encode(frames[i % 4]);
  let done = 0;
  let bytes = 0;
  const lat = [];
  const t0 = performance.now();
  const end = t0 + SECONDS * 1000;
  const lane = async (k) => {
    for (let i = k; performance.now() < end; i++) {
      const t = performance.now();
      const out = await encode(frames[i % 4]);
      bytes += out.byteLength;
      lat.push(performance.now() - t);
      done++;
    }
  };
  await Promise.all(Array.from({ length: Number(inFlight) }, (_, k) => lane(k)));
  const s = (performance.now() - t0) / 1000;
  lat.sort((a, b) => a - b);
  process.stdout.write(
    `${JSON.stringify({
      bench: 'jpeg.encode',
      config: name,
      width: W,
      height: H,
      quality: QUALITY,
      inFlight: Number(inFlight),
      uvThreadpool: Number(env.UV_THREADPOOL_SIZE ?? 4),
      vipsThreadsPerImage: vips,
      cores,
      fps: Math.round((done / s) * 10) / 10,
      msPerEncodeP50: Math.round(lat[Math.floor(lat.length / 2)] * 100) / 100,
      kbPerFrame: Math.round(bytes / done / 1024),
      load: loadavg()[0],
    })}\n`,
  );
} else {
  const self = fileURLToPath(import.meta.url);
  const configs = [
    ['single', 1, 'default', 4],
    ['single1', 1, '1', 4],
    ['pool', cores, '1', cores],
    ['default4', 8, 'default', 4],
  ];
  for (const [name, inFlight, vips, pool] of configs) {
    const r = spawnSync(process.execPath, [self], {
      env: { ...env, JPEG_BENCH_CHILD: `${name}:${inFlight}:${vips}`, UV_THREADPOOL_SIZE: String(pool) },
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    if (r.status !== 0) process.exitCode = 1;
  }
}
