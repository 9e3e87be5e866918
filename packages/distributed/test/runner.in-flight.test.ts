import { describe, expect, it } from 'vitest';
import { DistributedRunner, RunnerOptionError } from '../src/index.js';
import { expectNothingLeft, fixture, quiet, useEchoRunners } from './helpers.js';

// Calls in flight (maxInFlight) and the output rank (outputRank), through the public API with
// real rank processes (TypeScript ranks; Python ranks: python-pipeline.test.ts).
describe('DistributedRunner: calls in flight', () => {
  const { echo } = useEchoRunners();

  it('overlaps calls, answers in call order from the output rank, cancels one call alone, and keeps results per slot', async () => {
    const { runner, log } = await echo(2, { maxInFlight: 3, outputRank: 1 });
    const settled: number[] = [];
    const first = new AbortController();
    const third = new AbortController();
    const p1 = runner.generate({ untilAborted: [1] }, { signal: first.signal }).then(
      (v) => (settled.push(1), v),
      (e: unknown) => (settled.push(1), e),
    );
    const p2 = runner.generate({ announce: true, tag: 2 }).then((v) => (settled.push(2), v));
    const p3 = runner.generate({ reportAborted: true }, { signal: third.signal }).then(
      (v) => (settled.push(3), v),
      (e: unknown) => (settled.push(3), e),
    );
    expect(runner.stateName).toBe('busy');
    // The fourth call finds every slot taken.
    await expect(runner.generate({})).rejects.toMatchObject({
      code: 'runner_busy',
      message: 'generate() called while 3 calls are in flight (options.maxInFlight 3): await the oldest one first.',
    });
    // Rank 0 runs call 2 while call 1 is still in flight (rank 1 waits in it): the calls overlap.
    await log.waitFor(/\[rank 0\] generating step 2/);
    expect(settled).toEqual([]);
    // Call 3 is cancelled while it waits behind call 1 on rank 1; then call 1.
    third.abort(new Error('superseded'));
    first.abort(new Error('stop'));
    expect(await p1).toMatchObject({ name: 'AbortError', code: 'call_aborted' });
    // The output rank's result (rank 1), not rank 0's.
    expect(await p2).toMatchObject({ rank: 1, steps: 2, input: { tag: 2 } });
    expect(await p3).toMatchObject({ name: 'AbortError', code: 'call_aborted' });
    await log.waitFor(/\[rank 1\] signal aborted at start: true/);
    expect(settled).toEqual([1, 2, 3]);
    expect(runner.stateName).toBe('ready');

    // Zero-copy results: one block per slot, so a view stays valid until its slot comes round again.
    const v4 = await runner.generateView({ sharedPayloadBytes: 64 });
    const [v5, v6] = await Promise.all([runner.generateView({ sharedPayloadBytes: 64 }), runner.generateView({ sharedPayloadBytes: 64 })]);
    const frames = (v: { value: unknown }) => (v.value as { frames: Uint8Array }).frames[0];
    expect([frames(v4), frames(v5), frames(v6)]).toEqual([4, 5, 6]);
    expect([v4.valid, v5.valid, v6.valid]).toEqual([true, true, true]);
    const v7 = await runner.generateView({ sharedPayloadBytes: 64 });
    expect([v4.valid, v5.valid, frames(v7)]).toEqual([false, true, 7]);
    await runner.shutdown();
    expectNothingLeft(runner);
  });

  it('fails every call in flight at once when a rank raises mid-pipeline or crashes', async () => {
    const { runner } = await echo(2, { maxInFlight: 3 });
    const a = runner.generate({ tag: 'a' });
    const b = runner.generate({ throwOn: [1], type: 'TypeError' }).catch((e: unknown) => e);
    // Would wait until cancelled: it fails with b instead, not at a deadline.
    const c = runner.generate({ untilAborted: [0, 1] }).catch((e: unknown) => e);
    expect(await a).toMatchObject({ input: { tag: 'a' } });
    const err = (await b) as Error & { cause: { rankStack: string; rank: number } };
    expect(err).toMatchObject({ code: 'rank_desync' });
    expect(err.message).toContain('rank 1: threw TypeError: type error on rank 1');
    expect(err.cause).toMatchObject({ rank: 1 });
    expect(err.cause.rankStack).toContain('echo.mjs');
    expect(await c).toBe(err);
    expect(runner.healthy).toBe(false);

    const crashing = await echo(2, { maxInFlight: 2 });
    const x = crashing.runner.generate({ exitOn: [1], exitCode: 5 }).catch((e: unknown) => e);
    const y = crashing.runner.generate({ untilAborted: [0, 1] }).catch((e: unknown) => e);
    const crash = await x;
    expect(crash).toMatchObject({ code: 'worker_crashed', rank: 1, exitCode: 5, during: 'generate' });
    expect(await y).toBe(crash);
    await crashing.runner.shutdown();
    expectNothingLeft(crashing.runner);
  });

  it('refuses maxInFlight and outputRank out of range, and host collectives with calls in flight', async () => {
    const { EchoWorker } = await fixture('echo');
    const bad = (o: Record<string, unknown>) => {
      try {
        new DistributedRunner(EchoWorker, { worldSize: 2, logger: quiet, ...o });
      } catch (err) {
        return err as RunnerOptionError;
      }
      throw new Error('no error');
    };
    for (const maxInFlight of [0, 9, 2.5, '2']) {
      const err = bad({ maxInFlight });
      expect(err).toBeInstanceOf(RunnerOptionError);
      expect(err).toMatchObject({ code: 'runner_option', option: 'maxInFlight' });
    }
    expect(bad({ maxInFlight: 0 }).message).toBe('options.maxInFlight must be an integer from 1 (one call at a time) to 8, got 0.');
    expect(bad({ outputRank: 2 }).message).toBe('options.outputRank must be a rank: an integer from 0 to 1 (worldSize 2), got 2.');
    expect(bad({ outputRank: -1 })).toMatchObject({ code: 'runner_option', option: 'outputRank' });

    const { runner } = await echo(2, { maxInFlight: 2 });
    // Every rank raises the same CollectiveError: the call fails, the runner stays healthy.
    await expect(runner.generate({ barrierOn: [0, 1] })).rejects.toMatchObject({
      code: 'collective_misuse',
      message: expect.stringContaining('barrier() on rank 0 of a runner with maxInFlight 2: the host collectives pair every rank within one call'),
    });
    expect(runner.healthy).toBe(true);
  });
});
