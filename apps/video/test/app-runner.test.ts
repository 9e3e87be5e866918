// VideoApp in an in-process AppHost with real rank processes: readiness from the app's own
// hook, and a rank that dies while no call runs (paused) is noticed at once, reported to the
// clients, and replaced without ending the session.
import { readdirSync, readFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ServerMessage } from '@reactor/client';
import { AppHost, type Readiness } from '@reactor/runtime';
import { RecordingLogger, RecordingSink, command } from '@reactor/runtime/testing';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { until } from '@reactor/test-kit';
import { VideoApp } from '../src/app.js';

const here = dirname(fileURLToPath(import.meta.url));
const weights = resolve(here, '../weights');
const scratch = mkdtempSync(join(tmpdir(), 'video-app-runner-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const config = join(scratch, 'config.yaml');
writeFileSync(config, 'width: 32\nheight: 32\nframesPerChunk: 2\nworldSize: 2\ndevices: cpu\nbackend: wasm\n');

const hosts: AppHost[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.close()));
});

/** Live node processes below this one (the ranks), by walking /proc. */
function rankPids(): number[] {
  const parent = new Map<number, number>();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) continue;
      parent.set(Number(d), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone while we looked
    }
  }
  const below = (pid: number): boolean => {
    for (let p = parent.get(pid); p !== undefined && p > 1; p = parent.get(p)) if (p === process.pid) return true;
    return false;
  };
  const isRank = (pid: number): boolean => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('child-main');
    } catch {
      return false; // gone while we looked
    }
  };
  return [...parent.keys()].filter((pid) => below(pid) && isRank(pid));
}

describe('VideoApp: readiness and a rank that dies between calls', () => {
  it('reports not ready while it rebuilds, tells the clients, and streams again in the same session', async () => {
    const host = new AppHost(VideoApp, { statsIntervalMs: 0, gracePeriodMs: 0, weightsPath: weights, logger: new RecordingLogger() });
    hosts.push(host);
    let readinessAtNotice: Readiness | undefined;
    const sink = new (class extends RecordingSink {
      override message(msg: ServerMessage): void {
        if (msg.type === 'message' && msg.name === 'runner_restarting') readinessAtNotice = host.readiness();
        super.message(msg);
      }
    })();
    await host.load({ configPath: config });
    expect(host.readiness()).toEqual({ ready: true, reasons: [] });
    const client = host.connect(sink);
    await sink.waitForFrames(2, { timeoutMs: 30_000 });
    const welcome = sink.ofType('welcome')[0]!;

    // Paused: once a step has been refused, no call is in flight.
    expect((await client.command(command('1', 'set_paused', { paused: true }))).type).toBe('reply');
    const refused = host.counters.refusedSteps;
    await until(() => host.counters.refusedSteps > refused, 'a refused (paused) step');
    const before = rankPids();
    expect(before).toHaveLength(2);
    process.kill(before[1]!, 'SIGKILL');

    const notice = await sink.waitForMessage((m) => m.type === 'message' && m.name === 'runner_restarting', { timeoutMs: 10_000 });
    expect(notice).toMatchObject({
      data: { reason: expect.stringMatching(/^Rank 1 \(pid \d+\) was killed by SIGKILL during idle \(between calls\); a new runner is starting$/) },
    });
    expect(readinessAtNotice).toEqual({ ready: false, reasons: [{ code: 'runner_restarting', message: 'the video runner is restarting' }] });

    await until(() => host.readiness().ready, 'readiness to come back', 60_000);
    const after = rankPids();
    expect(after).toHaveLength(2);
    expect(after.some((p) => before.includes(p))).toBe(false);

    // Same session, same client: unpause and frames flow again.
    const framesBefore = sink.frames.length;
    await client.command(command('2', 'set_paused', { paused: false }));
    await until(() => sink.frames.length >= framesBefore + 2, 'frames after the rebuild');
    expect(sink.ofType('session').map((m) => m.session.state)).not.toContain('ended');
    expect(host.status).toMatchObject({ state: 'streaming', sessionId: welcome.session.sessionId });
    client.disconnect();
    await host.close();
    expect(rankPids()).toEqual([]);
  }, 120_000);
});
