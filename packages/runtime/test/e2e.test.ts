import { IsBoolean, IsInt, IsString, Max, MaxLength, Min } from 'class-validator';
import { afterEach, describe, expect, it } from 'vitest';
import {
  AppHost,
  ApplicationError,
  type Client,
  CommandError,
  connected,
  disconnected,
  event,
  Frames,
  InputField,
  InputState,
  Output,
  ReactorApp,
  reactorApp,
  sessionEnded,
  sessionStarted,
  type StepOutcome,
  TrackPayload,
  Video,
} from '../src/index.js';
import { connectAsTransport, Gate, RecordingLogger, RecordingSink, rgbFrames, waitForStatus } from '../src/testing.js';

class DemoState extends InputState {
  @InputField({ default: 'forest', description: 'What the video shows.' })
  @IsString()
  @MaxLength(20)
  prompt!: string;

  @InputField({ default: false, description: 'Pause generation.' })
  @IsBoolean()
  paused!: boolean;

  @InputField({ default: 0 })
  _chunks!: number;
}

class BoostParams {
  @InputField({ description: 'How much.' })
  @IsInt()
  @Min(1)
  @Max(10)
  amount!: number;
}

class Notice {
  constructor(readonly text: string) {}
}

class DemoOutput extends Output {
  @Video({ width: 4, height: 2 })
  mainVideo?: Video;
}

class RolloutExhausted extends Error {}
class BackendLost extends Error {}

type Step = { kind: 'ok'; n: number } | { kind: 'recoverable' } | { kind: 'fatal' };

// `ahead`: the model runs up to bufferSize frames ahead, which fixes the order of frames, replies and
// refusals this test pins (just-in-time steps have their own tests in session/step-loop.test.ts).
@reactorApp({ state: DemoState, output: DemoOutput, messages: [Notice], fps: 10, bufferSize: 4, pacing: 'ahead', name: 'demo', version: '1.2.3' })
class DemoApp extends ReactorApp<DemoState, { prompt: string }, Frames, Notice> {
  static gate = new Gate<{ prompt: string }, Step>();
  static hooks: string[] = [];

  override processInput(): { prompt: string } {
    if (this.state.paused) throw new ApplicationError('paused');
    return { prompt: this.state.prompt };
  }

  override async generate(input: { prompt: string }): Promise<Frames> {
    const step = await DemoApp.gate.call(input);
    if (step.kind === 'recoverable') throw new RolloutExhausted('rollout over');
    if (step.kind === 'fatal') throw new BackendLost('GPU fell off the bus');
    return new Frames(rgbFrames(step.n, 4, 2, 7), [step.n, 2, 4, 3]);
  }

  override processOutput(outcome: StepOutcome<Frames>): Output | null {
    if (outcome.error instanceof RolloutExhausted) {
      this.output.flush();
      this.send(new Notice('rollout restarted'));
      return null;
    }
    if (outcome.error) throw outcome.error;
    this.state._chunks++;
    return new DemoOutput({ mainVideo: new TrackPayload(outcome.result!, { metadata: { chunk: this.state._chunks } }) });
  }

  @event({ name: 'boost', description: 'Boost the thing.', params: BoostParams })
  boost(p: BoostParams, client: Client): unknown {
    if (p.amount === 7) throw new CommandError('unlucky', 'seven is unlucky');
    if (p.amount === 9) throw new Error('secret internals at /srv/model.ts:42');
    return { boosted: p.amount, by: client.id };
  }

  @event({ name: 'reset', description: 'Start over.' })
  reset(): void {
    this.output.flush();
  }

  @sessionStarted started(): void {
    DemoApp.hooks.push('sessionStarted');
  }
  @sessionEnded ended(): void {
    DemoApp.hooks.push('sessionEnded');
  }
  @connected joined(c: Client): void {
    DemoApp.hooks.push(`connected:${c.id}`);
  }
  @disconnected left(c: Client): void {
    DemoApp.hooks.push(`disconnected:${c.id}`);
  }
}

let host: AppHost | undefined;
afterEach(async () => {
  await host?.close();
  host = undefined;
});

const cmd = (id: string, name: string, params?: Record<string, unknown>) => ({ type: 'command' as const, id, name, ...(params ? { params } : {}) });

