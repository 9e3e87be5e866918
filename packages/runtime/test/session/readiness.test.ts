import { afterEach, describe, expect, it } from 'vitest';
import { ApplicationError, type AppReadiness, type Client, connected, ReactorApp, ReadinessCode, sessionEnded } from '../../src/index.js';
import { RecordingLogger, RecordingSink, deferred, useHosts } from '../../src/testing.js';

const start = useHosts(afterEach);

/** An app whose readiness the test sets, whose load and @sessionEnded the test holds. */
function app(opts: { load?: Promise<void>; ended?: Promise<void>; fail?: boolean } = {}) {
  const control: { report: () => AppReadiness } = { report: () => true };
  class A extends ReactorApp {
    override async load(): Promise<void> {
      await opts.load;
      if (opts.fail) throw new Error('no weights in /nowhere');
    }
    override readiness(): AppReadiness {
      return control.report();
    }
    override processInput(): never {
      throw new ApplicationError('idle');
    }
    generate(): null {
      return null;
    }
    @sessionEnded async ended(): Promise<void> {
      await opts.ended;
    }
  }
  return { A, control };
}

describe('AppHost.readiness()', () => {
  it('is not ready while loading, ready once loaded, and says why not after a load failure', async () => {
    const loaded = deferred();
    const { A } = app({ load: loaded.promise });
    const h = start(A);
    expect(h.readiness()).toEqual({ ready: false, reasons: [{ code: 'loading', message: 'the app is loading' }] });
    const loading = h.load();
    expect(h.readiness().reasons.map((r) => r.code)).toEqual(['loading']);
    loaded.resolve();
    await loading;
    expect(h.readiness()).toEqual({ ready: true, reasons: [] });

    const { A: Failing } = app({ fail: true });
    const f = start(Failing);
    await f.load().catch(() => undefined);
    expect(f.readiness()).toEqual({
      ready: false,
      reasons: [{ code: 'load_failed', message: 'the app failed to load: A.load() failed: Error: no weights in /nowhere' }],
    });
  });

  it('is not ready while the host closes, nor while a session ends (a new client would wait)', async () => {
    const ended = deferred();
    const { A } = app({ ended: ended.promise });
    const h = start(A, { gracePeriodMs: 0 });
    await h.load();
    const sink = new RecordingSink();
    const c = h.connect(sink);
    await sink.waitForSession('streaming');
    c.disconnect();
    const closingSeen = new Promise<void>((resolve) => h.onStatus((s) => s.state === 'closing' && resolve()));
    await closingSeen;
    expect(h.readiness()).toEqual({
      ready: false,
      reasons: [{ code: 'session_closing', message: 'the current session is ending; a new one starts when it has' }],
    });
    const closing = h.close();
    expect(h.readiness().reasons.map((r) => r.code)).toEqual(['closing']);
    ended.resolve();
    await closing;
    expect(h.readiness().reasons.map((r) => r.code)).toEqual(['closing']);
  });

  it("adds the app's own reasons as app_not_ready: a string, several, a throw, a wrong value", async () => {
    const { A, control } = app();
    const h = start(A, { logger: new RecordingLogger() });
    await h.load();
    control.report = () => 'the runner is restarting';
    expect(h.readiness()).toEqual({ ready: false, reasons: [{ code: 'app_not_ready', message: 'the runner is restarting' }] });
    control.report = () => ['rank 1 stalled', 'shared memory low'];
    expect(h.readiness().reasons).toEqual([
      { code: 'app_not_ready', message: 'rank 1 stalled' },
      { code: 'app_not_ready', message: 'shared memory low' },
    ]);
    control.report = () => {
      throw new Error('boom');
    };
    expect(h.readiness().reasons).toEqual([{ code: 'app_not_ready', message: 'A.readiness() threw: Error: boom' }]);
    control.report = () => false as unknown as true;
    expect(h.readiness().reasons).toEqual([
      { code: 'app_not_ready', message: expect.stringMatching(/^A\.readiness\(\) returned false; return true or the reason it is not ready/) },
    ]);
    control.report = () => true;
    expect(h.readiness().ready).toBe(true);
  });

  it("keeps the codes of the app's { code, message } reasons (runner_unhealthy, rank_stalled, runner_restarting), strings still app_not_ready", async () => {
    const { A, control } = app();
    const h = start(A, { logger: new RecordingLogger() });
    await h.load();
    control.report = () => ({ code: ReadinessCode.RunnerRestarting, message: 'the runner is restarting' });
    expect(h.readiness()).toEqual({ ready: false, reasons: [{ code: 'runner_restarting', message: 'the runner is restarting' }] });
    control.report = () => [
      { code: ReadinessCode.RankStalled, message: 'rank 1 has made no progress for 5.0 s (generate)' },
      'shared memory low',
      { code: ReadinessCode.RunnerUnhealthy, message: 'rank 0 exited' },
    ];
    expect(h.readiness().reasons).toEqual([
      { code: 'rank_stalled', message: 'rank 1 has made no progress for 5.0 s (generate)' },
      { code: 'app_not_ready', message: 'shared memory low' },
      { code: 'runner_unhealthy', message: 'rank 0 exited' },
    ]);
    // The app's own code, if snake_case; anything else is reported as a wrong value.
    control.report = () => ({ code: 'cache_warming', message: 'warming the cache' });
    expect(h.readiness().reasons).toEqual([{ code: 'cache_warming', message: 'warming the cache' }]);
    control.report = () => ({ code: 'Not Snake', message: 'x' });
    expect(h.readiness().reasons).toEqual([
      {
        code: 'app_not_ready',
        message:
          'A.readiness() returned {"code":"Not Snake","message":"x"}; return true or the reason it is not ready (a message, or { code, message } with a snake_case code)',
      },
    ]);
    control.report = () => true;
    expect(h.readiness()).toEqual({ ready: true, reasons: [] });
  });
});

