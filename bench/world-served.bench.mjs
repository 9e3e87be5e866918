// Issue 39: the world app served by `reactor run` (the small config on CPU) as a 2-stage
// pipeline, one chunk in flight against two (`inFlight` in its config: the step loop dispatches
// ahead and the runner keeps that many calls). Plain JS against the compiled dist/; a client on a
// real socket counts the frames it gets. Prints one JSON object per line:
//   world.served  {variant, pipeline, ranks, inFlight, seconds, frames, fps, chunksPerSecond, load}
// Runs alternate (1, 2, 1, 2, ...) so a change of the machine's load shows in both.
// WORLD_SERVED_SECONDS (default 10) of frames after the first 2 chunks; WORLD_SERVED_ROUNDS
// (default 2); WORLD_SERVED_PIPELINE blocks|steps (default blocks); WORLD_SERVED_ONE_RANK=1 adds
// the one-rank app as a reference.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { WebSocket } from 'ws';
import { connect } from '../packages/client/dist/index.js';

const seconds = Number(process.env.WORLD_SERVED_SECONDS ?? 10);
const rounds = Number(process.env.WORLD_SERVED_ROUNDS ?? 2);
const shape = process.env.WORLD_SERVED_PIPELINE ?? 'blocks';
const PY = process.env.REACTOR_PYTHON ?? '/usr/bin/python3';
const app = fileURLToPath(new URL('../apps/world/', import.meta.url));
const cli = fileURLToPath(new URL('../packages/cli/dist/main.js', import.meta.url));
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const round = (x) => Math.round(x * 100) / 100;
const load = () => loadavg().map((x) => Math.round(x * 100) / 100);
const dir = mkdtempSync(join(tmpdir(), 'world-served-bench-'));

async function served(variant, cfg) {
  const file = join(dir, `${variant}.yaml`);
  writeFileSync(file, `model: small\ndevices: cpu\ncompile: off\nthreads: 1\n${cfg}\n`);
  const child = spawn(process.execPath, [cli, 'run', '--manifest', join(app, 'reactor.yaml'), '--config', file, '--port', '0'], {
    cwd: app,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, REACTOR_PYTHON: PY },
  });
  let out = '';
  child.stderr.on('data', (d) => (out += d));
  const exited = new Promise((r) => child.once('exit', r));
  try {
    const url = await new Promise((res, rej) => {
      child.stdout.on('data', (d) => {
        out += d;
        const m = /Viewer: (\S+)/.exec(out);
        if (m) res(m[1]);
      });
      child.once('exit', (code) => rej(new Error(`reactor run exited with ${code}:\n${out}`)));
    });
    const c = await connect(url, { WebSocket, reconnect: false });
    let frames = 0;
    let counting = false;
    let warm;
    const warmed = new Promise((r) => (warm = r));
    const chunks = new Set();
    c.on('frame', (f) => {
      if (f.metadata?.chunk >= 2) warm();
      if (!counting) return;
      frames++;
      chunks.add(f.metadata?.chunk);
    });
    await warmed;
    counting = true;
    const l0 = load();
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, seconds * 1000));
    const s = (performance.now() - t0) / 1000;
    counting = false;
    c.close();
    return { frames, fps: round(frames / s), chunksPerSecond: round(chunks.size / s), seconds: round(s), load: [l0, load()] };
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
}

const variants = [
  ...(process.env.WORLD_SERVED_ONE_RANK === '1' ? [{ variant: 'one-rank', pipeline: 'none', ranks: 1, inFlight: 1 }] : []),
  { variant: `${shape}-depth1`, pipeline: shape, ranks: 2, inFlight: 1 },
  { variant: `${shape}-depth2`, pipeline: shape, ranks: 2, inFlight: 2 },
];
try {
  for (let r = 0; r < rounds; r++) {
    for (const v of variants) {
      const cfg = `pipeline: ${v.pipeline}\nranks: ${v.ranks}\ninFlight: ${v.inFlight}`;
      emit({ bench: 'world.served', round: r, ...v, ...(await served(v.variant, cfg)) });
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
