/**
 * Roles in the host: a command's `roles` (events and setters), a spectator's publication, the
 * token's track grant, single-controller mode with hand-over, and a resumed client's new sink.
 */
import { IsInt, IsString } from 'class-validator';
import { afterEach, describe, expect, it } from 'vitest';
import {
  AppDefinitionError,
  AppHost,
  ApplicationError,
  type Client,
  event,
  Input,
  InputField,
  InputState,
  ReactorApp,
  reactorApp,
  Video,
  type InputBuffer,
} from '../../src/index.js';
import { RecordingSink } from '../../src/testing.js';

class State extends InputState {
  @InputField({ default: 'forest' }) @IsString() prompt!: string;
  @InputField({ default: 0, roles: ['controller', 'spectator'] }) @IsInt() votes!: number;
}

class Cam extends Input {
  @Video({ width: 2, height: 2, fps: 30 }) webcam!: InputBuffer<Uint8Array>;
  @Video({ width: 2, height: 2, fps: 30 }) screen!: InputBuffer<Uint8Array>;
}

const likes: Array<{ id: string; role: string }> = [];

@reactorApp({ state: State, input: Cam })
class App extends ReactorApp<State, null, null, never, Cam> {
  override processInput(): never {
    throw new ApplicationError('idle');
  }
  generate(): null {
    return null;
  }
  @event({ name: 'reset' })
  reset(): void {}
  @event({ name: 'like', roles: ['spectator', 'controller'] })
  like(_p: object, client: Client): void {
    likes.push({ id: client.id, role: client.role });
  }
  @event({ name: 'moderate', roles: ['moderator'] })
  moderate(): string {
    return 'ok';
  }
}

const hosts: AppHost[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.close()));
  likes.length = 0;
});
const cmd = (id: string, name: string, params: Record<string, unknown> = {}) => ({ type: 'command' as const, id, name, params });

async function start(options: { singleController?: boolean } = {}): Promise<AppHost> {
  const host = new AppHost(App, { statsIntervalMs: 0, refusalBackoffMs: 10_000, ...options });
  hosts.push(host);
  await host.load();
  return host;
}

async function join(host: AppHost, info: { role?: string; publish?: '*' | string[] } = {}) {
  const sink = new RecordingSink();
  const handle = host.connect(sink, info);
  await sink.waitForMessage((m) => (m.type === 'session' || m.type === 'welcome') && m.session.state === 'streaming');
  return { sink, handle };
}

describe('roles', () => {
  it('refuses a spectator the commands without its role, runs the ones that name it, and puts roles in the schema', async () => {
    const host = await start();
    const viewer = await join(host, { role: 'spectator' });
    const steer = await join(host);
    expect(viewer.sink.ofType('welcome')[0]!.role).toBe('spectator');
    expect(await viewer.handle.command(cmd('1', 'reset'))).toEqual({
      type: 'error',
      id: '1',
      code: 'forbidden_role',
      message: 'command reset: your role "spectator" may not; it takes "controller" (a token with that role)',
    });
    expect(await viewer.handle.command(cmd('2', 'set_prompt', { prompt: 'sea' }))).toMatchObject({ code: 'forbidden_role' });
    expect(await viewer.handle.command(cmd('3', 'set_votes', { votes: 3 }))).toEqual({ type: 'reply', id: '3' });
    expect(await viewer.handle.command(cmd('4', 'like'))).toEqual({ type: 'reply', id: '4' });
    expect(likes).toEqual([{ id: viewer.handle.id, role: 'spectator' }]);
    expect(await steer.handle.command(cmd('5', 'reset'))).toEqual({ type: 'reply', id: '5' });
    expect(await steer.handle.command(cmd('6', 'moderate'))).toMatchObject({ code: 'forbidden_role' });
    const mod = await join(host, { role: 'moderator' });
    expect(await mod.handle.command(cmd('7', 'moderate'))).toEqual({ type: 'reply', id: '7', result: 'ok' });
    const schema = host.schema.commands;
    expect(schema.find((c) => c.name === 'like')!.roles).toEqual(['spectator', 'controller']);
    expect(schema.find((c) => c.name === 'set_votes')!.roles).toEqual(['controller', 'spectator']);
    expect(schema.find((c) => c.name === 'reset')!.roles).toBeUndefined();
  });

  it("refuses a spectator's publication and a track the grant does not list; a controller publishes", async () => {
    const host = await start();
    const viewer = await join(host, { role: 'spectator' });
    expect(viewer.handle.publish('p1', 'webcam')).toMatchObject({ type: 'error', code: 'forbidden_role' });
    const limited = await join(host, { role: 'controller', publish: ['screen'] });
    expect(limited.handle.publish('p2', 'webcam')).toMatchObject({ type: 'error', code: 'publish_not_granted' });
    expect(limited.handle.publish('p3', 'screen')).toEqual({ type: 'reply', id: 'p3' });
    const full = await join(host);
    expect(full.handle.publish('p4', 'webcam')).toEqual({ type: 'reply', id: 'p4' });
  });

  it('rejects a malformed roles option when the app is registered', () => {
    @reactorApp({})
    class Bad extends ReactorApp<InputState, null, null> {
      generate(): null {
        return null;
      }
      @event({ roles: [] })
      nothing(): void {}
    }
    expect(() => new AppHost(Bad)).toThrow(AppDefinitionError);
    expect(() => new AppHost(Bad)).toThrow(/roles must be a non-empty list of snake_case role names/);
  });
});

