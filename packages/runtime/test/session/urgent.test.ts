import { afterEach, describe, expect, it } from 'vitest';
import { IsString } from 'class-validator';
import type { AppliedMessage } from '@reactor/protocol';
import { event, InputField, InputState, Output, ReactorApp, reactorApp, Video } from '../../src/index.js';
import { command as cmd, RecordingSink, rgbFrames, useHosts } from '../../src/testing.js';

// Issue 39, point 5: an urgent state field supersedes the chunk in flight: the step's
// restartSignal aborts, the queued frames of the old value are dropped (a flush), `applied` names
// the first frame of the new value; at most one restart a chunk however many changes come.
// The same for an urgent `@event` (`@event({ urgent: true })`), whose handler changes what the
// next step makes.
const start = useHosts(afterEach);

class PromptState extends InputState {
  @InputField({ default: 'hold', urgent: true })
  @IsString()
  prompt!: string;
}

class Out extends Output {
  @Video({ width: 1, height: 1 }) main?: Video;
}

/** A model whose chunk takes as long as it likes while the prompt says `hold...`: until its restartSignal aborts. */
@reactorApp({ state: PromptState, output: Out, fps: 500 })
class HoldingApp extends ReactorApp<PromptState> {
  aborts = 0;
  /** Resolves when a chunk holds (the model is in flight). */
  holding!: Promise<void>;
  private held!: () => void;
  constructor() {
    super();
    this.holding = new Promise((r) => (this.held = r));
  }
  async generate(s: PromptState): Promise<Out> {
    if (s.prompt.startsWith('hold')) {
      const signal = this.restartSignal!;
      this.held();
      await new Promise((_resolve, reject) =>
        signal.aborted
          ? reject(signal.reason as Error)
          : signal.addEventListener(
              'abort',
              () => {
                this.aborts++;
                reject(signal.reason as Error);
              },
              { once: true },
            ),
      );
    }
    return new Out({ main: rgbFrames(1, 1, 1, s.prompt.length) });
  }
}

const applied = (sink: RecordingSink, id: string) => sink.messages.find((m): m is AppliedMessage => m.type === 'applied' && m.id === id);

describe('urgent state fields', () => {
  it('restart the chunk in flight, drop the old frames, and name the first new frame', async () => {
    const host = start(HoldingApp);
    await host.load();
    const sink = new RecordingSink();
    const h = host.connect(sink);
    // The first chunk holds (prompt "hold"): without the restart this command would wait for it forever.
    await (host.app as HoldingApp).holding;
    expect(await h.command(cmd('c1', 'set_prompt', { prompt: 'go' }))).toMatchObject({ type: 'reply', id: 'c1' });
    await sink.waitForMessage((m) => m.type === 'applied' && m.id === 'c1');
    const ack = applied(sink, 'c1')!;
    expect(ack).toMatchObject({ outcome: 'applied', track: 'main' });
    // The frame it names shows the new prompt ('go': 2), and it is the first frame.
    const frame = sink.frames.find((f) => f.seq === (ack as Extract<AppliedMessage, { outcome: 'applied' }>).seq)!;
    expect(frame.rgb[0]).toBe(2);
    expect(sink.frames[0]!.seq).toBe(frame.seq);
    expect(sink.messages.some((m) => m.type === 'flush')).toBe(true);
    expect((host.app as HoldingApp).aborts).toBe(1);
    expect(host.counters).toMatchObject({ urgentRestarts: 1, urgentRateLimited: 0, modelErrors: 0 });
  });

  it('cost at most one restart a chunk however many urgent changes come', async () => {
    const host = start(HoldingApp);
    await host.load();
    const sink = new RecordingSink();
    const h = host.connect(sink);
    await (host.app as HoldingApp).holding;
    // A flood while the chunk holds: the first restarts it, the others are ordinary changes.
    const answers = await Promise.all(['hold-2', 'hold-3', 'hold-4', 'go!'].map((prompt, i) => h.command(cmd(`f${i}`, 'set_prompt', { prompt }))));
    expect(answers.map((a) => a.type)).toEqual(['reply', 'reply', 'reply', 'reply']);
    await sink.waitForMessage((m) => m.type === 'applied' && m.id === 'f3');
    expect(applied(sink, 'f3')).toMatchObject({ outcome: 'applied' });
    expect(['f0', 'f1', 'f2'].map((id) => applied(sink, id)?.outcome)).toEqual(['superseded', 'superseded', 'superseded']);
    expect((host.app as HoldingApp).aborts).toBe(1);
    expect(host.counters).toMatchObject({ urgentRestarts: 1, urgentRateLimited: 3 });
    // One flush: the granted change's.
    expect(sink.messages.filter((m) => m.type === 'flush')).toHaveLength(1);
    // Frames show the last prompt ('go!': 3) only.
    await sink.waitForFrames(2);
    expect(sink.frames.every((f) => f.rgb[0] === 3)).toBe(true);
  });
});

/**
 * The same model steered by urgent events: `go` switches the app's own mode (what the next chunk
 * shows: its length), `go_flush` does too and flushes itself.
 */
@reactorApp({ state: PromptState, output: Out, fps: 500 })
class EventApp extends HoldingApp {
  mode: string | undefined;
  handled = 0;
  override async generate(s: PromptState): Promise<Out> {
    return super.generate(this.mode === undefined ? s : Object.assign(new PromptState(), { prompt: this.mode }));
  }

  @event({ name: 'go', urgent: true })
  go(): void {
    this.handled++;
    this.mode = 'go';
  }

  @event({ name: 'go_flush', urgent: true })
  goFlush(): void {
    this.handled++;
    this.mode = 'go!!';
    this.output.flush();
  }
}

