// What a runner tells whoever listens (issue 26): its ranks' load progress while it starts (the
// `progress` event and RUNNER_PROGRESS_CHANNEL, in the async context that called start()), each
// call's dispatch / ranks / hand-back time (RUNNER_CALL_CHANNEL, in the caller's async context),
// and its ranks' GPU busy ratio (`gpuBusy`), for TypeScript and Python ranks; bad reports fail
// the load with a message that says what a report must be.
import { AsyncLocalStorage } from 'node:async_hooks';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { afterEach, describe, expect, it } from 'vitest';
import { until } from '@reactor/test-kit';
import { DistributedRunner, RUNNER_CALL_CHANNEL, RUNNER_PROGRESS_CHANNEL, pythonWorker, type RunnerCallTiming, type RunnerLoadProgress } from '../src/index.js';
import { captureLogger, fixture } from './helpers.js';
import { FIXTURES, PY } from './python-helpers.js';

// A plain-JS fixture (typed loosely, as the other fixtures are).
const { ProgressWorker } = (await fixture('progress')) as { ProgressWorker: any };
const runners: DistributedRunner<any, any, any>[] = [];
afterEach(async () => {
  for (const r of runners.splice(0)) await r.shutdown();
});

function tsRunner(loadArgs: unknown, worldSize = 2): DistributedRunner<any, any, any> {
  const r = new DistributedRunner(ProgressWorker, { worldSize, devices: 'cpu', loadArgs, logger: captureLogger() });
  runners.push(r);
  return r;
}

function pyRunner(loadArgs: unknown, worldSize = 2): DistributedRunner<any, any, any> {
  const r = new DistributedRunner(pythonWorker('progress_worker:ProgressWorker', { path: [FIXTURES], interpreter: PY }), {
    worldSize,
    devices: 'cpu',
    loadArgs,
    logger: captureLogger(),
  });
  runners.push(r);
  return r;
}

describe('DistributedRunner load progress', () => {
  for (const [kind, make] of [
    ['TypeScript', tsRunner],
    ['Python', pyRunner],
  ] as const) {
    it(`averages its ${kind} ranks' reports, names the least advanced rank, and publishes them in the context that started it`, async () => {
      const runner = make({
        reports: [
          [0.5, 'reading weights'],
          [0.8, 'compiling'],
        ],
      });
      const events: RunnerLoadProgress[] = [];
      runner.on('progress', (p) => events.push({ ...p }));
      const als = new AsyncLocalStorage<string>();
      const published: { p: RunnerLoadProgress; store: string | undefined }[] = [];
      const onProgress = (msg: unknown) => published.push({ p: { ...(msg as RunnerLoadProgress) }, store: als.getStore() });
      subscribe(RUNNER_PROGRESS_CHANNEL, onProgress);
      try {
        await als.run('the app host', () => runner.start());
      } finally {
        unsubscribe(RUNNER_PROGRESS_CHANNEL, onProgress);
      }
      expect(events[0]).toEqual({ ratio: 0, stage: 'starting ranks', rank: undefined });
      expect(events.at(-1)).toEqual({ ratio: 1, stage: 'loaded', rank: undefined });
      // However the two ranks interleave, the last report of each stage names that stage (its
      // rank is then the least advanced, or tied), and the mean is at least that rank's ratio.
      const reading = events.find((e) => /^rank [01]: reading weights$/.test(e.stage));
      const compiling = events.find((e) => /^rank [01]: compiling$/.test(e.stage));
      expect(reading?.ratio).toBeGreaterThanOrEqual(0.5);
      expect(compiling?.ratio).toBeGreaterThanOrEqual(0.8);
      for (const e of events) expect(e.ratio >= 0 && e.ratio <= 1).toBe(true);
      expect(published.map((x) => x.p)).toEqual(events);
      expect(new Set(published.map((x) => x.store))).toEqual(new Set(['the app host']));
    });
  }

  it('fails the load of a TypeScript rank whose report is out of range, saying what a report must be', async () => {
    const runner = tsRunner({ reports: [[1.5, 'compiling']] }, 1);
    await expect(runner.start()).rejects.toThrow('ProgressWorker.reportProgress(): ratio must be a number from 0 to 1 (0.63 for 63 %), got 1.5');
  });

  it('fails the load of a TypeScript rank whose report has no stage', async () => {
    const runner = tsRunner({ reports: [[0.5, '  ']] }, 1);
    await expect(runner.start()).rejects.toThrow(
      `ProgressWorker.reportProgress(): stage must be a non-empty string saying what the rank is doing ('reading weights', 'compiling'), got "  "`,
    );
  });

  it('fails the load of a Python rank whose report is out of range, saying what a report must be', async () => {
    const runner = pyRunner({ reports: [[-0.1, 'compiling']] }, 1);
    await expect(runner.start()).rejects.toThrow('ProgressWorker.report_progress(): ratio must be a number from 0 to 1 (0.63 for 63 %), got -0.1');
  });
});

