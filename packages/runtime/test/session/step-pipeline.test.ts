/**
 * Steps in flight (issue 39, `ReactorApp.inFlight`): the step loop dispatches step k+1's
 * `generate()` before step k's returns and processes the outcomes in order; a setter runs with
 * calls in flight (its `applied` names the first frame that shows it), everything that needs the
 * model between calls (an event, a rewind) waits for them, an urgent change cancels them, a
 * failure fails the session as at depth 1 and the next session runs.
 *
 * The model stand-in answers a call only when the next one is dispatched (or once `free`): a loop
 * that awaited each call before the next would never get a frame out of it.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { IsInt } from 'class-validator';
import type { AppliedMessage } from '@reactor/protocol';
import { event, Frames, InputField, InputState, Output, ReactorApp, reactorApp, type StepOutcome, Video } from '../../src/index.js';
import { command as cmd, RecordingSink, useHosts } from '../../src/testing.js';

const start = useHosts(afterEach);

class ValueState extends InputState {
  @InputField({ default: 0 })
  @IsInt()
  value!: number;

  @InputField({ default: 0, urgent: true })
  @IsInt()
  hot!: number;
}

class Out extends Output {
  @Video()
  main?: Video;
}

interface Input {
  /** The dispatch number (1, 2, ...): pixel 0 of the frame. */
  n: number;
  /** The state read: pixel 1 (`value + hot`). */
  v: number;
}

function pipeApp(depth: number, options: { free?: boolean; snapshot?: boolean } = {}) {
  @reactorApp({ state: ValueState, output: Out, fps: 1000, ...(options.snapshot === true && { snapshot: { everySteps: 2, fields: ['dispatched'] } }) })
  class PipeApp extends ReactorApp<ValueState, Input, Out> {
    override inFlight = depth;
    dispatched = 0;
    processed = 0;
    running = 0;
    maxRunning = 0;
    aborted = 0;
    free = options.free === true;
    /** Makes the next call (dispatch number) reject, with every call in flight: a runner crash. */
    crashAt: number | undefined;
    steps: number[] = [];
    seen: { dispatched: number; processed: number } | undefined;
    /** Added to the state read (pixel 1) by the urgent `bump`. */
    bumped = 0;
    /** What the urgent `bump` saw: the calls running, dispatched and processed. */
    bumpSaw: { running: number; dispatched: number; processed: number } | undefined;
    private open: Array<{ answer: () => void; fail: (e: Error) => void }> = [];

    override processInput(): Input {
      return { n: ++this.dispatched, v: this.state.value + this.state.hot + this.bumped };
    }

    override generate(input: Input): Promise<Out> {
      const signal = this.restartSignal;
      this.running++;
      this.maxRunning = Math.max(this.maxRunning, this.running);
      if (input.n === this.crashAt) {
        const crash = new Error('rank 1 exited with code 1');
        for (const o of this.open.splice(0)) o.fail(crash);
        this.running--;
        return Promise.reject(crash);
      }
      // Every earlier call answers now: this one was dispatched while they ran.
      for (const o of this.open.splice(0)) o.answer();
      return new Promise<Out>((resolve, reject) => {
        const frame = new Uint8Array(2 * 1 * 3);
        frame[0] = input.n % 256;
        frame[3] = input.v;
        // Settles once (the shared restart switch may abort after the answer).
        let settled = false;
        const answer = (): void => {
          if (settled) return;
          settled = true;
          this.running--;
          resolve(new Out({ main: new Frames(frame, [1, 1, 2, 3]) }));
        };
        const fail = (e: Error): void => {
          if (settled) return;
          settled = true;
          this.running--;
          reject(e);
        };
        if (this.free) return answer();
        this.open.push({ answer, fail });
        signal?.addEventListener(
          'abort',
          () => {
            this.aborted++;
            this.open = this.open.filter((o) => o.answer !== answer);
            fail(signal.reason as Error);
          },
          { once: true },
        );
      });
    }

    override processOutput(outcome: StepOutcome<Out>): Out {
      this.processed++;
      this.steps.push(outcome.step);
      if (outcome.error) throw outcome.error;
      return outcome.result!;
    }

    /** Answers every call in flight and every later one at once. */
    release(): void {
      this.free = true;
      for (const o of this.open.splice(0)) o.answer();
    }

    @event({ name: 'mark' })
    mark(): void {
      this.seen = { dispatched: this.dispatched, processed: this.processed };
    }

    @event({ name: 'bump', urgent: true })
    bump(): void {
      this.bumped = 5;
      this.bumpSaw = { running: this.running, dispatched: this.dispatched, processed: this.processed };
    }

    override snapshot(): unknown {
      return { at: this.processed };
    }

    override restore(): void {
      this.seen = { dispatched: this.dispatched, processed: this.processed };
    }
  }
  return PipeApp;
}
type PipeApp = InstanceType<ReturnType<typeof pipeApp>>;

async function streaming(depth: number, options: { free?: boolean; snapshot?: boolean } = {}) {
  const host = start(pipeApp(depth, options));
  await host.load();
  const sink = new RecordingSink();
  const h = host.connect(sink);
  return { host, sink, h, app: host.app as PipeApp };
}

const pixels = (sink: RecordingSink) => sink.frames.map((f) => [f.rgb[0]!, f.rgb[3]!]);
const applied = (sink: RecordingSink, id: string) =>
  sink.messages.find((m): m is Extract<AppliedMessage, { outcome: 'applied' }> => m.type === 'applied' && m.id === id && m.outcome === 'applied');