describe('single-controller mode', () => {
  it('lets the first controller steer, queues requests, and hands control over on release and on leave', async () => {
    const host = await start({ singleController: true });
    const a = await join(host);
    const b = await join(host);
    const c = await join(host);
    expect(a.sink.ofType('welcome')[0]!.control).toEqual({ controller: a.handle.id, queue: [] });
    expect(await b.handle.command(cmd('1', 'reset'))).toMatchObject({ code: 'not_controller' });
    expect(b.handle.publish('p', 'webcam')).toMatchObject({ code: 'not_controller' });
    // A controller without control may still do what a spectator may.
    expect(await b.handle.command(cmd('2', 'like'))).toEqual({ type: 'reply', id: '2' });
    expect(b.handle.requestControl('r1')).toEqual({ type: 'reply', id: 'r1', result: { controller: false, position: 1 } });
    expect(c.handle.requestControl('r2')).toEqual({ type: 'reply', id: 'r2', result: { controller: false, position: 2 } });
    expect(a.sink.ofType('control').at(-1)).toEqual({ type: 'control', controller: a.handle.id, queue: [b.handle.id, c.handle.id] });
    expect(b.handle.releaseControl('x')).toMatchObject({ result: { controller: false } }); // leaves the queue
    expect(c.handle.releaseControl('y')).toMatchObject({ result: { controller: false } });
    expect(b.handle.releaseControl('z')).toMatchObject({ code: 'not_holding_control' });
    b.handle.requestControl('r3');
    c.handle.requestControl('r4');
    expect(a.handle.releaseControl('rel')).toEqual({ type: 'reply', id: 'rel', result: { controller: false } });
    expect(b.sink.ofType('control').at(-1)).toEqual({ type: 'control', controller: b.handle.id, queue: [c.handle.id] });
    expect(await b.handle.command(cmd('3', 'reset'))).toEqual({ type: 'reply', id: '3' });
    expect(await a.handle.command(cmd('4', 'reset'))).toMatchObject({ code: 'not_controller' });
    b.handle.disconnect();
    expect(c.sink.ofType('control').at(-1)).toEqual({ type: 'control', controller: c.handle.id, queue: [] });
    expect(await c.handle.command(cmd('5', 'reset'))).toEqual({ type: 'reply', id: '5' });
    const viewer = await join(host, { role: 'spectator' });
    expect(viewer.handle.requestControl('r5')).toMatchObject({ code: 'forbidden_role' });
  });
});

describe('rebind (resume)', () => {
  it('sends the new sink a welcome with resumed: true and the current state; the client keeps its id and publication', async () => {
    const host = await start();
    const a = await join(host);
    expect(a.handle.publish('p', 'webcam')).toEqual({ type: 'reply', id: 'p' });
    await a.handle.command(cmd('1', 'set_prompt', { prompt: 'sea' }));
    const next = new RecordingSink();
    a.handle.rebind(next);
    const welcome = next.ofType('welcome')[0]!;
    expect(welcome).toMatchObject({ clientId: a.handle.id, resumed: true, state: { prompt: 'sea', votes: 0 } });
    expect(a.handle.publishes('webcam')).toBe(true);
    await a.handle.command(cmd('2', 'set_prompt', { prompt: 'dune' }));
    expect(next.ofType('state').at(-1)).toEqual({ type: 'state', state: { prompt: 'dune', votes: 0 } });
    expect(a.sink.ofType('state').at(-1)).toEqual({ type: 'state', state: { prompt: 'sea', votes: 0 } });
  });
});
