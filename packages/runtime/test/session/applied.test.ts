import { afterEach, describe, expect, it } from 'vitest';
import { IsInt } from 'class-validator';
import type { AppliedMessage } from '@reactor/protocol';
import { Audio, Frames, InputField, InputState, Output, ReactorApp, reactorApp, type StepOutcome, Video } from '../../src/index.js';
import { AppliedAcks } from '../../src/session/applied.js';
import { command as cmd, RecordingSink, rgbFrames, useHosts } from '../../src/testing.js';

const start = useHosts(afterEach);

/** An AppliedAcks whose messages land in `told`, as `<client>:<id>:<outcome>[@seq]`. */
function acks(track: string | null = 'main'): { a: AppliedAcks<string>; told: string[] } {
  const told: string[] = [];
  const a = new AppliedAcks<string>(track ?? undefined, (client, m) =>
    told.push(`${client}:${m.id}:${m.outcome}${m.outcome === 'applied' ? `@${m.seq}` : ''}`),
  );
  return { a, told };
}

describe('AppliedAcks (the host logic)', () => {
  it('a later command on the same key supersedes a waiting one (any client); other keys wait on', () => {
    const { a, told } = acks();
    a.changed({ client: 'x', id: '1', key: 'field:value' });
    a.changed({ client: 'x', id: '2', key: 'event:paint' });
    a.changed({ client: 'y', id: '3', key: 'field:value' });
    expect(told).toEqual(['x:1:superseded']);
    const taken = a.take()!;
    expect(taken.map((t) => t.id)).toEqual(['2', '3']);
    expect(a.take()).toBeUndefined();
    // Taken (a slot carries them): a new command on the key does not supersede them.
    a.changed({ client: 'x', id: '4', key: 'field:value' });
    a.played(taken, 17);
    expect(told).toEqual(['x:1:superseded', 'x:2:applied@17', 'y:3:applied@17']);
    expect(a.waiting).toBe(1);
  });

  it('slots dropped unplayed give their commands back, ahead of the newer ones; a newer one on the key supersedes', () => {
    const { a, told } = acks();
    a.changed({ client: 'x', id: '1', key: 'field:value' });
    a.changed({ client: 'x', id: '2', key: 'event:paint' });
    const taken = a.take()!;
    a.changed({ client: 'x', id: '3', key: 'field:value' });
    a.changed({ client: 'x', id: '4', key: 'event:reset' });
    a.returned(taken);
    expect(told).toEqual(['x:1:superseded']);
    a.played(a.take()!, 5);
    expect(told).toEqual(['x:1:superseded', 'x:2:applied@5', 'x:3:applied@5', 'x:4:applied@5']);
  });

  it('among the commands given back, the latest on a key wins', () => {
    const { a, told } = acks();
    a.changed({ client: 'x', id: '1', key: 'field:value' });
    const first = a.take()!;
    a.changed({ client: 'x', id: '2', key: 'field:value' });
    const second = a.take()!;
    a.returned([...first, ...second]);
    expect(told).toEqual(['x:1:superseded']);
    expect(a.take()!.map((t) => t.id)).toEqual(['2']);
  });

  it('a refused step pauses every waiting command; the session end ends the waiting ones and every later one', () => {
    const { a, told } = acks();
    a.changed({ client: 'x', id: '1', key: 'field:frozen' });
    a.refused();
    a.changed({ client: 'x', id: '2', key: 'field:value' });
    const taken = a.take()!;
    a.changed({ client: 'x', id: '3', key: 'event:paint' });
    a.end();
    expect(told).toEqual(['x:1:paused', 'x:3:ended']);
    // The playout's close gives back what it held: ended too.
    a.returned(taken);
    a.changed({ client: 'x', id: '4', key: 'event:paint' });
    expect(told).toEqual(['x:1:paused', 'x:3:ended', 'x:2:ended', 'x:4:ended']);
  });

  it('an app with no outbound track: nothing is taken; commands wait until superseded or the end', () => {
    const { a, told } = acks(null);
    a.changed({ client: 'x', id: '1', key: 'field:value' });
    expect(a.take()).toBeUndefined();
    a.end();
    expect(told).toEqual(['x:1:ended']);
  });
});

class ValueState extends InputState {
  @InputField({ default: 0 })
  @IsInt()
  value!: number;
}

class AvOut extends Output {
  @Video({ width: 1, height: 1 }) main?: Video;
  @Audio({ sampleRate: 8000 }) sound?: Audio;
}

class AudioOnlyOut extends Output {
  @Audio({ sampleRate: 8000 }) sound?: Audio;
}

function appliedOf(sink: RecordingSink): AppliedMessage[] {
  return sink.messages.filter((m): m is AppliedMessage => m.type === 'applied');
}

