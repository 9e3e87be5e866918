import { describe, expect, it } from 'vitest';
import { type RunnerHealth, runnerReadiness, runnerRestartingReason } from '@reactor/runtime';

const healthy: RunnerHealth = { stalledRanks: [], rebuilding: undefined, runner: { healthy: true }, problem: undefined };
const opts = { name: 'the video runner', unhealthy: 'the video runner is unusable' };

describe('runnerReadiness', () => {
  it('is true for a running, healthy runner', () => {
    expect(runnerReadiness(healthy, opts)).toBe(true);
  });

  it('names a stalled rank first, even while a rebuild runs', () => {
    const r = runnerReadiness({ ...healthy, rebuilding: Promise.resolve(), stalledRanks: [{ rank: 1, sinceMs: 5200, phase: 'generate' }] }, opts);
    expect(r).toEqual([{ code: 'rank_stalled', message: 'rank 1 has made no progress for 5.2 s (generate)' }]);
  });

  it('says restarting during a rebuild, then unhealthy for a missing or broken runner', () => {
    expect(runnerReadiness({ ...healthy, rebuilding: Promise.resolve() }, opts)).toEqual({
      code: 'runner_restarting',
      message: 'the video runner is restarting',
    });
    expect(runnerReadiness({ ...healthy, runner: undefined }, opts)).toEqual({ code: 'runner_unhealthy', message: 'the video runner is not running' });
    expect(runnerReadiness({ ...healthy, runner: { healthy: false } }, opts)).toEqual({ code: 'runner_unhealthy', message: 'the video runner is unusable' });
    expect(runnerReadiness({ ...healthy, runner: { healthy: false } }, { name: 'the enhance runner' })).toEqual({
      code: 'runner_unhealthy',
      message: 'the enhance runner is not running',
    });
    expect(runnerReadiness({ ...healthy, runner: { healthy: false }, problem: 'the video runner could not be restarted: boom' }, opts)).toEqual({
      code: 'runner_unhealthy',
      message: 'the video runner could not be restarted: boom',
    });
  });

  it('gives the runner_restarting reason from the error’s first sentence', () => {
    expect(runnerRestartingReason('rank 1 exited with code 1')).toBe('rank 1 exited with code 1; a new runner is starting');
  });
});
