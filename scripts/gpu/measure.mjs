#!/usr/bin/env node
// GPU-machine measurements of the sample app (issues 6 and 7), run from an unpacked bundle:
//   ./run.sh node scripts/gpu/measure.mjs <part> [...]
// Parts (each prints one JSON object per line):
//   model      video.fps per backend (webgpu, wasm) and size (256², 512², 1280x720), 1 rank
//   serve      the whole path in one process: serve(VideoApp) 1 GPU rank at 512x512, a Node client
//              for MEASURE_SECONDS (default 30): delivered fps, due->received latency, step split
//   scale      1 vs 2 GPU ranks at 1280x720 (webgpu): frames/s, gather ms, each rank's GPU
//   crash      `reactor run` with 2 GPU ranks, SIGKILL one rank: time to the client's session
//              error, processes and GPUs freed, then a new session streams again
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { WebSocket } from 'ws';
import { DistributedRunner } from '../../packages/distributed/dist/index.js';
import { serve } from '../../packages/runtime/dist/index.js';
import { connect } from '../../packages/client/dist/index.js';
import { VideoApp } from '../../apps/video/dist/index.js';
import { VideoWorker } from '../../apps/video/dist/video-worker.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const weightsRoot = join(root, 'apps/video/weights');
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const quiet = {
  info() {},
  warn(m) {
    if (!/^\[rank/.test(m)) process.stderr.write(`${m}\n`);
  },
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const r2 = (x) => (x === undefined ? null : Math.round(x * 100) / 100);
const SIZES = [
  [256, 256],
  [512, 512],
  [1280, 720],
];
// MEASURE_BACKEND=wasm and MEASURE_DEVICES=cpu rehearse the serve/scale/crash parts on a machine without a GPU.
const BACKEND = process.env.MEASURE_BACKEND ?? 'webgpu';
const DEVICES = process.env.MEASURE_DEVICES ?? 'auto';
const SCALE_FRAMES = Number(process.env.MEASURE_SCALE_FRAMES ?? 8);

function smi() {
  try {
    return execFileSync('nvidia-smi', ['--query-gpu=index,memory.used,utilization.gpu', '--format=csv,noheader,nounits'], { encoding: 'utf8' })
      .trim()
      .split('\n')
      .map((l) => {
        const [index, mem, util] = l.split(',').map((s) => Number(s.trim()));
        return { index, memMiB: mem, util };
      });
  } catch {
    return [];
  }
}

async function runnerFps({ backend, width, height, worldSize, seconds, framesPerChunk = 4, devices = 'auto' }) {
  const runner = new DistributedRunner(VideoWorker, {
    worldSize,
    devices,
    logger: quiet,
    callTimeoutMs: 120_000,
    loadArgs: { weightsRoot, width, height, framesPerChunk, rolloutChunks: 1e9, backend },
  });
  await runner.start();
  try {
    let res;
    for (let i = 0; i < 3; i++) res = await runner.generate({ prompt: 'warm-up' });
    const backends = res.backends;
    const times = [];
    const gathers = [];
    const renders = [];
    let frames = 0;
    const util = [];
    const t0 = performance.now();
    let nextSmi = t0 + 1000;
    while (performance.now() - t0 < seconds * 1000) {
      const c0 = performance.now();
      const r = await runner.generate({ prompt: 'A walk through a forest.' });
      times.push(performance.now() - c0);
      if (r.timings) {
        gathers.push(r.timings.gatherMs);
        renders.push(r.timings.renderMs);
      }
      frames += r.n;
      if (performance.now() > nextSmi) {
        util.push(smi());
        nextSmi += 1000;
      }
    }
    const fps = (frames * 1000) / (performance.now() - t0);
    return {
      fps,
      chunkP50: pct(times, 50),
      gatherP50: gathers.length ? pct(gathers, 50) : undefined,
      renderP50: renders.length ? pct(renders, 50) : undefined,
      backends,
      util,
    };
  } finally {
    await runner.shutdown();
  }
}

async function model() {
  for (const [width, height] of SIZES) {
    const out = {};
    for (const backend of ['webgpu', 'wasm']) {
      const seconds = backend === 'wasm' && width > 512 ? 8 : 5;
      const m = await runnerFps({ backend, width, height, worldSize: 1, seconds, framesPerChunk: width > 512 && backend === 'wasm' ? 1 : 4 });
      out[backend] = m.fps;
      emit({
        bench: 'video.fps',
        backend,
        worldSize: 1,
        width,
        height,
        framesPerSec: r2(m.fps),
        chunkP50Ms: r2(m.chunkP50),
        renderP50Ms: r2(m.renderP50),
        adapter: m.backends[0]?.adapter ?? null,
      });
    }
    emit({ bench: 'video.webgpuOverWasm', width, height, ratio: r2(out.webgpu / out.wasm) });
  }
}

async function scale() {
  const res = {};
  for (const worldSize of [1, 2]) {
    const m = await runnerFps({ backend: BACKEND, devices: DEVICES, width: 1280, height: 720, worldSize, seconds: 8, framesPerChunk: SCALE_FRAMES });
    res[worldSize] = m.fps;
    emit({
      bench: 'video.fps',
      backend: 'webgpu',
      worldSize,
      width: 1280,
      height: 720,
      framesPerChunk: SCALE_FRAMES,
      framesPerSec: r2(m.fps),
      chunkP50Ms: r2(m.chunkP50),
      gatherP50Ms: r2(m.gatherP50),
      renderP50Ms: r2(m.renderP50),
      ranks: m.backends,
      gpuSamples: m.util,
    });
  }
  emit({ bench: 'video.scale', width: 1280, height: 720, framesPerChunk: SCALE_FRAMES, ratio2over1: r2(res[2] / res[1]) });
}

/** Same-process server and client: one clock, so due -> received latency is exact. */
async function servePath() {
  const seconds = Number(process.env.MEASURE_SECONDS ?? 30);
  const dir = mkdtempSync(join(tmpdir(), 'gpu-serve-'));
  const config = join(dir, 'config.yaml');
  const ws = Number(process.env.MEASURE_WORLD_SIZE ?? 1);
  const fpc = Number(process.env.MEASURE_FRAMES ?? 4);
  const encoding = process.env.MEASURE_ENCODING ?? 'jpeg';
  writeFileSync(config, `width: 512\nheight: 512\nframesPerChunk: ${fpc}\nrolloutChunks: 100000\nworldSize: ${ws}\nbackend: ${BACKEND}\ndevices: ${DEVICES}\n`);
  const steps = [];
  class MeasuredApp extends VideoApp {
    async processOutput(outcome) {
      const r = outcome.result;
      if (r) steps.push({ elapsedMs: outcome.elapsedMs, renderMs: r.timings?.renderMs, gatherMs: r.timings?.gatherMs });
      return super.processOutput(outcome);
    }
  }
  const server = await serve(MeasuredApp, {
    port: 0,
    encoding,
    configPath: config,
    weightsPath: weightsRoot,
    logger: {
      debug() {},
      info() {},
      warn: console.warn,
      error: console.error,
      child() {
        return this;
      },
    },
  });
  await server.loaded;
  const due = new Map();
  server.host.connect({
    message() {},
    close() {},
    frame(f) {
      due.set(f.seq, f.dueAt);
    },
  });
  const client = await connect(server.url, { WebSocket, reconnect: false });
  const lat = [];
  let n = 0;
  let t0 = 0;
  let dropped = 0;
  client.on('stats', (s) => (dropped = s.dropped));
  await new Promise((res) => {
    client.on('frame', () => {
      if (!t0) {
        t0 = performance.now();
        res();
      }
    });
  });
  client.on('frame', (f) => {
    n++;
    const d = due.get(f.seq);
    if (d !== undefined) {
      lat.push(performance.now() - d);
      due.delete(f.seq);
    }
  });
  const steps0 = steps.length;
  await sleep(seconds * 1000);
  const elapsed = (performance.now() - t0) / 1000;
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  const sum = Number(/reactor_frame_encode_seconds_sum(?:\{[^}]*\})? ([\d.e+-]+)/.exec(metrics)?.[1]);
  const count = Number(/reactor_frame_encode_seconds_count(?:\{[^}]*\})? ([\d.e+-]+)/.exec(metrics)?.[1]);
  const s = steps.slice(steps0);
  const med = (k) =>
    r2(
      pct(
        s.map((x) => x[k]).filter((x) => x !== undefined),
        50,
      ),
    );
  const elapsedMs = med('elapsedMs');
  const renderMs = med('renderMs');
  const gatherMs = med('gatherMs');
  emit({
    bench: 'gpu.serve',
    width: 512,
    height: 512,
    worldSize: ws,
    encoding,
    vipsConcurrency: process.env.VIPS_CONCURRENCY ?? null,
    seconds: r2(elapsed),
    framesDelivered: n,
    deliveredFps: r2(n / elapsed),
    droppedForClient: dropped,
    latencyP50Ms: r2(pct(lat, 50)),
    latencyP99Ms: r2(pct(lat, 99)),
    stepSplitP50Ms: {
      generate: elapsedMs,
      modelRender: renderMs,
      gather: gatherMs,
      transfer: renderMs !== null && elapsedMs !== null ? r2(elapsedMs - renderMs - (gatherMs ?? 0)) : null,
      jpegEncodePerFrame: r2((sum / count) * 1000),
    },
    framesPerChunk: fpc,
  });
  client.close();
  await server.close();
}

