// SelfHealingRunner: what the sample apps share to keep a runner alive: a rank that dies between
// calls gets a new runner at once (the app is told why), a failure during a call is the caller's,
// and a rebuild that fails is kept for readiness and refused steps.
import { afterEach, describe, expect, it } from 'vitest';
import { DistributedRunner, SelfHealingRunner, WorkerCrashedError, WorkerStalledError } from '../src/index.js';
import { alive } from '../src/internal.js';
import { eventually, expectNothingLeft, fixture, quiet } from './helpers.js';

const { EchoWorker } = await fixture('echo');
const made: SelfHealingRunner[] = [];
afterEach(async () => {
  await Promise.allSettled(made.splice(0).map((r) => r.shutdown()));
});

function keeper(loadArgs: () => unknown = () => ({}), maxInFlight = 1) {
  const restarting: string[] = [];
  const runners: DistributedRunner[] = [];
  let rebuilds = 0;
  const r = new SelfHealingRunner<any, any, any>({
    name: 'the echo runner',
    logger: quiet,
    create: () => {
      const runner = new DistributedRunner(EchoWorker, { worldSize: 2, devices: 'cpu', logger: quiet, loadArgs: loadArgs(), maxInFlight });
      runners.push(runner);
      return runner;
    },
    onRestarting: (reason) => restarting.push(reason),
    onRebuild: () => rebuilds++,
  });
  made.push(r);
  return { r, restarting, runners, rebuilds: () => rebuilds };
}

describe('SelfHealingRunner', () => {
  it('builds a new runner at once when a rank dies between calls, and says why', async () => {
    const { r, restarting, runners, rebuilds } = keeper();
    expect(r.refusal()).toBe('the model is not loaded');
    await r.start();
    expect(r.refusal()).toBeUndefined();
    const first = r.runner!;
    process.kill(first.pids[1]!, 'SIGKILL');
    await eventually(() => restarting.length === 1, 10_000, 'the restart notice');
    expect(restarting[0]).toMatch(/^Rank 1 \(pid \d+\) was killed by SIGKILL/);
    expect(r.refusal()).toBe('the runner is restarting');
    await r.rebuilding;
    expect(rebuilds()).toBe(1);
    expect(r.runner).not.toBe(first);
    expect(runners).toHaveLength(2);
    expect(r.runner!.healthy).toBe(true);
    expect(r.problem).toBeUndefined();
    expect(await r.generate({ value: 1 })).toMatchObject({ rank: 0 });
    expectNothingLeft(first);
  });

  it('leaves a failure during a call to the caller (no rebuild behind its back), and heals at the next session', async () => {
    const { r, restarting } = keeper();
    await r.start();
    const first = r.runner!;
    await expect(r.generate({ exitOn: [1] })).rejects.toBeInstanceOf(WorkerCrashedError);
    expect(restarting).toEqual([]);
    expect(r.rebuilding).toBeUndefined();
    expect(first.healthy).toBe(false);
    await r.healIfBroken();
    expect(r.runner).not.toBe(first);
    expect(r.runner!.healthy).toBe(true);
  });

  it('with two calls in flight, a crash in the second after the first returned is still the caller’s (issue 39)', async () => {
    const { r, restarting } = keeper(undefined, 2);
    await r.start();
    const first = r.generate({ value: 1 });
    const second = r.generate({ exitOn: [1] });
    await expect(first).resolves.toMatchObject({ rank: 0 });
    await expect(second).rejects.toBeInstanceOf(WorkerCrashedError);
    // The step that made the second call reports it; no runner was rebuilt behind its back.
    expect(restarting).toEqual([]);
    expect(r.rebuilding).toBeUndefined();
    await r.healIfBroken();
    expect(await r.generate({ value: 2 })).toMatchObject({ rank: 0 });
  });

  it('fails a call at the stall event when a rank stops (SIGSTOP), naming the rank, long before the call deadline, and builds a new runner', async () => {
    let builds = 0;
    const r = new SelfHealingRunner<any, any, any>({
      name: 'the echo runner',
      logger: quiet,
      create: () =>
        new DistributedRunner(EchoWorker, {
          worldSize: 2,
          devices: 'cpu',
          logger: quiet,
          stallMs: 300,
          callTimeoutMs: 60_000,
          // Rank 1 stops itself (SIGSTOP) in its second call: the first runner's only.
          faults: ++builds === 1 ? [{ rank: 1, call: 2, kind: 'stall' }] : [],
          loadArgs: {},
        }),
    });
    made.push(r);
    await r.start();
    const first = r.runner!;
    const pid = first.pids[1]!;
    try {
      expect(await r.generate({ value: 1 })).toMatchObject({ rank: 0 });
      const t0 = performance.now();
      const err = await r.generate({ value: 2 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WorkerStalledError);
      expect(err).toMatchObject({ code: 'worker_stalled', ranks: [1], phases: ['generate'] });
      expect((err as Error).message).toMatch(
        /^generate\(\) stalled: rank 1 \(in generate\) made no progress for \d+ ms \(a stopped process, or synchronous code that blocks its event loop\)\. The call failed at once and the echo runner is being rebuilt/,
      );
      // Far from the 60 s call deadline (the stall event comes after stallMs, 300 ms).
      expect(performance.now() - t0).toBeLessThan(20_000);
      expect(r.rebuilding).toBeDefined();
      // Readiness still names the stalled rank while its runner is being replaced.
      expect(r.stalledRanks).toMatchObject([{ rank: 1, phase: 'generate' }]);
      await r.rebuilding;
      expect(r.stalledRanks).toEqual([]);
      expect(r.runner).not.toBe(first);
      expect(await r.generate({ value: 3 })).toMatchObject({ rank: 0 });
      await eventually(() => !alive(pid), 20_000, 'the stopped rank killed');
    } finally {
      if (alive(pid)) process.kill(pid, 'SIGKILL');
    }
  });

  it('keeps why a rebuild failed for readiness and refused steps, and the next heal tries again', async () => {
    let creates = 0;
    // A start deadline no rank can meet: every start() fails.
    const failing = new SelfHealingRunner<any, any, any>({
      name: 'the broken runner',
      logger: quiet,
      create: () => {
        creates++;
        return new DistributedRunner(EchoWorker, { worldSize: 1, devices: 'cpu', logger: quiet, startTimeoutMs: 1, loadArgs: {} });
      },
    });
    made.push(failing);
    await expect(failing.start()).rejects.toThrow();
    await failing.rebuild();
    expect(failing.problem).toMatch(/^the broken runner could not be restarted: /);
    expect(failing.refusal()).toBe(failing.problem);
    await failing.healIfBroken();
    expect(creates).toBe(3);
    expect(failing.refusal()).toBe(failing.problem);
  });
});
