import { IsBoolean, IsInt } from 'class-validator';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ApplicationError, event, Frames, InputField, InputState, Output, ReactorApp, reactorApp, Video } from '../../src/index.js';
import { connectAsTransport, Gate, RecordingLogger, RecordingSink, command as cmd, deferred, rgbFrames, useHosts } from '../../src/testing.js';
import { useVirtualTime } from './virtual-time.js';

const start = useHosts(afterEach);
/** A measurement window (time passing is what is measured here, not a synchronisation). */
const windowOf = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Lets every pending callback run once (to show that something did NOT happen). */
const turns = async (n = 5) => {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
};

class LevelState extends InputState {
  @InputField({ default: 0 })
  @IsInt()
  level!: number;
  @InputField({ default: true })
  @IsBoolean()
  paused!: boolean;
}

class Out extends Output {
  @Video({ width: 2, height: 2 }) main?: Video;
}

describe('step loop', () => {
  it('runs a command that arrives mid-step only after the step (processOutput included) has finished', async () => {
    const log: string[] = [];
    const gate = new Gate<number, void>();
    @reactorApp({ state: LevelState })
    class App extends ReactorApp<LevelState, number, null> {
      override processInput(): number {
        log.push(`input:${this.state.level}`);
        return this.state.level;
      }
      async generate(level: number): Promise<null> {
        log.push('generate:start');
        await gate.call(level);
        log.push('generate:end');
        return null;
      }
      override async processOutput(): Promise<null> {
        await turns(2);
        log.push('output');
        return null;
      }
      @event({ name: 'poke' }) poke(): void {
        log.push('command:poke');
      }
    }
    const host = start(App);
    await host.load();
    const h = host.connect(new RecordingSink());
    const step1 = await gate.next();
    const replies = Promise.all([h.command(cmd('1', 'poke')), h.command(cmd('2', 'set_level', { level: 5 }))]);
    await turns(10);
    expect(log).toEqual(['input:0', 'generate:start']); // the commands wait for the step
    step1.resolve();
    await replies;
    const step2 = await gate.next();
    expect(step2.input).toBe(5);
    expect(log).toEqual(['input:0', 'generate:start', 'generate:end', 'output', 'command:poke', 'input:5', 'generate:start']);
    step2.resolve();
  });

  describe('a refused step (ApplicationError)', () => {
    it.each([
      ['is retried after the back-off, not in a busy spin', false],
      ['that flushes before refusing is still retried after the back-off (a flush inside a step is not a change)', true],
    ])('%s, and timers keep running', async (_name, flushes) => {
      let calls = 0;
      const first = deferred();
      const watch: { after?: number; reached?: () => void } = {};
      class App extends ReactorApp {
        override processInput(): never {
          calls++;
          if (watch.after !== undefined && calls - watch.after >= 4) watch.reached?.();
          if (flushes) this.output.flush();
          first.resolve();
          throw new ApplicationError('waiting for a prompt');
        }
        generate(): null {
          throw new Error('the model must not be called for a refused step');
        }
      }
      const host = start(App, { refusalBackoffMs: 50 });
      await host.load();
      host.connect(new RecordingSink());
      await first.promise;
      const t0 = performance.now();
      const reached = deferred();
      watch.reached = reached.resolve;
      watch.after = calls;
      // A timer fires while steps are refused: the loop does not monopolise the event loop.
      await windowOf(20);
      await reached.promise;
      // Four more tries took at least four back-offs (a spin would make them in microseconds);
      // only a lower bound, so a slow machine cannot fail it.
      expect(performance.now() - t0).toBeGreaterThanOrEqual(4 * 50 - 5);
      expect(host.counters.steps).toBe(0);
    });

    it('is retried at once when something changes (a command, a client joining), not before', async () => {
      let calls = 0;
      let next = deferred();
      @reactorApp({ state: LevelState })
      class App extends ReactorApp<LevelState> {
        override processInput(): LevelState {
          calls++;
          next.resolve();
          throw new ApplicationError('paused');
        }
        generate(): null {
          return null;
        }
      }
      const host = start(App, { refusalBackoffMs: 60_000 });
      await host.load();
      const h = host.connect(new RecordingSink());
      await next.promise;
      await windowOf(100);
      expect(calls).toBe(1); // nothing changed: no retry (the back-off is a minute)
      next = deferred();
      await h.command(cmd('1', 'set_level', { level: 2 }));
      await next.promise;
      expect(calls).toBe(2);
      next = deferred();
      host.connect(new RecordingSink());
      await next.promise;
      expect(calls).toBeGreaterThanOrEqual(3);
    });

    it('logs each new reason once', async () => {
      const reasons = ['a', 'a', 'a', 'b', 'b', 'a', 'a'];
      const done = deferred();
      class App extends ReactorApp<InputState, null> {
        override processInput(): null {
          const r = reasons.shift();
          if (r !== undefined) throw new ApplicationError(r);
          done.resolve();
          return null;
        }
        generate(): null {
          return null;
        }
      }
      const logger = new RecordingLogger();
      const host = start(App, { refusalBackoffMs: 1, logger });
      await host.load();
      host.connect(new RecordingSink());
      await done.promise;
      expect(logger.at('info')).toEqual(['step refused: a', 'step refused: b', 'step refused: a']);
      expect(host.counters.refusedSteps).toBe(7);
    });
  });

  it('applies back-pressure: the model is never more than bufferSize frames ahead of playout', async () => {
    const aheadAtGenerate: number[] = [];
    let produced = 0;
    const sink = new RecordingSink();
    const enough = deferred();
    @reactorApp({ output: Out, fps: 200, bufferSize: 4 })
    class App extends ReactorApp<InputState, InputState, Out> {
      async generate(): Promise<Out> {
        aheadAtGenerate.push(produced - sink.frames.length);
        produced += 4;
        if (aheadAtGenerate.length === 15) enough.resolve();
        // A step of 8+ ms: the pacer starts it while 2 or more of the batch's 5 ms frames still play.
        await new Promise((r) => setTimeout(r, 8));
        return new Out({ main: new Frames(rgbFrames(4, 2, 2), [4, 2, 2, 3]) });
      }
    }
    const host = start(App);
    await host.load();
    host.connect(sink);
    await enough.promise;
    expect(Math.max(...aheadAtGenerate)).toBeLessThanOrEqual(4);
    expect(Math.max(...aheadAtGenerate)).toBeGreaterThanOrEqual(2); // the buffer is used
  });

  // One frame every 5 s, 2 a step, a 2-frame buffer; `cut` flushes. Just in time, step 2 is held
  // until the 2nd frame's 5 s are nearly up; ahead, step 2 ran at once and its batch waits for
  // room (1 queued + 2 > 2). Either way the cut releases the waiting step at once.
  it.each([
    { pacing: 'just-in-time' as const, before: 1, what: 'a step held for its due time' },
    { pacing: 'ahead' as const, before: 2, what: 'a producer blocked on a full buffer' },
  ])('pacing $pacing: flush releases $what and tells clients to cut', async ({ pacing, before }) => {
    let calls = 0;
    const next = deferred();
    @reactorApp({ output: Out, fps: 0.2, bufferSize: 2, pacing })
    class App extends ReactorApp<InputState, InputState, Out> {
      generate(): Out {
        calls++;
        if (calls === before + 1) next.resolve();
        return new Out({ main: new Frames(rgbFrames(2, 2, 2), [2, 2, 2, 3]) });
      }
      @event({ name: 'cut' }) cut(): void {
        this.output.flush();
      }
    }
    const host = start(App);
    await host.load();
    const sink = new RecordingSink();
    const h = connectAsTransport(host, sink);
    await sink.waitForFrames(1);
    await turns(10);
    expect(calls).toBe(before);
    const t0 = performance.now();
    const reply = await h.command(cmd('1', 'cut'));
    await next.promise;
    expect(performance.now() - t0).toBeLessThan(4500); // before the queued frame's 5 s were up
    expect(reply).toEqual({ type: 'reply', id: '1' });
    expect(sink.summary().slice(0, 5)).toEqual(['welcome:waiting', 'session:streaming', 'frame:main#0', 'flush', 'reply:1']);
    expect(sink.ofType('flush')).toEqual([{ type: 'flush', nextSeq: 1 }]);
  });

  it('starts each step just in time: a model faster than its fps keeps about one frame queued, not bufferSize', async () => {
    const aheadAtGenerate: number[] = [];
    let produced = 0;
    const sink = new RecordingSink();
    const enough = deferred();
    @reactorApp({ output: Out, fps: 40, bufferSize: 8 })
    class App extends ReactorApp<InputState, InputState, Out> {
      generate(): Out {
        aheadAtGenerate.push(produced - sink.frames.length);
        produced += 1;
        if (aheadAtGenerate.length === 30) enough.resolve();
        return new Out({ main: new Frames(rgbFrames(1, 2, 2), [1, 2, 2, 3]) });
      }
    }
    const host = start(App);
    await host.load();
    // On virtual time: timers fire when due, as on a quiet machine. (On a busy one, timers that
    // fire late grow the pacer's margin, and it then starts steps earlier on purpose.)
    useVirtualTime();
    try {
      host.connect(sink);
      let settled = false;
      void enough.promise.then(() => (settled = true));
      for (let i = 0; i < 2000 && !settled; i++) await vi.advanceTimersByTimeAsync(5);
      expect(settled).toBe(true);
    } finally {
      vi.useRealTimers();
    }
    // Running ahead, the model would have 8 frames queued by now; held to its due times it has
    // at most the one frame still playing when it makes the next.
    expect(Math.max(...aheadAtGenerate.slice(3))).toBeLessThanOrEqual(1);
    expect(sink.frames.map((f) => f.seq)).toEqual(sink.frames.map((_, i) => i));
  });

  it('paces playout at the declared fps', async () => {
    @reactorApp({ output: Out, fps: 50, bufferSize: 10 })
    class App extends ReactorApp<InputState, InputState, Out> {
      generate(): Out {
        return new Out({ main: new Frames(rgbFrames(5, 2, 2), [5, 2, 2, 3]) });
      }
    }
    const host = start(App);
    await host.load();
    const sink = new RecordingSink();
    const at: number[] = [];
    const origFrame = sink.frame.bind(sink);
    sink.frame = (f) => {
      at.push(performance.now());
      origFrame(f);
    };
    host.connect(sink);
    await sink.waitForFrames(11);
    const pts = sink.frames.slice(0, 11).map((f) => f.ptsMs);
    // One interval apart; a frame more than one interval late (a loaded machine, or the next
    // step arriving after the queue ran dry) restarts the clock: a gap of more than two intervals.
    for (let i = 1; i < pts.length; i++) {
      const gap = pts[i]! - pts[i - 1]!;
      expect(Math.abs(gap - 20) < 1e-6 || gap > 40, `pts gap ${gap} ms`).toBe(true);
    }
    const frames = sink.frames.slice(0, 11);
    // Never played before its due time (0.5 ms timer tolerance), so 10 intervals take >= 200 ms...
    frames.forEach((f, i) => expect(at[i]!).toBeGreaterThanOrEqual(f.dueAt - 0.6));
    expect(at[10]! - frames[0]!.dueAt).toBeGreaterThanOrEqual(199.4);
    // ...and not much more, even on a loaded machine.
    expect(at[10]! - at[0]!).toBeLessThan(2000);
  });

  it('paces playout at frames / measured generate() time when no fps is declared', async () => {
    @reactorApp({ output: Out, bufferSize: 8 })
    class App extends ReactorApp<InputState, InputState, Out> {
      async generate(): Promise<Out> {
        await windowOf(40);
        return new Out({ main: new Frames(rgbFrames(4, 2, 2), [4, 2, 2, 3]) });
      }
    }
    const host = start(App);
    await host.load();
    const sink = new RecordingSink();
    host.connect(sink);
    await sink.waitForFrames(4);
    const pts = sink.frames.slice(0, 4).map((f) => f.ptsMs);
    const gaps = [1, 2, 3].map((i) => pts[i]! - pts[i - 1]!);
    // The interval is generate() time / 4 frames: >= 40 ms / 4 (timers may fire ~1 ms early).
    // A late timer on a loaded machine may restart the clock (a longer gap), never a shorter one.
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(9.7);
    expect(Math.min(...gaps)).toBeLessThan(60);
  });
});

