import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { DistributedRunner, RunnerUnusableError } from '../src/index.js';
import { captureLogger, eventually, expectNothingLeft, fixture, isAlive, quiet, rankProcesses, segments, trackRunners } from './helpers.js';

const parentScript = fileURLToPath(new URL('./fixtures/parent.mjs', import.meta.url));

/** Starts fixtures/parent.mjs in `mode` and waits for its facts line. */
async function startParent(mode: string): Promise<{ proc: ChildProcess; pids: number[]; prefix: string; out: string[] }> {
  const proc = spawn(process.execPath, [parentScript, mode], { stdio: ['ignore', 'pipe', 'inherit'] });
  parents.push(proc);
  const out: string[] = [];
  let buf = '';
  const facts = await new Promise<{ pids: number[]; prefix: string }>((resolve, reject) => {
    proc.stdout!.setEncoding('utf8');
    proc.stdout!.on('data', (chunk: string) => {
      buf += chunk;
      const lines = buf.split('\n');
      buf = lines.pop()!;
      for (const l of lines) {
        out.push(l);
        if (l.startsWith('{')) resolve(JSON.parse(l) as { pids: number[]; prefix: string });
      }
    });
    proc.on('exit', (code, signal) => reject(new Error(`parent exited early (${code}, ${signal})`)));
  });
  expect(facts.pids).toHaveLength(2);
  // (in 'exit'/'forget' modes the parent may already be gone and have cleaned up)
  if (mode === 'wait' || mode === 'own-handler') expect(segments(facts.prefix).length).toBeGreaterThan(0);
  return { proc, ...facts, out };
}

const parents: ChildProcess[] = [];
afterEach(() => {
  for (const p of parents.splice(0)) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
});