describe('urgent events (@event({ urgent: true }))', () => {
  it('restart the chunk in flight, run the handler, drop the old frames, and name the first new frame', async () => {
    const host = start(EventApp);
    await host.load();
    const sink = new RecordingSink();
    const h = host.connect(sink);
    const app = host.app as EventApp;
    await app.holding;
    // Without the restart this event would wait for the holding chunk forever.
    expect(await h.command(cmd('e1', 'go'))).toMatchObject({ type: 'reply', id: 'e1' });
    await sink.waitForMessage((m) => m.type === 'applied' && m.id === 'e1');
    const ack = applied(sink, 'e1')! as Extract<AppliedMessage, { outcome: 'applied' }>;
    expect(ack).toMatchObject({ outcome: 'applied', track: 'main' });
    const frame = sink.frames.find((f) => f.seq === ack.seq)!;
    expect(frame.rgb[0]).toBe(2);
    expect(sink.frames[0]!.seq).toBe(frame.seq);
    expect(sink.messages.filter((m) => m.type === 'flush')).toHaveLength(1);
    expect(app.aborts).toBe(1);
    expect(host.counters).toMatchObject({ urgentRestarts: 1, urgentRateLimited: 0, modelErrors: 0 });
  });

  it('flush once when the handler flushes itself, and cost at most one restart a chunk on a flood', async () => {
    const host = start(EventApp);
    await host.load();
    const sink = new RecordingSink();
    const h = host.connect(sink);
    const app = host.app as EventApp;
    await app.holding;
    const answers = await Promise.all(['go_flush', 'go_flush', 'go_flush', 'go_flush'].map((name, i) => h.command(cmd(`f${i}`, name))));
    expect(answers.map((a) => a.type)).toEqual(['reply', 'reply', 'reply', 'reply']);
    expect(app.handled).toBe(4);
    expect(app.aborts).toBe(1);
    expect(host.counters).toMatchObject({ urgentRestarts: 1, urgentRateLimited: 3 });
    await sink.waitForMessage((m) => m.type === 'applied' && m.id === 'f3');
    // Four handler flushes (each its own); the granted one is not flushed a second time by the host.
    expect(sink.messages.filter((m) => m.type === 'flush')).toHaveLength(4);
    await sink.waitForFrames(2);
    expect(sink.frames.every((f) => f.rgb[0] === 4)).toBe(true);
  });

  it('refuse an urgent option that is not a boolean at the decorator', () => {
    expect(() => event({ urgent: 'yes' as unknown as boolean })({}, 'go', { value: () => undefined })).toThrow(
      '@event urgent must be true or false (Object.go), got "yes"',
    );
  });

  it('an urgent command its client may not send restarts nothing', async () => {
    const host = start(EventApp);
    await host.load();
    const sink = new RecordingSink();
    const h = host.connect(sink);
    const app = host.app as EventApp;
    await app.holding;
    // A spectator may not send `go`: refused (once the lock is free), and not granted before it queues.
    const spectator = host.connect(new RecordingSink(), { role: 'spectator' });
    const refused = spectator.command(cmd('s1', 'go'));
    expect(host.counters).toMatchObject({ urgentRestarts: 0, urgentRateLimited: 0 });
    // So the controller's `go` is the chunk's one restart, not a rate-limited one.
    expect(await h.command(cmd('e2', 'go'))).toMatchObject({ type: 'reply' });
    expect(await refused).toMatchObject({ type: 'error', code: 'forbidden_role' });
    expect(app.aborts).toBe(1);
    expect(host.counters).toMatchObject({ urgentRestarts: 1, urgentRateLimited: 0 });
  });
});

describe('urgent in the schema clients get', () => {
  @reactorApp({ state: PromptState, output: Out, fps: 500 })
  class UrgentOn extends ReactorApp<PromptState> {
    generate(s: PromptState): Out {
      return new Out({ main: rgbFrames(1, 1, 1, s.prompt.length) });
    }
  }

  @reactorApp({ state: PromptState, output: Out, fps: 500 })
  class UrgentOff extends ReactorApp<PromptState> {
    override load(): void {
      // What the world app does for a pipelined config: its urgent marks do not act.
      this.urgent = false;
    }
    generate(s: PromptState): Out {
      return new Out({ main: rgbFrames(1, 1, 1, s.prompt.length) });
    }
  }

  const commandsOf = (sink: RecordingSink) => {
    const welcome = sink.messages.find((m) => m.type === 'welcome');
    return welcome?.type === 'welcome' ? welcome.schema.commands : [];
  };

  it('marks an urgent setter urgent in the welcome and in host.schema', async () => {
    const host = start(UrgentOn);
    await host.load();
    const sink = new RecordingSink();
    host.connect(sink);
    await sink.waitForMessage((m) => m.type === 'welcome');
    expect(commandsOf(sink).find((c) => c.name === 'set_prompt')).toMatchObject({ kind: 'setter', urgent: true });
    expect(host.schema.commands.find((c) => c.name === 'set_prompt')?.urgent).toBe(true);
  });

  it('leaves the mark out while the app turned its urgency off in load()', async () => {
    const host = start(UrgentOff);
    await host.load();
    const sink = new RecordingSink();
    host.connect(sink);
    await sink.waitForMessage((m) => m.type === 'welcome');
    const setter = commandsOf(sink).find((c) => c.name === 'set_prompt')!;
    expect(setter).toMatchObject({ kind: 'setter', field: 'prompt' });
    expect('urgent' in setter).toBe(false);
    expect(host.schema.commands.find((c) => c.name === 'set_prompt')).not.toHaveProperty('urgent');
  });
});
