#!/usr/bin/env node
// Audio/video sync benchmark (issue 11's `av.sync`): a served app plays 512x512 video at 30 fps
// (JPEG-encoded once per frame by the server) with a 48 kHz mono soundtrack, 4 frames and their
// audio per step, to N Node clients over real WebSockets on 127.0.0.1. For every video frame the
// client looks up the audio chunk that plays with it and measures the skew between the two:
//
//   ptsSkew      audio pts - video pts (the presentation times the server stamps)
//   arrivalSkew  audio arrival - video arrival, at the client (when a client that presents on
//                arrival would show the picture and queue the sound)
//
// Target: |skew| <= one frame interval (33.3 ms). Samples are checked for continuity too (the
// soundtrack counts samples, so a lost or repeated one shows). Server and clients share this
// process, so both ends read one clock. Run after `pnpm build`: node bench/av.bench.mjs
import { Audio, Frames, Output, ReactorApp, Video, reactorApp } from '../packages/runtime/dist/index.js';
import { serve } from '../packages/server/dist/index.js';
import { decodeFrame, FrameEncoding } from '../packages/client/dist/index.js';
import { WebSocket } from '../packages/server/node_modules/ws/wrapper.mjs';

const W = 512;
const H = 512;
const FPS = 30;
const RATE = 48_000;
const CHUNK = 4;
const WARMUP_MS = 1500;
const MEASURE_MS = Number(process.env.AV_BENCH_MS ?? 8000);

const FRAMES = Array.from({ length: 8 }, (_, k) => {
  const rgb = new Uint8Array(W * H * 3);
  for (let i = 0; i < rgb.length; i += 3) {
    const x = (i / 3) % W;
    const y = Math.floor(i / 3 / W);
    rgb[i] = (x / 2 + k * 16) & 255;
    rgb[i + 1] = (y / 2) & 255;
    rgb[i + 2] = (128 + ((x + y) >> 3)) & 255;
  }
  return rgb;
});

class AvOutput extends Output {}
Video({ width: W, height: H })(AvOutput.prototype, 'mainVideo');
Audio({ sampleRate: RATE })(AvOutput.prototype, 'soundtrack');

class AvApp extends ReactorApp {
  i = 0;
  sample = 0;
  generate() {
    const rgb = new Uint8Array(CHUNK * W * H * 3);
    for (let f = 0; f < CHUNK; f++) rgb.set(FRAMES[this.i++ % FRAMES.length], f * W * H * 3);
    // The sample counter (k mod 32768) as the signal: a lost or repeated sample shows.
    const pcm = new Int16Array((CHUNK * RATE) / FPS);
    for (let s = 0; s < pcm.length; s++) pcm[s] = this.sample++ % 32768;
    return new AvOutput({ mainVideo: new Frames(rgb, [CHUNK, H, W, 3]), soundtrack: pcm });
  }
}
reactorApp({ output: AvOutput, fps: FPS, bufferSize: 8, name: 'av-bench' })(AvApp);

const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}
const r3 = (x) => Math.round(x * 1000) / 1000;

async function run(clients) {
  const server = await serve(AvApp, { port: 0, gracePeriodMs: 0, logger: quiet, encoding: 'jpeg', jpegQuality: 80 });
  await server.loaded;
  const start = performance.now();
  const states = [];
  for (let c = 0; c < clients; c++) {
    const st = { video: [], audio: [], samples: [], ws: new WebSocket(server.wsUrl) };
    st.ws.on('message', (data, isBinary) => {
      if (!isBinary) return;
      const at = performance.now();
      if (at - start < WARMUP_MS) return;
      const f = decodeFrame(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
      if (f.encoding === FrameEncoding.PcmS16le) {
        st.audio.push({ at, ptsMs: f.ptsMs });
        const pcm = new Int16Array(f.payload.buffer.slice(f.payload.byteOffset, f.payload.byteOffset + f.payload.byteLength));
        st.samples.push([f.seq, pcm[0], pcm.length]);
      } else {
        st.video.push({ at, ptsMs: f.ptsMs });
      }
    });
    states.push(st);
  }
  await new Promise((r) => setTimeout(r, WARMUP_MS + MEASURE_MS));
  for (const st of states) st.ws.close();
  await server.close();

  const arrival = [];
  const pts = [];
  let unmatched = 0;
  let gaps = 0;
  let frames = 0;
  let chunks = 0;
  for (const st of states) {
    frames += st.video.length;
    chunks += st.audio.length;
    // Both lists are in arrival order, which is pts order on one connection.
    let j = 0;
    for (const v of st.video) {
      // The chunk that plays with this frame: the one whose pts is nearest to the frame's.
      while (j + 1 < st.audio.length && Math.abs(st.audio[j + 1].ptsMs - v.ptsMs) <= Math.abs(st.audio[j].ptsMs - v.ptsMs)) j++;
      const a = st.audio[j];
      if (!a || Math.abs(a.ptsMs - v.ptsMs) > 1000 / FPS) {
        unmatched++;
        continue;
      }
      pts.push(Math.abs(a.ptsMs - v.ptsMs));
      arrival.push(Math.abs(a.at - v.at));
    }
    const s = st.samples.sort((x, y) => x[0] - y[0]);
    for (let i = 1; i < s.length; i++) if ((s[i - 1][1] + s[i - 1][2]) % 32768 !== s[i][1]) gaps++;
  }
  arrival.sort((a, b) => a - b);
  const interval = 1000 / FPS;
  const max = arrival.at(-1) ?? NaN;
  return {
    bench: 'av.sync',
    clients,
    width: W,
    height: H,
    fps: FPS,
    sampleRate: RATE,
    frameIntervalMs: r3(interval),
    framesMeasured: frames,
    audioChunks: chunks,
    framesWithoutAudio: unmatched,
    ptsSkewMaxMs: pts.length ? r3(Math.max(...pts)) : NaN,
    arrivalSkewP50Ms: r3(percentile(arrival, 50)),
    arrivalSkewP99Ms: r3(percentile(arrival, 99)),
    arrivalSkewMaxMs: r3(max),
    sampleGaps: gaps,
    targetMet: unmatched <= clients && gaps === 0 && max <= interval && Math.max(...pts) <= interval,
  };
}

for (const clients of [1, 4]) console.log(JSON.stringify(await run(clients)));
