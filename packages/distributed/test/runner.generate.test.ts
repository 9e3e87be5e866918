import { describe, expect, it } from 'vitest';
import { DistributedRunner, RankDesyncError, RunnerUnusableError, SharedMemoryCapacityError, WorkerCrashedError, WorkerTimeoutError } from '../src/index.js';
import { expectNothingLeft, fixture, isAlive, quiet, useEchoRunners } from './helpers.js';

describe('DistributedRunner', () => {
  const { track, echo } = useEchoRunners();

  describe('generate', () => {
    it("gives every rank the same input and returns rank 0's result", async () => {
      const { runner } = await echo(3);
      const input = { prompt: 'forest', frames: new Uint8Array([1, 2, 3]), nested: [{ x: 1.5 }], m: new Map([['k', 1]]) };
      const out = await runner.generate(input);
      expect(out.rank).toBe(0);
      expect(out.input).toEqual(input);
      expect(out.steps).toBe(1);
      expect((await runner.generate({})).steps).toBe(2);
      await runner.reset();
      expect((await runner.generate({})).steps).toBe(1);
    });

    it("rethrows rank 0's error as the module's own class when every rank throws the same type, and stays healthy", async () => {
      const { runner, mod } = await echo(2);
      const err = await runner.generate({ throwOn: [0, 1], type: 'RolloutExhausted' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(mod.RolloutExhausted);
      expect(err).toBeInstanceOf(Error);
      expect(err).toMatchObject({ name: 'RolloutExhausted', message: 'exhausted on rank 0', chunk: 7, rank: 0 });
      expect((err as Error).stack).toContain('echo.mjs');
      expect(runner.healthy).toBe(true);
      expect((await runner.generate({})).steps).toBe(2);
    });

    it('keeps name, message, rank and stack of an error class the module does not export', async () => {
      const { runner } = await echo(2);
      const err = (await runner.generate({ throwOn: [0, 1], type: 'TypeError' }).catch((e: unknown) => e)) as Error & { rank: number };
      expect(err).toBeInstanceOf(Error);
      expect(err).toMatchObject({ name: 'TypeError', message: 'type error on rank 0', rank: 0 });
      expect(err.stack).toContain('echo.mjs');
      expect(runner.healthy).toBe(true);
    });

    it('throws RankDesyncError with the first failure as cause when only some ranks throw, and becomes unusable', async () => {
      const { runner, mod } = await echo(2);
      const err = await runner.generate({ throwOn: [1], type: 'RolloutExhausted' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RankDesyncError);
      expect((err as RankDesyncError).code).toBe('rank_desync');
      expect((err as Error).cause).toBeInstanceOf(mod.RolloutExhausted);
      expect((err as Error).message).toMatchInlineSnapshot(`
        "Ranks disagreed in generate(): 1 of 2 ranks failed.
          rank 0: ok
          rank 1: threw RolloutExhausted: exhausted on rank 1
        Every rank must run the same calls (and the same collectives) and fail the same way. The runner is unusable: shut it down and construct a new DistributedRunner."
      `);
      expect(runner.healthy).toBe(false);
      const again = await runner.generate({}).catch((e: unknown) => e);
      expect(again).toBeInstanceOf(RunnerUnusableError);
      expect((again as Error).message).toMatchInlineSnapshot(
        `"Cannot call generate(): the runner is unusable (RankDesyncError: Ranks disagreed in generate(): 1 of 2 ranks failed.). Shut it down and construct a new DistributedRunner."`,
      );
      await runner.shutdown();
      expectNothingLeft(runner);
    });

    it('throws RankDesyncError when ranks throw different error types', async () => {
      const { runner } = await echo(2);
      const err = await runner.generate({ throwOn: [0, 1], types: ['RolloutExhausted', 'OtherModelError'] }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RankDesyncError);
      expect((err as Error).message).toContain('ranks failed with different error types');
      expect(runner.healthy).toBe(false);
      await runner.shutdown();
      expectNothingLeft(runner);
    });

    it('rejects with WorkerCrashedError at once (the exit event, not a watch or timeout) when a rank is killed with SIGKILL mid-call', async () => {
      const { runner, log } = await echo(2);
      const call = runner.generate({ announce: true, hangOn: [1] });
      const settled = call.catch((e: unknown) => e);
      await log.waitFor(/\[rank 1\] generating step 1/);
      const pid = runner.pids[1]!;
      const t0 = performance.now();
      process.kill(pid, 'SIGKILL');
      const err = await settled;
      const elapsed = performance.now() - t0;
      expect(err).toBeInstanceOf(WorkerCrashedError);
      const crash = err as WorkerCrashedError;
      expect(crash).toMatchObject({ code: 'worker_crashed', rank: 1, pid, exitCode: null, signal: 'SIGKILL' });
      expect(crash.stderrTail).toContain('generating step 1');
      expect(crash.message.replace(/pid \d+/, 'pid <pid>')).toMatchInlineSnapshot(`
        "Rank 1 (pid <pid>) was killed by SIGKILL during generate(). The runner is unusable: shut it down and construct a new DistributedRunner.
        Last stderr lines of rank 1:
          | warn from rank 1
          | generating step 1"
      `);
      // From the exit event: well before the 5 s stall watch or the 30 s call timeout could
      // answer, with room for a loaded 2-core machine (100 ms was a speed check, not the contract).
      expect(elapsed).toBeLessThan(2_000);
      expect(runner.healthy).toBe(false);
      await runner.shutdown();
      expectNothingLeft(runner);
    });

    it('reports a rank that exits by itself mid-call with its exit code', async () => {
      const { runner } = await echo(2);
      const err = await runner.generate({ exitOn: [0], exitCode: 9 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WorkerCrashedError);
      expect(err).toMatchObject({ rank: 0, exitCode: 9, signal: null });
      await runner.shutdown();
      expectNothingLeft(runner);
    });

    it('gives WorkerTimeoutError after callTimeoutMs, kills the hung rank and becomes unusable', async () => {
      const { runner } = await echo(2, { callTimeoutMs: 2000 });
      const hung = runner.pids[1]!;
      const err = await runner.generate({ hangOn: [1] }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WorkerTimeoutError);
      expect(err).toMatchObject({ code: 'worker_timeout', ranks: [1], timeoutMs: 2000 });
      expect((err as Error).message).toMatchInlineSnapshot(
        `"generate() did not finish within 2000 ms: rank 1 never answered and was killed. The runner is unusable: shut it down and construct a new DistributedRunner (raise options.callTimeoutMs if the work is legitimately slower)."`,
      );
      expect(isAlive(hung)).toBe(false);
      expect(runner.healthy).toBe(false);
      expectNothingLeft(runner);
      await expect(runner.reset()).rejects.toBeInstanceOf(RunnerUnusableError);
    });

    it('notices a rank that dies between calls: the next call says the runner is unusable and why', async () => {
      const { runner, log } = await echo(2);
      await runner.generate({});
      process.kill(runner.pids[1]!, 'SIGKILL');
      await log.waitFor(/^warn Rank 1 \(pid \d+\) was killed by SIGKILL during idle/);
      expect(runner.healthy).toBe(false);
      const err = await runner.generate({}).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RunnerUnusableError);
      expect((err as Error).cause).toBeInstanceOf(WorkerCrashedError);
      expect((err as Error).message).toMatch(
        /^Cannot call generate\(\): the runner is unusable \(WorkerCrashedError: Rank 1 \(pid \d+\) was killed by SIGKILL during idle \(between calls\)\./,
      );
      await runner.shutdown();
      expectNothingLeft(runner);
    });

    it('rejects a second call while one is in flight', async () => {
      const { runner, log } = await echo(2);
      const first = runner.generate({ announce: true });
      const second = await runner.generate({}).catch((e: unknown) => e);
      expect(second).toMatchObject({ code: 'runner_busy' });
      expect((second as Error).message).toMatchInlineSnapshot(
        `"generate() called while generate() is in flight: the runner runs one call at a time; await the previous call first (or raise options.maxInFlight)."`,
      );
      await expect(runner.reset()).rejects.toMatchObject({ code: 'runner_busy' });
      expect((await first).steps).toBe(1);
      await log.waitFor(/generating step 1/);
      expect(runner.healthy).toBe(true);
    });

    it('rejects calls before start()', async () => {
      const { EchoWorker } = await fixture('echo');
      const runner = track(new DistributedRunner(EchoWorker, { worldSize: 1, logger: quiet }));
      await expect(runner.generate({})).rejects.toMatchObject({
        code: 'runner_state',
        message: 'generate() called before start() finished: await runner.start() first.',
      });
    });

    it('returns data the caller owns by default: one copy out of shared memory, untouched by the next generate()', async () => {
      const { runner } = await echo(2);
      const bytes = 3 * 1024 * 1024 + 5;
      const a = await runner.generate({ payloadBytes: bytes });
      expect(a.frames).toBeInstanceOf(Uint8Array);
      expect(a.frames.byteLength).toBe(bytes);
      // An array of its own (its buffer is exactly its bytes), not a view into the result block.
      expect(a.frames.buffer.byteLength).toBe(bytes);
      expect(a.frames[0]).toBe(1);
      const b = await runner.generate({ payloadBytes: bytes });
      expect(b.frames[0]).toBe(2);
      expect(a.frames[0]).toBe(1);
      // Zero-copy arrays from worker.resultArray() are copied too.
      const c = await runner.generate({ sharedPayloadBytes: 1 << 20 });
      await runner.generate({ pokeLastShared: 42 });
      expect(c.frames[1]).toBe(0);
      await runner.shutdown();
      expectNothingLeft(runner);
    });

    it('moves large typed arrays through shared memory and, from generateView(), returns zero-copy views valid until the next generate()', async () => {
      const { runner } = await echo(2);
      const bytes = 8 * 1024 * 1024 + 3;
      const shared = await runner.generateView({ payloadBytes: bytes });
      expect(shared.valid).toBe(true);
      const a = shared.value;
      expect(a.frames).toBeInstanceOf(Uint8Array);
      expect(a.frames.byteLength).toBe(bytes);
      expect(a.frames[0]).toBe(1);
      // A view into rank 0's result block (bigger than the payload), not a heap copy.
      expect(a.frames.buffer.byteLength).toBeGreaterThanOrEqual(bytes);
      expect(a.frames.buffer.byteLength).not.toBe(bytes);
      const owned = shared.copy();
      const b = (await runner.generateView({ payloadBytes: bytes })).value;
      expect(b.frames[0]).toBe(2);
      // The documented lifetime: the previous result's memory now holds the new one.
      expect(a.frames[0]).toBe(2);
      expect(shared.valid).toBe(false);
      expect(owned.frames[0]).toBe(1);
      expect(() => shared.copy()).toThrowErrorMatchingInlineSnapshot(
        `[RunnerStateError: copy() of a generateView() result after a later generate() started: its shared memory holds another result now. Copy (or use) a result before the next call.]`,
      );
      const kept = b.frames.slice();
      await runner.shutdown();
      // After shutdown the views still point at mapped memory (no crash) and hold their bytes.
      expect(b.frames[0]).toBe(2);
      expect(kept[0]).toBe(2);
      expectNothingLeft(runner);
    });

    it("delivers arrays from worker.resultArray() with no copy at all (the caller sees the rank's own memory)", async () => {
      const { runner } = await echo(2);
      const bytes = 3 * 1024 * 1024;
      const a = (await runner.generateView({ sharedPayloadBytes: bytes })).value;
      expect(a.frames.byteLength).toBe(bytes);
      expect(a.frames[0]).toBe(1);
      expect(a.frames.byteOffset).toBe(0);
      expect(a.extra).toEqual(new Float64Array([0, 0.5]));
      expect(a.heap).toEqual(Int16Array.from([-1, -2]));
      // Rank 0 writes into the array it returned last time: the caller's view shows it, so the
      // two are the same memory.
      await runner.generateView({ pokeLastShared: 42 });
      expect(a.frames[1]).toBe(42);
      // Growth past the block's size still works (that step's arrays are copied once).
      const big = (await runner.generateView({ sharedPayloadBytes: 9 * 1024 * 1024 })).value;
      expect(big.frames.byteLength).toBe(9 * 1024 * 1024);
      expect(big.frames[0]).toBe(3);
      expect(big.heap).toEqual(Int16Array.from([-1, -2]));
    });

    it('grows the input and result blocks on demand and reuses them across steps', async () => {
      const { runner } = await echo(1);
      for (const n of [10, 3 << 20, 100, 5 << 20]) {
        const input = new Float64Array(n / 8 + 1).fill(0.5);
        const out = await runner.generate({ big: input });
        expect(out.input.big.length).toBe(input.length);
        expect(out.input.big[input.length - 1]).toBe(0.5);
      }
    });

    it('throws SharedMemoryCapacityError with the sizes when a block does not fit, and stays healthy', async () => {
      const { runner } = await echo(1, { maxShmBytes: 2 << 20 });
      const err = await runner.generate({ big: new Uint8Array(3 << 20) }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SharedMemoryCapacityError);
      expect((err as Error).message).toMatchInlineSnapshot(
        `"Shared memory for the runner input needs 3.0 MiB but only 2.0 MiB are allowed by options.maxShmBytes. Raise the limit: give the container more shared memory (docker run --shm-size=2g; containers default to 64 MB), free space in /dev/shm, or raise options.maxShmBytes."`,
      );
      expect(runner.healthy).toBe(true);
      // A result that does not fit on rank 0 is reported the same way; the model's step ran.
      const err2 = await runner.generate({ payloadBytes: 3 << 20 }).catch((e: unknown) => e);
      expect(err2).toBeInstanceOf(SharedMemoryCapacityError);
      expect((err2 as Error).message).toContain("Shared memory for rank 0's results needs 3.0 MiB");
      expect(runner.healthy).toBe(true);
      // The refused input never reached the ranks; the step whose result was undeliverable ran.
      expect((await runner.generate({})).steps).toBe(2);
    });
    it('reports a resultArray() that does not fit as SharedMemoryCapacityError and stays healthy', async () => {
      const { BigResultArrayWorker } = await fixture('big-result-array');
      const runner: DistributedRunner<any, any, any> = track(
        new DistributedRunner(BigResultArrayWorker, { worldSize: 2, maxShmBytes: 2 << 20, logger: quiet }),
      );
      await runner.start();
      const err = await runner.generate({ bytes: 3 << 20 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SharedMemoryCapacityError);
      expect(err).toMatchObject({ code: 'shm_capacity', neededBytes: 3 << 20, availableBytes: 2 << 20 });
      expect((err as Error).message).toContain("Shared memory for rank 0's results needs 3.0 MiB but only 2.0 MiB");
      expect(runner.healthy).toBe(true);
      const small = await runner.generate({ bytes: 1000 });
      expect(small.frames.byteLength).toBe(1000);
      expect(small.frames[999]).toBe(7);
      await runner.shutdown();
      expectNothingLeft(runner);
    });
  });

  describe('reset', () => {
    it('runs reset() on every rank', async () => {
      const { runner } = await echo(2);
      await runner.generate({});
      await runner.reset();
      expect((await runner.generate({})).resets).toBe(1);
    });

    it('rethrows the same error type from every rank and stays healthy', async () => {
      const { runner, mod } = await echo(2, { loadArgs: { resetThrowsOn: [0, 1] } });
      const err = await runner.reset().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(mod.RolloutExhausted);
      expect((err as Error).message).toBe('reset refused on rank 0');
      expect(runner.healthy).toBe(true);
    });

    it('is a RankDesyncError when only some ranks throw', async () => {
      const { runner } = await echo(2, { loadArgs: { resetThrowsOn: [1] } });
      const err = await runner.reset().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RankDesyncError);
      expect((err as Error).message.split('\n')[0]).toBe('Ranks disagreed in reset(): 1 of 2 ranks failed.');
      expect(runner.healthy).toBe(false);
      expectNothingLeft(runner);
    });
  });
});
