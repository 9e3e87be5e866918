import { IsIn, IsInt, IsString, Max, MaxLength, Min } from 'class-validator';
import { afterEach, describe, expect, it } from 'vitest';
import { AppHost, ApplicationError, type Client, CommandError, event, InputField, InputState, ReactorApp, reactorApp } from '../../src/index.js';
import { connectAsTransport, RecordingLogger, RecordingSink, deferred } from '../../src/testing.js';

class State extends InputState {
  @InputField({ default: 'forest' })
  @IsString()
  @MaxLength(10)
  prompt!: string;
  @InputField({ default: 'low' })
  @IsIn(['low', 'high'])
  qualityMode!: string;
  @InputField({ default: 0 })
  _secret!: number;
}

class MoveParams {
  @InputField({ description: 'Steps.' })
  @IsInt()
  @Min(1)
  @Max(5)
  steps!: number;
  @InputField({ default: 'north' })
  @IsIn(['north', 'south'])
  direction!: string;
}

class Whisper {
  constructor(readonly textBody: string) {}
}
class Undeclared {}

const seen: Array<{ params: unknown; client: string }> = [];

@reactorApp({ state: State, messages: [Whisper] })
class App extends ReactorApp<State, State, unknown, Whisper> {
  generate(): null {
    return null;
  }
  @event({ name: 'move', description: 'Move.', params: MoveParams })
  move(p: MoveParams, client: Client): unknown {
    seen.push({ params: { ...p }, client: client.id });
    return { at: p.steps, isMoveParams: p instanceof MoveParams };
  }
  @event({ name: 'whisper' })
  whisper(_p: object, client: Client): void {
    client.send(new Whisper('only you'));
  }
  @event({ name: 'shout' })
  shout(): void {
    this.send(new Whisper('everyone'));
  }
  @event({ name: 'bad_message' })
  badMessage(): void {
    // @ts-expect-error -- undeclared on purpose: the host's run-time check is under test
    this.send(new Undeclared());
  }
  @event({ name: 'refuse' })
  refuse(): void {
    throw new CommandError('not_now', 'come back later');
  }
}

const hosts: AppHost[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.close()));
});
const cmd = (id: string, name: string, params?: unknown) => ({
  type: 'command' as const,
  id,
  name,
  ...(params !== undefined ? { params: params as Record<string, unknown> } : {}),
});

async function setup(): Promise<{
  host: AppHost;
  a: RecordingSink;
  b: RecordingSink;
  ha: ReturnType<AppHost['connect']>;
  hb: ReturnType<AppHost['connect']>;
  logger: RecordingLogger;
}> {
  const logger = new RecordingLogger();
  // A subclass (inheriting App's @reactorApp declaration) that refuses every step, so only commands run.
  class Idle extends App {
    override processInput(): never {
      throw new ApplicationError('idle');
    }
  }
  const host = new AppHost(Idle, { statsIntervalMs: 0, refusalBackoffMs: 10_000, logger });
  hosts.push(host);
  await host.load();
  const a = new RecordingSink();
  const b = new RecordingSink();
  const ha = connectAsTransport(host, a);
  const hb = connectAsTransport(host, b);
  await a.waitForMessage((m) => m.type === 'session' && m.session.state === 'streaming');
  // The first refused step goes into the status (`refused`) once: wait for it, so it is not mistaken for a broadcast.
  await a.waitForMessage((m) => m.type === 'session' && m.session.refused === 'idle');
  await b.waitForMessage((m) => m.type === 'session' && m.session.refused === 'idle');
  return { host, a, b, ha, hb, logger };
}

