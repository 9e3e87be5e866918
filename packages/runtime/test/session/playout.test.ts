import { describe, expect, it, vi } from 'vitest';
import type { TrackSpec } from '../../src/app/track-specs.js';
import type { Chunk, QueuedFrame } from '../../src/session/normalize.js';
import { Playout } from '../../src/session/playout.js';
import type { OutputAudio, OutputFrame } from '../../src/index.js';
import { useVirtualTime } from './virtual-time.js';

const track: TrackSpec = { name: 'main', property: 'main', index: 0, kind: 'video', fps: undefined, width: 1, height: 1, sampleRate: undefined };

function chunk(n: number, intervalMs: number, tag = 0): Chunk {
  return [Array.from({ length: n }, (_, i): QueuedFrame => ({ rgb: new Uint8Array(3), width: 1, height: 1, metadata: tag * 100 + i, intervalMs }))];
}

function recorder(): { frames: Array<OutputFrame & { at: number }>; emit: (f: OutputFrame) => void; waitFor: (n: number) => Promise<void> } {
  const frames: Array<OutputFrame & { at: number }> = [];
  let want = Infinity;
  let done: (() => void) | undefined;
  return {
    frames,
    emit: (f) => {
      frames.push({ ...f, at: performance.now() });
      if (frames.length >= want) done?.();
    },
    waitFor: (n) =>
      frames.length >= n
        ? Promise.resolve()
        : new Promise<void>((resolve) => {
            want = n;
            done = resolve;
          }),
  };
}

