import { describe, expect, it } from 'vitest';
import { KEY_FRAME_MIN_INTERVAL_MS, KeyFrameGate } from '../src/index.js';

function clock(): { now: () => number; advance(ms: number): void } {
  let t = 1000;
  return { now: () => t, advance: (ms) => void (t += ms) };
}

describe('KeyFrameGate', () => {
  it('discards deltas before the first key frame and asks for one (a join mid-stream)', () => {
    const c = clock();
    const g = new KeyFrameGate({ now: c.now });
    expect(g.offer({ seq: 5, key: false })).toEqual({ decode: false, requestKeyFrame: true, loss: 'no_key_yet' });
    expect(g.offer({ seq: 6, key: false })).toEqual({ decode: false, requestKeyFrame: false, loss: 'no_key_yet' });
    expect(g.offer({ seq: 7, key: true })).toEqual({ decode: true, requestKeyFrame: false });
    expect(g.offer({ seq: 8, key: false })).toEqual({ decode: true, requestKeyFrame: false });
    expect(g.requests).toBe(1);
    expect(g.discarded).toBe(2);
  });

  it('asks again at most once per KEY_FRAME_MIN_INTERVAL_MS while deltas keep coming', () => {
    const c = clock();
    const g = new KeyFrameGate({ now: c.now });
    const asked: number[] = [];
    for (let seq = 0; seq < 40; seq++) {
      if (g.offer({ seq, key: false }).requestKeyFrame) asked.push(seq);
      c.advance(50);
    }
    // 40 frames over 2 s: asked at 0 ms, 500, 1000, 1500.
    expect(KEY_FRAME_MIN_INTERVAL_MS).toBe(500);
    expect(asked).toEqual([0, 10, 20, 30]);
  });

  it('after a gap, discards the next deltas until a key frame, and asks for one', () => {
    const g = new KeyFrameGate({ now: clock().now });
    expect(g.offer({ seq: 0, key: true }).decode).toBe(true);
    expect(g.offer({ seq: 1 }).decode).toBe(true);
    expect(g.offer({ seq: 3 }, true)).toEqual({ decode: false, requestKeyFrame: true, loss: 'gap' });
    expect(g.offer({ seq: 4 }).decode).toBe(false);
    expect(g.waitingForKey).toBe(true);
    expect(g.offer({ seq: 5, key: true }, true).decode).toBe(true);
    expect(g.offer({ seq: 6 }).decode).toBe(true);
    expect(g.lastLoss).toBe('gap');
  });

  it('a decode error or falling behind loses the reference with that reason', () => {
    const c = clock();
    const g = new KeyFrameGate({ now: c.now });
    g.offer({ seq: 0, key: true });
    expect(g.lose('decode_error')).toBe(true);
    expect(g.offer({ seq: 1 })).toEqual({ decode: false, requestKeyFrame: false, loss: 'decode_error' });
    c.advance(500);
    expect(g.offer({ seq: 2 })).toEqual({ decode: false, requestKeyFrame: true, loss: 'decode_error' });
    g.offer({ seq: 3, key: true });
    expect(g.lose('behind')).toBe(false); // within 500 ms of the last request: the server would not force another
    expect(g.offer({ seq: 4 }).loss).toBe('behind');
  });

  it('a new configuration waits for the key frame the server sends without asking', () => {
    const g = new KeyFrameGate({ now: clock().now });
    g.offer({ seq: 0, key: true });
    g.configure();
    expect(g.waitingForKey).toBe(true);
    expect(g.requests).toBe(0);
    expect(g.offer({ seq: 1, key: true }).decode).toBe(true);
  });

  it('a flush drops the frames below nextSeq, even key frames, and waits for a key frame', () => {
    const g = new KeyFrameGate({ now: clock().now });
    g.offer({ seq: 0, key: true });
    g.offer({ seq: 1 });
    g.flush(10);
    expect(g.offer({ seq: 2 })).toEqual({ decode: false, requestKeyFrame: false });
    expect(g.offer({ seq: 3, key: true })).toEqual({ decode: false, requestKeyFrame: false });
    expect(g.offer({ seq: 10, key: true }).decode).toBe(true);
    expect(g.offer({ seq: 11 }).decode).toBe(true);
  });

  it('discards a delta that is not newer than the last frame, but takes a key frame of a restarted sequence', () => {
    const g = new KeyFrameGate({ now: clock().now });
    g.offer({ seq: 100, key: true });
    expect(g.offer({ seq: 100 }).decode).toBe(false);
    expect(g.offer({ seq: 99 }).decode).toBe(false);
    expect(g.offer({ seq: 0, key: true }).decode).toBe(true);
    expect(g.offer({ seq: 1 }).decode).toBe(true);
  });

  it('rejects a negative request interval, naming the option', () => {
    expect(() => new KeyFrameGate({ minRequestIntervalMs: -1 })).toThrowErrorMatchingInlineSnapshot(
      `[RangeError: options.minRequestIntervalMs must be a number >= 0, got -1]`,
    );
  });
});
