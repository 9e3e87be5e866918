/**
 * Issue 26 in the app model: where a step's time goes (the step listener's {@link StepSample}),
 * the app's own load progress (`context.reportProgress`) in the status and the readiness, and
 * OpenTelemetry spans of each step once a tracer provider is registered (an in-memory exporter
 * from `@opentelemetry/sdk-trace-base`, with the async-hooks context manager a Node SDK installs).
 */
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { context, trace } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { channel } from 'node:diagnostics_channel';
import { afterEach, describe, expect, it } from 'vitest';
import { Frames, type LoadContext, Output, ReactorApp, type StepSample, Video, reactorApp } from '../../src/index.js';
import { RUNNER_CALL_CHANNEL } from '../../src/session/step-stages.js';
import { RecordingSink, deferred, useHosts, waitForStatus } from '../../src/testing.js';

const start = useHosts(afterEach);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

class Out extends Output {}
Video({ width: 4, height: 4 })(Out.prototype, 'main');
const frame = new Frames(new Uint8Array(4 * 4 * 3), [1, 4, 4, 3]);

/** An app whose hooks take 15 / 25 / 10 ms, so each stage has a floor. */
function timedApp(inGenerate?: () => void): new () => ReactorApp {
  class TimedApp extends ReactorApp<any, null, Output> {
    override async processInput(): Promise<null> {
      await sleep(15);
      return null;
    }
    async generate(): Promise<Output> {
      inGenerate?.();
      await sleep(25);
      return new Out({ main: frame });
    }
    override async processOutput(o: { result: unknown }): Promise<Output> {
      await sleep(10);
      return o.result as Output;
    }
  }
  reactorApp({ output: Out })(TimedApp);
  return TimedApp;
}

describe('AppHost step samples', () => {
  it('times processInput, generate and processOutput of every step, and leaves the runner part out for an app without a runner', async () => {
    const host = start(timedApp());
    const samples: StepSample[] = [];
    host.onStep((s) => samples.push({ ...s }));
    await host.load();
    host.connect(new RecordingSink());
    while (samples.length < 3) await sleep(20);
    for (const s of samples.slice(0, 3)) {
      expect(s.failed).toBe(false);
      expect(s.processInputMs).toBeGreaterThanOrEqual(14);
      expect(s.elapsedMs).toBeGreaterThanOrEqual(24);
      expect(s.processOutputMs).toBeGreaterThanOrEqual(9);
      expect(s.runner).toBeUndefined();
    }
  });
});

/** A runner call's timing as `@reactor/distributed` publishes it: when it is sent, in the caller's async context; filled once answered. */
interface FakeTiming {
  op: 'generate';
  startMs: number;
  dispatchMs: number;
  ranksMs: number;
  handbackMs: number;
  done: boolean;
}
const runnerChannel = channel(RUNNER_CALL_CHANNEL);

/**
 * Two steps in flight on a stand-in runner: each call is sent (published, its dispatch time the
 * dispatch number in ms) and answered 20 ms after the next call is sent, so a call's time from its
 * send includes 20 ms in which the ranks were still answering the call before it.
 */
function pipelinedRunnerApp() {
  class PipedRunnerApp extends ReactorApp<any, number, Output> {
    override inFlight = 2;
    private n = 0;
    private open: Array<() => void> = [];
    override processInput(): number {
      return ++this.n;
    }
    generate(n: number): Promise<Output> {
      const startMs = performance.now();
      const timing: FakeTiming = { op: 'generate', startMs, dispatchMs: n, ranksMs: 0, handbackMs: 0, done: false };
      runnerChannel.publish(timing);
      const sentAt = startMs + n;
      for (const answer of this.open.splice(0)) setTimeout(answer, 20);
      const signal = this.restartSignal;
      return new Promise((resolve, reject) => {
        // Cancelled (the session ends with it in flight): it stops, unanswered.
        signal?.addEventListener('abort', () => reject(signal.reason as Error), { once: true });
        this.open.push(() => {
          timing.ranksMs = Math.max(0, performance.now() - sentAt);
          timing.handbackMs = 0.5;
          timing.done = true;
          resolve(new Out({ main: frame }));
        });
      });
    }
  }
  reactorApp({ output: Out })(PipedRunnerApp);
  return PipedRunnerApp;
}

describe('AppHost step samples with steps in flight', () => {
  it("give each pipelined step its own runner calls, the ranks' time counted from the previous result", async () => {
    const host = start(pipelinedRunnerApp());
    const samples: StepSample[] = [];
    host.onStep((s) => samples.push({ ...s, runner: s.runner && { ...s.runner } }));
    await host.load();
    host.connect(new RecordingSink());
    while (samples.length < 5) await sleep(20);
    samples.slice(0, 5).forEach((s, i) => {
      // Step i + 1's own call (its dispatch time is its number), not the one sent while it ran.
      expect(s.runner).toMatchObject({ calls: 1, dispatchMs: i + 1, handbackMs: 0.5 });
      expect(s.processOutputMs).toBeDefined();
      // The ranks' part of a step's generate is inside the pipeline's time for it (from its send,
      // it would include the 20 ms the ranks still spent on the call before it).
      expect(s.runner!.ranksMs).toBeLessThanOrEqual(s.elapsedMs);
    });
  });
});

