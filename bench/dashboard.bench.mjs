#!/usr/bin/env node
// Dashboard benchmarks (issue 26): what the live dashboard costs the server.
//
//   dashboard.sample   one sample (the server takes one a second): read every metric the dashboard
//                      shows from a server's registry by name and keep the interval's figures, us
//                      p50/p99 of 2000, on the registry of a real `ServerMetrics` plus the metrics of
//                      issue 26 at a realistic size (command-to-pixel for 10 commands x 2 transports,
//                      9 step stages, 8 GPU ranks, time to first frame), observed between samples;
//                      "share" is the p50 as a share of the second between samples
//   dashboard.data     `GET /dashboard/data`'s body: the whole 10-minute ring (what a page asks first)
//                      and one new sample (what it asks each second after), ms to build + JSON and KB
//   dashboard.live     `reactor run` of the sample app (128x96, 1 wasm rank) with one client for 30 s:
//                      the server's own figure of what a sample cost it (`now.sampleCostUs`: median and
//                      mean of the samples kept), and the step time it measured meanwhile
//
// Run after `pnpm build`: node bench/dashboard.bench.mjs
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect } from '../packages/client/dist/index.js';
import { WebSocket } from '../packages/server/node_modules/ws/wrapper.mjs';
import { ServerMetrics } from '../packages/server/dist/base/metrics.js';
import { DashboardSampler, DASHBOARD_HISTORY } from '../packages/server/dist/dashboard/dashboard.js';
import { DashboardEvents } from '../packages/server/dist/dashboard/dashboard-events.js';

const r3 = (x) => Math.round(x * 1000) / 1000;
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

const metrics = new ServerMetrics();
const reg = metrics.registry;
// prom-client's classes, as the server has them (the root package does not depend on prom-client).
const Histogram = metrics.stepSeconds.constructor;
const Gauge = metrics.clients.constructor;
const Counter = metrics.framesSent.constructor;
const LAT = [0.016, 0.033, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2, 5];
const c2p = new Histogram({ name: 'reactor_command_to_pixel_seconds', help: 'b', labelNames: ['command', 'transport'], buckets: LAT, registers: [reg] });
const ttff = new Histogram({ name: 'reactor_time_to_first_frame_seconds', help: 'b', labelNames: ['transport'], buckets: LAT, registers: [reg] });
const stage = new Histogram({
  name: 'reactor_step_stage_seconds',
  help: 'b',
  labelNames: ['stage'],
  buckets: [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5],
  registers: [reg],
});
const gpu = new Gauge({ name: 'reactor_rank_gpu_busy_ratio', help: 'b', labelNames: ['rank'], registers: [reg] });
const freezes = new Counter({ name: 'reactor_client_freezes_total', help: 'b', labelNames: ['transport'], registers: [reg] });
const dropped = new Counter({ name: 'reactor_client_frames_dropped_total', help: 'b', labelNames: ['transport'], registers: [reg] });
new Gauge({ name: 'reactor_load_progress_ratio', help: 'b', registers: [reg] }).set(1);
const STAGES = ['process_input', 'generate', 'runner_dispatch', 'runner_ranks', 'runner_handback', 'process_output', 'encode', 'queue', 'send'];
const COMMANDS = Array.from({ length: 10 }, (_, i) => `set_field_${i}`);
metrics.clients.set(4);
let steps = 0;
metrics.setStepCounter(() => steps);

/** What a second of a 30 fps stream with 4 clients adds to the metrics. */
function aSecondOfTraffic() {
  for (let f = 0; f < 30; f++) {
    steps++;
    metrics.stepSeconds.observe(0.012);
    metrics.framesEmitted.inc({ track: 'main_video' });
    metrics.framesSent.inc(4);
    metrics.encodeSeconds.observe(0.0016);
    for (const s of STAGES) stage.observe({ stage: s }, 0.001 + Math.random() * 0.002);
  }
  for (const command of COMMANDS.slice(0, 3)) c2p.observe({ command, transport: Math.random() < 0.5 ? 'websocket' : 'webrtc' }, 0.05 + Math.random() * 0.05);
  for (let r = 0; r < 8; r++) gpu.set({ rank: String(r) }, Math.random());
  freezes.inc({ transport: 'websocket' }, 0);
  dropped.inc({ transport: 'websocket' }, 1);
  metrics.commands.inc({ code: 'ok' }, 5);
}
for (const command of COMMANDS) for (const transport of ['websocket', 'webrtc']) c2p.observe({ command, transport }, 0.08);
ttff.observe({ transport: 'websocket' }, 0.4);

