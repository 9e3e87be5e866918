import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { IllegalTransitionError } from '../src/index.js';
import { type ExitInfo, WORKER_PROCESS_TRANSITIONS, WorkerProcess } from '../src/process/worker-process.js';
import { isAlive } from './helpers.js';

const live: WorkerProcess[] = [];
afterEach(async () => {
  await Promise.all(live.splice(0).map((p) => p.stop(false, 100)));
});

function spawnIdle(exits: ExitInfo[] = []): WorkerProcess {
  const proc = new WorkerProcess({
    rank: 3,
    childMain: fileURLToPath(new URL('./fixtures/idle-child.mjs', import.meta.url)),
    prefix: 'reactor-test-idle-child',
    env: process.env,
    onLine: () => {},
    onMessage: () => {},
    onExit: (info) => exits.push(info),
  });
  live.push(proc);
  return proc;
}

describe('WorkerProcess', () => {
  it('reports an unexpected exit once, even when stderr ends after the drain timer', async () => {
    const exits: ExitInfo[] = [];
    let lineSeen!: () => void;
    const grandchildDone = new Promise<void>((resolve) => (lineSeen = resolve));
    const proc = new WorkerProcess({
      rank: 0,
      childMain: fileURLToPath(new URL('./fixtures/lingering-stderr.mjs', import.meta.url)),
      prefix: 'reactor-test-lingering-stderr',
      env: process.env,
      onLine: (_stream, line) => {
        if (line === 'grandchild done') lineSeen();
      },
      onMessage: () => {},
      onExit: (info) => exits.push(info),
    });
    // The grandchild holds the rank's stderr open ~300 ms past the exit: the 30 ms drain timer
    // reports first, then stderr ends. 'close' (exit and every stream ended) is the condition.
    await grandchildDone;
    await proc.whenClosed();
    expect(proc.hasExited).toBe(true);
    expect(proc.state).toBe('failed');
    expect(exits).toHaveLength(1);
    expect(exits[0]).toMatchObject({ rank: 0, exitCode: 3, signal: null, expected: false });
    expect(exits[0]!.stderrTail).toContain('exiting');
  });

  describe('state machine', () => {
    it('has exactly the documented edges', () => {
      expect(WORKER_PROCESS_TRANSITIONS).toEqual({
        starting: ['ready', 'stopping', 'failed'],
        ready: ['busy', 'stopping', 'failed'],
        busy: ['ready', 'stopping', 'failed'],
        stopping: ['stopped'],
        stopped: [],
        failed: [],
      });
    });

    it('moves starting -> ready -> busy -> ready -> stopping -> stopped through its own methods', async () => {
      const exits: ExitInfo[] = [];
      const proc = spawnIdle(exits);
      expect(proc.state).toBe('starting');
      proc.markLoaded();
      expect(proc.state).toBe('ready');
      proc.beginCall();
      expect(proc.state).toBe('busy');
      proc.endCall();
      expect(proc.state).toBe('ready');
      const stopped = proc.stop(false, 100);
      expect(proc.state).toBe('stopping');
      await stopped;
      expect(proc.state).toBe('stopped');
      expect(exits).toEqual([expect.objectContaining({ rank: 3, expected: true, signal: 'SIGTERM' })]);
      expect(isAlive(proc.pid)).toBe(false);
    });

    it('throws IllegalTransitionError on an edge the lifecycle does not have', async () => {
      const proc = spawnIdle();
      expect(() => proc.beginCall()).toThrow(IllegalTransitionError);
      expect(() => proc.beginCall()).toThrowErrorMatchingInlineSnapshot(
        `[IllegalTransitionError: WorkerProcess(rank 3): illegal state transition starting -> busy.]`,
      );
      proc.markLoaded();
      expect(() => proc.markLoaded()).toThrowErrorMatchingInlineSnapshot(
        `[IllegalTransitionError: WorkerProcess(rank 3): illegal state transition ready -> ready.]`,
      );
      await proc.stop(false, 100);
      expect(() => proc.markLoaded()).toThrowErrorMatchingInlineSnapshot(
        `[IllegalTransitionError: WorkerProcess(rank 3): illegal state transition stopped -> ready.]`,
      );
      expect(proc.state).toBe('stopped');
    });

    it('ends in failed, not stopped, when the process dies unasked', async () => {
      const exits: ExitInfo[] = [];
      const proc = spawnIdle(exits);
      proc.markLoaded();
      process.kill(proc.pid, 'SIGKILL');
      await proc.whenClosed();
      expect(proc.state).toBe('failed');
      expect(exits).toEqual([expect.objectContaining({ expected: false, signal: 'SIGKILL' })]);
    });
  });
});
