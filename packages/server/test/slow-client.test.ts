import { describe, expect, it } from 'vitest';
import type { Socket } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { type AppHost } from '@reactor/runtime';
import { serve } from '../src/index.js';
import { patternApp } from './fixtures/pattern-app.js';
import { until } from '@reactor/test-kit';
import { RawClient, stalledClient } from './fixtures/net.js';
import { quiet, useCleanups } from './fixtures/cleanups.js';

const cleanups = useCleanups();

// A real collection before each memory sample, so garbage awaiting GC is not read as a leak.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** How many frames the stalled client must have lost (about 5 s of stream): long past filling every buffer it has. */
const DROPS_WANTED = 150;
/** Upper bound for reaching {@link DROPS_WANTED}, for a loaded machine. */
const STALL_TIMEOUT_MS = 30_000;
const EMPTY = Buffer.alloc(0);
const FPS = 30;

describe('server: a client that stops reading', () => {
  it(
    `until ${DROPS_WANTED} of its frames were dropped holds bounded memory, gets its late frames dropped and counted, and the others miss none`,
    async () => {
      // Raw RGB 256x256 (196 KB a frame, ~5.9 MB/s): the stalled socket's kernel buffers fill within a second or two.
      const server = await serve(patternApp({ width: 256, height: 256, fps: FPS, chunk: 2 }), {
        port: 0,
        gracePeriodMs: 0,
        logger: quiet,
        encoding: 'rgb',
        statsIntervalMs: 250,
      });
      cleanups.push(() => server.close());
      await server.loaded;
      const others = [await new RawClient(server.wsUrl).open(), await new RawClient(server.wsUrl).open()];
      cleanups.push(() => others.forEach((o) => o.close()));
      await until(() => others.every((o) => o.binaries.length > 10), 'the stream to run', 10_000);
      const stalled: Socket = await stalledClient(server.port);
      cleanups.push(() => stalled.destroy());
      await until(() => server.connections().length === 3, 'the stalled client to join', 5000);

      const frameSize = 256 * 256 * 3;
      const start = others.map((o) => o.binaries.length);
      const emittedAt = (): number => Number(/reactor_frames_emitted_total\{track="main_video"\} (\d+)/.exec(metricsText)?.[1] ?? 0);
      let metricsText = await (await fetch(`${server.url}/metrics`)).text();
      const emitted0 = emittedAt();
      gc();
      const arrayBuffers0 = process.memoryUsage().arrayBuffers;
      let maxBuffered = 0;
      let maxQueued = 0;
      let maxArrayBuffers = 0;
      const t0 = performance.now();
      // Sample until the stalled client has lost DROPS_WANTED frames: its buffers are long full by then.
      let dropped = 0;
      while (dropped < DROPS_WANTED) {
        if (performance.now() - t0 > STALL_TIMEOUT_MS) throw new Error(`the stalled client lost only ${dropped} frames in ${STALL_TIMEOUT_MS} ms`);
        await new Promise((r) => setTimeout(r, 250));
        // Release what the healthy clients already got so the test itself does not hoard memory.
        for (const o of others) o.binaries.fill(EMPTY);
        const conns = server.connections();
        const s = conns.reduce((a, b) => (a.framesDropped >= b.framesDropped ? a : b));
        maxBuffered = Math.max(maxBuffered, s.bufferedBytes);
        maxQueued = Math.max(maxQueued, s.queuedFrames);
        dropped = s.framesDropped;
        gc();
        maxArrayBuffers = Math.max(maxArrayBuffers, process.memoryUsage().arrayBuffers - arrayBuffers0);
      }
      const seconds = (performance.now() - t0) / 1000;
      const got = others.map((o, i) => o.binaries.length - start[i]!);
      const conns = server.connections();
      const hostDropped = (server.host as AppHost).counters.framesDropped; // same tick as the snapshot
      metricsText = await (await fetch(`${server.url}/metrics`)).text();
      const emitted = emittedAt() - emitted0;
      const stalledInfo = conns.reduce((a, b) => (a.framesDropped >= b.framesDropped ? a : b));

      // The healthy clients received every frame the model played, and none was dropped for them.
      // (How fast it played is a speed figure, which a busy machine moves: bench/stream.bench.mjs,
      // `stream.fanout`, measures the delivered rate with a stalled client beside the readers.)
      expect(emitted).toBeGreaterThan(0);
      for (const g of got) expect(g).toBeGreaterThanOrEqual(emitted * 0.97);
      for (const c of conns) if (c !== stalledInfo) expect(c.framesDropped).toBe(0);
      // The stalled client lost most frames, counted, and its backlog stayed bounded.
      expect(stalledInfo.framesDropped).toBeGreaterThan(emitted * 0.5);
      expect(maxQueued).toBeLessThanOrEqual(2);
      expect(maxBuffered).toBeLessThanOrEqual(3 * frameSize + 64 * 1024);
      // Everything the test process holds (server, 2 readers, the model's frames) stays within a
      // few frames; keeping the stalled client's stream would grow ~5.9 MB a second.
      expect(maxArrayBuffers).toBeLessThan(32 * 1024 * 1024);
      // Counted in /metrics and told to the host (they go into the stalled client's stats).
      const metricDropped = Number(/reactor_frames_dropped_total\{reason="slow_client"\} (\d+)/.exec(metricsText)?.[1]);
      expect(metricDropped).toBeGreaterThanOrEqual(stalledInfo.framesDropped);
      expect(metricDropped).toBeLessThanOrEqual(stalledInfo.framesDropped + 5);
      expect(hostDropped).toBe(stalledInfo.framesDropped);
      console.info(
        JSON.stringify({
          seconds: +seconds.toFixed(1),
          fps: +(emitted / seconds).toFixed(1),
          emitted,
          got,
          stalled: stalledInfo,
          maxBuffered,
          maxQueued,
          maxArrayBuffers,
        }),
      );
    },
    STALL_TIMEOUT_MS + 25_000,
  );

  it('is cut off (unread_backlog) when what it does not read piles up beyond 16 x maxBufferedBytes', async () => {
    const server = await serve(patternApp({ width: 32, height: 32 }), {
      port: 0,
      gracePeriodMs: 0,
      logger: quiet,
      commandRate: 1e6,
      commandBurst: 1e6,
      maxBufferedBytes: 4096,
    });
    cleanups.push(() => server.close());
    await server.loaded;
    const other = await new RawClient(server.wsUrl).open();
    cleanups.push(() => other.close());
    const greedy = await stalledClient(server.port);
    cleanups.push(() => greedy.destroy());
    // 60 000 one-byte text messages (masked with a zero key, as clients must), never reading the
    // ~10 MB of error replies they earn.
    const one = Buffer.from([0x81, 0x80 | 1, 0, 0, 0, 0, 0x78]);
    greedy.write(Buffer.concat(Array.from({ length: 60_000 }, () => one)));
    await until(() => server.connections().length === 1, 'the greedy client to be cut off', 10_000);
    expect(await (await fetch(`${server.url}/metrics`)).text()).toMatch(/reactor_connections_rejected_total\{reason="unread_backlog"\} 1/);
    expect(await other.command('ok', 'set_speed', { speed: 1 })).toEqual({ type: 'reply', id: 'ok' });
  });
});

