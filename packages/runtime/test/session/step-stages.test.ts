/**
 * Issue 26 in the app model: where a step's time goes (the step listener's {@link StepSample}),
 * the app's own load progress (`context.reportProgress`) in the status and the readiness, and
 * OpenTelemetry spans of each step once a tracer provider is registered (an in-memory exporter
 * from `@opentelemetry/sdk-trace-base`, with the async-hooks context manager a Node SDK installs).
 */
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { context, trace } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterEach, describe, expect, it } from 'vitest';
import { Frames, type LoadContext, Output, ReactorApp, type StepSample, Video, reactorApp } from '../../src/index.js';
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
});
