#!/usr/bin/env node
// The world app through the whole serving path (issue 35): `reactor run --manifest
// apps/world/reactor.yaml` in a child process, this process its client over a real socket.
//   node scripts/gpu/world.mjs         (WORLD_* variables below; one JSON line on stdout)
// Measures, in one run: model-only chunk time (each frame's metadata carries its chunk's cost) and
// delivered fps side by side, time to first frame (client connected -> first frame), command-to-
// pixel for prompt switches (send -> arrival of the frame its `applied` names, which is the first
// frame of the re-cached chunk), GPU memory (nvidia-smi, and torch's peak from the metadata).
//   WORLD_CONFIG      extra app-config YAML lines (e.g. "compile: on")
//   WORLD_SECONDS     the delivered-fps window (default 20)
//   WORLD_SWITCHES    prompt switches for command-to-pixel (default 20)
//   WORLD_LABEL       a label for the JSON line
//   WORLD_APP=tiny    the tiny world (TinyWorldApp, the shipped weights, raw RGB frames, 3-frame
//                     chunks): command-to-pixel is a held turn key (set_keys) instead of a prompt
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { WebSocket } from 'ws';
import { connect } from '../../packages/client/dist/index.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const SECONDS = Number(process.env.WORLD_SECONDS ?? 20);
const SWITCHES = Number(process.env.WORLD_SWITCHES ?? 20);
const TINY = process.env.WORLD_APP === 'tiny';
const CHUNK = TINY ? 3 : 12;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pct = (xs, p) => {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] * 10) / 10;
};
function smiMiB() {
  try {
    return Number(execFileSync('nvidia-smi', ['--query-gpu=memory.used', '--format=csv,noheader,nounits'], { encoding: 'utf8' }).trim().split('\n')[0]);
  } catch {
    return null;
  }
}
function smiUtil() {
  try {
    return Number(execFileSync('nvidia-smi', ['--query-gpu=utilization.gpu', '--format=csv,noheader,nounits'], { encoding: 'utf8' }).trim().split('\n')[0]);
  } catch {
    return null;
  }
}

const dir = mkdtempSync(join(tmpdir(), 'world-bench-'));
writeFileSync(join(dir, 'config.yaml'), `${(process.env.WORLD_CONFIG ?? '').replaceAll('\\n', '\n')}\n`);
writeFileSync(
  join(dir, 'reactor.yaml'),
  `model: { name: world-bench, version: 0.0.1, resources: { gpu: { count: 1 } } }\nruntime:\n  import: ${join(root, 'apps/world/dist/index.js')}:${TINY ? 'TinyWorldApp' : 'WorldApp'}\n  config: config.yaml\n` +
    (TINY ? 'server:\n  encoding: rgb\n' : ''),
);
const t0 = performance.now();
const child = spawn(process.execPath, [join(root, 'packages/cli/dist/main.js'), 'run', '--manifest', join(dir, 'reactor.yaml'), '--port', '0'], {
  stdio: ['ignore', 'pipe', 'pipe'],
  env: process.env,
});
let log = '';
child.stderr.on('data', (d) => {
  log += d;
  process.stderr.write(d);
});
const url = await new Promise((res, rej) => {
  let out = '';
  child.stdout.on('data', (d) => {
    out += d;
    const m = /Viewer: (\S+)/.exec(out);
    if (m) res(m[1]);
  });
  child.once('exit', (c) => rej(new Error(`reactor run exited ${c}: ${log.slice(-2000)}`)));
});
const readyMs = performance.now() - t0;
const frames = [];
const c = await connect(url, { WebSocket, reconnect: false });
const connectedAt = performance.now();
c.on('frame', (f) => frames.push({ seq: f.seq, at: performance.now(), meta: f.metadata, w: f.width, h: f.height }));
while (frames.length === 0) await sleep(5);
const firstFrameMs = frames[0].at - connectedAt;
// Warm: two chunks, then the delivered window.
while (frames.length < 3 * CHUNK + 24) await sleep(10);
const util = [];
const w0 = performance.now();
const n0 = frames.length;
while (performance.now() - w0 < SECONDS * 1000) {
  await sleep(500);
  util.push(smiUtil());
}
const n1 = frames.length;
const deliveredFps = ((n1 - n0) * 1000) / (performance.now() - w0);
const window = frames.slice(n0, n1);
const chunkMs = [...new Map(window.map((f) => [f.meta.chunk, f.meta.modelMs])).values()];
const ditMs = [...new Map(window.map((f) => [f.meta.chunk, f.meta.ditMs])).values()];
const memMiB = smiMiB();
// Command-to-pixel: prompt switches at random moments.
const c2p = [];
const prompts = ['a city at night', 'a walk through a forest', 'a desert road at noon', 'snow on a mountain pass'];
const held = [['turn_left'], [], ['turn_right'], ['forward']];
for (let i = 0; i < SWITCHES; i++) {
  await sleep(100 + Math.random() * 600);
  const sent = performance.now();
  const cmd = TINY ? c.send('set_keys', { keys: held[i % held.length] }) : c.send('set_prompt', { prompt: `${prompts[i % prompts.length]} ${i}` });
  const a = await cmd.applied;
  if (a.outcome !== 'applied') continue;
  const until = performance.now() + 15_000;
  while (!frames.some((f) => f.seq === a.seq) && performance.now() < until) await sleep(2);
  const f = frames.find((x) => x.seq === a.seq);
  if (f) c2p.push({ ms: f.at - sent, recached: f.meta.recached === true });
}
c.close();
child.kill('SIGTERM');
await new Promise((r) => child.once('exit', r));
const med = pct(chunkMs, 50);
process.stdout.write(
  `${JSON.stringify({
    bench: 'world.serve',
    label: process.env.WORLD_LABEL ?? '',
    config: process.env.WORLD_CONFIG ?? '',
    size: `${frames[0].w}x${frames[0].h}`,
    readyMs: Math.round(readyMs),
    firstFrameMs: Math.round(firstFrameMs),
    deliveredFps: Math.round(deliveredFps * 10) / 10,
    modelChunkMsP50: med,
    app: TINY ? 'tiny-world' : 'world',
    modelFps: med ? Math.round(((CHUNK * 1000) / med) * 10) / 10 : null,
    deliveredOverModel: med ? Math.round((deliveredFps / ((CHUNK * 1000) / med)) * 1000) / 1000 : null,
    ditMsP50: pct(ditMs, 50),
    c2pMsP50: pct(
      c2p.map((x) => x.ms),
      50,
    ),
    c2pMsP99: pct(
      c2p.map((x) => x.ms),
      99,
    ),
    c2pAppliedFrameRecached: c2p.filter((x) => x.recached).length,
    c2pSamples: c2p.length,
    gpuMemMiB: memMiB,
    torchPeakGiB: Math.round((window[window.length - 1]?.meta.gpuPeakBytes ?? 0) / 2 ** 28) / 4,
    gpuUtilP50: pct(
      util.filter((u) => u !== null),
      50,
    ),
    loadLine: (TINY ? /tiny world: .*/ : /world model .*loaded in \d+ ms/).exec(log)?.[0] ?? null,
  })}\n`,
);
