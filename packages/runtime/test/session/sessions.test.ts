import type { SessionStatus } from '@reactor/client';
import { IsString } from 'class-validator';
import { afterEach, describe, expect, it } from 'vitest';
import {
  AppHost,
  AppLoadError,
  ApplicationError,
  type Client,
  connected,
  disconnected,
  Frames,
  getWeightsPath,
  HostOptionError,
  InputField,
  InputState,
  NoSessionError,
  Output,
  ReactorApp,
  reactorApp,
  sessionEnded,
  sessionStarted,
  Video,
  WEIGHTS_PATH_ENV,
  WeightsPathNotSetError,
} from '../../src/index.js';
import { RecordingLogger, RecordingSink, command as cmd, deferred, rgbFrames, useHosts } from '../../src/testing.js';

const start = useHosts(afterEach);

function statusLog(h: AppHost): { states: string[]; until: (state: string, count?: number) => Promise<void> } {
  const states: string[] = [];
  const waiters: Array<{ state: string; count: number; resolve: () => void }> = [];
  h.onStatus((s: SessionStatus) => {
    states.push(`${s.state}/${s.clients}${s.error ? `!${s.error.code}` : ''}${s.refused !== undefined ? `~${s.refused}` : ''}`);
    for (const w of [...waiters]) {
      if (states.filter((x) => x.startsWith(`${w.state}/`)).length >= w.count) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    }
  });
  return {
    states,
    until: (state, count = 1) =>
      states.filter((x) => x.startsWith(`${state}/`)).length >= count
        ? Promise.resolve()
        : new Promise<void>((resolve, reject) => {
            const t = setTimeout(() => reject(new Error(`status ${state} #${count} not reached: ${states.join(' ')}`)), 5000);
            waiters.push({ state, count, resolve: () => (clearTimeout(t), resolve()) });
          }),
  };
}

class PromptState extends InputState {
  @InputField({ default: 'forest' })
  @IsString()
  prompt!: string;
}

/** An app whose steps are refused (so tests control exactly what runs) and which records its hooks. */
function hookApp(log: string[], opts: { throwIn?: string } = {}) {
  @reactorApp({ state: PromptState })
  class App extends ReactorApp<PromptState> {
    override processInput(): never {
      throw new ApplicationError('idle');
    }
    generate(): null {
      return null;
    }
    @sessionStarted started(): void {
      log.push(`sessionStarted:${this.state.prompt}`);
      if (opts.throwIn === 'sessionStarted') throw new Error('hook failed');
    }
    @sessionStarted async startedToo(): Promise<void> {
      await Promise.resolve();
      log.push('sessionStarted#2');
    }
    @connected async joined(c: Client): Promise<void> {
      log.push(`connected:${c.id}`);
      if (opts.throwIn === 'connected') throw new Error('async hook failed');
    }
    @disconnected left(c: Client): void {
      log.push(`disconnected:${c.id}`);
    }
    @sessionEnded ended(): void {
      log.push(`sessionEnded:${this.state.prompt}`);
    }
  }
  return App;
}

