/**
 * Optional OpenTelemetry spans of each step, through `@opentelemetry/api` (an optional peer
 * dependency): loaded once when the host loads, used only when it is installed and a tracer
 * provider is registered (an SDK set up by the user, e.g. `node --import ./otel.js`). Without
 * either, a step costs one property read. Each step is a `reactor.step` span, current while the
 * step runs (spans the app makes in its hooks are its children), with one child span per stage:
 * `reactor.process_input`, `reactor.generate` (and per runner call `reactor.runner.dispatch`,
 * `reactor.runner.ranks`, `reactor.runner.handback`), `reactor.process_output`. With steps in
 * flight (`ReactorApp.inFlight` > 1) the spans of several steps overlap: each is current while
 * its own `processInput` and `generate()` call run, and again while its `processOutput` runs; a
 * step dropped unprocessed (an urgent change, a refusal or a failure before it) ends with
 * `reactor.step.dropped` naming why.
 */
import type * as OtelApiModule from '@opentelemetry/api';
import type { Context, Span, Tracer } from '@opentelemetry/api';
import type { RunnerCallTiming, StepSample } from './step-stages.js';

type OtelApi = typeof OtelApiModule;

/** The tracer name the spans are made with. */
export const TRACER_NAME = '@reactor/runtime';

let api: OtelApi | null | undefined;

/** Imports `@opentelemetry/api` once (null when it is not installed). */
export async function loadTracingApi(): Promise<void> {
  if (api !== undefined) return;
  try {
    api = await import('@opentelemetry/api');
  } catch {
    api = null;
  }
}

/** How often a host without a registered tracer provider looks again, ms. */
const RECHECK_MS = 1000;

/** One step's span and what runs under it. */
export interface StepSpan {
  /** Runs `fn` with the step span current. */
  run<T>(fn: () => T): T;
  /**
   * Ends the step span with its stage spans (from `sample`, when the step produced one).
   * `outputAtMs`: when its `processOutput` began, where that is not right after `generate`
   * (a pipelined step's outcome waits behind the ones before it).
   */
  end(startMs: number, sample: StepSample | undefined, calls: readonly RunnerCallTiming[], outputAtMs?: number): void;
  /** Ends a step that was dropped unprocessed, saying why (`reactor.step.dropped`). */
  drop(reason: string): void;
}

/** The spans of one host's steps. */
export class StepTracing {
  private tracer: Tracer | undefined;
  private nextCheck = 0;

  /** A span for a step starting now, or undefined (no API, no provider: no cost beyond this call). */
  begin(nowMs: number, appName: string, sessionId: string): StepSpan | undefined {
    if (!api) return undefined;
    const tracer = this.current(api, nowMs);
    if (!tracer) return undefined;
    const otel = api;
    const span = tracer.startSpan('reactor.step', { startTime: epoch(nowMs), attributes: { 'reactor.app': appName, 'reactor.session': sessionId } });
    const ctx = otel.trace.setSpan(otel.context.active(), span);
    return {
      run: (fn) => otel.context.with(ctx, fn),
      end: (startMs, sample, calls, outputAtMs) => {
        if (sample) stageSpans(tracer, ctx, startMs, sample, calls, outputAtMs);
        else span.setAttribute('reactor.step.refused', true);
        if (sample?.failed) span.setStatus({ code: otel.SpanStatusCode.ERROR, message: 'generate() threw' });
        span.end(epoch(performance.now()));
      },
      drop: (reason) => {
        span.setAttribute('reactor.step.dropped', reason);
        span.end(epoch(performance.now()));
      },
    };
  }

  /** The registered provider's tracer; looked for again at most once a second while there is none. */
  private current(otel: OtelApi, nowMs: number): Tracer | undefined {
    if (this.tracer || nowMs < this.nextCheck) return this.tracer;
    this.nextCheck = nowMs + RECHECK_MS;
    // The global provider is a proxy: its delegate tracer exists only once an SDK registered one.
    const provider = otel.trace.getTracerProvider() as { getDelegateTracer?(name: string): Tracer | undefined };
    this.tracer = typeof provider.getDelegateTracer === 'function' ? provider.getDelegateTracer(TRACER_NAME) : otel.trace.getTracer(TRACER_NAME);
    return this.tracer;
  }
}

function stageSpans(tracer: Tracer, parent: Context, startMs: number, s: StepSample, calls: readonly RunnerCallTiming[], outputAtMs?: number): void {
  const child = (name: string, from: number, ms: number): Span => {
    const span = tracer.startSpan(name, { startTime: epoch(from) }, parent);
    span.end(epoch(from + ms));
    return span;
  };
  let at = startMs;
  child('reactor.process_input', at, s.processInputMs);
  at += s.processInputMs;
  child('reactor.generate', at, s.elapsedMs);
  for (const c of calls) {
    if (!c.done) continue;
    child('reactor.runner.dispatch', c.startMs, c.dispatchMs);
    child('reactor.runner.ranks', c.startMs + c.dispatchMs, c.ranksMs);
    child('reactor.runner.handback', c.startMs + c.dispatchMs + c.ranksMs, c.handbackMs);
  }
  at += s.elapsedMs;
  if (s.processOutputMs !== undefined) child('reactor.process_output', outputAtMs ?? at, s.processOutputMs);
}

/** performance.now() as epoch milliseconds (what every SDK reads a number time as). */
function epoch(ms: number): number {
  return performance.timeOrigin + ms;
}