describe('a client that joins late', () => {
  it('gets the state as soon as it joins the next session when it connected while one was closing', async () => {
    const ended = deferred();
    const { A } = app({ ended: ended.promise });
    const h = start(A, { gracePeriodMs: 0 });
    await h.load();
    const first = new RecordingSink();
    const c = h.connect(first);
    await first.waitForSession('streaming');
    c.disconnect();
    await new Promise<void>((resolve) => h.onStatus((s) => s.state === 'closing' && resolve()));
    const late = new RecordingSink();
    h.connect(late);
    expect(late.messages[0]).toMatchObject({ type: 'welcome', state: {}, session: { state: 'closing' } });
    ended.resolve();
    await late.waitForSession('streaming');
    expect(late.summary()).toEqual(['welcome:closing', 'session:ready', 'session:waiting', 'state', 'session:streaming']);
    expect(late.ofType('state')).toEqual([{ type: 'state', state: {} }]);
  });
});

describe('the app logger', () => {
  it('is the host logger as a child bound to the app name, from the constructor on', async () => {
    const logger = new RecordingLogger();
    class Talkative extends ReactorApp {
      constructor() {
        super();
        this.logger.info('built');
      }
      override load(): void {
        this.logger.info({ gpus: 0 }, 'loading');
      }
      generate(): null {
        return null;
      }
      @connected hello(c: Client): void {
        this.logger.debug(`hello ${c.id}`);
      }
    }
    const h = start(Talkative, { logger });
    await h.load();
    const sink = new RecordingSink();
    const c = h.connect(sink);
    await sink.waitForSession('streaming');
    expect(logger.lines.filter((l) => l.fields.app === 'Talkative').map((l) => [l.level, l.message, l.fields])).toEqual([
      ['info', 'built', { app: 'Talkative' }],
      ['info', 'loading', { app: 'Talkative', gpus: 0 }],
      ['debug', `hello ${c.id}`, { app: 'Talkative' }],
    ]);
  });
});