describe('commands', () => {
  it('a generated setter validates, sets the state and broadcasts it; the reply goes to the sender only', async () => {
    const { a, b, ha } = await setup();
    const from = b.events.length;
    expect(await ha.command(cmd('1', 'set_quality_mode', { quality_mode: 'high' }))).toEqual({ type: 'reply', id: '1' });
    expect(a.messages.slice(-2)).toEqual([
      { type: 'state', state: { prompt: 'forest', quality_mode: 'high' } },
      { type: 'reply', id: '1' },
    ]);
    expect(b.events.slice(from).map((e) => (e.kind === 'message' ? e.msg : e))).toEqual([{ type: 'state', state: { prompt: 'forest', quality_mode: 'high' } }]);
  });

  it('rejects a setter payload with a missing field, an unknown field or a broken constraint', async () => {
    const { ha, b } = await setup();
    const before = b.events.length;
    expect(await ha.command(cmd('1', 'set_prompt', {}))).toEqual({
      type: 'error',
      id: '1',
      code: 'invalid_params',
      message: 'invalid params for set_prompt: prompt is required',
      details: [{ field: 'prompt', constraint: 'required', message: 'prompt is required' }],
    });
    expect(await ha.command(cmd('2', 'set_prompt', { prompt: 'x'.repeat(11), extra: true }))).toMatchObject({
      code: 'invalid_params',
      details: [
        { field: 'extra', constraint: 'whitelistValidation', message: 'property extra should not exist' },
        { field: 'prompt', constraint: 'maxLength', message: 'prompt must be shorter than or equal to 10 characters' },
      ],
    });
    expect(await ha.command(cmd('3', 'set_prompt', 'sea'))).toMatchObject({ code: 'invalid_params', details: [{ field: 'params', constraint: 'isObject' }] });
    expect(b.events.length).toBe(before); // nothing was broadcast
  });

  it('has no setter for a private field and answers unknown_command naming the commands there are', async () => {
    const { ha } = await setup();
    const r = await ha.command(cmd('1', 'set__secret', { _secret: 1 }));
    expect(r).toEqual({
      type: 'error',
      id: '1',
      code: 'unknown_command',
      message: 'unknown command "set__secret"; this app has: set_prompt, set_quality_mode, move, whisper, shout, bad_message, refuse',
    });
  });

  it('an event gets a validated params instance (defaults applied) and the sending client; its return value is the reply', async () => {
    const { ha } = await setup();
    seen.length = 0;
    expect(await ha.command(cmd('1', 'move', { steps: 3 }))).toEqual({ type: 'reply', id: '1', result: { at: 3, isMoveParams: true } });
    expect(seen).toEqual([{ params: { steps: 3, direction: 'north' }, client: ha.id }]);
    expect(await ha.command(cmd('2', 'move', { steps: 0, direction: 'up' }))).toMatchObject({
      code: 'invalid_params',
      details: [
        { field: 'steps', constraint: 'min' },
        { field: 'direction', constraint: 'isIn' },
      ],
    });
    expect(await ha.command(cmd('3', 'whisper', { loud: true }))).toMatchObject({
      code: 'invalid_params',
      details: [{ field: 'loud', constraint: 'whitelistValidation' }],
    });
    expect(seen).toHaveLength(1);
  });

  it('client.send reaches that client only; send() reaches everyone; wire names are snake_case', async () => {
    const { a, b, ha } = await setup();
    const fromB = b.events.length;
    await ha.command(cmd('1', 'whisper'));
    expect(a.messages.slice(-2)).toEqual([
      { type: 'message', name: 'whisper', data: { text_body: 'only you' } },
      { type: 'reply', id: '1' },
    ]);
    expect(b.events.length).toBe(fromB);
    await ha.command(cmd('2', 'shout'));
    expect(b.messages.at(-1)).toEqual({ type: 'message', name: 'whisper', data: { text_body: 'everyone' } });
  });

  it('CommandError reaches the sender unchanged; an undeclared message type is an internal_error with the reason only in the log', async () => {
    const { ha, logger } = await setup();
    expect(await ha.command(cmd('1', 'refuse'))).toEqual({ type: 'error', id: '1', code: 'not_now', message: 'come back later' });
    const r = await ha.command(cmd('2', 'bad_message'));
    expect(r).toEqual({ type: 'error', id: '2', code: 'internal_error', message: 'command bad_message failed inside the app; the server log has the details' });
    const line = logger.lines.find((l) => l.level === 'error' && l.message.includes('bad_message'))!;
    expect((line.fields.err as Error).message).toContain('Undeclared is not a declared message type of Idle');
    // The app keeps running.
    expect(await ha.command(cmd('3', 'move', { steps: 1 }))).toMatchObject({ type: 'reply' });
  });

  it('runs commands one at a time in arrival order', async () => {
    const { ha } = await setup();
    const replies = await Promise.all([
      ha.command(cmd('1', 'set_prompt', { prompt: 'a' })),
      ha.command(cmd('2', 'set_prompt', { prompt: 'b' })),
      ha.command(cmd('3', 'set_prompt', { prompt: 'c' })),
    ]);
    expect(replies.map((r) => r.id)).toEqual(['1', '2', '3']);
    ha.disconnect();
    expect(await ha.command(cmd('4', 'move', { steps: 1 }))).toMatchObject({ code: 'no_session' });
  });
});

