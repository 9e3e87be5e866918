import { describe, expect, it } from 'vitest';
import { DistributedRunner, ProtocolError, RunnerUnusableError, WorkerCrashedError, WorkerTimeoutError } from '../src/index.js';
import { captureLogger, expectNothingLeft, fixture, quiet, trackRunners } from './helpers.js';

describe('DistributedRunner', () => {
  const track = trackRunners();

  describe('start', () => {
    it('starts one process per rank with the rendezvous environment, device and loadArgs', async () => {
      const { EchoWorker } = await fixture('echo');
      const log = captureLogger();
      const runner = track(new DistributedRunner(EchoWorker, { worldSize: 2, loadArgs: { weightsRoot: '/w', table: new Float32Array([1, 2]) }, logger: log }));
      await runner.start();
      expect(runner.pids).toHaveLength(2);
      expect(new Set(runner.pids).size).toBe(2);
      const out: any = await runner.generate({ q: 1 });
      expect(out.rank).toBe(0);
      expect(out.worldSize).toBe(2);
      expect(out.isLeader).toBe(true);
      expect(out.device).toBe('cpu');
      expect(out.args).toEqual({ weightsRoot: '/w', table: new Float32Array([1, 2]) });
      expect(out.env).toMatchObject({ RANK: '0', LOCAL_RANK: '0', WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', CUDA_VISIBLE_DEVICES: '' });
      expect(Number(out.env.MASTER_PORT)).toBeGreaterThan(0);
      // load() ran once per rank; the no-GPU notice is logged once.
      expect(log.lines.filter((l) => l === 'info [rank 0] loaded rank 0')).toHaveLength(1);
      expect(log.lines.filter((l) => /No GPU found/.test(l))).toHaveLength(1);
      await runner.shutdown();
      expectNothingLeft(runner);
    });

    it('prefixes rank output with its rank; ranks other than 0 show only stderr', async () => {
      const { EchoWorker } = await fixture('echo');
      const log = captureLogger();
      const runner = track(new DistributedRunner(EchoWorker, { worldSize: 2, logger: log }));
      await runner.start();
      await log.waitFor(/^warn \[rank 1\] warn from rank 1$/);
      await log.waitFor(/^warn \[rank 0\] warn from rank 0$/);
      await runner.shutdown();
      expect(log.lines).toContain('info [rank 0] loaded rank 0');
      expect(log.lines.some((l) => l.includes('loaded rank 1'))).toBe(false);
    });

    it("re-throws a rank's load error as that error (an instance of the module's class) and leaves nothing running", async () => {
      const { ThrowOnLoadWorker, WeightsMissing } = await fixture('throw-on-load');
      const runner = track(new DistributedRunner(ThrowOnLoadWorker, { worldSize: 2, loadArgs: { weightsRoot: '/nope' }, logger: quiet }));
      const err = await runner.start().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WeightsMissing);
      expect(err).toMatchObject({ name: 'WeightsMissing', message: 'weights not found at /nope', path: '/nope', rank: 1 });
      expect((err as Error).stack).toContain('throw-on-load.mjs');
      expect(runner.healthy).toBe(false);
      expectNothingLeft(runner);
    });

    it('rejects start() at once with ProtocolError when a rank sends an unknown message during load, leaving nothing running', async () => {
      const { BogusMessageWorker } = await fixture('bogus-message');
      const runner = track(new DistributedRunner(BogusMessageWorker, { worldSize: 2, startTimeoutMs: 20_000, logger: quiet }));
      const t0 = performance.now();
      const err = await runner.start().catch((e: unknown) => e);
      expect(performance.now() - t0).toBeLessThan(10_000);
      expect(err).toBeInstanceOf(ProtocolError);
      expect(err).toMatchObject({ code: 'ipc_protocol' });
      expect((err as Error).message).toMatchInlineSnapshot(`"Parent received an unknown message from rank 1: {"bogus":1}."`);
      expect(runner.healthy).toBe(false);
      expectNothingLeft(runner);
    });

    it("logs a rank's load() failure with the rank, its pid and the rank's stack (the error itself is the app's own)", async () => {
      const { ThrowOnLoadWorker } = await fixture('throw-on-load');
      const log = captureLogger();
      const runner = track(new DistributedRunner(ThrowOnLoadWorker, { worldSize: 2, loadArgs: { weightsRoot: '/nope' }, logger: log }));
      await runner.start().catch(() => undefined);
      const line = log.lines.find((l) => l.includes('load() threw'));
      expect(line).toMatch(
        /^error rank 1 \(pid \d+\): load\(\) threw WeightsMissing: weights not found at \/nope\n\s+at ThrowOnLoadWorker\.load \(\S+throw-on-load\.mjs:\d+:\d+\)/,
      );
    });

    it('says why start() failed on every later call, with the failure as cause', async () => {
      const { ThrowOnLoadWorker, WeightsMissing } = await fixture('throw-on-load');
      const runner = track(new DistributedRunner(ThrowOnLoadWorker, { worldSize: 2, loadArgs: { weightsRoot: '/nope' }, logger: quiet }));
      const startErr = await runner.start().catch((e: unknown) => e);
      expect(startErr).toBeInstanceOf(WeightsMissing);
      for (const attempt of [() => runner.generate({}), () => runner.reset()]) {
        const err = await attempt().catch((e: unknown) => e);
        expect(err).toBeInstanceOf(RunnerUnusableError);
        expect((err as Error).cause).toBe(startErr);
        expect((err as Error).message).toContain('the runner is unusable (start() failed: weights not found at /nope)');
      }
      // shutdown() afterwards keeps the reason.
      await runner.shutdown();
      const after = await runner.generate({}).catch((e: unknown) => e);
      expect((after as Error).message).toMatchInlineSnapshot(
        `"Cannot call generate(): the runner is unusable (start() failed: weights not found at /nope). Shut it down and construct a new DistributedRunner."`,
      );
      expect((after as Error).cause).toBe(startErr);
    });

    it('reports a rank that exits during load as WorkerCrashedError with its stderr', async () => {
      const { ExitDuringLoadWorker } = await fixture('exit-during-load');
      const runner = track(new DistributedRunner(ExitDuringLoadWorker, { worldSize: 2, logger: quiet }));
      const err = await runner.start().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WorkerCrashedError);
      const crash = err as WorkerCrashedError;
      expect(crash.code).toBe('worker_crashed');
      expect(crash).toMatchObject({ rank: 1, exitCode: 7, signal: null });
      expect(crash.stderrTail).toContain('cannot open weights: /nonexistent/model.bin');
      expect(crash.message.replace(/pid \d+/, 'pid <pid>')).toMatchInlineSnapshot(`
        "Rank 1 (pid <pid>) exited with code 7 during start(). The runner is unusable: shut it down and construct a new DistributedRunner.
        Last stderr lines of rank 1:
          | cannot open weights: /nonexistent/model.bin"
      `);
      expectNothingLeft(runner);
    });

    it('gives WorkerTimeoutError after startTimeoutMs and kills every rank', async () => {
      const { HangOnLoadWorker } = await fixture('hang-on-load');
      const runner = track(new DistributedRunner(HangOnLoadWorker, { worldSize: 2, startTimeoutMs: 4000, logger: quiet }));
      const err = await runner.start().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WorkerTimeoutError);
      expect((err as WorkerTimeoutError).ranks).toEqual([0]);
      expect((err as Error).message).toMatchInlineSnapshot(
        `"start() did not finish within 4000 ms: rank 0 never answered and was killed. The runner is unusable: shut it down and construct a new DistributedRunner (raise options.startTimeoutMs if the work is legitimately slower)."`,
      );
      expectNothingLeft(runner);
    });

    it('starts once', async () => {
      const { EchoWorker } = await fixture('echo');
      const runner = track(new DistributedRunner(EchoWorker, { worldSize: 1, logger: quiet }));
      await runner.start();
      await expect(runner.start()).rejects.toMatchObject({ code: 'runner_state', message: 'start() was already called: a runner starts once.' });
      await runner.shutdown();
      await expect(runner.start()).rejects.toMatchObject({ code: 'runner_state' });
    });

    it('loads a worker exported only as default', async () => {
      const mod = await fixture('default-export');
      const runner = track(new DistributedRunner(mod.default, { worldSize: 2, logger: quiet }));
      await runner.start();
      expect(await runner.generate({ a: 1 })).toEqual({ rank: 0, input: { a: 1 } });
      await runner.shutdown();
      expectNothingLeft(runner);
    });
  });
});
