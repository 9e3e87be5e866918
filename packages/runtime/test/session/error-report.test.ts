// How a rank's error reads in the log, the session status and `reactor run`'s exit message.
import { describe, expect, it } from 'vitest';
import { REPORT_FRAMES, errorWhere, withTraceback } from '../../src/session/error-report.js';

function rankError(stack: string, rank = 1): Error {
  const e = new Error('boom');
  Object.assign(e, { rank, rankStack: stack });
  return e;
}

const PY = [
  'Traceback (most recent call last):',
  '  File "/x/reactor_worker/_rank.py", line 470, in call',
  '    result = worker.generate(value)',
  ...Array.from({ length: 12 }, (_, i) => [`  File "/app/worker/model.py", line ${10 + i}, in step${i}`, `    step${i + 1}()`]).flat(),
  '  File "/app/worker/model.py", line 40, in generate',
  '    rows = math.floor(2)',
  '           ^^^^',
  "NameError: name 'math' is not defined",
].join('\n');

describe('withTraceback', () => {
  it("ends the first line with the rank and the app's innermost frame, then its frames, bounded, without reactor_worker's", () => {
    const text = withTraceback("generate() failed: NameError: name 'math' is not defined", rankError(PY));
    const lines = text.split('\n');
    expect(lines[0]).toBe("generate() failed: NameError: name 'math' is not defined (rank 1, /app/worker/model.py line 40, in generate)");
    expect(lines[1]).toBe('  ... 5 outer frames');
    // REPORT_FRAMES frames of two lines each (file and source), the caret line dropped.
    expect(lines).toHaveLength(2 + REPORT_FRAMES * 2);
    expect(lines.slice(-2)).toEqual(['  File "/app/worker/model.py", line 40, in generate', '    rows = math.floor(2)']);
    expect(text).not.toMatch(/_rank\.py|\^\^\^/);
  });

  it("finds the rank's error in the cause chain (a desync's cause) and keeps a multi-line first part", () => {
    const desync = new Error('Ranks disagreed: rank 1 raised.\n  rank 0: ok', { cause: rankError(PY) });
    const text = withTraceback(`generate() failed: ${desync.message}`, desync);
    expect(text.split('\n').slice(0, 2)).toEqual([
      'generate() failed: Ranks disagreed: rank 1 raised. (rank 1, /app/worker/model.py line 40, in generate)',
      '  rank 0: ok',
    ]);
  });

  it('shows a TypeScript rank stack innermost last, without Node internals', () => {
    const stack = [
      'RangeError: bad',
      '    at Worker.generate (file:///app/dist/worker.js:12:9)',
      '    at RankLoop.call (file:///repo/packages/distributed/dist/process/rank-loop.js:80:5)',
      '    at process.processTicksAndRejections (node:internal/process/task_queues:95:5)',
    ].join('\n');
    expect(errorWhere(rankError(stack, 0))).toBe('rank 0, file:///app/dist/worker.js line 12, in Worker.generate');
  });

  it("adds only the rank when every frame is the framework's (an error the rank raised about the app's file)", () => {
    const stack = [
      'Traceback (most recent call last):',
      '  File "/x/reactor_worker/_rank.py", line 429, in find_class',
      '    raise PythonWorkerError(',
      'PythonWorkerError: does not parse',
    ].join('\n');
    expect(withTraceback('load() failed: PythonWorkerError: does not parse', rankError(stack, 0))).toBe(
      'load() failed: PythonWorkerError: does not parse (rank 0)',
    );
  });

  it('leaves an error without a rank stack as it is', () => {
    expect(withTraceback('generate() failed: Error: plain', new Error('plain'))).toBe('generate() failed: Error: plain');
  });
});
