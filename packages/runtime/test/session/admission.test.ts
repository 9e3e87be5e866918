/**
 * `AppHostOptions.admission` (issue 42): a refusal keeps an idle host not ready with its code and
 * refuses a client that would start a session (welcome, `error`, close), both while the host is
 * loaded and for clients that waited during the load; a running session takes new clients
 * without asking; a bad option is refused at construction.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ApplicationError, ReactorApp, type SessionAdmission } from '../../src/index.js';
import { RecordingSink, deferred, useHosts } from '../../src/testing.js';

const start = useHosts(afterEach);

const REFUSAL = { code: 'gpu_full', message: 'all 1 session slot of GPU g0 are held by other instances' };

/** An admission the test opens and closes, counting how often it is asked. */
function gate(open: boolean): SessionAdmission & { open: boolean; asked: number } {
  return {
    open,
    asked: 0,
    refusal() {
      this.asked++;
      return this.open ? undefined : REFUSAL;
    },
  };
}

function app(load?: Promise<void>) {
  return class A extends ReactorApp {
    override async load(): Promise<void> {
      await load;
    }
    override processInput(): never {
      throw new ApplicationError('idle');
    }
    generate(): null {
      return null;
    }
  };
}

describe('AppHost admission', () => {
  it('an idle host is not ready with the refusal, and a client that would start a session is refused (welcome, error, close)', async () => {
    const admission = gate(false);
    const h = start(app(), { admission });
    await h.load();
    expect(h.readiness()).toEqual({ ready: false, reasons: [REFUSAL] });
    const sink = new RecordingSink();
    h.connect(sink);
    expect(sink.events.map((e) => (e.kind === 'message' ? e.msg.type : e.kind))).toEqual(['welcome', 'error', 'close']);
    expect(sink.ofType('error')[0]).toEqual({ type: 'error', ...REFUSAL });
    expect(h.status).toMatchObject({ state: 'ready', clients: 0 });
    expect(h.counters.sessions).toBe(0);

    admission.open = true;
    expect(h.readiness()).toEqual({ ready: true, reasons: [] });
    const ok = new RecordingSink();
    h.connect(ok);
    await ok.waitForSession('streaming');
    // A running session takes more clients without asking again, and the host's readiness does not ask either.
    admission.open = false;
    const asked = admission.asked;
    const viewer = new RecordingSink();
    h.connect(viewer);
    await viewer.waitForSession('streaming');
    expect(viewer.ofType('error')).toEqual([]);
    expect(h.readiness().reasons.map((r) => r.code)).not.toContain('gpu_full');
    expect(admission.asked).toBe(asked);
  });

  it('refuses the clients that waited during the load when the admission refuses at load end', async () => {
    const loaded = deferred();
    const h = start(app(loaded.promise), { admission: gate(false) });
    const loading = h.load();
    const sink = new RecordingSink();
    h.connect(sink);
    loaded.resolve();
    await loading;
    await sink.waitFor((e) => e.kind === 'close');
    expect(sink.ofType('error').map((m) => m.code)).toEqual(['gpu_full']);
    expect(h.counters.sessions).toBe(0);
  });

  it("is closed once the host has closed (the GPU slot goes back), after the app's unload()", async () => {
    const order: string[] = [];
    class A extends app() {
      override unload(): void {
        order.push('unload');
      }
    }
    const h = start(A, { admission: { refusal: () => undefined, close: () => order.push('admission closed') } });
    await h.load();
    await h.close();
    await h.close();
    expect(order).toEqual(['unload', 'admission closed']);
  });

  it('refuses an admission that is not one', () => {
    expect(() => start(app(), { admission: {} as SessionAdmission })).toThrow(/options.admission must be an object with a refusal\(\) method/);
  });
});