describe('Playout', () => {
  it('paces frames at their interval (declared fps): 50 fps -> 20 ms apart', async () => {
    const r = recorder();
    const p = new Playout([track], 16, performance.now(), r.emit);
    const t0 = performance.now();
    await p.push(chunk(6, 20));
    await r.waitFor(6);
    const span = r.frames[5]!.at - t0;
    // 5 intervals of 20 ms: never early (timers never fire early), generous upper bound for a loaded CI box.
    expect(span).toBeGreaterThanOrEqual(99);
    expect(span).toBeLessThan(1500);
    // Each frame is due one interval after the previous one; frames queued in time are caught up
    // after a late timer (a loaded machine), and only a stall past MAX_CATCH_UP_MS restarts the
    // clock, which shows as a gap of more than two intervals. Never less than one interval apart, never in between.
    const gaps = r.frames.slice(1).map((f, i) => f.ptsMs - r.frames[i]!.ptsMs);
    for (const g of gaps) expect(Math.abs(g - 20) <= 0.5 || g > 40, `pts gap ${g} ms`).toBe(true);
    expect(r.frames.map((f) => f.seq)).toEqual([0, 1, 2, 3, 4, 5]);
    for (let i = 1; i < 6; i++) expect(r.frames[i]!.at - r.frames[i - 1]!.at).toBeGreaterThanOrEqual(0);
  });

  it('back-pressure: push waits until the queue has room for the batch (bufferSize frames ahead at most)', async () => {
    const r = recorder();
    const p = new Playout([track], 3, performance.now(), r.emit);
    expect(await p.push(chunk(2, 30, 1))).toBe(true); // first frame plays at once, one stays queued
    let accepted: boolean | undefined;
    const second = p.push(chunk(3, 30, 2)).then((ok) => (accepted = ok)); // 1 queued + 3 > 3: must wait
    await r.waitFor(1);
    expect(accepted).toBeUndefined();
    expect(p.queued).toBeLessThanOrEqual(3);
    await second;
    expect(accepted).toBe(true);
    // It was let in only once the queue was empty: the previous batch had fully played.
    expect(r.frames.length).toBe(2);
    await r.waitFor(5);
    expect(r.frames.map((f) => f.metadata)).toEqual([100, 101, 200, 201, 202]);
  });

  it('flush drops queued frames and releases a blocked producer (its batch dropped)', async () => {
    const r = recorder();
    const p = new Playout([track], 2, performance.now(), r.emit);
    await p.push(chunk(2, 10_000, 1)); // frame 0 now, frame 1 in 10 s
    await r.waitFor(1);
    const blocked = p.push(chunk(2, 10_000, 2));
    const t0 = performance.now();
    expect(p.flush()).toBe(1);
    expect(await blocked).toBe(false);
    // Released by the flush, not by frame 1 falling due in 10 s.
    expect(performance.now() - t0).toBeLessThan(5000);
    expect(p.queued).toBe(0);
    // Playout carries on with the next batch, sequence numbers continue.
    await p.push(chunk(1, 0, 3));
    await r.waitFor(2);
    expect(r.frames.map((f) => [f.seq, f.metadata])).toEqual([
      [0, 100],
      [1, 300],
    ]);
    p.close();
  });

  it('restarts its clock after an underrun instead of bursting to catch up', async () => {
    // Virtual time: on a busy machine a late wall-clock timer makes the frames after it catch up by
    // design (their due times hold), which a wall-clock run cannot tell from a burst.
    useVirtualTime();
    try {
      const r = recorder();
      const p = new Playout([track], 8, performance.now(), r.emit);
      await p.push(chunk(1, 5));
      await vi.advanceTimersByTimeAsync(0);
      expect(r.frames).toHaveLength(1);
      // Well past the next due time with nothing queued, then 3 frames at 30 ms.
      await vi.advanceTimersByTimeAsync(60);
      const pushed = performance.now();
      await p.push(chunk(3, 30));
      for (let i = 0; i < 100 && r.frames.length < 4; i++) await vi.advanceTimersByTimeAsync(5);
      expect(r.frames).toHaveLength(4);
      // The first plays at once (its due time is long past), then one interval apart: no burst.
      expect(r.frames[1]!.at - pushed).toBeLessThan(30);
      const gaps = [r.frames[2]!.at - r.frames[1]!.at, r.frames[3]!.at - r.frames[2]!.at];
      expect(gaps[0]).toBeGreaterThanOrEqual(29);
      expect(gaps[1]).toBeGreaterThanOrEqual(29);
      p.close();
    } finally {
      vi.useRealTimers();
    }
  });

  it('close resolves a waiting producer with false and plays nothing more', async () => {
    const r = recorder();
    const p = new Playout([track], 1, performance.now(), r.emit);
    await p.push(chunk(2, 10_000));
    const blocked = p.push(chunk(1, 0));
    p.close();
    expect(await blocked).toBe(false);
    expect(await p.push(chunk(1, 0))).toBe(false);
  });

  describe('audio', () => {
    const video: TrackSpec = { ...track, name: 'main', index: 1 };
    const sound: TrackSpec = {
      name: 'sound',
      property: 'sound',
      index: 2,
      kind: 'audio',
      fps: undefined,
      width: undefined,
      height: undefined,
      sampleRate: 8000,
    };
    /** Records frames and audio in one list, in emission order. */
    function avRecorder(): {
      events: Array<{ kind: 'frame' | 'audio'; seq: number; ptsMs: number; dueAt: number; samples?: number[] }>;
      emit: (f: OutputFrame) => void;
      emitAudio: (a: OutputAudio) => void;
      waitFor: (n: number) => Promise<void>;
    } {
      const r = recorder();
      const events: Array<{ kind: 'frame' | 'audio'; seq: number; ptsMs: number; dueAt: number; samples?: number[] }> = [];
      return {
        events,
        emit: (f) => {
          events.push({ kind: 'frame', seq: f.seq, ptsMs: f.ptsMs, dueAt: f.dueAt });
          r.emit(f);
        },
        emitAudio: (a) => {
          expect([a.track, a.trackIndex, a.sampleRate]).toEqual(['sound', 2, 8000]);
          events.push({ kind: 'audio', seq: a.seq, ptsMs: a.ptsMs, dueAt: a.dueAt, samples: Array.from(a.pcm) });
          r.emit({ ...a, width: 0, height: 0, rgb: new Uint8Array(0) });
        },
        waitFor: r.waitFor,
      };
    }
    const frameWithAudio = (i: number, intervalMs: number): QueuedFrame => ({
      rgb: new Uint8Array(3),
      width: 1,
      height: 1,
      metadata: undefined,
      intervalMs,
      audio: [{ track: sound, pcm: Int16Array.of(i, i) }],
    });

    it('plays each audio piece right after its frame, with the same due time and pts, on the session-wide seq', async () => {
      const r = avRecorder();
      const p = new Playout([video, sound], 16, performance.now(), r.emit, r.emitAudio);
      await p.push([[0, 1, 2].map((i) => frameWithAudio(i, 20)), undefined]);
      await r.waitFor(6);
      expect(r.events.map((e) => `${e.kind}#${e.seq}`)).toEqual(['frame#0', 'audio#1', 'frame#2', 'audio#3', 'frame#4', 'audio#5']);
      for (let i = 0; i < 6; i += 2) {
        expect(r.events[i + 1]!.ptsMs).toBe(r.events[i]!.ptsMs);
        expect(r.events[i + 1]!.dueAt).toBe(r.events[i]!.dueAt);
        expect(r.events[i + 1]!.samples).toEqual([i / 2, i / 2]);
      }
      expect(p.takeWindow()).toBe(3); // frames played, not frames + audio
      p.close();
    });

    it('paces audio without frames by its own duration', async () => {
      const r = avRecorder();
      const p = new Playout([video, sound], 16, performance.now(), r.emit, r.emitAudio);
      const slot = (v: number): Chunk => [[{ intervalMs: 50, audio: [{ track: sound, pcm: new Int16Array(400).fill(v) }] }], undefined];
      for (const v of [1, 2, 3]) await p.push(slot(v));
      await r.waitFor(3);
      expect(r.events.map((e) => [e.kind, e.samples![0]])).toEqual([
        ['audio', 1],
        ['audio', 2],
        ['audio', 3],
      ]);
      // Due one duration apart (more only when a loaded machine fires late and the clock restarts).
      for (let i = 1; i < 3; i++) {
        const gap = r.events[i]!.ptsMs - r.events[i - 1]!.ptsMs;
        expect(Math.abs(gap - 50) <= 0.5 || gap > 100, `pts gap ${gap} ms`).toBe(true);
      }
      p.close();
    });

    it('flush cuts queued audio with the frames', async () => {
      const r = avRecorder();
      const p = new Playout([video, sound], 16, performance.now(), r.emit, r.emitAudio);
      await p.push([[0, 1, 2].map((i) => frameWithAudio(i, 10_000)), undefined]);
      await r.waitFor(2);
      expect(p.flush()).toBe(2);
      await p.push([[frameWithAudio(7, 10)], undefined]);
      await r.waitFor(4);
      expect(r.events.map((e) => [e.kind, e.seq, e.samples?.[0]])).toEqual([
        ['frame', 0, undefined],
        ['audio', 1, 0],
        ['frame', 2, undefined],
        ['audio', 3, 7],
      ]);
      p.close();
    });
  });
});