describe('AppHost end to end (in process)', () => {
  it('runs a session with two clients through commands, steps, refusals, model errors, a flush and a fatal error, then a new session', async () => {
    const logger = new RecordingLogger();
    host = new AppHost(DemoApp, { gracePeriodMs: 20, statsIntervalMs: 0, refusalBackoffMs: 40, logger });
    const gate = DemoApp.gate;
    await host.load();

    // A joins: a fresh session starts.
    const a = new RecordingSink();
    const ha = connectAsTransport(host, a, { remoteAddress: '10.0.0.1' });
    await a.waitForSession('streaming');

    // Step 1: two frames.
    (await gate.next()).resolve({ kind: 'ok', n: 2 });
    await a.waitForFrames(2);

    // A command that arrives mid-step runs after it: step 2's input still has the old prompt.
    const step2 = await gate.next();
    const setPrompt = ha.command(cmd('a1', 'set_prompt', { prompt: 'sea' }));
    step2.resolve({ kind: 'ok', n: 2 });
    expect(await setPrompt).toEqual({ type: 'reply', id: 'a1' });
    expect(step2.input).toEqual({ prompt: 'forest' });
    await a.waitForFrames(4);
    const step3 = await gate.next();
    expect(step3.input).toEqual({ prompt: 'sea' });

    // B joins the running session and sees the shared state.
    const b = new RecordingSink();
    const hb = connectAsTransport(host, b);
    const welcomeB = b.messages[0]!;
    expect(welcomeB).toMatchObject({ type: 'welcome', state: { prompt: 'sea', paused: false }, session: { state: 'streaming', clients: 2 } });
    await a.waitForMessage((m) => m.type === 'session' && m.session.clients === 2);

    // Replies go to the sender only; the reply contract.
    const boosts = [
      hb.command(cmd('b1', 'boost', { amount: 3 })),
      hb.command(cmd('b2', 'boost', { amount: 7 })),
      hb.command(cmd('b3', 'boost', { amount: 9 })),
      hb.command(cmd('b4', 'boost', { amount: 'x', extra: 1 })),
    ];
    step3.resolve({ kind: 'ok', n: 2 });
    const [r1, r2, r3, r4] = await Promise.all(boosts);
    expect(r1).toEqual({ type: 'reply', id: 'b1', result: { boosted: 3, by: hb.id } });
    expect(r2).toEqual({ type: 'error', id: 'b2', code: 'unlucky', message: 'seven is unlucky' });
    expect(r3).toMatchObject({ type: 'error', id: 'b3', code: 'internal_error' });
    expect((r3 as { message: string }).message).not.toContain('secret');
    expect(r4).toMatchObject({ type: 'error', id: 'b4', code: 'invalid_params' });
    expect((r4 as { details: unknown[] }).details).toEqual([
      { field: 'extra', constraint: 'whitelistValidation', message: 'property extra should not exist' },
      // A string for an integer field: the type is the cause, not the range (issue 17).
      { field: 'amount', constraint: 'isInt', message: 'amount must be an integer number' },
    ]);
    expect(logger.at('error').some((l) => l.includes('boost'))).toBe(true);
    await a.waitForFrames(6);
    await b.waitForFrames(2);

    // A refused step: paused. processInput is asked again only on a change or after the back-off.
    const step4 = await gate.next();
    const pause = ha.command(cmd('a2', 'set_paused', { paused: true }));
    step4.resolve({ kind: 'ok', n: 2 });
    await pause;
    await a.waitForFrames(8);
    await b.waitForFrames(4);
    expect(logger.at('info').filter((l) => l === 'step refused: paused').length).toBeLessThanOrEqual(1);
    await ha.command(cmd('a3', 'set_paused', { paused: false }));
    expect(logger.at('info').filter((l) => l === 'step refused: paused')).toHaveLength(1);

    // A recoverable model error: the app flushes and tells everyone; no frames.
    (await gate.next()).resolve({ kind: 'recoverable' });
    await b.waitForMessage((m) => m.type === 'message');

    // A flush while frames are queued and the producer is blocked on a full buffer.
    (await gate.next()).resolve({ kind: 'ok', n: 3 });
    await b.waitForFrames(5);
    const step7 = await gate.next();
    const reset = ha.command(cmd('a4', 'reset'));
    step7.resolve({ kind: 'ok', n: 3 });
    await reset;
    (await gate.next()).resolve({ kind: 'ok', n: 2 });
    await b.waitForFrames(7);

    // A leaves; B stays. Then a fatal model error ends the session and B is told.
    ha.disconnect();
    await b.waitForMessage((m) => m.type === 'session' && m.session.clients === 1);
    (await gate.next()).resolve({ kind: 'fatal' });
    await b.waitFor((e) => e.kind === 'close');
    await waitForStatus(host, 'ready');
    expect(host.status.error).toMatchObject({ code: 'session_failed' });
    await expect(hb.command(cmd('b5', 'boost', { amount: 1 }))).resolves.toMatchObject({ code: 'no_session' });

    // A new client starts a new session with fresh state.
    const c = new RecordingSink();
    const hc = connectAsTransport(host, c);
    await c.waitForSession('streaming');
    const s1 = await gate.next();
    expect(s1.input).toEqual({ prompt: 'forest' });
    s1.resolve({ kind: 'ok', n: 1 });
    await c.waitForFrames(1);
    hc.disconnect();
    // A step still in flight finishes (a session never ends mid-step), then the grace period runs out.
    gate.answerAll({ kind: 'ok', n: 1 });
    await waitForStatus(host, 'ready');

    expect(DemoApp.hooks).toEqual([
      'sessionStarted',
      `connected:${ha.id}`,
      `connected:${hb.id}`,
      `disconnected:${ha.id}`,
      `disconnected:${hb.id}`,
      'sessionEnded',
      'sessionStarted',
      `connected:${hc.id}`,
      `disconnected:${hc.id}`,
      'sessionEnded',
    ]);
    const frames = (n: number) => Array.from({ length: n }, (_, i) => `frame:main_video#${i}`);
    const f = (from: number, to: number) => frames(to + 1).slice(from);
    expect(a.summary()).toEqual([
      'welcome:waiting',
      'session:streaming',
      ...f(0, 1), // step 1
      'state', // set_prompt waited for step 2 to end...
      'reply:a1',
      ...f(2, 3), // ...and step 2's media left outside the lock, after it
      'session:streaming', // B joined (clients: 2)
      'frame:main_video#4', // step 3's first frame: the first made after set_prompt
      'applied:a1:applied@4',
      'frame:main_video#5',
      'state', // paused
      'reply:a2',
      'applied:a2:paused', // the step that read it was refused
      'session:streaming', // the next step is refused: its reason in the status (refused: paused)
      ...f(6, 7), // the media of the step before, played out
      'state', // unpaused
      'reply:a3',
      'session:streaming', // steps run again: the status drops the reason
      'flush', // recoverable model error: the app flushed...
      'message:notice', // ...and told everyone
      'frame:main_video#8', // first frame of step 6 (step 5 made none); the rest is cut by reset:
      'applied:a3:applied@8',
      'flush',
      'reply:a4',
      'frame:main_video#9', // step 8 (step 7's batch was waiting for room and was dropped, the reset's ack with it)
      'applied:a4:applied@9',
      'frame:main_video#10',
    ]);
    expect(b.summary()).toEqual([
      'welcome:streaming',
      'reply:b1',
      'error:b2:unlucky',
      'error:b3:internal_error',
      'error:b4:invalid_params',
      ...f(4, 5),
      'state',
      'session:streaming', // refused: paused
      'frame:main_video#6', // step 4: the first after boost b1 (an event: a change the host cannot see, named all the same)
      'applied:b1:applied@6',
      'frame:main_video#7',
      'state',
      'session:streaming', // stepping again
      'flush',
      'message:notice',
      'frame:main_video#8',
      'flush',
      ...f(9, 10),
      'session:streaming', // A left (clients: 1)
      'session:closing!session_failed', // the fatal step
      'close',
    ]);
    expect(c.summary()).toEqual(['welcome:waiting', 'session:streaming', 'frame:main_video#0']);

    // Details of what the clients saw.
    expect(a.ofType('state').map((m) => m.state)).toEqual([
      { prompt: 'sea', paused: false },
      { prompt: 'sea', paused: true },
      { prompt: 'sea', paused: false },
    ]);
    expect(a.ofType('flush')).toEqual([
      { type: 'flush', nextSeq: 8 },
      { type: 'flush', nextSeq: 9 },
    ]);
    expect(b.ofType('message')).toEqual([{ type: 'message', name: 'notice', data: { text: 'rollout restarted' } }]);
    expect(b.frames.map((fr) => (fr.metadata as { chunk: number }).chunk)).toEqual([3, 3, 4, 4, 5, 7, 7]);
    const fr = b.frames[0]!;
    expect([fr.width, fr.height, fr.rgb.length, fr.rgb[0], fr.trackIndex]).toEqual([4, 2, 24, 7, 0]);
    expect(a.frames[4]).toBe(b.frames[0]); // one object for every sink
    const closing = b.ofType('session').at(-1)!;
    expect(closing.session.error).toEqual({ code: 'session_failed', message: 'processOutput() failed: Error: GPU fell off the bus' });
    expect(c.messages[0]).toMatchObject({ type: 'welcome', state: { prompt: 'forest', paused: false } });
    // Frame timestamps follow the declared 10 fps within a batch.
    expect(a.frames[1]!.ptsMs - a.frames[0]!.ptsMs).toBeCloseTo(100, 5);
  });
});
