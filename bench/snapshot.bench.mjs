// Session snapshots (issue 41), through AppHost.snapshots with the real apps in this process and
// their Python ranks on CPU: the whole path a rewind takes (the ranks' snapshot(), the IPC, the
// checked encoding; and back). Prints one JSON object per line:
//   snapshot.take     p50/p99 ms and the snapshot's bytes, per app
//   snapshot.restore  p50/p99 ms of restoring it (decode + check + the ranks' restore())
//   snapshot.rewind_gap  p50/p99 ms from a `rewind` command sent to the first frame after it (what a viewer sees)
// Apps: seed-video (2 ranks: a 48x64 float64 motion state) and world at its `small` config (1 rank:
// the KV cache of 9 latent frames), and the CPPN sample app (apps/video at its config.yaml: 2
// TypeScript ranks on CPU; the rollout's state and the steering picture). REACTOR_PYTHON names the
// Python (default /usr/bin/python3); SNAPSHOT_BENCH_N the repetitions (default 30);
// SNAPSHOT_BENCH_APPS a comma list of labels to run (default all).
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AppHost } from '../packages/runtime/dist/index.js';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
process.env.REACTOR_PYTHON ??= '/usr/bin/python3';
const N = Number(process.env.SNAPSHOT_BENCH_N ?? 30);
const quiet = { debug() {}, info() {}, warn() {}, error() {}, fatal() {}, trace() {}, child: () => quiet };
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const pct = (s, p) => s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
const round = (x) => Math.round(x * 100) / 100;

/** A sink that drops everything but says when `n` frames have played. */
function sink() {
  let frames = 0;
  const waiters = [];
  return {
    frames: () => frames,
    until: (n) => new Promise((r) => (frames >= n ? r() : waiters.push([n, r]))),
    message() {},
    frame() {
      frames++;
      for (const [n, r] of waiters.splice(0))
        if (frames >= n) r();
        else waiters.push([n, r]);
    },
    audio() {},
    close() {},
  };
}

async function measure(label, App, load, weightsPath) {
  const host = new AppHost(App, { logger: quiet, weightsPath });
  try {
    await host.load(load);
    const s = sink();
    host.connect(s);
    await s.until(24);
    const take = [];
    const restore = [];
    let bytes = 0;
    for (let i = 0; i < N; i++) {
      let t = performance.now();
      const snap = await host.snapshots.take();
      take.push(performance.now() - t);
      bytes = snap.byteLength;
      t = performance.now();
      await host.snapshots.restore(snap);
      restore.push(performance.now() - t);
    }
    // The rewind gap as a viewer sees it: the `rewind` command sent -> the first frame after its flush.
    const gaps = [];
    const h = host.connect(s);
    for (let i = 0; i < Math.min(N, 10); i++) {
      await s.until(s.frames() + 12);
      const t = performance.now();
      const a = await h.command({ type: 'command', id: `r${i}`, name: 'rewind', params: { seconds: 0.2 } });
      if (a.type !== 'reply') throw new Error(`rewind: ${a.code}: ${a.message}`);
      const at = s.frames();
      await s.until(at + 1);
      gaps.push(performance.now() - t);
      // The rate limit (2 a second): the next rewind waits for its token.
      await new Promise((r) => setTimeout(r, 500));
    }
    gaps.sort((a, b) => a - b);
    emit({ bench: 'snapshot.rewind_gap', app: label, n: gaps.length, p50Ms: round(pct(gaps, 50)), p99Ms: round(pct(gaps, 99)) });
    take.sort((a, b) => a - b);
    restore.sort((a, b) => a - b);
    emit({ bench: 'snapshot.take', app: label, n: N, bytes, p50Ms: round(pct(take, 50)), p99Ms: round(pct(take, 99)) });
    emit({ bench: 'snapshot.restore', app: label, n: N, bytes, p50Ms: round(pct(restore, 50)), p99Ms: round(pct(restore, 99)) });
  } finally {
    await host.close();
  }
}

const only = process.env.SNAPSHOT_BENCH_APPS?.split(',');
const wanted = (label) => !only || only.includes(label);
if (wanted('seed-video')) {
  const seed = await import('../apps/seed-video/dist/index.js');
  await measure('seed-video', seed.VideoApp, { manifestGpuCount: 2 }, join(repo, 'apps/seed-video/weights'));
}
if (wanted('world-small')) {
  const world = await import('../apps/world/dist/index.js');
  await measure('world-small', world.WorldApp, { configPath: join(repo, 'apps/world/config.yaml') }, undefined);
}
if (wanted('video-cppn')) {
  const video = await import('../apps/video/dist/index.js');
  await measure('video-cppn', video.VideoApp, { configPath: join(repo, 'apps/video/config.yaml') }, join(repo, 'apps/video/weights'));
}
