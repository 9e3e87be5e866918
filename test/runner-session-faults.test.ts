/**
 * Runner faults as a client outside the project meets them (issue 22), through a served app that
 * keeps its ranks behind a SelfHealingRunner with the framework's defaults (no stallTimeoutMs, no
 * `stall` listener): a rank that stops (SIGSTOP) ends the session with a message naming it within
 * seconds, not at the 30 s call deadline; when the new runner cannot start, the next session says
 * why in its status instead of streaming nothing in silence.
 */
import 'reflect-metadata';
import { afterAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import type { SessionStatus } from '@reactor/client';
import { DistributedRunner, SelfHealingRunner } from '@reactor/distributed';
import { alive } from '@reactor/distributed/internal';
import { ApplicationError, Frames, Output, ReactorApp, type StepOutcome, Video, reactorApp } from '@reactor/runtime';
import { serve, type ReactorServer } from '@reactor/server';
import { quiet } from './fixtures/cleanups.js';
// @ts-expect-error a plain-JS fixture of the distributed package
import { EchoWorker } from '../packages/distributed/test/fixtures/echo.mjs';

const stoppedPids: number[] = [];
let server: ReactorServer | undefined;
afterAll(async () => {
  await server?.close();
  for (const pid of stoppedPids) if (alive(pid)) process.kill(pid, 'SIGKILL');
});

class RankOutput extends Output {
  @Video() mainVideo?: Video;
}

let builds = 0;

/** Two CPU ranks; rank 1 of the first runner stops itself in its 4th call; every later runner fails to start. */
@reactorApp({ name: 'ranks', output: RankOutput, fps: 30, bufferSize: 4 })
class RanksApp extends ReactorApp<never, { n: number }, unknown> {
  readonly runners = new SelfHealingRunner<{ n: number }, unknown, unknown>({
    name: 'the echo runner',
    logger: quiet,
    create: () => {
      builds++;
      return new DistributedRunner(EchoWorker, {
        worldSize: 2,
        devices: 'cpu',
        logger: quiet,
        loadArgs: {},
        // The first runner: rank 1 stops in its 4th call. Later ones cannot start in 1 ms (as with /dev/shm full).
        ...(builds === 1 ? { faults: [{ rank: 1, call: 4, kind: 'stall' as const }] } : { startTimeoutMs: 1 }),
      });
    },
  });

  override async load(): Promise<void> {
    await this.runners.start();
    stoppedPids.push(...this.runners.runner!.pids);
  }

  override processInput(): { n: number } {
    const refusal = this.runners.refusal();
    if (refusal !== undefined) throw new ApplicationError(refusal);
    return { n: 1 };
  }

  async generate(input: { n: number }): Promise<unknown> {
    return this.runners.generate(input);
  }

  override processOutput(outcome: StepOutcome<unknown>): Output {
    if (outcome.error !== undefined) {
      void this.runners.rebuild();
      throw outcome.error;
    }
    return new RankOutput({ mainVideo: new Frames(new Uint8Array(2 * 8 * 8 * 3), [2, 8, 8, 3]) });
  }

  override async unload(): Promise<void> {
    await this.runners.shutdown();
  }
}

describe('runner faults reach the session', () => {
  it('a stopped rank ends the session with a message naming it within seconds; a runner that cannot be rebuilt shows in the next session', async () => {
    server = await serve(RanksApp, { port: 0, gracePeriodMs: 0, logger: quiet });
    await server.loaded;
    const statuses: Array<{ at: number; s: SessionStatus }> = [];
    const ws = new WebSocket(server.wsUrl);
    ws.on('message', (d, bin) => {
      if (bin) return;
      const m = JSON.parse(String(d)) as { type: string; session?: SessionStatus };
      if (m.type === 'welcome' || m.type === 'session') statuses.push({ at: performance.now(), s: m.session! });
    });
    try {
      await expect.poll(() => statuses.some((x) => x.s.state === 'streaming'), { timeout: 20_000 }).toBe(true);
      const streamingAt = statuses.find((x) => x.s.state === 'streaming')!.at;
      // The rank stops in its 4th call (a fraction of a second in); the runner's stallMs is 5 s; the call deadline 30 s.
      await expect.poll(() => statuses.find((x) => x.s.error !== undefined), { timeout: 25_000 }).toBeDefined();
      const failed = statuses.find((x) => x.s.error !== undefined)!;
      expect(failed.at - streamingAt).toBeLessThan(15_000);
      expect(failed.s.error!.code).toBe('session_failed');
      expect(failed.s.error!.message).toMatch(/rank 1 \(in generate\) made no progress for \d+ ms/);
      expect(failed.s.error!.message).toContain('[worker_stalled]');
      // The rebuild cannot start a runner: the next session says so instead of streaming nothing in silence.
      // A failed session closes its clients' sockets: a viewer reconnects, and gets a new session.
      // The rebuild cannot start a runner: that session says so instead of streaming nothing in silence.
      const next: SessionStatus[] = [];
      const again = new WebSocket(server.wsUrl);
      again.on('message', (d, bin) => {
        if (bin) return;
        const m = JSON.parse(String(d)) as { type: string; session?: SessionStatus };
        if (m.type === 'welcome' || m.type === 'session') next.push(m.session!);
      });
      try {
        await expect.poll(() => next.at(-1)?.refused, { timeout: 30_000 }).toMatch(/^the echo runner could not be restarted: /);
        expect(next.at(-1)!.state).toBe('streaming');
      } finally {
        again.close();
      }
    } finally {
      ws.close();
    }
  }, 90_000);
});
