import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CallAbortedError,
  DistributedRunner,
  FAULT_CRASH_EXIT_CODE,
  type FaultSpec,
  InjectedFaultError,
  RankDesyncError,
  type RankExitInfo,
  SharedMemoryCapacityError,
  type StallInfo,
  WorkerCrashedError,
  WorkerStalledError,
  WorkerTimeoutError,
} from '../src/index.js';
import { captureLogger, eventually, expectNothingLeft, fixture, isAlive, rankProcesses, segments, useEchoRunners } from './helpers.js';

const parentScript = fileURLToPath(new URL('./fixtures/parent.mjs', import.meta.url));
const parents: ChildProcess[] = [];
const stopped: number[] = [];
afterEach(() => {
  for (const p of parents.splice(0)) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  // A rank a test stopped must not outlive the test, whatever happened.
  for (const pid of stopped.splice(0)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
});

/** Starts fixtures/parent.mjs in `mode` and waits for its facts line; `lines` gets every stdout line. */
async function startParent(mode: string): Promise<{ proc: ChildProcess; pids: number[]; prefix: string; lines: string[] }> {
  const proc = spawn(process.execPath, [parentScript, mode], { stdio: ['ignore', 'pipe', 'inherit'] });
  parents.push(proc);
  const lines: string[] = [];
  let buf = '';
  const facts = await new Promise<{ pids: number[]; prefix: string }>((resolve, reject) => {
    proc.stdout!.setEncoding('utf8');
    proc.stdout!.on('data', (chunk: string) => {
      buf += chunk;
      const complete = buf.split('\n');
      buf = complete.pop()!;
      lines.push(...complete);
      const line = lines.find((l) => l.startsWith('{"pids"'));
      if (line) resolve(JSON.parse(line) as { pids: number[]; prefix: string });
    });
    proc.on('exit', (code, signal) => reject(new Error(`parent exited early (${code}, ${signal})`)));
  });
  return { proc, ...facts, lines };
}

describe('DistributedRunner', () => {
  const { track, echo } = useEchoRunners();

  describe('health', () => {
    it('is false before start(), during it and after it failed; true only once it succeeded', async () => {
      const { EchoWorker } = await fixture('echo');
      const runner = track(new DistributedRunner(EchoWorker, { worldSize: 2, logger: captureLogger() }));
      expect(runner.healthy).toBe(false);
      const starting = runner.start();
      expect(runner.healthy).toBe(false);
      await starting;
      expect(runner.healthy).toBe(true);
      const { ThrowOnLoadWorker } = await fixture('throw-on-load');
      const failing = track(new DistributedRunner(ThrowOnLoadWorker, { worldSize: 2, loadArgs: { weightsRoot: '/nope' }, logger: captureLogger() }));
      const failed = failing.start().catch((e: unknown) => e);
      expect(failing.healthy).toBe(false);
      expect(await failed).toBeInstanceOf(Error);
      expect(failing.healthy).toBe(false);
      expectNothingLeft(failing);
      await runner.shutdown();
      expectNothingLeft(runner);
    });

    it("reports a rank that dies between calls at once: 'rankExit' and 'unhealthy' events, healthy false", async () => {
      const { runner } = await echo(2);
      await runner.generate({});
      const exits: RankExitInfo[] = [];
      runner.on('rankExit', (info) => exits.push(info));
      const unhealthy = once(runner, 'unhealthy') as Promise<[Error]>;
      const pid = runner.pids[1]!;
      const t0 = performance.now();
      process.kill(pid, 'SIGKILL');
      const [err] = await unhealthy;
      const took = performance.now() - t0;
      expect(runner.healthy).toBe(false);
      expect(err).toBeInstanceOf(WorkerCrashedError);
      expect(err).toMatchObject({ rank: 1, pid, signal: 'SIGKILL', during: 'idle' });
      expect(exits).toEqual([{ rank: 1, pid, exitCode: null, signal: 'SIGKILL', during: 'idle' }]);
      // From the process 'exit' event, not a poll: well under the 5 s stall watch even on a loaded machine.
      expect(took).toBeLessThan(2_500);
      await runner.shutdown();
      expectNothingLeft(runner);
    });
  });

  describe('stuck ranks', () => {
    it('names a SIGSTOPped rank within stallMs of the stop (event, log line, stalledRanks), and clears it on SIGCONT', async () => {
      const { runner, log } = await echo(2, { stallMs: 1000 });
      const stalls: StallInfo[] = [];
      runner.on('stall', (info) => stalls.push(info));
      const call = runner.generate({ announce: true, hangOn: [1] }).catch((e: unknown) => e);
      await log.waitFor(/\[rank 1\] generating step 1/);
      const pid = runner.pids[1]!;
      const stalled = once(runner, 'stall');
      stopped.push(pid);
      const t0 = performance.now();
      process.kill(pid, 'SIGSTOP');
      await stalled;
      const took = performance.now() - t0;
      expect(stalls).toHaveLength(1);
      expect(stalls[0]).toMatchObject({ rank: 1, phase: 'generate' });
      expect(stalls[0]!.sinceMs).toBeGreaterThanOrEqual(1000);
      // stallMs after the last progress the parent saw (at most one tick before the stop), plus
      // one check interval, plus the delays of a loaded 2-core machine (far below the 30 s call timeout).
      expect(took).toBeLessThan(1000 + 4000);
      expect(runner.stalledRanks).toEqual([expect.objectContaining({ rank: 1, phase: 'generate' })]);
      expect(runner.healthy).toBe(true);
      expect(log.lines.some((l) => /^warn \[rank 1\] Rank 1 \(pid \d+\) made no progress for \d+ ms in generate during generate\(\)/.test(l))).toBe(true);
      const cleared = once(runner, 'stallCleared');
      process.kill(pid, 'SIGCONT');
      expect(await cleared).toEqual([1]);
      expect(runner.stalledRanks).toEqual([]);
      await runner.shutdown();
      expect(await call).toMatchObject({ code: 'runner_unusable' });
      expectNothingLeft(runner);
    });

    it('fails the call with WorkerStalledError after stallTimeoutMs, kills the stopped rank and becomes unusable', async () => {
      const { runner } = await echo(2, { stallMs: 300, stallTimeoutMs: 800, faults: [{ rank: 1, call: 2, kind: 'stall' }] });
      await runner.generate({});
      const pid = runner.pids[1]!;
      stopped.push(pid);
      const unhealthy = once(runner, 'unhealthy');
      const err = await runner.generate({}).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WorkerStalledError);
      expect(err).toMatchObject({ code: 'worker_stalled', ranks: [1], phases: ['generate'], stallTimeoutMs: 800 });
      expect((err as Error).message).toMatchInlineSnapshot(
        `"generate() stalled: rank 1 (in generate) made no progress for 800 ms and was killed (a stopped process, or synchronous code that blocks its event loop). The runner is unusable: shut it down and construct a new DistributedRunner (raise options.stallTimeoutMs if a step legitimately blocks that long)."`,
      );
      await unhealthy;
      expect(runner.healthy).toBe(false);
      await runner.shutdown();
      expect(isAlive(pid)).toBe(false);
      expectNothingLeft(runner);
    });
  });

  describe('hard kill of the parent', () => {
    it('leaves no rank and no segment when the parent is SIGKILLed mid-step (3 trials)', async () => {
      for (let trial = 0; trial < 3; trial++) {
        const { proc, pids, prefix } = await startParent('loop');
        proc.kill('SIGKILL');
        await once(proc, 'exit');
        await eventually(() => !pids.some(isAlive), 3_000, `trial ${trial}: every rank exiting`);
        await eventually(() => segments(prefix).length === 0, 3_000, `trial ${trial}: segments unlinked by the ranks`);
        expect(rankProcesses(prefix)).toEqual([]);
      }
    });

    it('sweeps, at the next start(), the segments of a parent and ranks all SIGKILLed at once', async () => {
      const { proc, pids, lines } = await startParent('kill-all');
      await once(proc, 'exit');
      await eventually(() => !pids.some(isAlive), 3_000, 'every rank gone');
      // What was left when everything was SIGKILLed (listed by the parent just before). Another
      // test file's runner may sweep it first: either way a start() removed it, no rank did.
      const left = (JSON.parse(lines.find((l) => l.startsWith('{"left"'))!) as { left: string[] }).left;
      expect(left.length).toBeGreaterThan(0);
      const { runner } = await echo(1);
      expect(readdirSync('/dev/shm').filter((f) => left.includes(f))).toEqual([]);
      await runner.shutdown();
      expectNothingLeft(runner);
    });
  });

  describe('fault injection', () => {
    it('crash: the rank exits at the chosen call with FAULT_CRASH_EXIT_CODE, reported as WorkerCrashedError', async () => {
      const { runner } = await echo(2, { faults: [{ rank: 1, call: 2, kind: 'crash' }] });
      expect((await runner.generate({})).steps).toBe(1);
      const err = await runner.generate({}).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WorkerCrashedError);
      expect(err).toMatchObject({ rank: 1, exitCode: FAULT_CRASH_EXIT_CODE, during: 'generate' });
      expect((err as WorkerCrashedError).stderrTail).toContain('injected fault: crash on rank 1 at generate() call 2');
      await runner.shutdown();
      expectNothingLeft(runner);
    });

    it('hang: the rank never answers; WorkerTimeoutError after callTimeoutMs', async () => {
      const { runner } = await echo(2, { callTimeoutMs: 1000, faults: [{ rank: 0, call: 1, kind: 'hang' }] });
      const err = await runner.generate({}).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WorkerTimeoutError);
      expect(err).toMatchObject({ ranks: [0] });
      await runner.shutdown();
      expectNothingLeft(runner);
    });

    it('throw: on every rank the InjectedFaultError is rethrown (healthy); on one rank it is a desync', async () => {
      const every = await echo(2, {
        faults: [
          { rank: 0, call: 1, kind: 'throw' },
          { rank: 1, call: 1, kind: 'throw' },
        ],
      });
      const err = await every.runner.generate({}).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InjectedFaultError);
      expect(err).toMatchObject({ code: 'injected_fault', rank: 0, message: 'injected fault: throw on rank 0 at generate() call 1' });
      expect(every.runner.healthy).toBe(true);
      expect((await every.runner.generate({})).steps).toBe(1);
      const one = await echo(2, { faults: [{ rank: 1, call: 1, kind: 'throw' }] });
      const desync = await one.runner.generate({}).catch((e: unknown) => e);
      expect(desync).toBeInstanceOf(RankDesyncError);
      expect((desync as Error).cause).toBeInstanceOf(InjectedFaultError);
      await every.runner.shutdown();
      await one.runner.shutdown();
      expectNothingLeft(every.runner);
      expectNothingLeft(one.runner);
    });

    it("shm_full: rank 0's result does not fit; SharedMemoryCapacityError and the runner stays healthy", async () => {
      const { runner } = await echo(2, { faults: [{ rank: 0, call: 1, kind: 'shm_full' }] });
      const err = await runner.generate({ payloadBytes: 1 << 16 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SharedMemoryCapacityError);
      expect((err as Error).message).toContain("Shared memory for rank 0's results needs 64.0 KiB but only 0 B are free in /dev/shm (injected shm_full fault)");
      expect(runner.healthy).toBe(true);
      expect((await runner.generate({ payloadBytes: 1 << 16 })).frames.byteLength).toBe(1 << 16);
      await runner.shutdown();
      expectNothingLeft(runner);
    });

    it('reads REACTOR_FAULTS, and rejects a malformed fault naming where it came from', async () => {
      const { EchoWorker } = await fixture('echo');
      const before = process.env.REACTOR_FAULTS;
      try {
        process.env.REACTOR_FAULTS = JSON.stringify([{ rank: 1, call: 1, kind: 'crash' }] satisfies FaultSpec[]);
        const runner = track(new DistributedRunner(EchoWorker, { worldSize: 2, logger: captureLogger() }));
        await runner.start();
        await expect(runner.generate({})).rejects.toMatchObject({ code: 'worker_crashed', rank: 1, exitCode: FAULT_CRASH_EXIT_CODE });
        await runner.shutdown();
        expectNothingLeft(runner);
        process.env.REACTOR_FAULTS = 'crash';
        expect(() => new DistributedRunner(EchoWorker, { worldSize: 2 })).toThrowErrorMatchingInlineSnapshot(
          `[RangeError: REACTOR_FAULTS must be a JSON array like [{"rank":1,"call":3,"kind":"crash"}], got "crash".]`,
        );
      } finally {
        if (before === undefined) delete process.env.REACTOR_FAULTS;
        else process.env.REACTOR_FAULTS = before;
      }
      expect(() => new DistributedRunner(EchoWorker, { worldSize: 2, faults: [{ rank: 2, call: 1, kind: 'crash' }] })).toThrowErrorMatchingInlineSnapshot(
        `[RangeError: options.faults[0].rank must be a rank between 0 and 1, got 2.]`,
      );
      expect(
        () => new DistributedRunner(EchoWorker, { worldSize: 2, faults: [{ rank: 0, call: 1, kind: 'melt' as never }] }),
      ).toThrowErrorMatchingInlineSnapshot(
        `[RangeError: options.faults[0].kind must be one of crash, hang, throw, stall, shm_full, diverge, slow, got "melt".]`,
      );
      expect(() => new DistributedRunner(EchoWorker, { worldSize: 2, faults: [{ rank: 0, call: 1, kind: 'slow', ms: 0 }] })).toThrowErrorMatchingInlineSnapshot(
        `[RangeError: options.faults[0].ms must be a whole number of ms from 1 to 600000, got 0.]`,
      );
      expect(
        () => new DistributedRunner(EchoWorker, { worldSize: 2, faults: [{ rank: 0, call: 1, kind: 'crash', ms: 10 }] }),
      ).toThrowErrorMatchingInlineSnapshot(`[RangeError: options.faults[0].ms is only for kind slow, got kind "crash".]`);
    });

    it('slow: from the chosen call on, every generate() of the rank sleeps ms first, and succeeds', async () => {
      const { runner, log } = await echo(2, { faults: [{ rank: 1, call: 2, kind: 'slow', ms: 300 }] });
      expect((await runner.generate({})).steps).toBe(1);
      for (const step of [2, 3]) {
        const t0 = performance.now();
        expect((await runner.generate({})).steps).toBe(step);
        // A sleep's floor, not a speed figure: the call cannot answer before rank 1 slept.
        expect(performance.now() - t0).toBeGreaterThanOrEqual(290);
      }
      await log.waitFor(/injected fault: slow \(300 ms before each generate\(\)\) on rank 1 from generate\(\) call 2/);
      expect(runner.healthy).toBe(true);
      await runner.shutdown();
      expectNothingLeft(runner);
    });
  });

  describe('cancellation', () => {
    it('rejects with an AbortError once every rank stopped, and stays healthy for the next call', async () => {
      const { runner, log } = await echo(2);
      const controller = new AbortController();
      const call = runner.generate({ announce: true, untilAborted: [0, 1] }, { signal: controller.signal }).catch((e: unknown) => e);
      await log.waitFor(/\[rank 1\] generating step 1/);
      await log.waitFor(/\[rank 0\] generating step 1/);
      controller.abort();
      const err = await call;
      expect(err).toBeInstanceOf(CallAbortedError);
      expect(err).toMatchObject({ name: 'AbortError', code: 'call_aborted', runnerUsable: true });
      expect((err as Error).message).toBe('generate() was cancelled: every rank stopped; the runner is ready for the next call.');
      expect(runner.healthy).toBe(true);
      expect((await runner.generate({})).steps).toBe(2);
      await runner.shutdown();
      expectNothingLeft(runner);
    });

    it('releases a rank waiting in a collective for a peer that stopped, and keeps collectives aligned afterwards', async () => {
      const { runner, log } = await echo(2);
      const controller = new AbortController();
      const call = runner.generate({ announce: true, barrierOn: [0], untilAborted: [1] }, { signal: controller.signal }).catch((e: unknown) => e);
      await log.waitFor(/\[rank 1\] generating step 1/);
      controller.abort();
      expect(await call).toMatchObject({ name: 'AbortError', runnerUsable: true });
      expect(runner.healthy).toBe(true);
      const next = await runner.generate({ barrierOn: [0, 1] });
      expect(next.steps).toBe(2);
      await runner.shutdown();
      expectNothingLeft(runner);
    });

    it('makes the runner unusable when a rank does not stop within cancelTimeoutMs', async () => {
      const { runner } = await echo(2, { cancelTimeoutMs: 500, faults: [{ rank: 1, call: 1, kind: 'hang' }] });
      const controller = new AbortController();
      const call = runner.generate({}, { signal: controller.signal }).catch((e: unknown) => e);
      const unhealthy = once(runner, 'unhealthy');
      controller.abort();
      const err = await call;
      expect(err).toMatchObject({ name: 'AbortError', runnerUsable: false });
      expect((err as Error).message).toBe(
        'generate() was cancelled: rank 1 did not stop within 500 ms (options.cancelTimeoutMs) and was killed. The runner is unusable: shut it down and construct a new DistributedRunner.',
      );
      await unhealthy;
      expect(runner.healthy).toBe(false);
      await runner.shutdown();
      expectNothingLeft(runner);
    });

    it('rejects at once, sending nothing, when the signal is already aborted', async () => {
      const { runner } = await echo(1);
      const err = await runner.generate({}, { signal: AbortSignal.abort() }).catch((e: unknown) => e);
      expect(err).toMatchObject({ name: 'AbortError', runnerUsable: true });
      expect((await runner.generate({})).steps).toBe(1);
      await runner.shutdown();
      expectNothingLeft(runner);
    });
  });

  describe('divergence check', () => {
    it('with verifyInputs, a rank that decoded a different input is a RankDesyncError naming it', async () => {
      const { runner } = await echo(3, { verifyInputs: true, faults: [{ rank: 2, call: 2, kind: 'diverge' }] });
      const input = { prompt: 'forest', frames: new Uint8Array([1, 2, 3]) };
      expect((await runner.generate(input)).steps).toBe(1);
      const err = await runner.generate(input).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RankDesyncError);
      expect(err).toMatchObject({ code: 'rank_desync', ranks: [2] });
      expect((err as Error).message.split('\n')[0]).toMatch(
        /^Ranks disagreed in generate\(\): rank 2 decoded a different input than rank 0 \(ranks 0, 1: [0-9a-f]{16}; rank 2: [0-9a-f]{16}\)\.$/,
      );
      expect(runner.healthy).toBe(false);
      await runner.shutdown();
      expectNothingLeft(runner);
    });
  });
});