describe('LoadContext.reportProgress', () => {
  it('puts the latest report in the status and the loading reason while loading, and drops it once loaded', async () => {
    const release = deferred();
    const reported = deferred();
    class SlowLoad extends ReactorApp {
      override async load(ctx: LoadContext): Promise<void> {
        ctx.reportProgress(0.2, 'downloading weights');
        ctx.reportProgress(0.63, '  compiling  ');
        reported.resolve();
        await release.promise;
      }
      generate(): null {
        return null;
      }
    }
    reactorApp({})(SlowLoad);
    const host = start(SlowLoad);
    const loaded = host.load();
    await reported.promise;
    // Reports faster than every 100 ms are published together: the last one wins.
    await waitForStatus({ status: host.status, onStatus: (l) => host.onStatus(l) }, 'loading');
    const deadline = Date.now() + 2000;
    while (host.status.progress?.ratio !== 0.63 && Date.now() < deadline) await sleep(10);
    expect(host.status).toMatchObject({ state: 'loading', progress: { ratio: 0.63, stage: 'compiling' } });
    expect(host.readiness().reasons).toEqual([
      { code: 'loading', message: 'the app is loading: compiling (63 %)', progress: { ratio: 0.63, stage: 'compiling' } },
    ]);
    release.resolve();
    await loaded;
    expect(host.status.progress).toBeUndefined();
    expect(host.status.state).toBe('ready');
  });

  it('fails the load with a report out of range, saying what a report must be', async () => {
    class BadReport extends ReactorApp {
      override load(ctx: LoadContext): void {
        ctx.reportProgress(63, 'compiling');
      }
      generate(): null {
        return null;
      }
    }
    reactorApp({})(BadReport);
    const err = await start(BadReport)
      .load()
      .catch((e: unknown) => e);
    expect((err as Error).message).toBe(
      'BadReport.load() failed: RangeError: BadReport.load(): context.reportProgress(): ratio must be a number from 0 to 1 (0.63 for 63 %), got 63',
    );
  });
});

describe('OpenTelemetry step spans', () => {
  it('makes a reactor.step span per step with a child per stage, current while the step runs', async () => {
    const exporter = new InMemorySpanExporter();
    const manager = new AsyncLocalStorageContextManager().enable();
    context.setGlobalContextManager(manager);
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
    try {
      const host = start(timedApp(() => trace.getTracer('app').startSpan('app.work').end()));
      let steps = 0;
      host.onStep(() => steps++);
      await host.load();
      host.connect(new RecordingSink());
      while (steps < 2) await sleep(20);
      await host.close();
      const spans = exporter.getFinishedSpans();
      const step = spans.find((s) => s.name === 'reactor.step' && s.attributes['reactor.step.refused'] === undefined)!;
      expect(step.attributes['reactor.app']).toBe('TimedApp');
      const children = spans.filter((s) => s.parentSpanContext?.spanId === step.spanContext().spanId).map((s) => s.name);
      expect(children).toEqual(expect.arrayContaining(['reactor.process_input', 'reactor.generate', 'reactor.process_output', 'app.work']));
      const gen = spans.find((s) => s.name === 'reactor.generate' && s.parentSpanContext?.spanId === step.spanContext().spanId)!;
      const ms = (t: [number, number]) => t[0] * 1000 + t[1] / 1e6;
      expect(ms(gen.endTime) - ms(gen.startTime)).toBeGreaterThanOrEqual(24);
    } finally {
      trace.disable();
      context.disable();
    }
  });

  it('with two steps in flight: a span per step, overlapping, each with its own runner call, and the steps cancelled at the end ended as dropped', async () => {
    const exporter = new InMemorySpanExporter();
    const manager = new AsyncLocalStorageContextManager().enable();
    context.setGlobalContextManager(manager);
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
    try {
      const host = start(pipelinedRunnerApp());
      let steps = 0;
      host.onStep(() => steps++);
      await host.load();
      host.connect(new RecordingSink());
      while (steps < 4) await sleep(20);
      await host.close();
      const spans = exporter.getFinishedSpans();
      const ms = (t: [number, number]) => t[0] * 1000 + t[1] / 1e6;
      const stepSpans = spans.filter((x) => x.name === 'reactor.step');
      const done = stepSpans.filter((x) => x.attributes['reactor.step.dropped'] === undefined && x.attributes['reactor.step.refused'] === undefined);
      expect(done.length).toBeGreaterThanOrEqual(4);
      const childrenOf = (x: (typeof spans)[number]) => spans.filter((c) => c.parentSpanContext?.spanId === x.spanContext().spanId);
      done.slice(0, 4).forEach((step, i) => {
        const kids = childrenOf(step);
        expect(kids.map((k) => k.name).sort()).toEqual(
          [
            'reactor.generate',
            'reactor.process_input',
            'reactor.process_output',
            'reactor.runner.dispatch',
            'reactor.runner.handback',
            'reactor.runner.ranks',
          ].sort(),
        );
        // Its own call: the stand-in's dispatch time is the step's number (ms).
        const dispatch = kids.find((k) => k.name === 'reactor.runner.dispatch')!;
        expect(ms(dispatch.endTime) - ms(dispatch.startTime)).toBeCloseTo(i + 1, 1);
        // generate runs from its call to its outcome, and processOutput after it.
        const gen = kids.find((k) => k.name === 'reactor.generate')!;
        const out = kids.find((k) => k.name === 'reactor.process_output')!;
        expect(ms(out.startTime)).toBeGreaterThanOrEqual(ms(gen.endTime) - 0.01);
      });
      // Two in flight: a step's span starts before the one before it ends.
      const [a, b] = done.sort((x, y) => ms(x.startTime) - ms(y.startTime));
      expect(ms(b!.startTime)).toBeLessThan(ms(a!.endTime));
      // What was in flight at close was cancelled unprocessed: its span ended, saying why.
      expect(stepSpans.filter((x) => x.attributes['reactor.step.dropped'] !== undefined).length).toBeGreaterThanOrEqual(1);
      expect(stepSpans.every((x) => x.ended)).toBe(true);
    } finally {
      trace.disable();
      context.disable();
    }
  });
});