/** Descendant pids of `pid`, from /proc. */
function descendants(pid) {
  const kids = new Map();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const st = readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]);
      kids.set(ppid, [...(kids.get(ppid) ?? []), Number(d)]);
    } catch {
      /* gone */
    }
  }
  const out = [];
  const walk = (p) => {
    for (const c of kids.get(p) ?? []) {
      out.push(c);
      walk(c);
    }
  };
  walk(pid);
  return out;
}
const alive = (pid) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function crash() {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-crash-'));
  writeFileSync(join(dir, 'config.yaml'), `width: 512\nheight: 512\nframesPerChunk: 4\nworldSize: 2\ndevices: ${DEVICES}\nbackend: ${BACKEND}\n`);
  writeFileSync(
    join(dir, 'reactor.yaml'),
    `model: { name: crash, version: 0.0.1, resources: { gpu: { count: 2 } } }\nruntime:\n  import: ${join(root, 'apps/video/dist/index.js')}:VideoApp\n  config: config.yaml\n  weights_path: ${weightsRoot}\nserver: { port: 0 }\n`,
  );
  const child = spawn(process.execPath, [join(root, 'packages/cli/dist/main.js'), 'run', '--manifest', join(dir, 'reactor.yaml')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  const url = await new Promise((res, rej) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = /Viewer: (\S+)/.exec(out);
      if (m) res(m[1]);
    });
    child.once('exit', (c) => rej(new Error(`reactor run exited ${c}: ${err}`)));
  });
  process.once('exit', () => child.kill('SIGKILL'));
  const client = await connect(url, { WebSocket, reconnect: false });
  let frames = 0;
  client.on('frame', () => frames++);
  while (frames < 20) await sleep(50);
  const ranks = descendants(child.pid).filter((p) => /child-main\.js/.test(readFileSync(`/proc/${p}/cmdline`, 'utf8')));
  const gpusBusy = smi();
  const gotError = new Promise((res) =>
    client.on('session', (s) => {
      if (s.error) res({ at: performance.now(), error: s.error });
    }),
  );
  const victim = ranks[ranks.length - 1];
  const t0 = performance.now();
  process.kill(victim, 'SIGKILL');
  const e = await Promise.race([gotError, sleep(10_000).then(() => null)]);
  await sleep(1500);
  const left = ranks.filter(alive);
  const gpusAfter = smi();
  client.close();
  const c2 = await connect(url, { WebSocket, reconnect: false });
  let f2 = 0;
  c2.on('frame', () => f2++);
  const t1 = performance.now();
  while (f2 < 20 && performance.now() - t1 < 60_000) await sleep(50);
  emit({
    bench: 'gpu.crash',
    worldSize: 2,
    killedPid: victim,
    rankPids: ranks,
    sessionErrorAfterMs: e ? r2(e.at - t0) : null,
    sessionError: e?.error ?? null,
    ranksLeftAfter1500Ms: left.length,
    gpusWhileStreaming: gpusBusy,
    gpusAfterCrash: gpusAfter,
    newSessionFrames: f2,
    newSessionFirst20FramesMs: r2(performance.now() - t1),
  });
  c2.close();
  const exited = new Promise((r) => child.once('exit', (c) => r(c)));
  child.kill('SIGTERM');
  emit({
    bench: 'gpu.crash.exit',
    exitCode: await exited,
    ranksLeft: descendants(child.pid).length,
    stderrTail: err
      .split('\n')
      .filter((l) => /Crash|crash|rank|session/.test(l))
      .slice(-8),
  });
}

const parts = { model, serve: servePath, scale, crash };
for (const p of process.argv.slice(2)) {
  if (!parts[p]) throw new Error(`unknown part ${p}; parts: ${Object.keys(parts).join(', ')}`);
  try {
    await parts[p]();
  } catch (e) {
    emit({ bench: `error.${p}`, message: String(e?.stack ?? e) });
  }
}
process.exit(0);
