/**
 * Session snapshots through `AppHost.snapshots` (the door fork, move and replay build on):
 * what a snapshot holds (state, declared fields, the app's model state), and every bad input
 * refused with its code and nothing changed: corrupt, truncated, another app's, another
 * version's, too big, not plain data. Rewind itself is tested through the protocol in
 * apps/seed-video/test/rewind.test.ts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { IsInt, IsString } from 'class-validator';
import { AppHost, Frames, HostOptionError, InputField, InputState, Output, ReactorApp, reactorApp, SnapshotError, Video } from '../../src/index.js';
import { describeApp } from '../../src/app/registry.js';
import { command as cmd, RecordingSink, rgbFrames, useHosts } from '../../src/testing.js';

const start = useHosts(afterEach);

class CounterState extends InputState {
  @InputField({ default: 0 })
  @IsInt()
  value!: number;

  @InputField({ default: 'a' })
  @IsString()
  label!: string;
}

class Out extends Output {
  @Video()
  main?: Video;
}

/** A model state: weights that drift by one every step, and a step counter of the app's own. */
function appClass(options: { name?: string; version?: string; maxBytes?: number; model?: () => unknown } = {}) {
  @reactorApp({
    state: CounterState,
    output: Out,
    fps: 500,
    name: options.name ?? 'counter',
    version: options.version ?? '1.0.0',
    snapshot: { fields: ['made'], everySteps: 2, ...(options.maxBytes !== undefined && { maxBytes: options.maxBytes }) },
  })
  class CounterApp extends ReactorApp<CounterState> {
    made = 0;
    weights = new Float32Array([1.5, 2.5, 3.5]);
    restored: unknown[] = [];
    generate(s: CounterState): Out {
      this.made++;
      for (let i = 0; i < this.weights.length; i++) this.weights[i]! += 1;
      return new Out({ main: new Frames(rgbFrames(1, 2, 2, s.value), [1, 2, 2, 3]) });
    }
    override snapshot(): unknown {
      return options.model ? options.model() : { weights: this.weights.slice(), note: 'weights' };
    }
    override restore(model: unknown): void {
      this.restored.push(model);
      this.weights = (model as { weights: Float32Array<ArrayBuffer> }).weights;
    }
  }
  return CounterApp;
}

async function running(App: ReturnType<typeof appClass>) {
  const host = start(App);
  await host.load();
  const sink = new RecordingSink();
  host.connect(sink);
  await sink.waitForFrames(3);
  return { host, app: host.app as InstanceType<ReturnType<typeof appClass>>, sink };
}

const code = (p: Promise<unknown>): Promise<string> =>
  p.then(
    () => 'ok',
    (e: unknown) => (e instanceof SnapshotError ? e.code : `not a SnapshotError: ${String(e)}`),
  );

