#!/usr/bin/env node
// enhance.fps on the GPU machine (issue 12), run from an unpacked bundle by scripts/gpu/enhance.sh:
//   ./run.sh node scripts/gpu/enhance.mjs
// For each world size (1, 2) and split (tiles, frames; one rank: tiles only) it starts
// `reactor run` serving the enhance app in a child process, connects a client from this
// process (outside the server), and for each model (slim, medium, thick) switches to it with
// set_model, lets it warm up, and counts the frames the client receives while sampling
// nvidia-smi per GPU. One JSON object per line on stdout; progress on stderr.
//
// Environment (defaults for the 2 x H200 host):
//   ENHANCE_CPU=1              rehearsal on a machine without GPU: CPU ranks, wasm, 32x20 output, 3 s windows
//   ENHANCE_MODELS             slim,medium,thick
//   ENHANCE_WORLD_SIZES        1,2
//   ENHANCE_SPLITS             tiles,frames
//   ENHANCE_WIDTH/HEIGHT       1280 / 720 (output size; the model input is a quarter of it: x4)
//   ENHANCE_FRAMES             frames per step (4)
//   ENHANCE_SECONDS            measured window per model (12)
//   ENHANCE_WARMUP_SECONDS     after the first frame of a model, before the window (3)
//   ENHANCE_ENCODING           jpeg (what a browser gets) or rgb
//   ENHANCE_PIPELINE           auto (on for GPU ranks) | on | off: pipelined steps
//   ENHANCE_BACKEND            the app's backend (default webgpu, wasm with ENHANCE_CPU=1); torch: Python ranks
//   ENHANCE_PYTHON             the interpreter of torch ranks (the app's `python` key; default REACTOR_PYTHON / python3)
//   ENHANCE_FIRST_FRAME_S      how long a model may take to its first frame (180: tfjs compiles shaders)
//   ENHANCE_CRASH=1            after the models of a one-rank server: SIGKILL a rank mid-step, time until the
//                              client is told, what is left behind (processes, /dev/shm), and that frames resume
//   ENHANCE_LATENCY=1          after each model's fps window: command-to-pixel (issue 26), see measureLatency
//   ENHANCE_LATENCY_COMMANDS   how many set_side_by_side toggles (40; 8 with ENHANCE_CPU=1)
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { connect } from '../../packages/client/dist/index.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
// ws as the server package resolves it: hoisted in the bundle, under .pnpm in a checkout.
const wsModule = await import(pathToFileURL(createRequire(join(root, 'packages/server/package.json')).resolve('ws')).href);
const WebSocket = wsModule.WebSocket ?? wsModule.default;
const env = process.env;
const cpu = env.ENHANCE_CPU === '1';
const list = (v, d) =>
  (v ?? d)
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
const MODELS = list(env.ENHANCE_MODELS, 'slim,medium,thick');
const WORLD_SIZES = list(env.ENHANCE_WORLD_SIZES, '1,2').map(Number);
const SPLITS = list(env.ENHANCE_SPLITS, 'tiles,frames');
const WIDTH = Number(env.ENHANCE_WIDTH ?? (cpu ? 32 : 1280));
const HEIGHT = Number(env.ENHANCE_HEIGHT ?? (cpu ? 20 : 720));
const FRAMES = Number(env.ENHANCE_FRAMES ?? (cpu ? 2 : 4));
const SECONDS = Number(env.ENHANCE_SECONDS ?? (cpu ? 3 : 12));
const WARMUP = Number(env.ENHANCE_WARMUP_SECONDS ?? (cpu ? 1 : 3));
const ENCODING = env.ENHANCE_ENCODING ?? 'jpeg';
const PIPELINE = env.ENHANCE_PIPELINE ?? 'auto';
const BACKEND = env.ENHANCE_BACKEND ?? (cpu ? 'wasm' : 'webgpu');
const PYTHON = env.ENHANCE_PYTHON;
const CRASH = env.ENHANCE_CRASH === '1';
const FIRST_S = Number(env.ENHANCE_FIRST_FRAME_S ?? 180);
const LATENCY = env.ENHANCE_LATENCY === '1';
const LATENCY_COMMANDS = Number(env.ENHANCE_LATENCY_COMMANDS ?? (cpu ? 8 : 40));
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const note = (m) => process.stderr.write(`[enhance ${new Date().toISOString().slice(11, 19)}] ${m}\n`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const percentile = (sorted, p) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : null);
const mean = (xs) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
const r2 = (x) => (x === undefined || x === null || Number.isNaN(x) ? null : Math.round(x * 100) / 100);

