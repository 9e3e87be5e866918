import { IsBoolean } from 'class-validator';
import { afterEach, describe, expect, it } from 'vitest';
import { until } from '@reactor/test-kit';
import {
  ApplicationError,
  Audio,
  type Client,
  connected,
  disconnected,
  Input,
  InputBuffer,
  InputField,
  type InputFrame,
  InputState,
  Output,
  ReactorApp,
  reactorApp,
  trackPublished,
  trackUnpublished,
  Video,
} from '../../src/index.js';
import type { AppHost, InboundFrame } from '../../src/index.js';
import { DEFAULT_WAIT_MS, Gate, RecordingLogger, RecordingSink, command, rgbFrames, useHosts } from '../../src/testing.js';

const start = useHosts(afterEach);

/** A 2x2 RGB frame of value `v`, pts `v`, as a transport hands it over. */
const video = (v: number, metadata?: unknown): InboundFrame => ({
  data: rgbFrames(1, 2, 2, v),
  width: 2,
  height: 2,
  ptsMs: v,
  receivedAtMs: performance.now(),
  ...(metadata !== undefined ? { metadata } : {}),
});

class CamInput extends Input {
  @Video({ width: 2, height: 2, fps: 30, capacity: 4 }) webcam!: InputBuffer<Uint8Array>;
  @Audio({ sampleRate: 16_000 }) mic!: InputBuffer<Int16Array>;
}

class Out extends Output {
  @Video({ width: 2, height: 2 }) main?: Video;
}

class FailState extends InputState {
  @InputField({ default: false })
  @IsBoolean()
  fail!: boolean;
}

/** Reads one webcam frame per step (fifo) and streams it back; logs steps and hooks. */
function camApp(log: string[]) {
  @reactorApp({ state: FailState, input: CamInput, output: Out })
  class CamApp extends ReactorApp<FailState, InputFrame<Uint8Array>, Out, never, CamInput> {
    override async processInput(): Promise<InputFrame<Uint8Array>> {
      if (this.state.fail) throw new Error('boom');
      const [frame] = await this.input.webcam.read({ mode: 'fifo' });
      return frame!;
    }
    generate(frame: InputFrame<Uint8Array>): Out {
      log.push(`step:${frame.ptsMs}`);
      return new Out({ main: frame.data });
    }
    @connected onConnected(c: Client) {
      log.push(`connected:${c.id}`);
    }
    @disconnected onDisconnected(c: Client) {
      log.push(`disconnected:${c.id}`);
    }
    @trackPublished onPublished(track: string, c: Client) {
      log.push(`published:${track}:${c.id}`);
    }
    @trackUnpublished onUnpublished(track: string, c: Client) {
      log.push(`unpublished:${track}:${c.id}`);
    }
  }
  return CamApp;
}

/** Never steps (refuses), so frames stay in the buffers for the test to inspect. */
@reactorApp({ input: CamInput })
class IdleApp extends ReactorApp<InputState, null, null, never, CamInput> {
  override processInput(): null {
    throw new ApplicationError('idle');
  }
  generate(): null {
    return null;
  }
}

async function joined(host: AppHost) {
  const sink = new RecordingSink();
  const client = host.connect(sink);
  await sink.waitForSession('streaming');
  return { sink, client };
}

