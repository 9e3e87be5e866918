/**
 * `AppHostOptions.admission` (issue 42): a refusal keeps an idle host not ready with its code and
 * refuses a client that would start a session (welcome, `error`, close), both while the host is
 * loaded and for clients that waited during the load; a running session takes new clients
 * without asking; a bad option is refused at construction.
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  ApplicationError,
  FRAME_HEALTH_MIN_INTERVALS,
  Output,
  ReactorApp,
  type SessionAdmission,
  type SessionFrameHealth,
  Video,
  reactorApp,
} from '../../src/index.js';
import { FrameTimes } from '../../src/session/frame-health.js';
import { RecordingSink, deferred, rgbFrames, useHosts } from '../../src/testing.js';

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

describe('AppHost admission: frame-time reports (gpu.admit: deadline)', () => {
  it("reports every second: nothing while idle, the session's fps and frame-time p99 while it streams, nothing at once when it ends", async () => {
    class Out extends Output {
      @Video({ width: 1, height: 1 }) main?: Video;
    }
    @reactorApp({ output: Out, fps: 50 })
    class S extends ReactorApp {
      generate(): Out {
        return new Out({ main: rgbFrames(2, 1, 1) });
      }
    }
    const reports: Array<SessionFrameHealth | undefined> = [];
    let waiter: { ok: (h: SessionFrameHealth | undefined) => boolean; resolve: () => void } | undefined;
    const until = (ok: (h: SessionFrameHealth | undefined) => boolean): Promise<void> =>
      new Promise((resolve) => {
        waiter = { ok, resolve };
      });
    const admission: SessionAdmission = {
      refusal: () => undefined,
      report(h) {
        reports.push(h);
        if (waiter?.ok(h)) waiter.resolve();
      },
    };
    const h = start(S, { admission, gracePeriodMs: 0 });
    await h.load();
    expect(reports).toEqual([undefined]);
    const sink = new RecordingSink();
    const c = h.connect(sink);
    await sink.waitForSession('streaming');
    await until((r) => r?.p99Ms !== undefined);
    const measured = reports.at(-1)!;
    const status = h.status;
    expect(measured).toMatchObject({ session: 'sessionId' in status ? status.sessionId : 'a session', fps: 50, windowMs: 5000 });
    expect(measured.intervals).toBeGreaterThanOrEqual(FRAME_HEALTH_MIN_INTERVALS);
    // A frame interval is 20 ms: the p99 is at least that (frames are never played early).
    expect(measured.p99Ms).toBeGreaterThanOrEqual(19);
    const ended = until((r) => r === undefined);
    c.disconnect();
    await ended;
    await h.close();
  });

  it('FrameTimes: nearest-rank p99 of the intervals in the window, the wait since the last frame included; too few intervals: not measured', () => {
    const t = new FrameTimes('s', 25, 1000);
    for (let k = 0; k < FRAME_HEALTH_MIN_INTERVALS - 1; k++) t.played(k * 40);
    // 6 intervals and the wait since the last frame: 7 < 8, not measured.
    expect(t.read(6 * 40 + 10)).toMatchObject({ intervals: 7, p99Ms: undefined });
    t.played(7 * 40 + 300);
    expect(t.read(7 * 40 + 300)).toEqual({ session: 's', fps: 25, intervals: 8, p99Ms: 340, windowMs: 1000 });
    // The window slides: the frames older than 1 s go, with their intervals (at 1080: the frames at 80..240 and 580, and the 500 ms wait).
    expect(t.read(7 * 40 + 300 + 500)).toMatchObject({ intervals: 6, p99Ms: undefined });
  });
});