describe('step loop fairness', () => {
  it('keeps the event loop turning when the model answers synchronously and emits nothing', async () => {
    let steps = 0;
    class App extends ReactorApp {
      generate(): null {
        steps++;
        return null;
      }
    }
    const host = start(App);
    await host.load();
    host.connect(new RecordingSink());
    const t0 = performance.now();
    await windowOf(30); // a timer must still fire while the loop runs flat out
    expect(performance.now() - t0).toBeLessThan(5000);
    expect(steps).toBeGreaterThan(5);
  });
});

describe('several tracks', () => {
  it('paces each track at its own rate; sequence numbers are session-wide', async () => {
    class TwoTracks extends Output {
      @Video({ width: 2, height: 2 }) main?: Video;
      @Video({ width: 1, height: 1, fps: 25 }) thumb?: Video;
    }
    @reactorApp({ output: TwoTracks, fps: 50, bufferSize: 4 })
    class App extends ReactorApp<InputState, InputState, TwoTracks> {
      generate(): TwoTracks {
        return new TwoTracks({ main: rgbFrames(2, 2, 2), thumb: rgbFrames(1, 1, 1) });
      }
    }
    const host = start(App);
    expect(host.schema.tracks).toEqual([
      { name: 'main', kind: 'video', direction: 'out', fps: 50 },
      { name: 'thumb', kind: 'video', direction: 'out', fps: 25 },
    ]);
    await host.load();
    const sink = new RecordingSink();
    host.connect(sink);
    await sink.waitFor(() => sink.frames.filter((f) => f.track === 'thumb').length >= 3);
    const seqs = sink.frames.map((f) => f.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(new Set(seqs).size).toBe(seqs.length);
    const gaps = (track: string) => {
      const pts = sink.frames.filter((f) => f.track === track).map((f) => f.ptsMs);
      return pts.slice(1).map((p, i) => Math.round(p - pts[i]!));
    };
    expect(Math.min(...gaps('main'))).toBe(20);
    expect(Math.min(...gaps('thumb'))).toBe(40);
    const thumb = sink.frames.find((f) => f.track === 'thumb')!;
    expect([thumb.trackIndex, thumb.width, thumb.height, thumb.rgb.length]).toEqual([1, 1, 1, 3]);
  });
});