describe('AppHost inbound tracks', () => {
  it('gives the app this.input: one InputBuffer per inbound track, by property, with the track name and capacity, for the host’s life', async () => {
    const host = start(IdleApp);
    const app = host.app as IdleApp;
    expect(Object.keys(app.input)).toEqual(['webcam', 'mic']);
    expect(app.input.webcam).toBeInstanceOf(InputBuffer);
    expect([app.input.webcam.name, app.input.webcam.capacity, app.input.mic.name, app.input.mic.capacity]).toEqual(['webcam', 4, 'mic', 128]);
    expect(Object.isFrozen(app.input)).toBe(true);
    await host.load();
    const { client } = await joined(host);
    client.disconnect();
    expect(app.input.webcam).toBe(app.input.webcam);
  });

  it("puts the publisher's frames into the track's buffer as InputFrames, which the app's steps read", async () => {
    const log: string[] = [];
    const host = start(camApp(log));
    await host.load();
    const { sink, client } = await joined(host);
    expect(client.pushFrame('webcam', video(1))).toBe(false); // not published yet
    expect(client.publish('p1', 'webcam')).toEqual({ type: 'reply', id: 'p1' });
    expect(client.publishes('webcam')).toBe(true);
    expect(client.pushFrame('webcam', video(7, { seq: 3 }))).toBe(true);
    await sink.waitForFrames(1);
    expect(log).toContain('step:7');
    expect([...sink.frames[0]!.rgb]).toEqual([...rgbFrames(1, 2, 2, 7)]);

    // Audio: Int16 PCM with the track's sample rate; the metadata travels with the frame.
    expect(client.publish('p2', 'mic')).toEqual({ type: 'reply', id: 'p2' });
    const pcm = new Int16Array([1, -2, 3]);
    expect(client.pushFrame('mic', { data: pcm, width: 3, height: 1, ptsMs: 40, receivedAtMs: 12.5, metadata: { seq: 9 } })).toBe(true);
    const [chunk] = (host.app as ReactorApp<InputState, unknown, unknown, never, CamInput>).input.mic.tryRead()!;
    expect(chunk).toMatchObject({ data: pcm, sampleRate: 16_000, ptsMs: 40, receivedAtMs: 12.5, metadata: { seq: 9 }, width: undefined, height: undefined });
  });

  it('drops frames of a client that does not publish the track, and frames that do not fit it (logged once per track)', async () => {
    const logger = new RecordingLogger();
    const host = start(IdleApp, { logger });
    await host.load();
    const { client: publisher } = await joined(host);
    const { client: other } = await joined(host);
    publisher.publish('p', 'webcam');
    expect(other.pushFrame('webcam', video(1))).toBe(false);
    expect(publisher.pushFrame('webcam', { ...video(1), width: 3 })).toBe(false);
    expect(publisher.pushFrame('webcam', { ...video(1), data: new Int16Array(12) })).toBe(false);
    const webcam = (host.app as IdleApp).input.webcam;
    expect([webcam.totalReceived, host.counters.inputFramesAccepted]).toEqual([0, 0]);
    expect(logger.at('warn')).toEqual([
      'dropped an inbound frame of track "webcam": 12 bytes for a 3x2 RGB24 frame (needs 18) (further ones are dropped silently)',
    ]);
  });

  it('counts accepted and evicted inbound frames in host.counters', async () => {
    const host = start(IdleApp);
    await host.load();
    const { client } = await joined(host);
    client.publish('p', 'webcam');
    for (let i = 0; i < 6; i++) expect(client.pushFrame('webcam', video(i))).toBe(true);
    const webcam = (host.app as IdleApp).input.webcam;
    expect([host.counters.inputFramesAccepted, host.counters.inputFramesEvicted]).toEqual([6, 2]);
    expect([webcam.available, webcam.dropped, webcam.tryRead({ n: 4, mode: 'fifo' })!.map((f) => f.ptsMs)]).toEqual([4, 2, [2, 3, 4, 5]]);
  });

  it('runs @trackPublished and @trackUnpublished (track, client) under the step lock, after @connected and before @disconnected', async () => {
    const log: string[] = [];
    const gate = new Gate<number, null>();
    @reactorApp({ input: CamInput })
    class GatedApp extends ReactorApp<InputState, number, null, never, CamInput> {
      override processInput(): number {
        return 0;
      }
      generate(): Promise<null> {
        return gate.call(0);
      }
      @connected onConnected(c: Client) {
        log.push(`connected:${c.id}`);
      }
      @disconnected onDisconnected(c: Client) {
        log.push(`disconnected:${c.id}`);
      }
      @trackPublished onPublished(track: string, c: Client) {
        log.push(`published:${track}:${c.id}`);
      }
      @trackUnpublished onUnpublished(track: string, c: Client) {
        log.push(`unpublished:${track}:${c.id}`);
      }
    }
    const host = start(GatedApp);
    await host.load();
    const { client: watcher } = await joined(host);
    const { client } = await joined(host);
    const step = await gate.next(); // a step is running
    expect(client.publish('p1', 'webcam')).toEqual({ type: 'reply', id: 'p1' });
    const inStep = [...log];
    step.resolve(null);
    gate.answerAll(null);
    await until(() => log.includes(`published:webcam:${client.id}`), 'the publish hook ran', DEFAULT_WAIT_MS, 1);
    expect(inStep).not.toContain(`published:webcam:${client.id}`);
    client.unpublish('u1', 'webcam');
    // Published and unpublished before the hooks' turn: the app hears of neither.
    watcher.publish('w1', 'mic');
    watcher.unpublish('w2', 'mic');
    client.publish('p2', 'webcam');
    client.publish('p3', 'mic');
    await until(() => log.includes(`published:mic:${client.id}`), 'both publish hooks ran', DEFAULT_WAIT_MS, 1);
    client.disconnect();
    await until(() => log.includes(`disconnected:${client.id}`), 'the client is gone', DEFAULT_WAIT_MS, 1);
    expect(log).toEqual([
      `connected:${watcher.id}`,
      `connected:${client.id}`,
      `published:webcam:${client.id}`,
      `unpublished:webcam:${client.id}`,
      `published:webcam:${client.id}`,
      `published:mic:${client.id}`,
      `unpublished:webcam:${client.id}`,
      `unpublished:mic:${client.id}`,
      `disconnected:${client.id}`,
    ]);
  });

  it('lets a command run while a step waits in a read: the read gives way, the step is refused and retried', async () => {
    const log: string[] = [];
    const host = start(camApp(log), { refusalBackoffMs: 1 });
    await host.load();
    const { client } = await joined(host);
    const webcam = (host.app as ReactorApp<InputState, unknown, unknown, never, CamInput>).input.webcam;
    await until(() => webcam.pendingReads === 1, 'the step waits in read()', DEFAULT_WAIT_MS, 1);
    // Nobody publishes: without giving way, this command would wait for a frame forever.
    expect(await client.command(command('c', 'set_fail', { fail: false }))).toEqual({ type: 'reply', id: 'c' });
    await until(() => webcam.pendingReads === 1, 'the step waits in read() again', DEFAULT_WAIT_MS, 1);
    expect([host.counters.refusedSteps > 0, host.status.state]).toEqual([true, 'streaming']);
  });

  it('closes the buffer on unpublish: the pending read rejects, the step is refused (logged once), and reads resume when a publisher returns', async () => {
    const log: string[] = [];
    const logger = new RecordingLogger();
    const host = start(camApp(log), { logger, refusalBackoffMs: 1 });
    await host.load();
    const { client: first } = await joined(host);
    const { sink, client: second } = await joined(host);
    const app = host.app as ReactorApp<InputState, unknown, unknown, never, CamInput>;
    first.publish('p', 'webcam');
    first.pushFrame('webcam', video(1));
    await until(() => log.includes('step:1'), 'the first frame was read', DEFAULT_WAIT_MS, 1);
    await until(() => app.input.webcam.pendingReads === 1, 'the next step waits in read()', DEFAULT_WAIT_MS, 1);
    expect(first.unpublish('u', 'webcam')).toEqual({ type: 'reply', id: 'u' });
    expect(app.input.webcam.closed).toBe(true);
    await until(() => host.counters.refusedSteps >= 3, 'several steps were refused', DEFAULT_WAIT_MS, 1);
    expect(host.status.state).toBe('streaming');
    expect(logger.at('info').filter((m) => m.includes('is closed'))).toEqual([
      'step refused: input track "webcam" is closed (its publisher unpublished or left) with 0 of the 1 frame asked for; it reopens when a client publishes it again',
    ]);
    expect(first.pushFrame('webcam', video(2))).toBe(false);
    // Another client takes the track over: the buffer reopens, empty.
    expect(second.publish('p2', 'webcam')).toEqual({ type: 'reply', id: 'p2' });
    expect([app.input.webcam.closed, app.input.webcam.totalReceived]).toEqual([false, 0]);
    second.pushFrame('webcam', video(3));
    await until(() => log.includes('step:3'), 'the new publisher’s frame was read', DEFAULT_WAIT_MS, 1);
    await sink.waitForFrames(2);
    expect(log.filter((l) => l.startsWith('step:'))).toEqual(['step:1', 'step:3']);
  });

  it('closes the buffer when its publisher leaves, and frees the track for another client', async () => {
    const host = start(IdleApp);
    await host.load();
    const { client: stays } = await joined(host);
    const { client: leaves } = await joined(host);
    leaves.publish('p', 'webcam');
    leaves.pushFrame('webcam', video(1));
    leaves.disconnect();
    const webcam = (host.app as IdleApp).input.webcam;
    expect([webcam.closed, webcam.available]).toEqual([true, 1]);
    expect(stays.publish('p', 'webcam')).toEqual({ type: 'reply', id: 'p' });
    expect([webcam.closed, webcam.available]).toEqual([false, 0]);
  });

  it('refuses (never fails) a step whose generate() reads a closed buffer', async () => {
    const logger = new RecordingLogger();
    @reactorApp({ input: CamInput })
    class ReadsInGenerate extends ReactorApp<InputState, unknown, null, never, CamInput> {
      async generate(): Promise<null> {
        await this.input.webcam.read();
        return null;
      }
    }
    const host = start(ReadsInGenerate, { logger, refusalBackoffMs: 1 });
    await host.load();
    const { client } = await joined(host);
    const webcam = (host.app as ReadsInGenerate).input.webcam;
    await until(() => webcam.pendingReads === 1, 'generate() waits in read()', DEFAULT_WAIT_MS, 1);
    client.publish('p', 'webcam');
    client.unpublish('u', 'webcam');
    await until(() => host.counters.refusedSteps >= 2, 'steps were refused', DEFAULT_WAIT_MS, 1);
    expect([host.counters.modelErrors, host.status.state]).toEqual([0, 'streaming']);
    expect(logger.at('error')).toEqual([]);
  });

  it('refuses a step whose read times out, with the reason logged once', async () => {
    const logger = new RecordingLogger();
    @reactorApp({ input: CamInput })
    class Impatient extends ReactorApp<InputState, unknown, null, never, CamInput> {
      override async processInput(): Promise<unknown> {
        return this.input.mic.read({ timeoutMs: 1 });
      }
      generate(): null {
        return null;
      }
    }
    const host = start(Impatient, { logger, refusalBackoffMs: 1 });
    await host.load();
    await joined(host);
    await until(() => host.counters.refusedSteps >= 3, 'steps were refused', DEFAULT_WAIT_MS, 1);
    expect(host.status.state).toBe('streaming');
    expect(logger.at('info').filter((m) => m.startsWith('step refused'))).toEqual([
      'step refused: no frame on input track "mic" within 1 ms (0 buffered); is a client publishing it?',
    ]);
  });

  it('at session end: each publisher gets track_released, @trackUnpublished runs, the buffers reset and the tracks are free again', async () => {
    const log: string[] = [];
    const host = start(camApp(log), { gracePeriodMs: 0 });
    await host.load();
    const { sink, client } = await joined(host);
    const app = host.app as ReactorApp<InputState, unknown, unknown, never, CamInput>;
    client.publish('p', 'mic');
    client.pushFrame('mic', { data: new Int16Array(4), ptsMs: 0, receivedAtMs: 0 });
    await until(() => log.includes(`published:mic:${client.id}`), 'the publish hook ran', DEFAULT_WAIT_MS, 1);
    expect(await client.command(command('f', 'set_fail', { fail: true }))).toEqual({ type: 'reply', id: 'f' });
    await sink.waitFor((e) => e.kind === 'close');
    expect(sink.summary().slice(-3)).toEqual(['session:closing!session_failed', 'track_released', 'close']);
    expect(sink.ofType('track_released')).toEqual([{ type: 'track_released', track: 'mic', reason: 'the session ended: processInput() failed: Error: boom' }]);
    expect(log.slice(-2)).toEqual([`unpublished:mic:${client.id}`, `disconnected:${client.id}`]);
    for (const b of [app.input.webcam, app.input.mic]) expect([b.closed, b.available, b.totalReceived, b.dropped]).toEqual([false, 0, 0, 0]);

    // The next session: the track is free, and frames flow again.
    const next = await joined(host);
    expect(next.client.publishes('mic')).toBe(false);
    expect(next.client.publish('p', 'mic')).toEqual({ type: 'reply', id: 'p' });
    expect(next.client.pushFrame('mic', { data: new Int16Array(4), ptsMs: 1, receivedAtMs: 0 })).toBe(true);
    expect(app.input.mic.available).toBe(1);
  });

  it('sends track_released on shutdown, and host.close() is not held up by a step waiting in a read', async () => {
    const log: string[] = [];
    const host = start(camApp(log));
    await host.load();
    const { sink, client } = await joined(host);
    client.publish('p', 'mic');
    const webcam = (host.app as ReactorApp<InputState, unknown, unknown, never, CamInput>).input.webcam;
    await until(() => webcam.pendingReads === 1, 'the step waits in read()', DEFAULT_WAIT_MS, 1);
    await host.close();
    expect(sink.ofType('track_released')).toEqual([{ type: 'track_released', track: 'mic', reason: 'the app host is shutting down' }]);
    expect(sink.summary().at(-1)).toBe('close');
    expect(webcam.pendingReads).toBe(0);
  });

  it('refuses publishing an outbound or unknown track, and a second publisher of a taken one', async () => {
    @reactorApp({ input: CamInput, output: Out })
    class Both extends ReactorApp<InputState, null, null, never, CamInput> {
      override processInput(): null {
        throw new ApplicationError('idle');
      }
      generate(): null {
        return null;
      }
    }
    const host = start(Both);
    await host.load();
    const { client: a } = await joined(host);
    const { client: b } = await joined(host);
    expect(a.publish('1', 'main')).toMatchObject({ type: 'error', code: 'wrong_track_direction' });
    expect(a.publish('2', 'nope')).toMatchObject({ type: 'error', code: 'unknown_track' });
    expect(a.publish('3', 'webcam')).toEqual({ type: 'reply', id: '3' });
    expect(b.publish('4', 'webcam')).toMatchObject({ type: 'error', code: 'publish_refused', message: expect.stringContaining(`client ${a.id} publishes it`) });
    expect(b.unpublish('5', 'webcam')).toMatchObject({ type: 'error', code: 'not_publisher' });
  });
});
