import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { type ExitInfo, WorkerProcess } from '../src/process/worker-process.js';

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
    // reports first, then stderr ends.
    await grandchildDone;
    await new Promise((r) => setTimeout(r, 200));
    expect(proc.hasExited).toBe(true);
    expect(exits).toHaveLength(1);
    expect(exits[0]).toMatchObject({ rank: 0, exitCode: 3, signal: null, expected: false });
    expect(exits[0]!.stderrTail).toContain('exiting');
  });
});
