#!/usr/bin/env node
// Clip ring benchmark (issue 27): what keeping the ring costs a server streaming 720p30 with
// sound, and how long a 30 s clip takes. One JSON object per line:
//
//   clips.cost     per viewer codec (jpeg, h264): the server process's CPU (cores, from
//                  /proc/<pid>/stat) and resident memory (VmRSS) with clips off and on, measured
//                  in alternating rounds in the same run (off, on, off, on...; medians), after the
//                  ring has filled; the ring's own bytes (reactor_clip_ring_bytes); the extra CPU
//                  in percent of one core and the extra memory against the ring's bytes.
//   clips.latency  time from sending `clip` (30 s of 720p) to the reply with its URL, and to
//                  the whole MP4 downloaded, p50 and max of CLIP_BENCH_CLIPS clips.
//   clips.mux      the muxing alone, in this process: a ring of 30 s of 720p30 (real H.264
//                  access units, a 60-frame group of pictures replayed, and AAC-sized packets)
//                  sliced and muxed into an MP4, 10 times: the first (cold) and the median.
//
// Each server runs in a child process (this file with --serve on|off), serving a synthetic
// 720p30 app (30 pre-made moving frames, a 48 kHz tone) with video.codec h264; one Node viewer
// in this process reads every frame (JPEG, or H.264 at the first tier, the one the ring shares).
// Env: CLIP_BENCH_FILL_S (seconds before measuring, default 32: the ring holds 30 s),
// CLIP_BENCH_MEASURE_S (default 8), CLIP_BENCH_ROUNDS (default 2), CLIP_BENCH_CLIPS (default 5),
// CLIP_BENCH_CODECS (default "jpeg,h264").
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { scrapeMetrics } from './lib/metrics-text.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const W = 1280;
const H = 720;
const FPS = 30;