describe('session snapshots (AppHost.snapshots)', () => {
  it('captures the state, the declared fields and the model; a restore puts them back, cuts the stream and sends the state', async () => {
    const App = appClass();
    expect(describeApp(App).schema.commands.map((c) => c.name)).toContain('rewind');
    const { host, app, sink } = await running(App);
    const h = host.snapshots!;
    const bytes = await h.take();
    const made = app.made;
    const weights = [...app.weights];
    const state = host.status;
    expect(state.state).toBe('streaming');
    await sink.waitForFrames(sink.frames.length + 3);
    expect(app.made).toBeGreaterThan(made);
    const flushes = sink.ofType('flush').length;
    const states = sink.ofType('state').length;
    await h.restore(bytes);
    // Taken back between steps: the app's field and the model are as they were at the snapshot.
    expect(app.restored).toHaveLength(1);
    expect([...(app.restored[0] as { weights: Float32Array }).weights]).toEqual(weights);
    expect((app.restored[0] as { note: string }).note).toBe('weights');
    expect(app.made).toBeGreaterThanOrEqual(made);
    expect(app.made).toBeLessThanOrEqual(made + 1);
    expect(sink.ofType('flush').length).toBe(flushes + 1);
    expect(sink.ofType('state').length).toBe(states + 1);
  });

  it('rewind follows the roles: a spectator is refused, a role named in rewindRoles may', async () => {
    @reactorApp({ state: CounterState, output: Out, fps: 500, snapshot: { everySteps: 1, rewindRoles: ['controller', 'editor'] } })
    class Roles extends ReactorApp<CounterState> {
      generate(s: CounterState): Out {
        return new Out({ main: new Frames(rgbFrames(1, 2, 2, s.value), [1, 2, 2, 3]) });
      }
    }
    expect(describeApp(Roles).schema.commands.find((c) => c.name === 'rewind')!.roles).toEqual(['controller', 'editor']);
    const host = start(Roles);
    await host.load();
    const lead = new RecordingSink();
    host.connect(lead);
    await lead.waitForFrames(4);
    const spectator = host.connect(new RecordingSink(), { role: 'spectator' });
    expect(await spectator.command(cmd('s1', 'rewind', { seq: 1 }))).toMatchObject({ type: 'error', code: 'forbidden_role' });
    const editor = host.connect(new RecordingSink(), { role: 'editor' });
    expect(await editor.command(cmd('e1', 'rewind', { seq: 1 }))).toMatchObject({ type: 'reply', result: { seq: 1 } });
  });

  it('a freeze (a move) holds the commands from the snapshot on: a thaw applies them in order, a session that ends frozen applies none', async () => {
    const host = start(appClass(), { gracePeriodMs: 0 });
    await host.load();
    const sink = new RecordingSink();
    const lead = host.connect(sink);
    await sink.waitForFrames(3);
    const state = (): unknown => (sink.ofType('state').at(-1) as { state: unknown }).state;
    await lead.command(cmd('c0', 'set_value', { value: 1 }));
    const h = host.snapshots!;
    expect((await h.take({ freeze: true })).byteLength).toBeGreaterThan(0);
    let answered = 0;
    const first = lead.command(cmd('c1', 'set_value', { value: 2 })).then((a) => (answered++, a));
    const second = lead.command(cmd('c2', 'set_label', { label: 'b' })).then((a) => (answered++, a));
    // Held: the steps go on, the commands do not apply.
    await sink.waitForFrames(sink.frames.length + 3);
    expect(answered).toBe(0);
    expect(state()).toMatchObject({ value: 1, label: 'a' });
    expect(h.thaw()).toBe(2);
    expect(await first).toMatchObject({ type: 'reply', id: 'c1' });
    expect(await second).toMatchObject({ type: 'reply', id: 'c2' });
    expect(state()).toMatchObject({ value: 2, label: 'b' });
    expect(h.thaw()).toBe(0);

    // Frozen again, then the session ends (the move went through): the held command is answered no_session, never applied.
    await h.take({ freeze: true });
    const late = lead.command(cmd('c3', 'set_value', { value: 3 }));
    await sink.waitForFrames(sink.frames.length + 2);
    lead.disconnect();
    expect(await late).toMatchObject({ type: 'error', id: 'c3', code: 'no_session' });
    expect(state()).toMatchObject({ value: 2 });
  });

  it('the host option snapshots overrides the ring settings (reactor.yaml snapshots:), and is checked', async () => {
    const App = appClass();
    // maxBytes from the host option, over the app's 32 MiB: this snapshot is too big.
    const host = start(App, { snapshots: { maxBytes: 64 } });
    await host.load();
    host.connect(new RecordingSink());
    expect(await code(host.snapshots!.take())).toBe('snapshot_too_big');
    expect(() => new AppHost(App, { snapshots: { everySteps: 0 } })).toThrow('options.snapshots.everySteps must be a positive integer, got 0');
    expect(() => new AppHost(App, { snapshots: { rewindRoles: ['viewer'] } as never })).toThrow(
      'options.snapshots.rewindRoles is not a ring setting (everySteps, ringBytes, maxBytes, rewindsPerSecond)',
    );
    class Plain extends ReactorApp {
      generate(): null {
        return null;
      }
    }
    expect(() => new AppHost(Plain, { snapshots: { everySteps: 2 } })).toThrow(HostOptionError);
    expect(() => new AppHost(Plain, { snapshots: { everySteps: 2 } })).toThrow('Plain takes no snapshots');
  });

  it('refuses corrupt, truncated, other-app, other-version and too-big bytes with their codes, changing nothing', async () => {
    const { host, app } = await running(appClass());
    const h = host.snapshots!;
    const bytes = await h.take();
    const flipped = bytes.slice();
    flipped[bytes.length >> 1]! ^= 0xff;
    expect(await code(h.restore(flipped))).toBe('snapshot_corrupt');
    expect(await code(h.restore(new TextEncoder().encode('{"not":"a snapshot"}')))).toBe('snapshot_corrupt');
    expect(await code(h.restore(bytes.slice(0, bytes.length - 40)))).toBe('snapshot_truncated');
    expect(await code(h.restore(bytes.slice(0, 6)))).toBe('snapshot_truncated');
    expect(app.restored).toHaveLength(0);

    const other = await running(appClass({ name: 'another-app' }));
    expect(await code(other.host.snapshots!.restore(bytes))).toBe('snapshot_app_mismatch');
    const newer = await running(appClass({ version: '2.0.0' }));
    expect(await code(newer.host.snapshots!.restore(bytes))).toBe('snapshot_version_mismatch');
    expect(other.app.restored).toHaveLength(0);
    expect(newer.app.restored).toHaveLength(0);

    const small = await running(appClass({ maxBytes: 4096 }));
    expect(await code(small.host.snapshots!.restore(bytes.length > 4096 ? bytes : new Uint8Array(5000)))).toBe('snapshot_too_big');
    const big = await running(appClass({ maxBytes: 4096, model: () => ({ kv: new Float32Array(2048) }) }));
    expect(await code(big.host.snapshots!.take())).toBe('snapshot_too_big');
    const odd = await running(appClass({ model: () => ({ cache: new Map([[1, 2]]) }) }));
    const err = await odd.host.snapshots!.take().catch((e: unknown) => e as SnapshotError);
    expect((err as SnapshotError).code).toBe('snapshot_value');
    expect((err as SnapshotError).message).toContain('snapshot.model.cache is a Map');
  });

  it('seed() keeps checked bytes for one session id: that session starts from them before its first step, another id does not', async () => {
    const { host } = await running(appClass());
    const bytes = await host.snapshots!.take();
    // A fresh host (another instance): the seed is checked at once, and refused with its code.
    const target = start(appClass());
    await target.load();
    const flipped = bytes.slice();
    flipped[bytes.length >> 1]! ^= 0xff;
    expect(() => target.snapshots!.seed('fork-1', flipped)).toThrow(expect.objectContaining({ code: 'snapshot_corrupt' }) as Error);
    expect(target.snapshots!.seed('fork-1', bytes)).toMatchObject({ bytes: bytes.byteLength });
    expect(target.snapshots!.maxBytes).toBe(32 * 1024 * 1024);
    // A session of another id starts fresh (the seed waits for its own).
    const other = new RecordingSink();
    const otherClient = target.connect(other, { sessionId: 'someone-else' });
    await other.waitForFrames(1);
    expect((target.app as InstanceType<ReturnType<typeof appClass>>).restored).toHaveLength(0);
    otherClient.disconnect();
    await target.endCurrentSession('next');
    const sink = new RecordingSink();
    target.connect(sink, { sessionId: 'fork-1' });
    await sink.waitForFrames(1);
    const app = target.app as InstanceType<ReturnType<typeof appClass>>;
    expect(app.restored).toHaveLength(1);
    expect(target.snapshots!.log()).toMatchObject({ unreplayable: expect.stringContaining('started from a snapshot') as string });
  });

  it('a seeded session whose restore() throws ends with that error code; the host serves the next one', async () => {
    const { host } = await running(appClass());
    const bytes = await host.snapshots!.take();
    const target = start(appClass());
    await target.load();
    const app = target.app as InstanceType<ReturnType<typeof appClass>>;
    app.restore = () => {
      throw new SnapshotError('snapshot_world_size', 'taken with 2 ranks, this runner has 1');
    };
    target.snapshots!.seed('fork-2', bytes);
    const sink = new RecordingSink();
    target.connect(sink, { sessionId: 'fork-2' });
    const ended = await sink.waitForMessage((m) => m.type === 'session' && m.session.state === 'closing');
    expect(ended).toMatchObject({ session: { error: { code: 'snapshot_world_size' } } });
    expect(JSON.stringify(ended)).toContain('could not start from its snapshot');
    // The seed is spent: the next viewer gets a fresh session.
    const next = new RecordingSink();
    target.connect(next, { sessionId: 'fork-2' });
    await next.waitForFrames(1);
  });
});
