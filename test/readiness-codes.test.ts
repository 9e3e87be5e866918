/**
 * Readiness with real codes, through the server: the sample app (VideoApp, two CPU ranks on
 * wasm) reports a rank that stopped making progress during a call as `rank_stalled`, both in the
 * /health/ready body and as the `reactor_not_ready{reason="rank_stalled"}` metric, and is ready
 * again once the rank goes on.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { VideoApp } from '@reactor/app-video';
import { serve, type ReactorServer } from '@reactor/server';
import { quiet, useCleanups } from './fixtures/cleanups.js';
import { untilValue } from '@reactor/test-kit';

const weights = fileURLToPath(new URL('../apps/video/weights', import.meta.url));

async function probe(url: string): Promise<{ status: number; body: { ready: boolean; reasons: Array<{ code: string; message: string }> } }> {
  const res = await fetch(url);
  return { status: res.status, body: (await res.json()) as { ready: boolean; reasons: Array<{ code: string; message: string }> } };
}

/** The value of one sample line of /metrics (NaN when absent). */
async function metric(server: ReactorServer, sample: string): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${sample} `));
  return line === undefined ? NaN : Number(line.slice(sample.length + 1));
}

/** Stopped (state T) rank processes below this one. */
function stoppedRanks(): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (fields[0] === 'T' && Number(fields[1]) === process.pid && readFileSync(`/proc/${d}/cmdline`, 'utf8').includes('child-main')) out.push(Number(d));
    } catch {
      // gone while we looked
    }
  }
  return out;
}

describe('readiness codes through the server (sample app)', () => {
  const cleanups = useCleanups();

  it('a stalled rank is rank_stalled in /health/ready and in reactor_not_ready{reason}, and ready again when it goes on', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'readiness-codes-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const config = join(dir, 'config.yaml');
    writeFileSync(config, 'width: 32\nheight: 32\nframesPerChunk: 2\nworldSize: 2\ndevices: cpu\nbackend: wasm\n');
    // Rank 1 stops itself (SIGSTOP) in its second generate(); read by the runner the app builds.
    process.env['REACTOR_FAULTS'] = JSON.stringify([{ rank: 1, call: 2, kind: 'stall' }]);
    cleanups.push(() => delete process.env['REACTOR_FAULTS']);
    const server = await serve(VideoApp, { port: 0, gracePeriodMs: 0, statsIntervalMs: 0, logger: quiet, configPath: config, weightsPath: weights });
    cleanups.push(() => server.close());
    await server.loaded;
    expect(await probe(`${server.url}/health/ready`)).toEqual({ status: 200, body: { ready: true, reasons: [] } });

    const ws = new WebSocket(server.wsUrl);
    cleanups.push(() => ws.close());
    // The runner's stallMs (5 s by default) after the stop, the rank is named.
    const stalled = await untilValue(
      () => probe(`${server.url}/health/ready`),
      (r) => r.status === 503,
      'readiness to drop',
      25_000,
      50,
    );
    expect(stalled.body.ready).toBe(false);
    expect(stalled.body.reasons).toEqual([
      { code: 'rank_stalled', message: expect.stringMatching(/^rank 1 has made no progress for \d+\.\d s \(generate\)$/) },
    ]);
    expect(await metric(server, 'reactor_ready')).toBe(0);
    expect(await metric(server, 'reactor_not_ready{reason="rank_stalled"}')).toBe(1);
    expect(await metric(server, 'reactor_not_ready{reason="app_not_ready"}')).toBeNaN();

    const stopped = stoppedRanks();
    expect(stopped).toHaveLength(1);
    process.kill(stopped[0]!, 'SIGCONT');
    await untilValue(
      () => probe(`${server.url}/health/ready`),
      (r) => r.status === 200,
      'readiness to come back',
      30_000,
      50,
    );
    expect(await metric(server, 'reactor_not_ready{reason="rank_stalled"}')).toBeNaN();
  }, 60_000);

  it('an idle rank that freezes (SIGSTOP, no session) makes /health/ready 503 rank_stalled within ~5 s, and ready again on SIGCONT (issue 30)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'readiness-idle-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const config = join(dir, 'config.yaml');
    writeFileSync(config, 'width: 32\nheight: 32\nframesPerChunk: 2\nworldSize: 2\ndevices: cpu\nbackend: wasm\n');
    const server = await serve(VideoApp, { port: 0, gracePeriodMs: 0, statsIntervalMs: 0, logger: quiet, configPath: config, weightsPath: weights });
    cleanups.push(() => server.close());
    await server.loaded;
    expect((await probe(`${server.url}/health/ready`)).status).toBe(200);
    const ranks = rankProcesses();
    expect(ranks).toHaveLength(2);
    // Nobody connected: no call runs. Freeze rank 1 from outside, as a hung GPU driver or a debugger would.
    process.kill(ranks[1]!, 'SIGSTOP');
    cleanups.push(() => process.kill(ranks[1]!, 'SIGCONT'));
    const t = performance.now();
    const stalled = await untilValue(
      () => probe(`${server.url}/health/ready`),
      (r) => r.status === 503,
      'readiness to drop',
      15_000,
      50,
    );
    const took = performance.now() - t;
    expect(took).toBeLessThan(5000 + 4000); // the runner's stallMs (5 s), a check tick, and a loaded 2-core machine's delays
    expect(stalled.body.reasons).toEqual([{ code: 'rank_stalled', message: expect.stringMatching(/^rank \d has made no progress for \d+\.\d s \(idle\)$/) }]);
    process.kill(ranks[1]!, 'SIGCONT');
    await untilValue(
      () => probe(`${server.url}/health/ready`),
      (r) => r.status === 200,
      'readiness to come back',
      30_000,
      50,
    );
  }, 60_000);
});

/** The rank processes (child-main) this test process started, by pid order. */
function rankProcesses(): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[1]) === process.pid && readFileSync(`/proc/${d}/cmdline`, 'utf8').includes('child-main')) out.push(Number(d));
    } catch {
      // gone while we looked
    }
  }
  return out.sort((a, b) => a - b);
}