if (process.argv[2] === '--serve') {
  const { Audio, Frames, Output, ReactorApp, Video, reactorApp } = await import('../packages/runtime/dist/index.js');
  const { serve } = await import('../packages/server/dist/index.js');
  const frames = [];
  for (let f = 0; f < FPS; f++) {
    const rgb = new Uint8Array(W * H * 3);
    for (let y = 0; y < H; y++)
      for (let x = 0; x < W; x++) {
        const p = (y * W + x) * 3;
        rgb[p] = (x + f * 8) & 255;
        rgb[p + 1] = (y * 2 + f * 4) & 255;
        rgb[p + 2] = ((x ^ y) + f * 16) & 255;
      }
    frames.push(rgb);
  }
  class BenchOutput extends Output {}
  Video({ width: W, height: H })(BenchOutput.prototype, 'mainVideo');
  Audio({ sampleRate: 48_000 })(BenchOutput.prototype, 'sound');
  class BenchApp extends ReactorApp {
    i = 0;
    s = 0;
    generate() {
      const sound = new Int16Array(48_000 / FPS);
      for (let k = 0; k < sound.length; k++) sound[k] = Math.round(6000 * Math.sin((2 * Math.PI * 440 * this.s++) / 48_000));
      return new BenchOutput({ mainVideo: new Frames(frames[this.i++ % frames.length], [1, H, W, 3]), sound });
    }
  }
  reactorApp({ output: BenchOutput, fps: FPS, bufferSize: 4, name: 'clips-bench' })(BenchApp);
  const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
  const dir = process.argv[4];
  const server = await serve(BenchApp, {
    port: 0,
    logger: quiet,
    video: { codec: 'h264' },
    ...(process.argv[3] === 'on' && { recording: { dir, minFreeBytes: 0 } }),
  });
  process.stdout.write(`${JSON.stringify({ url: server.url })}\n`);
  process.on('SIGTERM', () => void server.close().then(() => process.exit(0)));
} else {
  const serverRequire = createRequire(join(here, '..', 'packages', 'server', 'package.json'));
  const { WebSocket } = serverRequire('ws');
  const { connect } = await import('../packages/client/dist/index.js');
  const FILL_S = Number(process.env.CLIP_BENCH_FILL_S ?? 32);
  const MEASURE_S = Number(process.env.CLIP_BENCH_MEASURE_S ?? 8);
  const ROUNDS = Number(process.env.CLIP_BENCH_ROUNDS ?? 2);
  const CLIPS = Number(process.env.CLIP_BENCH_CLIPS ?? 5);
  const CODECS = (process.env.CLIP_BENCH_CODECS ?? 'jpeg,h264').split(',');
  const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const r1 = (x) => Math.round(x * 10) / 10;
  const r3 = (x) => Math.round(x * 1000) / 1000;
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const ticks = 100; // USER_HZ
  const cpuTicks = (pid) => {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return Number(f[11]) + Number(f[12]);
  };
  const rssBytes = (pid) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) * 1024;

  async function phase(codec, mode, latency) {
    const dir = mkdtempSync(join(tmpdir(), 'reactor-clips-bench-'));
    const child = spawn(process.execPath, [fileURLToPath(import.meta.url), '--serve', mode, dir], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      const url = await new Promise((res, rej) => {
        let out = '';
        child.stdout.on('data', (d) => {
          out += d;
          const m = /\{"url":"([^"]+)"\}/.exec(out);
          if (m) res(m[1]);
        });
        child.once('exit', (c) => rej(new Error(`bench server exited with ${c}`)));
      });
      const client = await connect(url, { WebSocket, reconnect: false });
      if (codec === 'h264') await client.selectVideo('h264');
      let frames = 0;
      client.on('frame', () => frames++);
      await sleep(FILL_S * 1000);
      const c0 = cpuTicks(child.pid);
      const f0 = frames;
      const t0 = performance.now();
      const rss = [];
      for (let i = 0; i < MEASURE_S * 4; i++) {
        await sleep(250);
        rss.push(rssBytes(child.pid));
      }
      const secs = (performance.now() - t0) / 1000;
      const cores = (cpuTicks(child.pid) - c0) / ticks / secs;
      const fps = (frames - f0) / secs;
      let ringBytes = 0;
      if (mode === 'on') {
        ringBytes = (await scrapeMetrics(url)).get('reactor_clip_ring_bytes') ?? 0;
      }
      const result = { cores, rss: median(rss), fps, ringBytes };
      if (latency) {
        const reply = [];
        const full = [];
        let last;
        for (let i = 0; i < CLIPS; i++) {
          const s = performance.now();
          last = await client.clip({ seconds: 30 });
          reply.push(performance.now() - s);
          const res = await fetch(last.url);
          await res.arrayBuffer();
          full.push(performance.now() - s);
          await sleep(300);
        }
        result.latency = { reply, full, last };
      }
      client.close();
      return result;
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => (child.exitCode !== null ? r() : child.once('exit', r)));
      rmSync(dir, { recursive: true, force: true });
    }
  }

  {
    const { webCodecsEncoderFactory } = await import('../packages/server/dist/index.js');
    const { MediaRing } = await import('../packages/server/dist/recording/media-ring.js');
    const { muxClip } = await import('../packages/server/dist/recording/mp4.js');
    const { annexBToAvcc, avcDecoderConfigurationRecord } = await import('../packages/server/dist/recording/avc.js');
    // The native encoder's callbacks do not keep the event loop alive.
    const keep = setInterval(() => {}, 1000);
    const enc = await webCodecsEncoderFactory({ codec: 'h264', width: W, height: H, bitrate: 4_000_000, framerate: FPS });
    const rgb = new Uint8Array(W * H * 3);
    const gop = [];
    for (let i = 0; i < 60; i++) {
      for (let p = 0; p < rgb.length; p += 3) rgb[p] = (p / 3 + i * 7) % 256;
      gop.push(await enc.encode(rgb, Math.round((i * 1e6) / FPS), i === 0));
    }
    enc.close();
    // As the server's ring holds them: length-prefixed, with the stream's avcC.
    const units = gop.map((c) => ({ ...annexBToAvcc(c.data), key: c.key }));
    const ring = new MediaRing(30, 64 * 2 ** 20);
    const config = { codec: 'avc1.42c01f', width: W, height: H, description: avcDecoderConfigurationRecord(units[0].sps, units[0].pps) };
    let a = 0;
    for (let i = 0; i < 30 * FPS; i++) {
      const src = units[i % 60];
      const ptsUs = Math.round((i * 1e6) / FPS);
      ring.pushVideo({ data: src.data.slice(), key: src.key, ptsUs, config });
      for (; a <= ptsUs; a += 1024e6 / 48_000) ring.pushAudio({ data: new Uint8Array(300), ptsUs: Math.round(a), durationUs: 21_333 });
    }
    const audio = { codec: 'mp4a.40.2', sampleRate: 48_000, numberOfChannels: 1, description: new Uint8Array([0x11, 0x88]) };
    const times = [];
    let bytes = 0;
    for (let k = 0; k < 10; k++) {
      const t = performance.now();
      bytes = (await muxClip(ring.slice(30), audio)).byteLength;
      times.push(performance.now() - t);
    }
    clearInterval(keep);
    emit({
      bench: 'clips.mux',
      seconds: 30,
      size: `${W}x${H}`,
      frames: ring.frames,
      mib: r1(bytes / 2 ** 20),
      firstMs: Math.round(times[0]),
      p50Ms: Math.round(median(times)),
      loadAvg1m: r1(loadavg()[0]),
    });
  }

  for (const codec of CODECS) {
    const off = [];
    const on = [];
    for (let round = 0; round < ROUNDS; round++) {
      off.push(await phase(codec, 'off', false));
      on.push(await phase(codec, 'on', codec === 'h264' && round === 0));
    }
    const cOff = median(off.map((r) => r.cores));
    const cOn = median(on.map((r) => r.cores));
    const mOff = median(off.map((r) => r.rss));
    const mOn = median(on.map((r) => r.rss));
    const ring = median(on.map((r) => r.ringBytes));
    emit({
      bench: 'clips.cost',
      viewerCodec: codec,
      size: `${W}x${H}`,
      fps: FPS,
      viewerFps: r1(median([...off, ...on].map((r) => r.fps))),
      coresOff: r3(cOff),
      coresOn: r3(cOn),
      extraCpuPctOfCore: r1((cOn - cOff) * 100),
      rssOffMiB: r1(mOff / 2 ** 20),
      rssOnMiB: r1(mOn / 2 ** 20),
      extraRssMiB: r1((mOn - mOff) / 2 ** 20),
      ringMiB: r1(ring / 2 ** 20),
      extraRssOverRing: r3((mOn - mOff) / ring),
      rounds: ROUNDS,
      loadAvg1m: r1(loadavg()[0]),
    });
    const lat = on.find((r) => r.latency)?.latency;
    if (lat) {
      emit({
        bench: 'clips.latency',
        seconds: 30,
        size: `${W}x${H}`,
        clipDurationS: lat.last.durationS,
        clipMiB: r1(lat.last.bytes / 2 ** 20),
        replyMsP50: Math.round(median(lat.reply)),
        replyMsMax: Math.round(Math.max(...lat.reply)),
        downloadedMsP50: Math.round(median(lat.full)),
        downloadedMsMax: Math.round(Math.max(...lat.full)),
        clips: lat.reply.length,
      });
    }
  }
}
