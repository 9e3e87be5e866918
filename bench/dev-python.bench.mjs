#!/usr/bin/env node
// `reactor dev` on the python template (issue 37): edit -> first frame of the new version, for
// the application half (src/app.ts: the app restarts, the Python rank and its loaded model stay)
// and the Python half (worker/app_worker.py: only the rank restarts, in place; the app half, its
// session and its connections run on), p50 of 3 edits each. A project `reactor init --template
// python` writes (one CPU rank, torch), installed from pnpm's store, served by `reactor dev
// --port 0`; each edit is an atomic save. The clock starts at the rename and stops at the first
// frame a new client gets after the reload; `keptClient*` is the time to the first frame a client
// connected throughout gets from the new version (after its new welcome for an app edit; after
// the log's "restarted the ranks" for a Python edit, which sends no welcome).
// `node bench/run.mjs dev-python`; the built CLI is needed (pnpm build), and a Python with torch
// (REACTOR_PYTHON, default /usr/bin/python3).
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const bin = join(repo, 'packages/cli/dist/main.js');
const EDITS = 3;
const env = {
  ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(npm_|PNPM_|VITEST|NODE_OPTIONS$)/i.test(k))),
  REACTOR_PYTHON: process.env.REACTOR_PYTHON ?? '/usr/bin/python3',
};
const run = (cmd, args, cwd) =>
  new Promise((done) =>
    execFile(cmd, args, { cwd, env, maxBuffer: 32 << 20 }, (err, stdout, stderr) => done({ code: err ? 1 : 0, out: `${stdout}${stderr}` })),
  );
const until = async (cond, what, ms = 120_000) => {
  const end = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > end) throw new Error(`timed out waiting for ${typeof what === 'function' ? what() : what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
};
const atomicWrite = (file, text) => {
  const tmp = join(dirname(file), `.${process.pid}.swp`);
  writeFileSync(tmp, text);
  renameSync(tmp, file);
};
const p50 = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];

const scratch = mkdtempSync(join(tmpdir(), 'reactor-dev-python-bench-'));
const project = join(scratch, 'bench-app');
let child;
try {
  let r = await run(process.execPath, [bin, 'init', project, '--template', 'python'], scratch);
  if (r.code !== 0) throw new Error(`reactor init failed:\n${r.out}`);
  r = await run('pnpm', ['install', '--offline'], project);
  if (r.code !== 0) r = await run('pnpm', ['install'], project);
  if (r.code !== 0) throw new Error(`pnpm install failed:\n${r.out}`);
  const req = createRequire(join(project, 'package.json'));
  const { connect } = await import(pathToFileURL(req.resolve('@reactor/client')).href);
  const ws = await import(pathToFileURL(req.resolve('ws')).href);
  const WebSocket = ws.WebSocket ?? ws.default;
  const firstFrame = async (url) => {
    const client = await connect(url, { WebSocket, reconnect: false });
    try {
      await new Promise((resolve) => client.once('frame', resolve));
    } finally {
      client.close();
    }
  };

  child = spawn(process.execPath, [bin, 'dev', '--port', '0'], { cwd: project, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (err += d));
  const viewers = () => [...out.matchAll(/Viewer: (\S+)/g)].map((m) => m[1]);
  await until(
    () => viewers().length === 1,
    () => `the first server:\n${err}`,
    300_000,
  );
  await firstFrame(viewers()[0]);
  // A client that stays connected through every reload (the app host is swapped under its socket):
  // the time to its first frame after the new version's welcome is measured too.
  const kept = new WebSocket(`ws://${new URL(viewers()[0]).host}/ws`);
  let keptWelcomes = 0;
  let keptFrames = 0;
  let keptClosed = false;
  kept.on('message', (d, binary) => {
    if (binary) keptFrames++;
    else if (JSON.parse(d.toString()).type === 'welcome') {
      keptWelcomes++;
      keptFrames = 0;
    }
  });
  kept.on('close', () => (keptClosed = true));
  await until(() => keptWelcomes === 1 && keptFrames > 0, 'the kept client to stream');
  const keptTimes = { app: [], python: [] };
  const restarts = () => err.match(/restarted the ranks of/g)?.length ?? 0;

  const measure = async (file, edit, half) => {
    const times = [];
    const original = readFileSync(file, 'utf8');
    for (let i = 1; i <= EDITS; i++) {
      const count = viewers().length;
      const welcomes = keptWelcomes;
      const restarted = restarts();
      const t0 = performance.now();
      atomicWrite(file, edit(original, i));
      if (half === 'app')
        await until(() => keptWelcomes === welcomes + 1 && keptFrames > 0, `the kept client's first frame after edit ${i}:\n${err.slice(-2000)}`);
      else {
        await until(() => restarts() === restarted + 1, `the restart after edit ${i}:\n${err.slice(-2000)}`);
        const frames = keptFrames;
        await until(() => keptFrames > frames, `the kept client's first frame after restart ${i}`);
      }
      keptTimes[half].push((performance.now() - t0) / 1000);
      await until(() => viewers().length === count + 1, `the reload after edit ${i} of ${file}:\n${err.slice(-2000)}`);
      await firstFrame(viewers()[count]);
      times.push((performance.now() - t0) / 1000);
    }
    return times;
  };
  const app = await measure(
    join(project, 'src/app.ts'),
    (src, i) => src.replace("default: 'A sunset over the sea.'", `default: 'A sunset, take ${i}.'`),
    'app',
  );
  const python = await measure(join(project, 'worker/app_worker.py'), (src, i) => src.replace('4 * t[:, None, None]', `${4 + i} * t[:, None, None]`), 'python');
  const builds = [...err.matchAll(/built in ([\d.]+) s/g)].map((m) => Number(m[1]));
  const round = (x) => Math.round(x * 1000) / 1000;
  for (const [half, times] of [
    ['app', app],
    ['python', python],
  ]) {
    console.log(
      JSON.stringify({
        bench: 'dev.python.editToFrame',
        half,
        edits: times.length,
        p50S: round(p50(times)),
        maxS: round(Math.max(...times)),
        timesS: times.map(round),
        keptClientP50S: round(p50(keptTimes[half])),
        keptClientTimesS: keptTimes[half].map(round),
        keptClientConnected: !keptClosed,
        keptClientWelcomes: keptWelcomes,
      }),
    );
  }
  console.log(JSON.stringify({ bench: 'dev.python.build', builds: builds.length, firstS: builds[0], incrementalP50S: round(p50(builds.slice(1))) }));
} finally {
  if (child && child.exitCode === null) {
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
  }
  rmSync(scratch, { recursive: true, force: true });
}