describe('sessions', () => {
  it('go loading -> ready -> waiting -> streaming -> orphaned -> closing -> ready, with hooks in order', async () => {
    const log: string[] = [];
    const host = start(hookApp(log), { gracePeriodMs: 10 });
    const st = statusLog(host);
    expect(host.status).toEqual({ state: 'loading', clients: 0 });
    await host.load();
    const sink = new RecordingSink();
    const h = host.connect(sink);
    // The app refuses every step: the first refusal goes into the status (`refused`) once.
    await st.until('streaming', 2);
    h.disconnect();
    await st.until('ready', 2);
    const id = h.id;
    expect(st.states).toEqual([
      'loading/0',
      'ready/0',
      'waiting/1',
      'streaming/1',
      'streaming/1~idle',
      'streaming/0~idle',
      'orphaned/0',
      'closing/0',
      'ready/0',
    ]);
    expect(log).toEqual(['sessionStarted:forest', 'sessionStarted#2', `connected:${id}`, `disconnected:${id}`, 'sessionEnded:forest']);
    expect(sink.summary()).toEqual(['welcome:waiting', 'session:streaming', 'session:streaming']);
  });

  it('outlive their last client for the grace period: a client that rejoins finds the same session and state', async () => {
    const log: string[] = [];
    const host = start(hookApp(log), { gracePeriodMs: 60_000 });
    await host.load();
    const a = new RecordingSink();
    const ha = host.connect(a);
    await a.waitForSession('streaming');
    await ha.command(cmd('1', 'set_prompt', { prompt: 'sea' }));
    const sessionId = host.status.sessionId;
    ha.disconnect();
    const st = statusLog(host);
    await st.until('orphaned');
    const b = new RecordingSink();
    host.connect(b);
    expect(b.messages[0]).toMatchObject({ type: 'welcome', state: { prompt: 'sea' }, session: { state: 'orphaned', sessionId, clients: 1 } });
    await b.waitForSession('streaming');
    expect(host.status.sessionId).toBe(sessionId);
    expect(log.filter((l) => l.startsWith('session'))).toEqual(['sessionStarted:forest', 'sessionStarted#2']);
  });

  it('start with fresh state built from the defaults', async () => {
    const log: string[] = [];
    const host = start(hookApp(log), { gracePeriodMs: 0 });
    const st = statusLog(host);
    await host.load();
    const a = new RecordingSink();
    const ha = host.connect(a);
    await a.waitForSession('streaming');
    await ha.command(cmd('1', 'set_prompt', { prompt: 'sea' }));
    ha.disconnect();
    await st.until('ready', 2);
    const b = new RecordingSink();
    host.connect(b);
    expect(b.messages[0]).toMatchObject({ type: 'welcome', state: { prompt: 'forest' } });
    await b.waitForSession('streaming');
    expect(log.filter((l) => l.startsWith('session'))).toEqual([
      'sessionStarted:forest',
      'sessionStarted#2',
      'sessionEnded:sea',
      'sessionStarted:forest',
      'sessionStarted#2',
    ]);
  });

  it('log a throwing hook (sync or async) and carry on', async () => {
    for (const where of ['sessionStarted', 'connected']) {
      const log: string[] = [];
      const logger = new RecordingLogger();
      const host = start(hookApp(log, { throwIn: where }), { logger });
      await host.load();
      const sink = new RecordingSink();
      const h = host.connect(sink);
      await sink.waitForSession('streaming');
      expect(log).toEqual(['sessionStarted:forest', 'sessionStarted#2', `connected:${h.id}`]);
      expect(logger.at('error')).toEqual([
        where === 'sessionStarted' ? '@sessionStarted hook App.started threw (ignored)' : '@connected hook App.joined threw (ignored)',
      ]);
    }
  });

  it('run clients that connected while the app was loading into the first session', async () => {
    const log: string[] = [];
    const loaded = deferred();
    class Slow extends hookApp(log) {
      override async load(): Promise<void> {
        await loaded.promise;
      }
    }
    const host = start(Slow);
    const loading = host.load();
    const a = new RecordingSink();
    const ha = host.connect(a);
    loaded.resolve();
    await loading;
    await a.waitForSession('streaming');
    // Its welcome had no state (no session yet): the state follows as soon as it joins one.
    expect(a.summary()).toEqual(['welcome:loading', 'session:ready', 'session:waiting', 'state', 'session:streaming']);
    expect(a.messages[0]).toMatchObject({ type: 'welcome', state: {} });
    expect(a.ofType('state')[0]).toEqual({ type: 'state', state: { prompt: 'forest' } });
    expect(log).toEqual(['sessionStarted:forest', 'sessionStarted#2', `connected:${ha.id}`]);
  });
});