/** One nvidia-smi sample per GPU (empty without nvidia-smi), without blocking the client's event loop. */
function smi() {
  return new Promise((res) =>
    execFile('nvidia-smi', ['--query-gpu=index,utilization.gpu,memory.used', '--format=csv,noheader,nounits'], { timeout: 5000 }, (err, out) => {
      if (err) return res([]);
      res(
        out
          .trim()
          .split('\n')
          .map((l) => l.split(',').map((s) => Number(s.trim())))
          .map(([index, util, mem]) => ({ index, util, mem })),
      );
    }),
  );
}

/** Starts `reactor run` for one world size and split; resolves to its URL and a stop function. */
async function startServer(worldSize, split) {
  const dir = mkdtempSync(join(tmpdir(), 'enhance-gpu-'));
  const devices = cpu ? 'cpu' : 'auto';
  writeFileSync(
    join(dir, 'config.yaml'),
    `model: ${MODELS[0]}\noutputWidth: ${WIDTH}\noutputHeight: ${HEIGHT}\nframesPerStep: ${FRAMES}\nsplit: ${split}\nworldSize: ${worldSize}\ndevices: ${devices}\nbackend: ${BACKEND}\ncallTimeoutMs: 120000\npipeline: ${PIPELINE}\n` +
      (PYTHON ? `python: ${PYTHON}\n` : ''),
  );
  writeFileSync(
    join(dir, 'reactor.yaml'),
    `model: { name: enhance-gpu, version: 0.0.1, resources: { gpu: { count: ${worldSize} } } }\nruntime:\n  import: ${join(root, 'apps/enhance/dist/index.js')}:EnhanceApp\n  config: config.yaml\nserver: { port: 0, encoding: ${ENCODING} }\n`,
  );
  const child = spawn(process.execPath, [join(root, 'packages/cli/dist/main.js'), 'run', '--manifest', join(dir, 'reactor.yaml')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr.on('data', (d) => {
    err += d;
    for (const line of String(d).split('\n')) if (/rank 0 of|weights ESRGAN|error|Error|not used|Traceback/.test(line)) note(`server: ${line.slice(0, 400)}`);
  });
  const url = await new Promise((res, rej) => {
    let out = '';
    const timer = setTimeout(() => rej(new Error(`reactor run printed no URL within 180 s:\n${err.slice(-2000)}`)), 180_000);
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
      rej(new Error(`reactor run exited ${c}:\n${err.slice(-2000)}`));
    });
  }).catch((e) => {
    // A server that never came up leaves neither a process nor its config folder behind.
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    throw e;
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await Promise.race([exited, sleep(15_000).then(() => child.kill('SIGKILL'))]);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', () => child.kill('SIGKILL'));
  return { url, stop, stderr: () => err, pid: child.pid };
}

/** Pids of `pid`'s descendants (from /proc), children first. */
function descendants(pid) {
  const kids = new Map();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      kids.set(ppid, [...(kids.get(ppid) ?? []), Number(d)]);
    } catch {
      // gone meanwhile
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
const cmdline = (pid) => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    return '';
  }
};
const shmSegments = () => {
  try {
    return readdirSync('/dev/shm').filter((f) => f.startsWith('reactor-'));
  } catch {
    return [];
  }
};

/**
 * A rank of the serving runner SIGKILLed while steps run: how long until the client is told
 * (a session error, or the app's `runner_restarting` message), which processes and /dev/shm
 * segments of the killed runner are left 2 s later, and whether frames come again.
 */
async function crashRank(server, client, model) {
  let frames = 0;
  const offFrame = client.on('frame', () => frames++);
  const told = [];
  const offSession = client.on('session', (s) => {
    if (s.error) told.push({ what: 'session_error', at: performance.now(), detail: s.error });
  });
  const offMsg = client.on('message', (m) => {
    if (m.name === 'runner_restarting') told.push({ what: 'runner_restarting', at: performance.now(), detail: m.data });
  });
  try {
    const start = frames;
    const end0 = performance.now() + 60_000;
    while (frames < start + 10 && performance.now() < end0) await sleep(20);
    const ranks = descendants(server.pid).filter((p) => /reactor_worker|child-main/.test(cmdline(p)));
    // This server's runners' segments (named after the server's pid), not other processes'.
    const segments = shmSegments().filter((n) => n.startsWith(`reactor-${server.pid}.`));
    if (ranks.length === 0) throw new Error('no rank process found under reactor run');
    // Mid-step: wait for a frame to arrive, then kill half a step period later.
    const f = frames;
    while (frames === f) await sleep(1);
    await sleep(5);
    const victim = ranks[0];
    const t0 = performance.now();
    process.kill(victim, 'SIGKILL');
    const end = t0 + 10_000;
    while (told.length === 0 && performance.now() < end) await sleep(2);
    await sleep(2000);
    const left = ranks.filter(alive);
    const leftSegments = shmSegments().filter((s) => segments.includes(s));
    // The session ended with the error: a new client gets a new session on the rebuilt runner.
    const again = await connect(server.url, { WebSocket, reconnect: false });
    let more = 0;
    again.on('frame', () => more++);
    const t1 = performance.now();
    while (more < 10 && performance.now() - t1 < 120_000) await sleep(20);
    again.close();
    emit({
      bench: 'enhance.crash',
      backend: BACKEND,
      model,
      killed: { pid: victim, cmd: cmdline(victim).slice(0, 200) || '(gone)' },
      rankPids: ranks,
      toldAfterMs: told.length ? r2(told[0].at - t0) : null,
      toldBy: told.map((t) => ({ what: t.what, afterMs: r2(t.at - t0), detail: JSON.stringify(t.detail).slice(0, 300) })),
      targetMs: 200,
      ranksLeftAfter2s: left,
      shmSegmentsBefore: segments.length,
      shmSegmentsLeftAfter2s: leftSegments,
      newSessionFrames: more,
      tenFramesAgainAfterKillMs: more >= 10 ? r2(performance.now() - t0) : null,
    });
  } finally {
    offFrame();
    offSession();
    offMsg();
  }
}

/** Switches the running app to `model` and measures what the client receives. */
async function measureModel(client, model, worldSize, split, server) {
  let info = null;
  let frames = 0;
  let bytes = 0;
  const offInfo = client.on('message', (m) => {
    if (m.name === 'enhance_info' && m.data.model === model) info = m.data;
  });
  const offFrame = client.on('frame', (f) => {
    frames++;
    bytes += f.payload.byteLength;
  });
  // The app's step time (its `generate`: the runner call, all ranks plus the gather) as the
  // server reports it: with the delivered fps it tells how much of a step is outside the runner.
  let stepMs = [];
  // Frames the server dropped for this client (slow client: encoded faster than sent, or more
  // still encoding than it keeps), cumulative: read at the window's start and end.
  let dropped = 0;
  const offStats = client.on('stats', (st) => {
    if (st.steps > 0) stepMs.push(st.stepMs);
    dropped = st.dropped;
  });
  const unavailable = new Promise((res) =>
    client.on('message', (m) => {
      if (m.name === 'model_unavailable') res(m.data);
    }),
  );
  try {
    const t0 = performance.now();
    if (client.state.model !== model) await client.send('set_model', { model });
    const until = async (cond, ms, what) => {
      const end = performance.now() + ms;
      while (!cond()) {
        if (performance.now() > end) throw new Error(`${model}, ${worldSize} rank(s), ${split}: no ${what} within ${ms / 1000} s`);
        await sleep(20);
      }
    };
    const problem = await Promise.race([until(() => info !== null, FIRST_S * 1000, 'enhance_info').then(() => null), unavailable]);
    if (problem) throw new Error(`model_unavailable: ${problem.reason}`);
    const firstMs = performance.now() - t0;
    await sleep(WARMUP * 1000);
    frames = 0;
    bytes = 0;
    stepMs = [];
    const droppedAtStart = dropped;
    const samples = [];
    const start = performance.now();
    const end = start + SECONDS * 1000;
    while (performance.now() < end) {
      samples.push(await smi());
      await sleep(Math.max(0, Math.min(500, end - performance.now())));
    }
    const seconds = (performance.now() - start) / 1000;
    const got = frames;
    const gpus = new Map();
    for (const s of samples) for (const g of s) gpus.set(g.index, [...(gpus.get(g.index) ?? []), g]);
    emit({
      bench: 'enhance.fps',
      model,
      worldSize,
      split: worldSize === 1 ? 'one rank' : split,
      outputWidth: info.output_width,
      outputHeight: info.output_height,
      inputWidth: info.input_width,
      inputHeight: info.input_height,
      scale: info.scale,
      framesPerStep: FRAMES,
      pipeline: PIPELINE,
      backend: BACKEND,
      encoding: ENCODING,
      seconds: r2(seconds),
      framesDelivered: got,
      fps: r2(got / seconds),
      mbPerSec: r2(bytes / seconds / 1e6),
      firstFrameAfterSwitchMs: r2(firstMs),
      stepMsMean: stepMs.length ? r2(stepMs.reduce((a, x) => a + x, 0) / stepMs.length) : null,
      stepPeriodMs: got ? r2((seconds * 1000 * FRAMES) / got) : null,
      framesDroppedForClient: dropped - droppedAtStart,
      ranks: info.ranks,
      gpus: [...gpus].map(([index, s]) => ({
        index,
        utilMeanPct: r2(s.reduce((a, x) => a + x.util, 0) / s.length),
        utilMaxPct: Math.max(...s.map((x) => x.util)),
        memMiB: Math.max(...s.map((x) => x.mem)),
        samples: s.length,
      })),
      cpuMode: cpu,
    });
    return got / seconds;
  } finally {
    offInfo();
    offFrame();
    offStats();
  }
}

/** Prometheus text of the server's /metrics -> Map of "name{labels}" -> value (empty when it cannot be read). */
async function scrape(url) {
  const out = new Map();
  try {
    const text = await (await fetch(new URL('/metrics', url), { signal: AbortSignal.timeout(5000) })).text();
    for (const line of text.split('\n')) {
      if (line.startsWith('#') || line === '') continue;
      const i = line.lastIndexOf(' ');
      out.set(line.slice(0, i), Number(line.slice(i + 1)));
    }
  } catch {
    // no metrics: the server's view is left out
  }
  return out;
}

/** The server's view of one histogram between two scrapes: count, mean, and p50/p99 as bucket upper bounds, ms. */
function histogramDelta(before, after, name, labels) {
  const d = (k) => (after.get(k) ?? 0) - (before.get(k) ?? 0);
  const sel = labels ? `{${labels}}` : '';
  if (!after.has(`${name}_count${sel}`)) return null;
  const count = d(`${name}_count${sel}`);
  const buckets = [...after.keys()]
    .filter((k) => k.startsWith(`${name}_bucket{`) && k.includes(labels))
    .map((k) => {
      const le = /le="([^"]+)"/.exec(k)?.[1];
      return { le: le === '+Inf' ? Infinity : Number(le), n: d(k) };
    })
    .sort((a, b) => a.le - b.le);
  const at = (q) => buckets.find((b) => b.n >= q * count)?.le;
  return {
    count,
    meanMs: count ? r2((d(`${name}_sum${sel}`) / count) * 1000) : null,
    p50LeMs: count ? r2(at(0.5) * 1000) : null,
    p99LeMs: count ? r2(at(0.99) * 1000) : null,
  };
}