describe('DistributedRunner', () => {
  const track = trackRunners();

  describe('shutdown', () => {
    it('is idempotent and leaves nothing behind', async () => {
      const { EchoWorker } = await fixture('echo');
      const runner = track(new DistributedRunner(EchoWorker, { worldSize: 2, logger: quiet }));
      await runner.start();
      await runner.generate({ payloadBytes: 1 << 20 });
      const pids = runner.pids;
      await Promise.all([runner.shutdown(), runner.shutdown()]);
      await runner.shutdown();
      expect(pids.some(isAlive)).toBe(false);
      expectNothingLeft(runner);
      expect(runner.healthy).toBe(false);
      await expect(runner.generate({})).rejects.toMatchObject({
        code: 'runner_unusable',
        message: 'Cannot call generate(): the runner is unusable (it was shut down). Shut it down and construct a new DistributedRunner.',
      });
    });

    it('is safe mid-call: the call rejects with a clear error and the ranks are stopped', async () => {
      const { EchoWorker } = await fixture('echo');
      const log = captureLogger();
      const runner = track(new DistributedRunner(EchoWorker, { worldSize: 2, logger: log }));
      await runner.start();
      const call = runner.generate({ announce: true, hangOn: [0, 1] }).catch((e: unknown) => e);
      await log.waitFor(/\[rank 1\] generating/);
      await runner.shutdown();
      const err = await call;
      expect(err).toBeInstanceOf(RunnerUnusableError);
      expect((err as Error).message).toMatchInlineSnapshot(
        `"Cannot finish generate(): the runner is unusable (shutdown() was called while it was in flight). Shut it down and construct a new DistributedRunner."`,
      );
      expectNothingLeft(runner);
    });

    it('is safe right after start() was called, before any process exists', async () => {
      const { EchoWorker } = await fixture('echo');
      const runner = track(new DistributedRunner(EchoWorker, { worldSize: 2, logger: quiet }));
      const starting = runner.start().catch((e: unknown) => e);
      await runner.shutdown();
      expect(await starting).toBeInstanceOf(RunnerUnusableError);
      expect(runner.pids).toEqual([]);
      expectNothingLeft(runner);
    });

    it('is safe during start()', async () => {
      const { HangOnLoadWorker } = await fixture('hang-on-load');
      const runner = track(new DistributedRunner(HangOnLoadWorker, { worldSize: 2, logger: quiet }));
      const starting = runner.start().catch((e: unknown) => e);
      await eventually(() => runner.pids.length === 2, 5_000, 'spawn');
      await runner.shutdown();
      expect(await starting).toBeInstanceOf(RunnerUnusableError);
      expectNothingLeft(runner);
    });

    it('escalates to SIGKILL on the process group when a rank ignores the exit request and SIGTERM', async () => {
      const { StubbornWorker } = await fixture('stubborn');
      const log = captureLogger();
      const runner = track(new DistributedRunner(StubbornWorker, { worldSize: 1, logger: log, shutdownGraceMs: 200 }));
      await runner.start();
      const out: any = await runner.generate({});
      const grandchild = out.grandchild as number;
      expect(isAlive(grandchild)).toBe(true);
      const t0 = performance.now();
      await runner.shutdown();
      const took = performance.now() - t0;
      // exit request (ignored) -> 200 ms -> SIGTERM (ignored) -> 2 s -> SIGKILL
      expect(took).toBeGreaterThan(2_000);
      expect(log.lines).toContain('warn [rank 0] ignoring exit');
      expect(log.lines).toContain('warn [rank 0] ignoring SIGTERM');
      expect(isAlive(grandchild)).toBe(false);
      expectNothingLeft(runner);
    });

    it('workers exit by themselves when the parent is killed with SIGKILL, and unlink the segments', async () => {
      const { proc, pids, prefix } = await startParent('wait');
      proc.kill('SIGKILL');
      await once(proc, 'exit');
      // The IPC 'disconnect' (or the 500 ms ppid watchdog) ends them; how fast is not a test's
      // business on a loaded 2-core machine (a hang still fails at 10 s).
      await eventually(() => !pids.some(isAlive), 10_000, 'every worker exiting');
      await eventually(() => segments(prefix).length === 0, 2_000, 'segments unlinked');
      expect(rankProcesses(prefix)).toEqual([]);
    });

    it('runs on SIGTERM to the parent and re-raises it when the app has no handler', async () => {
      const { proc, pids, prefix } = await startParent('wait');
      proc.kill('SIGTERM');
      const [code, signal] = (await once(proc, 'exit')) as [number | null, string | null];
      expect({ code, signal }).toEqual({ code: null, signal: 'SIGTERM' });
      expect(pids.some(isAlive)).toBe(false);
      expect(segments(prefix)).toEqual([]);
    });

    it('runs on SIGINT to the parent', async () => {
      const { proc, pids, prefix } = await startParent('wait');
      proc.kill('SIGINT');
      const [, signal] = (await once(proc, 'exit')) as [number | null, string | null];
      expect(signal).toBe('SIGINT');
      expect(pids.some(isAlive)).toBe(false);
      expect(segments(prefix)).toEqual([]);
    });

    it("leaves SIGTERM to the app's own handler and still cleans up when the app exits", async () => {
      const { proc, pids, prefix, out } = await startParent('own-handler');
      proc.kill('SIGTERM');
      const [code] = (await once(proc, 'exit')) as [number | null, string | null];
      expect(code).toBe(0);
      expect(out).toContain('app handled SIGTERM');
      // The exit hook SIGKILLs the rank groups as the parent exits; they are gone moments later.
      await eventually(() => !pids.some(isAlive), 2_000, 'every worker exiting');
      expect(segments(prefix)).toEqual([]);
    });

    it('runs on process.exit()', async () => {
      const { proc, pids, prefix } = await startParent('exit');
      const [code] = (await once(proc, 'exit')) as [number | null];
      expect(code).toBe(0);
      await eventually(() => !pids.some(isAlive), 2_000, 'every worker exiting');
      expect(segments(prefix)).toEqual([]);
    });

    it('does not keep an idle parent alive, and cleans up when it exits without shutdown()', async () => {
      const { proc, pids, prefix } = await startParent('forget');
      const [code] = (await once(proc, 'exit')) as [number | null];
      expect(code).toBe(0);
      await eventually(() => !pids.some(isAlive), 2_000, 'every worker exiting');
      expect(segments(prefix)).toEqual([]);
    });
  });
});