describe('a session that fails', () => {
  class Out extends Output {
    @Video({ width: 1, height: 1 }) main?: Video;
  }

  it('ends when processInput throws something other than ApplicationError; clients are told and closed', async () => {
    const log: string[] = [];
    class Broken extends hookApp(log) {
      override processInput(): never {
        throw new TypeError('state is inconsistent');
      }
    }
    const host = start(Broken);
    await host.load();
    const sink = new RecordingSink();
    const h = host.connect(sink);
    await sink.waitFor((e) => e.kind === 'close');
    expect(sink.ofType('session').at(-1)!.session).toEqual({
      state: 'closing',
      sessionId: expect.any(String),
      clients: 1,
      error: { code: 'session_failed', message: 'processInput() failed: TypeError: state is inconsistent' },
    });
    expect(log).toEqual(['sessionStarted:forest', 'sessionStarted#2', `connected:${h.id}`, `disconnected:${h.id}`, 'sessionEnded:forest']);
    expect(host.status).toMatchObject({ state: 'ready', clients: 0, error: { code: 'session_failed' } });
  });

  it('ends, by default, when the model throws (default processOutput rethrows) or returns something that is not an Output', async () => {
    const modelError = Object.assign(new Error('CUDA out of memory'), { code: 'oom' });
    let mode: 'throw' | 'bad' | 'ok' = 'throw';
    @reactorApp({ output: Out })
    class Default extends ReactorApp<InputState, InputState, unknown> {
      generate(): unknown {
        if (mode === 'throw') throw modelError;
        if (mode === 'bad') return new Frames(rgbFrames(1, 1, 1), [1, 1, 1, 3]);
        return new Out({ main: rgbFrames(2, 1, 1) });
      }
    }
    const host = start(Default);
    await host.load();
    const a = new RecordingSink();
    host.connect(a);
    await a.waitFor((e) => e.kind === 'close');
    expect(a.ofType('session').at(-1)!.session.error).toEqual({ code: 'session_failed', message: 'processOutput() failed: Error: CUDA out of memory [oom]' });

    mode = 'bad';
    const b = new RecordingSink();
    host.connect(b);
    await b.waitFor((e) => e.kind === 'close');
    expect(b.ofType('session').at(-1)!.session.error!.message).toMatchInlineSnapshot(
      `"processOutput() failed: InvalidOutputError: Default.generate() returned Frames, not an Output; return an Output from generate() or override processOutput() to build one [invalid_output]"`,
    );

    mode = 'ok'; // and a new session works
    const c = new RecordingSink();
    host.connect(c);
    await c.waitForFrames(2);
    expect(c.summary().slice(0, 2)).toEqual(['welcome:waiting', 'session:streaming']);
  });
});