describe('applied-at in the host', () => {
  it('names a video frame, never the audio a step plays without one; the frame shows the value', async () => {
    let step = 0;
    // Odd steps: sound alone (a slot of the video track with no frame). Frames paint the value.
    @reactorApp({ state: ValueState, output: AvOut, fps: 200 })
    class App extends ReactorApp<ValueState> {
      generate(s: ValueState): AvOut {
        return step++ % 2 === 1 ? new AvOut({ sound: new Int16Array(40) }) : new AvOut({ main: rgbFrames(1, 1, 1, s.value), sound: new Int16Array(40) });
      }
    }
    const host = start(App);
    await host.load();
    const sink = new RecordingSink();
    const h = host.connect(sink);
    await sink.waitForFrames(2);
    for (let v = 1; v <= 10; v++) {
      await h.command(cmd(`c${v}`, 'set_value', { value: v }));
      await sink.waitForMessage((m) => m.type === 'applied' && m.id === `c${v}`);
    }
    for (const m of appliedOf(sink)) {
      expect(m.outcome).toBe('applied');
      if (m.outcome !== 'applied') continue;
      expect(m.track).toBe('main');
      const frame = sink.frames.find((f) => f.seq === m.seq);
      expect(frame, `seq ${m.seq} is a frame of main`).toBeDefined();
      const v = Number(m.id.slice(1));
      expect(frame!.rgb[0]).toBe(v);
      expect(sink.frames.filter((f) => f.seq < m.seq).every((f) => f.rgb[0] !== v)).toBe(true);
    }
  });

  it('a model whose output lags its input by a step (Output.inputStep) gets the frame that really shows the command', async () => {
    // A pipelined worker: each call returns the frames of the previous call's input.
    let previous: number | undefined;
    @reactorApp({ state: ValueState, output: AvOut, fps: 200 })
    class Pipelined extends ReactorApp<ValueState, number, number | undefined> {
      override processInput(): number {
        return this.state.value;
      }
      generate(value: number): number | undefined {
        const out = previous;
        previous = value;
        return out;
      }
      override processOutput(o: StepOutcome<number | undefined>): AvOut | null {
        if (o.result === undefined) return null;
        const out = new AvOut({ main: rgbFrames(1, 1, 1, o.result) });
        out.inputStep = o.step - 1;
        return out;
      }
    }
    const host = start(Pipelined);
    await host.load();
    const sink = new RecordingSink();
    const h = host.connect(sink);
    await sink.waitForFrames(2);
    for (let v = 1; v <= 8; v++) {
      await h.command(cmd(`p${v}`, 'set_value', { value: v }));
      await sink.waitForMessage((m) => m.type === 'applied' && m.id === `p${v}`);
    }
    for (const m of appliedOf(sink)) {
      expect(m.outcome).toBe('applied');
      if (m.outcome !== 'applied') continue;
      const v = Number(m.id.slice(1));
      const frame = sink.frames.find((f) => f.seq === m.seq)!;
      // The named frame is the first that shows v (one step later than the step that read it).
      expect(frame.rgb[0], `applied ${m.id} names seq ${m.seq}`).toBe(v);
      expect(sink.frames.filter((f) => f.seq < m.seq).every((f) => f.rgb[0] !== v)).toBe(true);
    }
  });

  it('AppliedAcks.take(shows) leaves the commands a later step reads waiting', () => {
    let next = 1;
    const told: string[] = [];
    const a = new AppliedAcks<string>(
      'main',
      (c, m) => told.push(`${c}:${m.id}:${m.outcome}`),
      () => next,
    );
    a.changed({ client: 'x', id: '1', key: 'field:value' });
    next = 2;
    a.changed({ client: 'x', id: '2', key: 'event:paint' });
    expect(a.take(0)).toBeUndefined();
    expect(a.take(1)!.map((t) => t.id)).toEqual(['1']);
    expect(a.waiting).toBe(1);
    expect(a.take(2)!.map((t) => t.id)).toEqual(['2']);
  });

  it('an app without video names its first audio track and the chunk seq', async () => {
    @reactorApp({ state: ValueState, output: AudioOnlyOut, fps: 100 })
    class App extends ReactorApp<ValueState> {
      generate(s: ValueState): AudioOnlyOut {
        return new AudioOnlyOut({ sound: new Int16Array(80).fill(s.value) });
      }
    }
    const host = start(App);
    await host.load();
    const sink = new RecordingSink();
    const h = host.connect(sink);
    await sink.waitForAudio(2);
    await h.command(cmd('a', 'set_value', { value: 9 }));
    const m = (await sink.waitForMessage((x) => x.type === 'applied')) as AppliedMessage;
    expect(m).toMatchObject({ outcome: 'applied', track: 'sound' });
    const seq = (m as { seq: number }).seq;
    expect(sink.audioChunks.find((c) => c.seq === seq)!.pcm[0]).toBe(9);
    expect(sink.audioChunks.filter((c) => c.seq < seq).every((c) => c.pcm[0] !== 9)).toBe(true);
  });

  it('a resumed client gets its last outcomes again after its welcome (those sent while it was away were lost)', async () => {
    @reactorApp({ state: ValueState, output: AvOut, fps: 100 })
    class App extends ReactorApp<ValueState> {
      generate(s: ValueState): AvOut {
        return new AvOut({ main: new Frames(rgbFrames(1, 1, 1, s.value), [1, 1, 1, 3]) });
      }
    }
    const host = start(App);
    await host.load();
    const first = new RecordingSink();
    const h = host.connect(first);
    await first.waitForFrames(1);
    // Dropped: the server binds it to a sink that drops everything until it resumes.
    const nowhere = new RecordingSink();
    h.rebind(nowhere);
    await h.command(cmd('r1', 'set_value', { value: 3 }));
    await nowhere.waitForMessage((m) => m.type === 'applied');
    const back = new RecordingSink();
    h.rebind(back);
    expect(back.summary().slice(0, 2)).toEqual(['welcome:streaming', expect.stringMatching(/^applied:r1:applied@\d+$/)]);
  });
});