describe('server: many clients that stop reading', () => {
  it('stay within the server-wide budget for unsent bytes: the worst holders are cut (server_budget), a reading client keeps its stream', async () => {
    const budget = 2 * 1024 * 1024;
    // A per-connection cap and a read-pause bound far above the budget, so the budget is what acts.
    const server = await serve(patternApp({ width: 32, height: 32 }), {
      port: 0,
      gracePeriodMs: 0,
      logger: quiet,
      commandRate: 1e6,
      commandBurst: 1e6,
      maxBufferedBytes: 1024 * 1024,
      maxTotalBufferedBytes: budget,
      readPauseBytes: 1024 * 1024 * 1024,
    });
    cleanups.push(() => server.close());
    await server.loaded;
    const reader = await new RawClient(server.wsUrl).open();
    cleanups.push(() => reader.close());
    const greedy = await Promise.all([0, 1, 2].map(() => stalledClient(server.port)));
    cleanups.push(() => greedy.forEach((g) => g.destroy()));
    await until(() => server.connections().length === 4, 'every client to join', 5000);
    // 60 000 one-byte text messages each (masked with a zero key), never reading the ~10 MB of errors they earn.
    const one = Buffer.from([0x81, 0x80 | 1, 0, 0, 0, 0, 0x78]);
    const flood = Buffer.concat(Array.from({ length: 60_000 }, () => one));
    let maxUnsent = 0;
    // The server's own count (reactor_unsent_bytes), sampled while the flood is handled.
    const sampler = setInterval(() => void server.metrics.unsentBytes.get().then((g) => (maxUnsent = Math.max(maxUnsent, g.values[0]?.value ?? 0))), 5);
    cleanups.push(() => clearInterval(sampler));
    for (const g of greedy) g.write(flood);
    await until(() => server.connections().length === 1, 'the greedy clients to be cut', 20_000);
    clearInterval(sampler);
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toMatch(/reactor_connections_rejected_total\{reason="server_budget"\} 3/);
    expect(metrics).not.toMatch(/reactor_connections_rejected_total\{reason="unread_backlog"\} [1-9]/);
    expect(metrics).toMatch(/reactor_unsent_bytes \d+/);
    // Within the budget, up to the 64 KiB a client may hold before a control message cuts it.
    expect(maxUnsent).toBeLessThanOrEqual(budget + 64 * 1024);
    // The reader was never cut, still gets frames and answers.
    expect(metrics).toMatch(/reactor_frames_dropped_total\{reason="server_budget"\} 0/);
    const before = reader.binaries.length;
    await until(() => reader.binaries.length > before + 3, 'more frames for the reader', 5000);
    expect(await reader.command('ok', 'set_speed', { speed: 1 })).toEqual({ type: 'reply', id: 'ok' });
  });
});
