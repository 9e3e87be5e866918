#!/usr/bin/env node
// Serving at the GPU's speed (issue 42), run from an unpacked bundle by scripts/gpu/serve.sh:
//   ./run.sh node scripts/gpu/serve.mjs
// Two phases, one JSON object per line on stdout, progress on stderr:
//   delivered  for each model: `reactor run` (backend: torch, compile: SERVE_COMPILE) in a child
//              process, a client in this one: JPEG, then H.264 (select_video) on the same server,
//              then raw RGB on a second server; fps, frame-interval p99, drops, GPU busy %
//              (`serve.delivered`);
//   sessions   for each model: N instances of `reactor run` on the one GPU (the app pinned to
//              30 fps a session: a 720p30 session), one client each, N raised until a session
//              gets < 29 fps or a frame interval p99 > 1.5 intervals (50 ms): the last N that held
//              is the count (`serve.sessions` per N, `serve.sessions.count` per model and encoding).
// Every phase checks the time left (SERVE_DEADLINE: epoch seconds) and writes what it measured.
//
// Environment:
//   SERVE_CPU=1            rehearsal without a GPU: CPU ranks, 64x36 output, slim, short windows
//   SERVE_MODELS           thick,medium
//   SERVE_PHASES           delivered,sessions
//   SERVE_ENCODINGS        jpeg,h264,rgb (delivered)
//   SERVE_SESSION_ENCODINGS jpeg,h264 (sessions; h264: one H.264 encode per session)
//   SERVE_COMPILE          auto (the app's compile key)
//   SERVE_SECONDS          window of the delivered phase (5), SERVE_SESSION_SECONDS (5)
//   SERVE_LEVELS_<MODEL>   session counts to try (thick 1,2,4,6,7,8,9,10,12; medium 1,2,4,8,12,16,20): the
//                          largest is how many instances start
//   SERVE_DEADLINE         epoch seconds by which everything ends (default: now + 400)
//   ENHANCE_PYTHON / REACTOR_PYTHON  the ranks' interpreter
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, availableParallelism } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { connect } from '../../packages/client/dist/index.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const wsModule = await import(pathToFileURL(createRequire(join(root, 'packages/server/package.json')).resolve('ws')).href);
const WebSocket = wsModule.WebSocket ?? wsModule.default;
const runtimeEntry = createRequire(join(root, 'apps/enhance/package.json')).resolve('@reactor/runtime');
const env = process.env;
const cpu = env.SERVE_CPU === '1';
const list = (v, d) =>
  (v ?? d)
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
const MODELS = list(env.SERVE_MODELS, cpu ? 'slim' : 'thick,medium');
const PHASES = list(env.SERVE_PHASES, 'delivered,sessions');
const ENCODINGS = list(env.SERVE_ENCODINGS, 'jpeg,h264,rgb');
const SESSION_ENCODINGS = list(env.SERVE_SESSION_ENCODINGS, 'jpeg,h264');
const COMPILE = env.SERVE_COMPILE ?? 'auto';
const WIDTH = cpu ? 64 : 1280;
const HEIGHT = cpu ? 36 : 720;
const SECONDS = Number(env.SERVE_SECONDS ?? (cpu ? 2 : 5));
const SESSION_SECONDS = Number(env.SERVE_SESSION_SECONDS ?? (cpu ? 2 : 5));
const SESSION_FPS = 30;
const DEADLINE = Number(env.SERVE_DEADLINE ?? Date.now() / 1000 + 400) * 1000;
const PYTHON = env.ENHANCE_PYTHON;
const FRAMES = { slim: 4, medium: 4, thick: 8 };
const LEVELS = {
  thick: list(env.SERVE_LEVELS_THICK, '1,2,4,6,7,8,9,10,12').map(Number),
  medium: list(env.SERVE_LEVELS_MEDIUM, '1,2,4,8,12,16,20').map(Number),
  slim: list(env.SERVE_LEVELS_SLIM, '1,2').map(Number),
};
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const note = (m) => process.stderr.write(`[serve ${new Date().toISOString().slice(11, 19)}] ${m}\n`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const left = () => DEADLINE - Date.now();
const r2 = (x) => (x === undefined || x === null || !Number.isFinite(x) ? null : Math.round(x * 100) / 100);
const pct = (xs, p) => {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

/** nvidia-smi every 500 ms while running: GPU busy % and memory, read over a window. */
const smiSamples = [];
let smiTimer;
function smiStart() {
  const tick = () =>
    execFile('nvidia-smi', ['--query-gpu=utilization.gpu,memory.used', '--format=csv,noheader,nounits'], { timeout: 4000 }, (err, out) => {
      if (!err) {
        const [util, mem] = out
          .trim()
          .split('\n')[0]
          .split(',')
          .map((s) => Number(s.trim()));
        smiSamples.push({ at: Date.now(), util, mem });
      }
      smiTimer = setTimeout(tick, 500);
    });
  tick();
}
function gpuOver(t0, t1) {
  const s = smiSamples.filter((x) => x.at >= t0 && x.at <= t1);
  if (s.length === 0) return null;
  return {
    utilMeanPct: r2(s.reduce((a, x) => a + x.util, 0) / s.length),
    utilMaxPct: Math.max(...s.map((x) => x.util)),
    memMiB: Math.max(...s.map((x) => x.mem)),
    samples: s.length,
  };
}

/**
 * `reactor run` for one model in a child process. `fps30`: the app pinned to 30 fps (a module
 * beside the manifest subclasses EnhanceApp with `fps: 30`), what a 720p30 session is.
 */
async function startServer({ model, encoding, fps30 = false, codec = false, firstS = 240 }) {
  const dir = mkdtempSync(join(tmpdir(), 'serve-gpu-'));
  const app = join(root, 'apps/enhance/dist/index.js');
  let entry = `${app}:EnhanceApp`;
  if (fps30) {
    writeFileSync(
      join(dir, 'enhance30.mjs'),
      `import { reactorApp } from ${JSON.stringify(pathToFileURL(runtimeEntry).href)};\n` +
        `import { EnhanceApp, EnhanceState, EnhanceInputTracks, EnhanceOutput, EnhanceInfo, ModelUnavailable, RunnerRestarting } from ${JSON.stringify(pathToFileURL(app).href)};\n` +
        `export class Enhance30 extends EnhanceApp {}\n` +
        `reactorApp({ state: EnhanceState, input: EnhanceInputTracks, output: EnhanceOutput, messages: [EnhanceInfo, ModelUnavailable, RunnerRestarting], name: 'reactor-enhance', version: '0.1.0', bufferSize: 16, fps: ${SESSION_FPS} })(Enhance30);\n`,
    );
    entry = `${join(dir, 'enhance30.mjs')}:Enhance30`;
  }
  writeFileSync(
    join(dir, 'config.yaml'),
    `model: ${model}\noutputWidth: ${WIDTH}\noutputHeight: ${HEIGHT}\nframesPerStep: ${FRAMES[model] ?? 4}\nworldSize: 1\ndevices: ${cpu ? 'cpu' : 'auto'}\nbackend: torch\ncallTimeoutMs: 120000\ncompile: ${COMPILE}\n` +
      (cpu ? 'startTimeoutMs: 120000\n' : 'startTimeoutMs: 300000\n') +
      (PYTHON ? `python: ${PYTHON}\n` : ''),
  );
  const video = codec ? `, video: { codec: h264, framerate: ${fps30 ? SESSION_FPS : 60} }` : '';
  writeFileSync(
    join(dir, 'reactor.yaml'),
    `model: { name: enhance-serve, version: 0.0.1${cpu ? '' : ', resources: { gpu: { count: 1 } }'} }\nruntime:\n  import: ${entry}\n  config: config.yaml\n  session_grace_ms: ${fps30 ? 300 : 60000}\nserver: { port: 0, encoding: ${encoding}${video} }\n`,
  );
  const child = spawn(process.execPath, [join(root, 'packages/cli/dist/main.js'), 'run', '--manifest', join(dir, 'reactor.yaml')], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...env, UV_THREADPOOL_SIZE: env.SERVE_UV_THREADS ?? env.UV_THREADPOOL_SIZE ?? String(availableParallelism()) },
  });
  let err = '';
  const warnings = [];
  child.stderr.on('data', (d) => {
    err += d;
    if (err.length > 200_000) err = err.slice(-100_000);
    for (const line of String(d).split('\n')) {
      if (/warning:|compile/.test(line)) warnings.push(line.slice(0, 300));
      if (/weights ESRGAN|warning:|Error|Traceback/.test(line)) note(`server ${child.pid}: ${line.slice(0, 300)}`);
    }
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await Promise.race([exited, sleep(10_000).then(() => child.kill('SIGKILL'))]);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', () => child.kill('SIGKILL'));
  try {
    const url = await new Promise((res, rej) => {
      let out = '';
      const timer = setTimeout(
        () => rej(new Error(`reactor run printed no URL within ${firstS} s:\n${err.slice(-1500)}`)),
        Math.min(firstS * 1000, Math.max(1000, left())),
      );
      child.stdout.on('data', (d) => {
        out += d;
        const m = /Viewer: (\S+)/.exec(out);
        if (m) {
          clearTimeout(timer);
          res(m[1]);
        }
      });
      child.once('exit', (c) => {
        clearTimeout(timer);
        rej(new Error(`reactor run exited ${c}:\n${err.slice(-1500)}`));
      });
    });
    return { url, stop, pid: child.pid, warnings, stderr: () => err };
  } catch (e) {
    await stop();
    throw e;
  }
}

/** A client of `url` counting frames (and their arrival intervals) once `enhance_info` came and `warm` frames arrived. */
async function openClient(url, { codec, warm = 10, firstS = 240, needInfo = true } = {}) {
  const client = await connect(url, { WebSocket, reconnect: false });
  const c = { client, info: null, enc: {}, frames: 0, bytes: 0, arrivals: [], dropped: 0, stepMs: [], counting: false, error: null };
  client.on('message', (m) => {
    if (m.name === 'enhance_info') c.info = m.data;
    if (m.name === 'model_unavailable') c.error = `model_unavailable: ${m.data.reason}`;
  });
  client.on('session', (s) => {
    if (s.error) c.error = `session: ${JSON.stringify(s.error).slice(0, 300)}`;
  });
  client.on('stats', (st) => {
    c.dropped = st.dropped;
    if (c.counting && st.steps > 0) c.stepMs.push(st.stepMs);
  });
  let seen = 0;
  client.on('frame', (f) => {
    seen++;
    if (!c.counting) return;
    c.frames++;
    c.enc[f.encoding] = (c.enc[f.encoding] ?? 0) + 1;
    c.bytes += f.payload?.byteLength ?? 0;
    c.arrivals.push(performance.now());
  });
  if (codec) await client.selectVideo(codec);
  const end = Date.now() + Math.min(firstS * 1000, Math.max(0, left()));
  // A later client of a session already streaming gets no enhance_info (it comes when a session starts or what runs changes).
  while (((needInfo && c.info === null) || seen < warm) && c.error === null) {
    if (Date.now() > end) throw new Error(`no ${needInfo && c.info === null ? 'enhance_info' : `${warm} frames`} within ${firstS} s (${seen} frames)`);
    await sleep(20);
  }
  if (c.error) throw new Error(c.error);
  return c;
}

/** Counts a window on every client at once; returns one summary a client. */
async function window(clients, seconds) {
  for (const c of clients) {
    c.frames = 0;
    c.bytes = 0;
    c.arrivals = [];
    c.enc = {};
    c.stepMs = [];
    c.dropped0 = c.dropped;
    c.counting = true;
  }
  const t0 = Date.now();
  const start = performance.now();
  await sleep(seconds * 1000);
  const s = (performance.now() - start) / 1000;
  for (const c of clients) c.counting = false;
  const gpu = gpuOver(t0, Date.now());
  return {
    gpu,
    each: clients.map((c) => {
      const gaps = c.arrivals.slice(1).map((t, i) => t - c.arrivals[i]);
      return {
        fps: r2(c.frames / s),
        intervalP50Ms: r2(pct(gaps, 50)),
        intervalP99Ms: r2(pct(gaps, 99)),
        intervalMaxMs: r2(gaps.length ? Math.max(...gaps) : null),
        mbPerSec: r2(c.bytes / s / 1e6),
        stepMsMean: c.stepMs.length ? r2(c.stepMs.reduce((a, x) => a + x, 0) / c.stepMs.length) : null,
        framesDroppedForClient: c.dropped - c.dropped0,
        wireEncodings: c.enc,
        error: c.error,
      };
    }),
    seconds: r2(s),
  };
}

/** The server's /metrics counters of interest. */
async function scrape(url) {
  const out = {};
  try {
    const text = await (await fetch(new URL('/metrics', url), { signal: AbortSignal.timeout(5000) })).text();
    for (const m of text.matchAll(/^reactor_frames_dropped_total\{reason="(\w+)"\} (\d+)/gm)) out[`dropped_${m[1]}`] = Number(m[2]);
    for (const m of text.matchAll(/^reactor_frames_(emitted|sent)_total(?:\{[^}]*\})? (\d+)/gm)) out[m[1]] = (out[m[1]] ?? 0) + Number(m[2]);
  } catch {
    // no metrics
  }
  return out;
}

async function delivered(model) {
  const rows = [];
  const byServer = [];
  if (ENCODINGS.some((e) => e !== 'rgb')) byServer.push({ encoding: 'jpeg', modes: ENCODINGS.filter((e) => e !== 'rgb') });
  if (ENCODINGS.includes('rgb')) byServer.push({ encoding: 'rgb', modes: ['rgb'] });
  for (const { encoding, modes } of byServer) {
    if (left() < 40_000) {
      emit({ bench: 'serve.delivered', model, encoding, skipped: 'out of time' });
      continue;
    }
    const t0 = Date.now();
    let server;
    try {
      server = await startServer({ model, encoding, codec: modes.includes('h264') });
      const upMs = Date.now() - t0;
      let info = null;
      for (const mode of modes) {
        if (left() < 15_000) {
          emit({ bench: 'serve.delivered', model, encoding: mode, skipped: 'out of time' });
          continue;
        }
        const c = await openClient(server.url, { codec: mode === 'h264' ? 'h264' : undefined, needInfo: info === null });
        info ??= c.info;
        const before = await scrape(server.url);
        const w = await window([c], SECONDS);
        const after = await scrape(server.url);
        const d = (k) => (after[k] ?? 0) - (before[k] ?? 0);
        c.client.close();
        const row = {
          bench: 'serve.delivered',
          model,
          encoding: mode,
          framesPerStep: FRAMES[model],
          output: `${WIDTH}x${HEIGHT}`,
          compile: COMPILE,
          running: info?.ranks?.[0]?.compile ?? null,
          serverUpMs: upMs,
          seconds: w.seconds,
          ...w.each[0],
          emittedFps: r2(d('emitted') / w.seconds),
          encoderBusyDrops: d('dropped_encoder_busy'),
          slowClientDrops: d('dropped_slow_client'),
          gpu: w.gpu,
          adapter: info?.ranks?.[0]?.adapter ?? null,
          warnings: server.warnings.filter((l) => /warning:/.test(l)).slice(0, 5),
          cpuMode: cpu,
        };
        rows.push(row);
        emit(row);
        await sleep(300);
      }
    } catch (e) {
      emit({ bench: 'serve.delivered', model, encoding, error: String(e.message).slice(0, 1500) });
    } finally {
      await server?.stop();
    }
  }
  return rows;
}

/**
 * Sessions of `model` on the one GPU: as many instances as the largest count tried start at once
 * (their compile and warm-up overlap; an instance without a client runs no steps), then for each
 * encoding the clients come, N at a time, until one session misses its deadline.
 */
async function sessions(model, encodings, until) {
  const mine = () => Math.min(left(), until - Date.now());
  const levels = LEVELS[model] ?? [1, 2];
  const deadlineMs = (1000 / SESSION_FPS) * 1.5;
  const t0 = Date.now();
  const started = await Promise.allSettled(
    Array.from({ length: levels[levels.length - 1] }, () =>
      startServer({ model, encoding: 'jpeg', fps30: true, codec: encodings.includes('h264'), firstS: 200 }),
    ),
  );
  const servers = started.filter((f) => f.status === 'fulfilled').map((f) => f.value);
  const notStarted = started.find((f) => f.status === 'rejected');
  note(`${model}: ${servers.length} of ${started.length} instances up after ${Date.now() - t0} ms`);
  try {
    for (const encoding of encodings) {
      const clients = [];
      let held = 0;
      let bound = null;
      try {
        for (const n of levels) {
          if (mine() < 12_000) {
            bound = `out of time before ${n} sessions`;
            break;
          }
          if (n > servers.length) {
            bound = `only ${servers.length} instances started: ${String(notStarted?.reason?.message).slice(0, 400)}`;
            break;
          }
          const opened = await Promise.allSettled(
            servers.slice(clients.length, n).map((s) => openClient(s.url, { codec: encoding === 'h264' ? 'h264' : undefined, firstS: 120 })),
          );
          for (const o of opened) if (o.status === 'fulfilled') clients.push(o.value);
          const bad = opened.find((o) => o.status === 'rejected');
          if (bad) {
            bound = `a session did not stream: ${String(bad.reason?.message).slice(0, 400)}`;
            break;
          }
          await sleep(1500);
          const w = await window(clients, SESSION_SECONDS);
          const fpsMin = Math.min(...w.each.map((e) => e.fps ?? 0));
          const p99Max = Math.max(...w.each.map((e) => e.intervalP99Ms ?? Infinity));
          const ok = fpsMin >= 29 && p99Max <= deadlineMs;
          emit({
            bench: 'serve.sessions',
            model,
            encoding,
            sessions: n,
            fpsTarget: SESSION_FPS,
            fpsMin: r2(fpsMin),
            fpsMean: r2(w.each.reduce((a, e) => a + (e.fps ?? 0), 0) / n),
            intervalP99MaxMs: r2(p99Max),
            deadlineMs: r2(deadlineMs),
            held: ok,
            droppedForClients: w.each.reduce((a, e) => a + e.framesDroppedForClient, 0),
            gpu: w.gpu,
            seconds: w.seconds,
            each: w.each.map((e) => [e.fps, e.intervalP99Ms]),
            cpuMode: cpu,
          });
          if (!ok) {
            bound = `${n} sessions: slowest ${r2(fpsMin)} fps, worst frame-interval p99 ${r2(p99Max)} ms`;
            break;
          }
          held = n;
        }
        if (bound === null) bound = `the largest count tried (${levels[levels.length - 1]}) held: raise SERVE_LEVELS_${model.toUpperCase()}`;
      } finally {
        for (const c of clients) c.client.close();
      }
      emit({
        bench: 'serve.sessions.count',
        model,
        encoding,
        sessionsHeld: held,
        criterion: `>= 29 fps each, frame-interval p99 <= ${r2(deadlineMs)} ms`,
        boundBy: bound,
        instancesUpMs: Date.now() - t0,
        cpuMode: cpu,
      });
      // The sessions end (grace 300 ms) before the next encoding's clients come.
      await sleep(1500);
    }
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
  }
}

smiStart();
try {
  if (PHASES.includes('delivered')) for (const m of MODELS) await delivered(m);
  if (PHASES.includes('sessions')) {
    // Each model gets its share of the time left (the last one what remains).
    for (const [i, m] of MODELS.entries()) if (left() > 45_000) await sessions(m, SESSION_ENCODINGS, Date.now() + left() / (MODELS.length - i));
  }
} finally {
  clearTimeout(smiTimer);
}
note('done');
process.exit(0);