const clients = Array.from({ length: 4 }, (_, i) => ({
  id: `c${i}`,
  role: 'controller',
  transport: 'websocket',
  codec: 'jpeg',
  tier: '-',
  framesSent: 1000,
  framesDropped: 0,
  bufferedBytes: 0,
}));
const sampler = new DashboardSampler({
  registry: reg,
  events: new DashboardEvents(),
  clients: () => clients,
  status: () => ({ state: 'streaming', clients: 4 }),
});

const times = [];
for (let i = 0; i < 2200; i++) {
  aSecondOfTraffic();
  const t0 = performance.now();
  await sampler.sample();
  if (i >= 200) times.push((performance.now() - t0) * 1000);
}
const p50 = pct(times, 50);
console.log(
  JSON.stringify({
    bench: 'dashboard.sample',
    samples: times.length,
    p50_us: Math.round(p50),
    p99_us: Math.round(pct(times, 99)),
    share_of_second_pct: r3(p50 / 1e4),
    ring: sampler.size,
  }),
);

const build = async (since) => {
  const ts = [];
  let bytes = 0;
  for (let i = 0; i < 50; i++) {
    const t0 = performance.now();
    const body = JSON.stringify(await sampler.data(since));
    ts.push(performance.now() - t0);
    bytes = Buffer.byteLength(body);
  }
  return { ms_p50: r3(pct(ts, 50)), kb: r3(bytes / 1024) };
};
const full = await build(undefined);
const last = (await sampler.data()).t.at(-2);
const one = await build(last);
console.log(
  JSON.stringify({
    bench: 'dashboard.data',
    samples: DASHBOARD_HISTORY,
    full_ms_p50: full.ms_p50,
    full_kb: full.kb,
    since_ms_p50: one.ms_p50,
    since_kb: one.kb,
  }),
);

// Live: the sample app served by `reactor run`, one client watching.
const repo = join(dirname(fileURLToPath(import.meta.url)), '..');
const dir = mkdtempSync(join(tmpdir(), 'dashboard-bench-'));
writeFileSync(join(dir, 'config.yaml'), 'width: 128\nheight: 96\nframesPerChunk: 4\nworldSize: 1\ndevices: cpu\nbackend: wasm\n');
writeFileSync(
  join(dir, 'reactor.yaml'),
  `runtime:\n  import: ${join(repo, 'apps/video/dist/index.js')}:VideoApp\n  config: config.yaml\n  weights_path: ${join(repo, 'apps/video/weights')}\nserver: { port: 0, encoding: jpeg }\n`,
);
const child = spawn(process.execPath, [join(repo, 'packages/cli/dist/main.js'), 'run', '--manifest', join(dir, 'reactor.yaml')], {
  cwd: dir,
  stdio: ['ignore', 'pipe', 'pipe'],
});
try {
  const base = await new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    child.stdout.on('data', (d) => {
      out += d;
      const m = /Dashboard: (\S+)/.exec(out);
      if (m) resolve(new URL(m[1]).origin);
    });
    child.once('exit', (code) => reject(new Error(`reactor run exited with ${code}: ${err}`)));
  });
  const client = await connect(base, { WebSocket, reconnect: false });
  await new Promise((r) => setTimeout(r, 30_000));
  const d = await (await fetch(`${base}/dashboard/data`)).json();
  client.close();
  const steps = d.series['step/mean'].filter((v) => v !== null);
  console.log(
    JSON.stringify({
      bench: 'dashboard.live',
      samples: d.t.length,
      sample_cost_us_p50: d.now.sampleCostUs.p50,
      sample_cost_us_mean: d.now.sampleCostUs.mean,
      sample_cost_us_last: d.now.sampleCostUs.last,
      share_of_second_pct: r3(d.now.sampleCostUs.p50 / 1e4),
      step_ms_mean: r3(steps.reduce((a, b) => a + b, 0) / Math.max(1, steps.length)),
      fps_last: d.series['fps/main_video']?.at(-1) ?? null,
    }),
  );
} finally {
  await new Promise((r) => {
    child.once('exit', r);
    child.kill('SIGTERM');
  });
  rmSync(dir, { recursive: true, force: true });
}
