import { afterEach, describe, expect, it } from 'vitest';
import { Audio, event, Frames, Output, ReactorApp, reactorApp, Video } from '../../src/index.js';
import { command as cmd, RecordingSink, rgbFrames, useHosts } from '../../src/testing.js';

const start = useHosts(afterEach);
const RATE = 8000;

class AvOut extends Output {
  @Video({ width: 1, height: 1 }) main?: Video;
  @Audio({ sampleRate: RATE }) sound?: Audio;
}

/** Counts samples across steps: sample k of the session has value k % 32768, so loss or repetition shows. */
class Counter {
  next = 0;
  take(n: number): Int16Array {
    const out = new Int16Array(n);
    for (let i = 0; i < n; i++) out[i] = this.next++ % 32768;
    return out;
  }
}

describe('audio out', () => {
  it('plays each step audio with its frames: every sample once and in order, each piece at its frame pts', async () => {
    const samples = new Counter();
    // 3 frames per step and 7 samples per frame plus one: the split is uneven, the sum must not be.
    @reactorApp({ output: AvOut, fps: 100 })
    class App extends ReactorApp {
      generate(): AvOut {
        return new AvOut({ main: new Frames(rgbFrames(3, 1, 1), [3, 1, 1, 3]), sound: samples.take(22) });
      }
    }
    const host = start(App);
    await host.load();
    const sink = new RecordingSink();
    host.connect(sink);
    await sink.waitForAudio(30);
    const audio = sink.audioChunks;
    const played = audio.flatMap((a) => Array.from(a.pcm));
    expect(played).toEqual(Array.from({ length: played.length }, (_, i) => i));
    expect(audio.map((a) => a.pcm.length).slice(0, 6)).toEqual([7, 8, 7, 7, 8, 7]);
    // Each chunk right after its frame: same pts and due time, the next seq, the track's rate.
    const events = sink.events.filter((e) => e.kind === 'frame' || e.kind === 'audio');
    for (let i = 0; i < 30; i++) {
      const f = events[2 * i]!;
      const a = events[2 * i + 1]!;
      if (f.kind !== 'frame' || a.kind !== 'audio') throw new Error(`expected frame then audio at ${2 * i}: ${sink.summary().join(' ')}`);
      expect([a.audio.ptsMs, a.audio.dueAt, a.audio.seq, a.audio.track, a.audio.trackIndex, a.audio.sampleRate]).toEqual([
        f.frame.ptsMs,
        f.frame.dueAt,
        f.frame.seq + 1,
        'sound',
        1,
        RATE,
      ]);
    }
    expect(
      sink
        .summary()
        .filter((s) => s.startsWith('audio:'))
        .slice(0, 2),
    ).toEqual(['audio:sound#1', 'audio:sound#3']);
    expect(host.counters.audioChunksPlayed).toBeGreaterThanOrEqual(30);
  });

  it('keeps picture and sound within one frame across a stall of playout (a blocked event loop): the frames queued in time play at once, with no pts jump', async () => {
    const FPS = 25;
    const PER_FRAME = RATE / FPS; // 320 samples, 40 ms
    @reactorApp({ output: AvOut, fps: FPS, pacing: 'ahead', bufferSize: 25 })
    class App extends ReactorApp {
      generate(): AvOut {
        return new AvOut({ main: new Frames(rgbFrames(4, 1, 1), [4, 1, 1, 3]), sound: new Int16Array(4 * PER_FRAME) });
      }
    }
    const host = start(App);
    await host.load();
    const sink = new RecordingSink();
    host.connect(sink);
    await sink.waitForAudio(10);
    // The injected stall: 250 ms (6 frames) with the event loop blocked, frames queued ahead.
    const until = performance.now() + 250;
    while (performance.now() < until) {
      // blocked
    }
    const stalledAt = sink.audioChunks.length;
    await sink.waitForAudio(stalledAt + 20);
    // Where each chunk plays by its pts, against where the sound has got to by its samples.
    const audio = sink.audioChunks;
    let samples = 0;
    let worst = 0;
    for (const a of audio) {
      const bySamples = (samples / RATE) * 1000;
      worst = Math.max(worst, Math.abs(a.ptsMs - audio[0]!.ptsMs - bySamples));
      samples += a.pcm.length;
    }
    expect(worst).toBeLessThan(1000 / FPS);
  });

  it('paces a step that has audio and no frame by the audio duration, in order with the frames around it', async () => {
    const samples = new Counter();
    let step = 0;
    // Even steps: one frame with 80 samples (10 ms at 100 fps). Odd steps: 160 samples alone (20 ms).
    @reactorApp({ output: AvOut, fps: 100 })
    class App extends ReactorApp {
      generate(): AvOut {
        return step++ % 2 === 0 ? new AvOut({ main: rgbFrames(1, 1, 1), sound: samples.take(80) }) : new AvOut({ sound: samples.take(160) });
      }
    }
    const host = start(App);
    await host.load();
    const sink = new RecordingSink();
    host.connect(sink);
    await sink.waitForAudio(9);
    const audio = sink.audioChunks.slice(0, 9);
    expect(audio.map((a) => a.pcm.length)).toEqual([80, 160, 80, 160, 80, 160, 80, 160, 80]);
    expect(audio.flatMap((a) => Array.from(a.pcm))).toEqual(Array.from({ length: 80 * 5 + 160 * 4 }, (_, i) => i));
    // A frame's successor is due one frame interval (10 ms) later, audio alone's its duration (20 ms) later;
    // a loaded machine may only make a gap longer (the clock restarts), never shorter.
    for (let i = 1; i < 9; i++) {
      const gap = audio[i]!.ptsMs - audio[i - 1]!.ptsMs;
      const want = i % 2 === 1 ? 10 : 20;
      expect(Math.abs(gap - want) <= 0.5 || gap > 2 * want, `gap ${i}: ${gap} ms, want ${want}`).toBe(true);
    }
    // Sequence numbers are shared with the frames: strictly increasing over both.
    const seqs = sink.events.flatMap((e) => (e.kind === 'frame' ? [e.frame.seq] : e.kind === 'audio' ? [e.audio.seq] : []));
    expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i));
  });

  it('streams an audio-only app, paced by the audio duration', async () => {
    class SoundOut extends Output {
      @Audio({ sampleRate: RATE }) voice?: Audio;
    }
    const samples = new Counter();
    @reactorApp({ output: SoundOut })
    class App extends ReactorApp {
      generate(): SoundOut {
        return new SoundOut({ voice: samples.take(120) }); // 15 ms
      }
    }
    const host = start(App);
    await host.load();
    const sink = new RecordingSink();
    host.connect(sink);
    await sink.waitForAudio(5);
    const audio = sink.audioChunks.slice(0, 5);
    expect(audio.flatMap((a) => Array.from(a.pcm))).toEqual(Array.from({ length: 600 }, (_, i) => i));
    for (let i = 1; i < 5; i++) {
      const gap = audio[i]!.ptsMs - audio[i - 1]!.ptsMs;
      expect(Math.abs(gap - 15) <= 0.5 || gap > 30, `gap ${gap} ms`).toBe(true);
    }
    expect(sink.frames).toEqual([]);
  });

  it('flush() cuts queued audio too: nothing older than flush.nextSeq arrives after the flush message', async () => {
    let step = 0;
    // One frame per second: the first of a batch plays at once, the rest (with their audio) wait.
    @reactorApp({ output: AvOut, fps: 1, bufferSize: 64 })
    class App extends ReactorApp {
      generate(): AvOut {
        step++;
        return new AvOut({ main: new Frames(rgbFrames(4, 1, 1, step), [4, 1, 1, 3]), sound: new Int16Array(4 * RATE).fill(step) });
      }
      @event({ name: 'reset' }) reset(): void {
        this.output.flush();
      }
    }
    const host = start(App);
    await host.load();
    const sink = new RecordingSink();
    const client = host.connect(sink);
    await sink.waitForAudio(1);
    expect(await client.command(cmd('r', 'reset'))).toEqual({ type: 'reply', id: 'r' });
    const at = sink.events.findIndex((e) => e.kind === 'message' && e.msg.type === 'flush');
    const flush = sink.events[at]!;
    if (flush.kind !== 'message' || flush.msg.type !== 'flush') throw new Error('no flush message');
    const nextSeq = flush.msg.nextSeq;
    // The step after the cut plays at once; everything after the flush message is from it on.
    await sink.waitFor((e) => e.kind === 'audio' && e.audio.seq >= nextSeq);
    const after = sink.events.slice(at + 1).flatMap((e) => (e.kind === 'audio' ? [e.audio] : []));
    expect(after.length).toBeGreaterThan(0);
    for (const a of after) {
      expect(a.seq).toBeGreaterThanOrEqual(nextSeq);
      expect(a.pcm[0]).toBeGreaterThan(1); // not the first step's sound
    }
    // The first step had 4 seconds of sound; only its first second played.
    expect(sink.audioChunks.filter((a) => a.pcm[0] === 1)).toHaveLength(1);
  });

  it('ends the session with session_failed naming the track when a step returns a bad audio payload', async () => {
    @reactorApp({ output: AvOut })
    class App extends ReactorApp {
      generate(): AvOut {
        return new AvOut({ main: rgbFrames(1, 1, 1), sound: new Float32Array(8) as never });
      }
    }
    const host = start(App);
    await host.load();
    const sink = new RecordingSink();
    host.connect(sink);
    const closing = await sink.waitForSession('closing');
    expect(closing.type === 'session' && closing.session.error).toEqual({
      code: 'session_failed',
      message: expect.stringContaining('track sound: payload is a Float32Array; an audio track takes an Int16Array of mono PCM samples at 8000 Hz'),
    });
    expect(sink.audioChunks).toEqual([]);
  });
});