describe('commands before a session exists', () => {
  it('answers no_session while the app is loading', async () => {
    const gate = deferred();
    class Slow extends ReactorApp {
      override async load(): Promise<void> {
        await gate.promise;
      }
      generate(): null {
        return null;
      }
      @event({ name: 'ping' }) ping(): string {
        return 'pong';
      }
    }
    const host = new AppHost(Slow, { statsIntervalMs: 0, logger: new RecordingLogger() });
    hosts.push(host);
    const loading = host.load();
    const sink = new RecordingSink();
    const h = host.connect(sink);
    expect(sink.messages[0]).toMatchObject({ type: 'welcome', session: { state: 'loading', clients: 1 }, state: {} });
    expect(await h.command(cmd('1', 'ping'))).toEqual({
      type: 'error',
      id: '1',
      code: 'no_session',
      message: 'no session is running yet: the app is still loading; try again once the session status is streaming',
    });
    gate.resolve();
    await loading;
    await sink.waitForSession('streaming');
    expect(await h.command(cmd('2', 'ping'))).toEqual({ type: 'reply', id: '2', result: 'pong' });
  });
});

describe('error answers', () => {
  it('name the real cause first: a wrong type is one type detail, not a false maxLength or range', async () => {
    const { ha } = await setup();
    expect(await ha.command(cmd('1', 'set_prompt', { prompt: 12345678901 }))).toEqual({
      type: 'error',
      id: '1',
      code: 'invalid_params',
      message: 'invalid params for set_prompt: prompt must be a string',
      details: [{ field: 'prompt', constraint: 'isString', message: 'prompt must be a string' }],
    });
    expect(await ha.command(cmd('2', 'move', { steps: 'three' }))).toMatchObject({
      details: [{ field: 'steps', constraint: 'isInt', message: 'steps must be an integer number' }],
    });
    // The range is still reported for a value of the right type.
    expect(await ha.command(cmd('3', 'move', { steps: 9 }))).toMatchObject({ details: [{ field: 'steps', constraint: 'max' }] });
  });

  it('are bounded: a few details, then a count; echoed keys cut to 64 code points', async () => {
    const { ha } = await setup();
    // A ~59 KB params object of unknown keys, as in the abuse test of issue 13.
    const params: Record<string, unknown> = { steps: 1 };
    for (let i = 0; i < 4000; i++) params[`k${i}_${'x'.repeat(8)}`] = 1;
    expect(JSON.stringify(params).length).toBeGreaterThan(59_000);
    const r = await ha.command(cmd('1', 'move', params));
    expect(r).toMatchObject({ code: 'invalid_params' });
    const details = (r as { details: Array<{ field: string; constraint: string; message: string }> }).details;
    expect(details).toHaveLength(6);
    expect(details.slice(0, 5).every((d) => d.constraint === 'whitelistValidation')).toBe(true);
    expect(details[5]).toEqual({ field: 'params', constraint: 'moreErrors', message: '3995 more problems not listed' });
    expect(JSON.stringify(r).length).toBeLessThan(1_000);
    expect((r as { message: string }).message).toMatch(/; and 3995 more$/);

    const longKey = '😀'.repeat(100); // 100 code points, 200 UTF-16 units
    const r2 = await ha.command(cmd('2', 'set_prompt', { prompt: 'sea', [longKey]: 1 }));
    const field = (r2 as { details: Array<{ field: string }> }).details[0]!.field;
    expect(Array.from(field)).toHaveLength(65);
    expect(field).toBe(`${'😀'.repeat(64)}…`);
  });

  it('an unknown command is unknown_command whatever its params; a long name is echoed cut', async () => {
    const { ha } = await setup();
    expect(await ha.command(cmd('1', 'fly', 'not an object'))).toMatchObject({ code: 'unknown_command' });
    expect(await ha.command(cmd('2', 'fly', { a: 1, b: 2 }))).toMatchObject({ code: 'unknown_command' });
    const r = await ha.command(cmd('3', 'n'.repeat(60_000)));
    expect(r).toMatchObject({ code: 'unknown_command' });
    expect(JSON.stringify(r).length).toBeLessThan(1_000);
  });
});