/**
 * Command-to-pixel (issue 26) on the running model: LATENCY_COMMANDS `set_side_by_side` toggles,
 * each sent at a random moment 300-700 ms after the last one's frames came, and for each:
 * - named: send -> delivery in this client of the frame whose seq the `applied` message names
 *   (what `command().applied` promises, and what the client reports to /metrics);
 * - shown: send -> delivery of the first frame whose width shows the new state (side by side
 *   doubles it): the pixel truth, to check the named frame against (named early: the named frame
 *   still had the old width; late: an earlier frame had the new one).
 * With the server's own view when /metrics has reactor_command_to_pixel_seconds, and its mean
 * per-step stage times (reactor_step_stage_seconds) over the same commands.
 */
async function measureLatency(client, model, worldSize, server) {
  const arrivals = new Map(); // seq -> { at, width }
  let lastWidth = 0;
  let frameCount = 0;
  let waitTruth = null; // { wanted: (width) => boolean, resolve }
  const offFrame = client.on('frame', (f) => {
    arrivals.set(f.seq, { at: f.receivedAt, width: f.width, n: ++frameCount });
    if (arrivals.size > 4000) arrivals.delete(arrivals.keys().next().value);
    lastWidth = f.width;
    if (waitTruth?.wanted(f.width)) {
      waitTruth.resolve({ at: f.receivedAt, seq: f.seq, n: frameCount });
      waitTruth = null;
    }
  });
  const until = async (cond, ms) => {
    const end = performance.now() + ms;
    while (!cond() && performance.now() < end) await sleep(2);
    return cond();
  };
  try {
    // Start from side_by_side off, with frames of the plain width flowing.
    await client.send('set_side_by_side', { side_by_side: false });
    await sleep(1500);
    const plain = lastWidth;
    if (!plain) throw new Error('no frames before the latency step');
    const before = await scrape(server.url);
    const trackerBefore = client.latency?.summary().samples ?? 0;
    const named = [];
    const shown = [];
    const offsets = []; // frames between the named one and the first one showing the change (0: exact)
    const queued = []; // frames delivered between the send and the named frame
    const replyMs = [];
    const outcomes = {};
    let on = false;
    for (let i = 0; i < LATENCY_COMMANDS; i++) {
      on = !on;
      const wantOn = on;
      const truth = new Promise((resolve) => (waitTruth = { wanted: (w) => (wantOn ? w > plain : w === plain), resolve }));
      const n0 = frameCount;
      const t0 = performance.now();
      const p = client.send('set_side_by_side', { side_by_side: wantOn });
      await p;
      replyMs.push(performance.now() - t0);
      const applied = await Promise.race([p.applied, sleep(30_000).then(() => ({ outcome: 'no_applied_in_30s' }))]);
      outcomes[applied.outcome] = (outcomes[applied.outcome] ?? 0) + 1;
      const seen = await Promise.race([truth, sleep(30_000).then(() => null)]);
      waitTruth = null;
      if (applied.outcome === 'applied') {
        // The named frame, or (dropped for this client) the first later one delivered.
        const delivered = () => [...arrivals].find(([seq]) => seq >= applied.seq);
        if (await until(() => delivered() !== undefined, 30_000)) {
          const [seq, a] = delivered();
          named.push(a.at - t0);
          queued.push(a.n - n0 - 1);
          if (seen) offsets.push(seen.seq - seq);
        }
      }
      if (seen) shown.push(seen.at - t0);
      await sleep(300 + Math.random() * 400);
    }
    if (on) await client.send('set_side_by_side', { side_by_side: false });
    await sleep(2500); // the client's last client_stats report reaches the server
    const after = await scrape(server.url);
    const stages = {};
    for (const k of after.keys()) {
      const m = /^reactor_step_stage_seconds_count\{stage="([^"]+)"\}$/.exec(k);
      if (!m) continue;
      const c = (after.get(k) ?? 0) - (before.get(k) ?? 0);
      const sum = (after.get(`reactor_step_stage_seconds_sum{stage="${m[1]}"}`) ?? 0) - (before.get(`reactor_step_stage_seconds_sum{stage="${m[1]}"}`) ?? 0);
      if (c > 0) stages[m[1]] = r2((sum / c) * 1000);
    }
    const stat = (xs) => {
      const s = [...xs].sort((a, b) => a - b);
      return { n: s.length, p50Ms: r2(percentile(s, 50)), p99Ms: r2(percentile(s, 99)), meanMs: r2(mean(s)), minMs: r2(s[0]), maxMs: r2(s.at(-1)) };
    };
    const offsetCounts = {};
    for (const o of offsets) offsetCounts[o] = (offsetCounts[o] ?? 0) + 1;
    const notApplied = Object.fromEntries(Object.entries(outcomes).filter(([k]) => k !== 'applied'));
    emit({
      bench: 'enhance.c2p',
      model,
      worldSize,
      backend: BACKEND,
      encoding: ENCODING,
      transport: 'websocket',
      framesPerStep: FRAMES,
      pipeline: PIPELINE,
      command: 'set_side_by_side',
      commands: LATENCY_COMMANDS,
      ...stat(named),
      outcomesNotApplied: notApplied,
      shown: stat(shown),
      namedMinusShownFrames: offsetCounts,
      framesQueuedBeforeNamed: { mean: r2(mean(queued)), max: queued.length ? Math.max(...queued) : null },
      replyMs: stat(replyMs),
      trackerSamples: (client.latency?.summary().samples ?? 0) - trackerBefore,
      server: histogramDelta(before, after, 'reactor_command_to_pixel_seconds', 'command="set_side_by_side",transport="websocket"'),
      serverStepMs: histogramDelta(before, after, 'reactor_step_duration_seconds', '')?.meanMs ?? null,
      serverStagesMs: Object.keys(stages).length ? stages : null,
      cpuMode: cpu,
    });
  } finally {
    waitTruth = null;
    offFrame();
  }
}

