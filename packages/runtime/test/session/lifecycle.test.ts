import { IsString } from 'class-validator';
import { afterEach, describe, expect, it } from 'vitest';
import {
  AppHost,
  ApplicationError,
  type Client,
  connected,
  disconnected,
  IllegalTransitionError,
  InputField,
  InputState,
  ReactorApp,
  reactorApp,
  RuntimeErrorCode,
} from '../../src/index.js';
import { CLIENT_TRANSITIONS, HOST_TRANSITIONS, Lifecycle, SESSION_TRANSITIONS } from '../../src/internal.js';
import { RecordingSink, deferred, useHosts } from '../../src/testing.js';

const start = useHosts(afterEach);

describe('Lifecycle', () => {
  it('moves only along its table; any other transition throws IllegalTransitionError naming the lifecycle and both states', () => {
    const l = new Lifecycle('session', 'starting', SESSION_TRANSITIONS);
    l.to('waiting');
    l.to('streaming');
    expect(l.is('streaming', 'orphaned')).toBe(true);
    let err: unknown;
    try {
      l.to('starting');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(IllegalTransitionError);
    expect(err).toMatchObject({ code: RuntimeErrorCode.IllegalTransition, lifecycle: 'session', from: 'streaming', to: 'starting' });
    expect((err as Error).message).toMatchInlineSnapshot(`"illegal session transition streaming -> starting"`);
    expect(l.state).toBe('streaming');
  });

  // Every pair of states of every lifecycle: allowed exactly when its table lists it.
  for (const [name, table] of [
    ['host', HOST_TRANSITIONS],
    ['session', SESSION_TRANSITIONS],
    ['client', CLIENT_TRANSITIONS],
  ] as const) {
    it(`${name}: every transition its table does not list is refused, every listed one is taken`, () => {
      const states = Object.keys(table) as Array<keyof typeof table>;
      let refused = 0;
      for (const from of states) {
        for (const to of states) {
          const l = new Lifecycle<string>(name, from, table as Record<string, readonly string[]>);
          const allowed = (table as Record<string, readonly string[]>)[from]!.includes(to);
          if (allowed) {
            l.to(to);
            expect(l.state).toBe(to);
          } else {
            expect(() => l.to(to), `${from} -> ${to}`).toThrow(IllegalTransitionError);
            expect(l.state).toBe(from);
            refused++;
          }
        }
      }
      // The terminal state goes nowhere, and self-transitions are never listed.
      expect(refused).toBeGreaterThanOrEqual(states.length);
    });
  }
});

class S extends InputState {
  @InputField({ default: 'forest' })
  @IsString()
  prompt!: string;
}

describe('AppHost lifecycles', () => {
  it('the host refuses load() after close() and a second load(); status after close stays where loading left it', async () => {
    class A extends ReactorApp {
      generate(): null {
        return null;
      }
    }
    const h = start(A);
    await h.load();
    await expect(h.load()).rejects.toMatchObject({ code: 'already_loaded' });
    await h.close();
    await expect(h.load()).rejects.toMatchObject({ code: 'host_closed' });
    expect(h.status.state).toBe('ready');
    expect(h.readiness()).toEqual({ ready: false, reasons: [{ code: 'closing', message: 'the app host is shutting down' }] });
  });

  it('a client that leaves before its @connected hook ran gets neither hook', async () => {
    const log: string[] = [];
    const gate = deferred();
    const left = deferred();
    @reactorApp({ state: S })
    class A extends ReactorApp<S> {
      override processInput(): never {
        throw new ApplicationError('idle');
      }
      generate(): null {
        return null;
      }
      @connected async hi(c: Client): Promise<void> {
        log.push(`connected:${c.id}`);
        await gate.promise;
      }
      @disconnected bye(c: Client): void {
        log.push(`disconnected:${c.id}`);
        left.resolve();
      }
    }
    const h = start(A, { gracePeriodMs: 60_000 });
    await h.load();
    const first = host(h);
    const second = host(h); // its @connected waits behind the first one's
    await first.sink.waitForMessage((m) => m.type === 'session' && m.session.clients === 2);
    second.handle.disconnect();
    gate.resolve();
    await first.sink.waitForSession('streaming');
    first.handle.disconnect();
    await left.promise;
    expect(h.status.state).toBe('orphaned');
    expect(log).toEqual([`connected:${first.handle.id}`, `disconnected:${first.handle.id}`]);
  });
});

function host(h: AppHost): { sink: RecordingSink; handle: ReturnType<AppHost['connect']> } {
  const sink = new RecordingSink();
  return { sink, handle: h.connect(sink) };
}