describe('AppHost', () => {
  it('load(): a failure sets status failed with the reason and rejects with AppLoadError; a second load is refused', async () => {
    class Fails extends ReactorApp {
      override load(): void {
        throw new Error('weights missing at /w');
      }
      generate(): null {
        return null;
      }
    }
    const host = start(Fails);
    const sink = new RecordingSink();
    host.connect(sink);
    const err = await host.load().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppLoadError);
    expect((err as AppLoadError).code).toBe('load_failed');
    expect((err as AppLoadError).cause).toBeInstanceOf(Error);
    expect(host.status).toEqual({ state: 'failed', clients: 1, error: { code: 'load_failed', message: 'Fails.load() failed: Error: weights missing at /w' } });
    expect(sink.ofType('session').map((m) => m.session.state)).toEqual(['failed']);
    await expect(host.load()).rejects.toMatchObject({ code: 'already_loaded' });
  });

  it('getWeightsPath(): the host option, overridden by REACTOR_WEIGHTS_PATH; a clear error when neither is set', async () => {
    const seen: string[] = [];
    class W extends ReactorApp {
      override load(): void {
        seen.push(getWeightsPath(), this.getWeightsPath());
        try {
          void this.state;
        } catch (e) {
          seen.push((e as NoSessionError).code);
        }
      }
      generate(): null {
        return null;
      }
    }
    const prev = process.env[WEIGHTS_PATH_ENV];
    delete process.env[WEIGHTS_PATH_ENV];
    try {
      await start(W, { weightsPath: '/models/demo' }).load();
      process.env[WEIGHTS_PATH_ENV] = '/env/weights';
      await start(W, { weightsPath: '/models/demo' }).load();
      delete process.env[WEIGHTS_PATH_ENV];
      const err = await start(W)
        .load()
        .catch((e: AppLoadError) => e.cause);
      expect(err).toBeInstanceOf(WeightsPathNotSetError);
      expect((err as Error).message).toMatchInlineSnapshot(
        `"no weights path is configured: set runtime.weights_path in reactor.yaml (or AppHost option weightsPath), or the environment variable REACTOR_WEIGHTS_PATH"`,
      );
    } finally {
      if (prev === undefined) delete process.env[WEIGHTS_PATH_ENV];
      else process.env[WEIGHTS_PATH_ENV] = prev;
    }
    expect(seen).toEqual(['/models/demo', '/models/demo', 'no_session', '/env/weights', '/env/weights', 'no_session']);
  });

  it('sends periodic stats to each client with its own dropped count', async () => {
    class Out extends Output {
      @Video({ width: 1, height: 1 }) main?: Video;
    }
    @reactorApp({ output: Out, fps: 100 })
    class S extends ReactorApp<InputState, InputState, Out> {
      async generate(): Promise<Out> {
        await new Promise((r) => setTimeout(r, 2));
        return new Out({ main: rgbFrames(1, 1, 1) });
      }
    }
    const host = start(S, { statsIntervalMs: 40 });
    await host.load();
    const a = new RecordingSink();
    const b = new RecordingSink();
    const ha = host.connect(a);
    host.connect(b);
    ha.reportDropped(3);
    await a.waitForFrames(3);
    const statsA = await a.waitForMessage((m) => m.type === 'stats' && m.steps > 0);
    const statsB = await b.waitForMessage((m) => m.type === 'stats' && m.steps > 0);
    expect(statsA).toMatchObject({ type: 'stats', dropped: 3 });
    expect(statsB).toMatchObject({ type: 'stats', dropped: 0 });
    // The step time and the fps are each stats window's. On a busy machine the first window with
    // a step may end before that step's frame plays (fps 0 there), so wait for a window that
    // holds both: it comes within a few windows, or the wait times out and fails.
    const windowed = await a.waitForMessage((m) => m.type === 'stats' && m.stepMs > 0 && m.fps > 0, { timeoutMs: 10_000 });
    if (windowed.type === 'stats') expect(windowed.stepMs).toBeGreaterThan(1);
    expect(host.counters.framesDropped).toBe(3);
  });

  it('close(): ends the session (hooks run), closes every sink; later connects are closed at once', async () => {
    const log: string[] = [];
    const host = start(hookApp(log));
    await host.load();
    const a = new RecordingSink();
    const ha = host.connect(a);
    await a.waitForSession('streaming');
    await host.close();
    expect(log).toEqual(['sessionStarted:forest', 'sessionStarted#2', `connected:${ha.id}`, `disconnected:${ha.id}`, 'sessionEnded:forest']);
    expect(a.events.at(-1)).toEqual({ kind: 'close', reason: 'the app host is shutting down' });
    const late = new RecordingSink();
    host.connect(late);
    expect(late.summary()).toEqual(['welcome:ready', 'close']);
    await host.close(); // idempotent
  });

  it('survives a sink that throws: it is logged, the other clients still get everything', async () => {
    class Out extends Output {
      @Video({ width: 1, height: 1 }) main?: Video;
    }
    @reactorApp({ output: Out, fps: 200 })
    class S extends ReactorApp<InputState, InputState, Out> {
      generate(): Out {
        return new Out({ main: rgbFrames(1, 1, 1) });
      }
    }
    const logger = new RecordingLogger();
    const host = start(S, { logger });
    await host.load();
    const bad = new RecordingSink();
    bad.frame = () => {
      throw new Error('socket exploded');
    };
    host.connect(bad);
    const good = new RecordingSink();
    host.connect(good);
    await good.waitForFrames(5);
    expect(logger.at('warn')).toContain('a client sink or status listener threw (ignored)');
    expect(host.status.state).toBe('streaming');
  });

  it('close() calls unload() once after the session ended, also after a sync or failed load(), never without a load()', async () => {
    const log: string[] = [];
    const make = (fail: boolean) =>
      class U extends hookApp(log) {
        override load(): void {
          log.push('load');
          if (fail) throw new Error('no weights');
        }
        override unload(): void {
          log.push('unload');
          throw new Error('unload trouble'); // logged, closing goes on
        }
      };
    const ok = start(make(false));
    await ok.load();
    const sink = new RecordingSink();
    ok.connect(sink);
    await sink.waitForSession('streaming');
    await ok.close();
    await ok.close();
    expect(log.filter((l) => !l.startsWith('connected') && !l.startsWith('disconnected'))).toEqual([
      'load',
      'sessionStarted:forest',
      'sessionStarted#2',
      'sessionEnded:forest',
      'unload',
    ]);
    log.length = 0;
    const failed = start(make(true));
    await failed.load().catch(() => undefined);
    await failed.close();
    expect(log).toEqual(['load', 'unload']);
    log.length = 0;
    await start(make(false)).close();
    expect(log).toEqual([]);
  });

  it('a second close() while the first runs resolves only after unload() finished', async () => {
    let unloaded = false;
    class Slow extends ReactorApp {
      generate(): null {
        return null;
      }
      override async unload(): Promise<void> {
        await new Promise((r) => setTimeout(r, 50));
        unloaded = true;
      }
    }
    const host = start(Slow);
    await host.load();
    const first = host.close();
    await host.close();
    expect(unloaded).toBe(true);
    await first;
  });

  it('validates its options eagerly', () => {
    class A extends ReactorApp {
      generate(): null {
        return null;
      }
    }
    expect(() => new AppHost(A, { gracePeriodMs: -1 })).toThrow(HostOptionError);
    expect(() => new AppHost(A, { gracePeriodMs: -1 })).toThrowErrorMatchingInlineSnapshot(
      `[HostOptionError: options.gracePeriodMs must be a non-negative number of ms, got -1]`,
    );
  });
});