const t0 = performance.now();
emit({
  bench: 'enhance.setup',
  cpuMode: cpu,
  models: MODELS,
  worldSizes: WORLD_SIZES,
  splits: SPLITS,
  width: WIDTH,
  height: HEIGHT,
  framesPerStep: FRAMES,
  seconds: SECONDS,
  encoding: ENCODING,
  gpus: await smi(),
});
const results = {};
for (const worldSize of WORLD_SIZES) {
  for (const split of worldSize === 1 ? [SPLITS[0]] : SPLITS) {
    note(`starting ${worldSize} rank(s), split ${split}`);
    let server;
    try {
      server = await startServer(worldSize, split);
      const client = await connect(server.url, { WebSocket, reconnect: false });
      try {
        for (const model of MODELS) {
          try {
            const fps = await measureModel(client, model, worldSize, split, server);
            results[`${model}/${worldSize}/${split}`] = fps;
            note(`${model} ${worldSize} rank(s) ${split}: ${fps.toFixed(1)} fps`);
            if (LATENCY) {
              try {
                await measureLatency(client, model, worldSize, server);
              } catch (e) {
                emit({ bench: 'error.enhance.latency', model, worldSize, message: String(e?.stack ?? e), stderrTail: server.stderr().slice(-3000) });
              }
            }
          } catch (e) {
            emit({ bench: 'error.enhance.fps', model, worldSize, split, message: String(e?.stack ?? e), stderrTail: server.stderr().slice(-3000) });
          }
        }
        if (CRASH && worldSize === 1) {
          try {
            await crashRank(server, client, MODELS[MODELS.length - 1]);
          } catch (e) {
            emit({ bench: 'error.enhance.crash', message: String(e?.stack ?? e) });
          }
        }
      } finally {
        client.close();
      }
    } catch (e) {
      emit({ bench: 'error.enhance.server', worldSize, split, message: String(e?.stack ?? e), stderrTail: server?.stderr().slice(-3000) });
    } finally {
      await server?.stop();
    }
  }
}
for (const model of MODELS) {
  const one = results[`${model}/1/${SPLITS[0]}`];
  const two = Object.fromEntries(SPLITS.map((s) => [s, results[`${model}/2/${s}`]]));
  const best = Object.entries(two)
    .filter(([, v]) => v !== undefined)
    .sort((a, b) => b[1] - a[1])[0];
  emit({
    bench: 'enhance.scale',
    model,
    width: WIDTH,
    height: HEIGHT,
    fps1: r2(one),
    fps2: Object.fromEntries(Object.entries(two).map(([k, v]) => [k, r2(v)])),
    faster2: best?.[0] ?? null,
    ratio2over1: best && one ? r2(best[1] / one) : null,
  });
}
emit({ bench: 'enhance.done', totalSeconds: r2((performance.now() - t0) / 1000) });
process.exit(0);
