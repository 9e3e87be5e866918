// Issue 37, point 1: a Python rank's exception wins over its peers' wait in a torch.distributed
// collective (gloo on CPU ranks): the call ends at once with that rank's error and traceback,
// not at callTimeoutMs, and the runner is rebuilt by the outcome policy.
import { describe, expect, it } from 'vitest';
import { DistributedRunner, InjectedFaultError, RankDesyncError, SelfHealingRunner, pythonWorker } from '../src/index.js';
import { expectNothingLeft, quiet, trackRunners } from './helpers.js';
import { FIXTURES, PY } from './python-helpers.js';

const track = trackRunners();
const WORKER = 'collective_worker:CollectiveWorker';

function collectiveRunner(extra: Record<string, unknown> = {}) {
  // callTimeoutMs and stallMs at their defaults (30 s, 5 s): neither may be what ends the call.
  return track(new DistributedRunner<any, any, any>(pythonWorker(WORKER, { path: [FIXTURES], interpreter: PY }), { worldSize: 2, logger: quiet, ...extra }));
}

async function rejection(p: Promise<unknown>): Promise<any> {
  return p.then(
    () => {
      throw new Error('expected a rejection');
    },
    (e: unknown) => e,
  );
}

// Well under the 5 s stall report and the 30 s call deadline; the promise is "within 1 s" of the
// peer's wait beginning (ABANDONED_COLLECTIVE_MS is 400 ms), with room for a loaded machine.
const PROMPT_MS = 3000;

describe('a Python rank that raises while its peers wait in a torch.distributed collective', () => {
  for (const [where, line, type] of [
    [
      'before',
      /collective_worker\.py", line \d+, in generate\n\s+raise ValueError\(f"rank \{self\.rank\} refuses the input before all_gather"\)/,
      'ValueError',
    ],
    ['inside', /collective_worker\.py", line \d+, in generate\n\s+dist\.all_gather\(parts/, 'RuntimeError'],
    [
      'after',
      /collective_worker\.py", line \d+, in generate\n\s+raise ValueError\(f"rank \{self\.rank\} refuses the gathered parts after all_gather"\)/,
      'ValueError',
    ],
  ] as const) {
    it(`a raise on rank 1 ${where} all_gather ends the call at once: RankDesyncError whose cause is rank 1's ${type} with its traceback`, async () => {
      const runner = collectiveRunner();
      await runner.start();
      const stalls: unknown[] = [];
      const unhealthy: Error[] = [];
      runner.on('stall', (s) => stalls.push(s));
      runner.on('unhealthy', (e) => unhealthy.push(e));
      const t0 = performance.now();
      // `reduce`: after all_gather rank 0 goes on into all_reduce, which a rank that raised after all_gather never joins.
      const err = await rejection(runner.generate({ raiseOn: [1], where, reduce: true }));
      const ms = performance.now() - t0;
      expect(err).toBeInstanceOf(RankDesyncError);
      expect(err.message).toMatch(
        new RegExp(`^Ranks disagreed in generate\\(\\): rank 1 raised ${type}: .* while rank 0 waited for it in a torch\\.distributed collective`),
      );
      expect(err.message).toMatch(/rank 0: waiting in a collective, killed\n\s+rank 1: threw /);
      expect(err.cause).toMatchObject({ name: type, rank: 1 });
      expect(err.cause.rankStack).toMatch(line);
      expect(ms).toBeLessThan(PROMPT_MS);
      expect(stalls).toEqual([]);
      expect(unhealthy).toEqual([err]);
      expect(runner.healthy).toBe(false);
      await runner.shutdown();
      expectNothingLeft(runner);
    });
  }

  it('a raise after the last collective, while rank 0 returns: RankDesyncError at rank 0 answer (1 of 2 ranks failed)', async () => {
    const runner = collectiveRunner();
    await runner.start();
    const err = await rejection(runner.generate({ raiseOn: [1], where: 'after' }));
    expect(err).toBeInstanceOf(RankDesyncError);
    expect(err.message).toMatch(/1 of 2 ranks failed/);
    expect(err.cause).toMatchObject({ name: 'ValueError', rank: 1 });
  });

  it('the same raise on every rank before all_gather is rethrown as that error and the runner stays healthy', async () => {
    const runner = collectiveRunner();
    await runner.start();
    const err = await rejection(runner.generate({ raiseOn: [0, 1], where: 'before' }));
    expect(err.name).toBe('ValueError');
    expect(err.message).toBe('rank 0 refuses the input before all_gather');
    expect(runner.healthy).toBe(true);
    const r = await runner.generate({});
    expect([...r.gathered]).toEqual([0, 0, 1, 1]);
  });

  it('a peer that computes a while before it joins the collective is waited for (not a desync while it works)', async () => {
    const runner = collectiveRunner();
    await runner.start();
    // Rank 0 raises at once; rank 1 computes 1.2 s (three times ABANDONED_COLLECTIVE_MS), then raises the same way.
    const err = await rejection(runner.generate({ raiseOn: [0, 1], where: 'before', spinOn: [1], ms: 1200 }));
    expect(err.name).toBe('ValueError');
    expect(runner.healthy).toBe(true);
  });

  it('an injected throw fault on rank 1 of a torch model: RankDesyncError at once whose cause is the InjectedFaultError', async () => {
    const runner = collectiveRunner({ faults: [{ rank: 1, call: 1, kind: 'throw' }] });
    await runner.start();
    const t0 = performance.now();
    const err = await rejection(runner.generate({}));
    expect(performance.now() - t0).toBeLessThan(PROMPT_MS);
    expect(err).toBeInstanceOf(RankDesyncError);
    expect(err.message).toMatch(/rank 1 raised InjectedFaultError: injected fault: throw on rank 1 at generate\(\) call 1 while rank 0 waited/);
    expect(err.cause).toBeInstanceOf(InjectedFaultError);
    expect(err.cause.rank).toBe(1);
  });

  it('a SelfHealingRunner rebuilds after it, and the next call runs on new ranks', async () => {
    const keeper = new SelfHealingRunner<any, any, any>({ name: 'the torch runner', logger: quiet, create: () => collectiveRunner() });
    try {
      await keeper.start();
      const first = keeper.runner!;
      await expect(keeper.generate({ raiseOn: [1], where: 'before' })).rejects.toBeInstanceOf(RankDesyncError);
      await keeper.healIfBroken();
      expect(keeper.runner).not.toBe(first);
      const r = await keeper.generate({});
      expect([...r.gathered]).toEqual([0, 0, 1, 1]);
    } finally {
      await keeper.shutdown();
    }
  });
});