describe('steps in flight (ReactorApp.inFlight)', () => {
  it('dispatches the next step before the previous returns and pushes the frames in order, as at depth 1', async () => {
    const one = await streaming(1, { free: true });
    await one.sink.waitForFrames(6);
    const two = await streaming(2);
    await two.sink.waitForFrames(6);
    // A loop that awaited each call would have none of these frames: each answers when the next is dispatched.
    expect(two.app.maxRunning).toBe(2);
    expect(one.app.maxRunning).toBe(1);
    expect(pixels(two.sink).slice(0, 6)).toEqual(pixels(one.sink).slice(0, 6));
    expect(pixels(two.sink).slice(0, 6)).toEqual([1, 2, 3, 4, 5, 6].map((n) => [n, 0]));
    expect(two.app.steps.slice(0, 6)).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it('a setter runs with a call in flight; its applied names the first frame that shows it', async () => {
    const { sink, h, app } = await streaming(2);
    await sink.waitForFrames(3);
    expect(app.dispatched).toBeGreaterThan(app.processed);
    expect(await h.command(cmd('s1', 'set_value', { value: 7 }))).toMatchObject({ type: 'reply' });
    await sink.waitForMessage((m) => m.type === 'applied' && m.id === 's1');
    const ack = applied(sink, 's1')!;
    expect(ack).toBeDefined();
    const at = sink.frames.findIndex((f) => f.seq === ack.seq);
    await sink.waitForFrames(at + 2);
    const v = sink.frames.map((f) => f.rgb[3]);
    expect(v[at]).toBe(7);
    expect(v.slice(0, at).every((x) => x === 0)).toBe(true);
    expect(v[at + 1]).toBe(7);
  });

  it('an event waits for the calls in flight: they are processed and pushed before it runs', async () => {
    const { sink, h, app } = await streaming(2);
    await sink.waitForFrames(3);
    const answer = h.command(cmd('e1', 'mark'));
    // The call in flight answers only when freed (no step is dispatched while the event waits).
    app.release();
    expect(await answer).toMatchObject({ type: 'reply' });
    expect(app.seen!.processed).toBe(app.seen!.dispatched);
  });

  it('a rewind waits for the calls in flight, then restores', async () => {
    // Answered at once (a snapshot drains too); still dispatched a turn ahead of its processing.
    const { sink, h, app } = await streaming(2, { snapshot: true, free: true });
    await sink.waitForFrames(6);
    expect(await h.command(cmd('r1', 'rewind', { seq: sink.frames[2]!.seq }))).toMatchObject({ type: 'reply' });
    expect(app.seen!.processed).toBe(app.seen!.dispatched);
  });

  it('an urgent change cancels every call in flight; its applied names the first frame of the new value', async () => {
    const { host, sink, h, app } = await streaming(2);
    await sink.waitForFrames(3);
    expect(await h.command(cmd('u1', 'set_hot', { hot: 9 }))).toMatchObject({ type: 'reply' });
    await sink.waitForMessage((m) => m.type === 'applied' && m.id === 'u1');
    const ack = applied(sink, 'u1')!;
    expect(app.aborted).toBeGreaterThanOrEqual(1);
    expect(host.counters.urgentRestarts).toBe(1);
    const after = sink.frames.filter((f) => f.seq >= ack.seq);
    expect(after[0]!.rgb[3]).toBe(9);
    expect(sink.messages.some((m) => m.type === 'flush')).toBe(true);
  });

  it('an urgent event cancels the calls in flight instead of draining them; its applied names the first frame it shows in', async () => {
    const { host, sink, h, app } = await streaming(2);
    await sink.waitForFrames(3);
    // Not released: a drain would wait for the call in flight forever (it answers only when the next is dispatched).
    expect(await h.command(cmd('b1', 'bump'))).toMatchObject({ type: 'reply' });
    // The handler ran with nothing in flight, and the cancelled calls were never processed.
    expect(app.bumpSaw!.running).toBe(0);
    expect(app.bumpSaw!.processed).toBeLessThan(app.bumpSaw!.dispatched);
    expect(app.aborted).toBeGreaterThanOrEqual(1);
    expect(host.counters.urgentRestarts).toBe(1);
    await sink.waitForMessage((m) => m.type === 'applied' && m.id === 'b1');
    const ack = applied(sink, 'b1')!;
    const at = sink.frames.findIndex((f) => f.seq === ack.seq);
    await sink.waitForFrames(at + 2);
    const v = sink.frames.map((f) => f.rgb[3]);
    expect(v[at]).toBe(5);
    expect(v.slice(0, at).every((x) => x === 0)).toBe(true);
    expect(v[at + 1]).toBe(5);
    expect(sink.messages.filter((m) => m.type === 'flush')).toHaveLength(1);
  });

  it('a crash with two calls in flight fails the session once; the next session streams', async () => {
    const { host, sink, app } = await streaming(2);
    await sink.waitForFrames(3);
    app.crashAt = app.dispatched + 1;
    await sink.waitForMessage((m) => m.type === 'session' && m.session.error?.code === 'session_failed');
    const failed = sink.ofType('session').find((m) => m.session.error !== undefined)!;
    expect(failed.session.error!.message).toContain('rank 1 exited with code 1');
    // Both calls failed; only the oldest's outcome was processed (it ended the session).
    expect(app.processed).toBe(app.steps.length);
    expect(host.counters.modelErrors).toBe(1);
    app.crashAt = undefined;
    const next = new RecordingSink();
    host.connect(next);
    await next.waitForFrames(3);
    expect(app.maxRunning).toBe(2);
  });

  it('refuses an inFlight out of range at load', async () => {
    const App = pipeApp(9);
    const host = start(App);
    await expect(host.load()).rejects.toMatchObject({
      code: 'load_failed',
      message: expect.stringContaining('PipeApp.inFlight must be an integer 1..8 (steps in flight), got 9'),
    });
  });
});