describe('DistributedRunner call timing', () => {
  it('publishes each call when it is sent, in the caller async context, and fills it when the result is decoded', async () => {
    const runner = tsRunner({}, 2);
    await runner.start();
    const als = new AsyncLocalStorage<string>();
    const seen: { t: RunnerCallTiming; store: string | undefined }[] = [];
    const onCall = (msg: unknown) => seen.push({ t: msg as RunnerCallTiming, store: als.getStore() });
    subscribe(RUNNER_CALL_CHANNEL, onCall);
    try {
      const t0 = performance.now();
      const result = await als.run('step 7', () => runner.generate({ frame: new Uint8Array(512 * 512 * 3) }));
      const wall = performance.now() - t0;
      expect((result as { echo: { frame: Uint8Array } }).echo.frame.byteLength).toBe(512 * 512 * 3);
      expect(seen).toHaveLength(1);
      const { t, store } = seen[0]!;
      expect(store).toBe('step 7');
      expect(t).toMatchObject({ op: 'generate', done: true });
      for (const ms of [t.dispatchMs, t.ranksMs, t.handbackMs]) expect(ms).toBeGreaterThanOrEqual(0);
      expect(t.dispatchMs + t.ranksMs + t.handbackMs).toBeLessThanOrEqual(wall);
    } finally {
      unsubscribe(RUNNER_CALL_CHANNEL, onCall);
    }
    // Nobody listens: nothing is timed or published.
    await runner.generate({ frame: new Uint8Array(4) });
    expect(seen).toHaveLength(1);
  });
});

describe('DistributedRunner GPU busy', () => {
  it("keeps each TypeScript rank's gpuBusy() report; a rank that does not know stays undefined", async () => {
    const runner = tsRunner({ gpu: [0.25, null] }, 2);
    await runner.start();
    expect(runner.gpuBusy).toEqual([undefined, undefined]);
    await until(() => runner.gpuBusy[0] !== undefined, "rank 0's GPU busy report", 5000);
    expect(runner.gpuBusy).toEqual([0.25, undefined]);
  });

  it('stops asking a rank whose gpuBusy() throws, and logs why', async () => {
    const log = captureLogger();
    const runner = new DistributedRunner(ProgressWorker, { worldSize: 1, devices: 'cpu', loadArgs: { gpu: ['throw'] }, logger: log });
    runners.push(runner);
    await runner.start();
    const line = await log.waitFor(/gpuBusy\(\) threw/, 5000);
    expect(line).toContain('gpuBusy() threw, GPU busy is unknown from now on: no NVML here');
    expect(runner.gpuBusy).toEqual([undefined]);
  });

  it("keeps each Python rank's gpu_busy() report", async () => {
    const runner = pyRunner({ gpu: [null, 0.75] }, 2);
    await runner.start();
    await until(() => runner.gpuBusy[1] !== undefined, "rank 1's GPU busy report", 5000);
    expect(runner.gpuBusy).toEqual([undefined, 0.75]);
  });
});
