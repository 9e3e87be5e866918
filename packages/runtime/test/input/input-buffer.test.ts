import { describe, expect, it } from 'vitest';
import { BufferClosedError, BufferTimeoutError, InputBuffer, InputFrame, InvalidReadError } from '../../src/index.js';

/** A 1x1 video frame whose only pixel's red byte is `i` (to tell frames apart). */
const frame = (i: number) => new InputFrame({ data: new Uint8Array([i, 0, 0]), width: 1, height: 1, ptsMs: i });
const ids = (frames: readonly InputFrame[] | null) => frames?.map((f) => f.ptsMs) ?? null;
/** Lets every pending callback run (to show that something did NOT happen). */
const turns = async (n = 5) => {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
};
/** Settles `p` into a readable outcome without an unhandled rejection. */
const outcome = <T>(p: Promise<T>) =>
  p.then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error }),
  );

function filled(count: number, capacity = 128): InputBuffer {
  const b = new InputBuffer({ name: 'webcam', capacity });
  for (let i = 0; i < count; i++) b.push(frame(i));
  return b;
}

describe('InputBuffer', () => {
  describe('capacity', () => {
    it('evicts the oldest frame when full and counts it in dropped', () => {
      const b = filled(5, 3);
      expect([b.available, b.totalReceived, b.dropped]).toEqual([3, 5, 2]);
      expect(ids(b.tryRead({ n: 3, mode: 'fifo' }))).toEqual([2, 3, 4]);
    });

    it('defaults to 128 and refuses a capacity that is not a positive integer', () => {
      expect(new InputBuffer().capacity).toBe(128);
      expect(() => new InputBuffer({ name: 'mic', capacity: 0 })).toThrow(InvalidReadError);
      expect(() => new InputBuffer({ name: 'mic', capacity: 1.5 })).toThrowErrorMatchingInlineSnapshot(
        `[InvalidReadError: InputBuffer "mic": capacity must be a positive integer (frames), got 1.5]`,
      );
    });
  });

  describe('read', () => {
    it("returns the newest n with mode 'latest' (default), oldest first, and drops the older ones", async () => {
      const b = filled(5);
      expect(ids(await b.read({ n: 2 }))).toEqual([3, 4]);
      expect([b.available, b.dropped]).toEqual([0, 3]);
    });

    it("pops the oldest n with mode 'fifo' and keeps the rest", async () => {
      const b = filled(5);
      expect(ids(await b.read({ n: 2, mode: 'fifo' }))).toEqual([0, 1]);
      expect(ids(await b.read({ mode: 'fifo' }))).toEqual([2]);
      expect([b.available, b.dropped]).toEqual([2, 0]);
    });

    it('waits until n frames are there, then resolves with exactly n', async () => {
      const b = filled(1);
      const read = b.read({ n: 3, mode: 'fifo' });
      b.push(frame(1));
      await turns();
      expect(b.pendingReads).toBe(1);
      b.push(frame(2));
      b.push(frame(3));
      expect(ids(await read)).toEqual([0, 1, 2]);
      expect(ids(b.tryRead())).toEqual([3]);
    });

    it('serves several readers in call order, a later one never overtaking an earlier one that needs more frames', async () => {
      const b = new InputBuffer({ name: 'webcam' });
      const order: string[] = [];
      const first = b.read({ n: 2, mode: 'fifo' }).then((f) => (order.push('first'), ids(f)));
      const second = b.read({ n: 1, mode: 'fifo' }).then((f) => (order.push('second'), ids(f)));
      const third = b.read({ n: 1, mode: 'latest' }).then((f) => (order.push('third'), ids(f)));
      b.push(frame(0));
      await turns();
      // One frame would satisfy `second`, but `first` asked before it.
      expect([order, b.available, b.tryRead()]).toEqual([[], 1, null]);
      b.push(frame(1));
      b.push(frame(2));
      b.push(frame(3));
      expect(await Promise.all([first, second, third])).toEqual([[0, 1], [2], [3]]);
      expect(order).toEqual(['first', 'second', 'third']);
    });

    it('serves the reader behind one that times out or is aborted', async () => {
      const b = filled(1);
      const controller = new AbortController();
      const head = outcome(b.read({ n: 3, signal: controller.signal }));
      const next = b.read({ n: 1, mode: 'fifo' });
      controller.abort(new Error('user left'));
      expect(await head).toEqual({ ok: false, error: new Error('user left') });
      expect(ids(await next)).toEqual([0]);
      expect(b.pendingReads).toBe(0);
    });

    it('rejects with BufferTimeoutError after timeoutMs and takes no frame', async () => {
      const b = filled(1);
      const t0 = performance.now();
      const err = await b.read({ n: 2, timeoutMs: 30 }).catch((e: unknown) => e);
      expect(performance.now() - t0).toBeGreaterThanOrEqual(25);
      expect(err).toBeInstanceOf(BufferTimeoutError);
      expect(err).toMatchObject({ code: 'buffer_timeout', track: 'webcam' });
      expect((err as Error).message).toMatchInlineSnapshot(`"no 2 frames on input track "webcam" within 30 ms (1 buffered); is a client publishing it?"`);
      expect([b.available, b.pendingReads]).toEqual([1, 0]);
    });

    it("rejects with the signal's reason, at once when it is already aborted", async () => {
      const b = filled(3);
      const reason = new DOMException('stop', 'AbortError');
      await expect(b.read({ signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
      expect(b.available).toBe(3);
    });

    it('refuses n outside 1..capacity, an unknown mode and a negative timeout with InvalidReadError', async () => {
      const b = filled(1, 4);
      await expect(b.read({ n: 5 })).rejects.toThrowErrorMatchingInlineSnapshot(
        `[InvalidReadError: InputBuffer "webcam".read(): n must be an integer from 1 to the buffer's capacity 4, got 5; raise the track's capacity (@Video({ capacity }) / @Audio({ capacity }))]`,
      );
      await expect(b.read({ n: 0 })).rejects.toMatchObject({ code: 'invalid_read' });
      await expect(b.read({ n: 1.5 })).rejects.toBeInstanceOf(InvalidReadError);
      await expect(b.read({ mode: 'newest' as never })).rejects.toThrow(`mode must be 'latest' or 'fifo', got "newest"`);
      await expect(b.read({ timeoutMs: -1 })).rejects.toThrow('timeoutMs must be a non-negative number of ms, got -1');
      expect(() => b.tryRead({ n: 5 })).toThrow(InvalidReadError);
      expect(b.available).toBe(1);
    });
  });

  describe('tryRead', () => {
    it('returns exactly n frames, or null leaving the buffer untouched', () => {
      const b = filled(3);
      expect(b.tryRead({ n: 4 })).toBeNull();
      expect([b.available, b.dropped]).toEqual([3, 0]);
      expect(ids(b.tryRead({ n: 2, mode: 'fifo' }))).toEqual([0, 1]);
      expect(ids(b.tryRead())).toEqual([2]);
      expect(b.tryRead()).toBeNull();
    });
  });

  describe('close', () => {
    it('lets the frames still there be read, then rejects with BufferClosedError', async () => {
      const b = filled(2);
      b.close();
      expect(b.closed).toBe(true);
      expect(ids(await b.read({ mode: 'fifo' }))).toEqual([0]);
      const err = await b.read({ n: 2 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BufferClosedError);
      expect((err as Error).message).toMatchInlineSnapshot(
        `"input track "webcam" is closed (its publisher unpublished or left) with 1 of the 2 frames asked for; it reopens when a client publishes it again"`,
      );
      expect(b.tryRead({ n: 2 })).toBeNull();
      expect(ids(b.tryRead())).toEqual([1]);
    });

    it('wakes pending readers in call order: those the remaining frames satisfy resolve, the others reject', async () => {
      const b = filled(1);
      const first = outcome(b.read({ n: 2 }));
      const second = outcome(b.read({ n: 1 }));
      const third = outcome(b.read({ n: 1 }));
      b.close();
      const [a, c, d] = await Promise.all([first, second, third]);
      expect(a.ok ? 'resolved' : (a.error as BufferClosedError).code).toBe('buffer_closed');
      expect(c).toEqual({ ok: true, value: [expect.objectContaining({ ptsMs: 0 })] });
      expect(d.ok ? 'resolved' : (d.error as BufferClosedError).code).toBe('buffer_closed');
      expect(b.pendingReads).toBe(0);
    });

    it('drops frames pushed after close without counting them', () => {
      const b = filled(1);
      b.close();
      expect(b.push(frame(9))).toBe(false);
      expect([b.available, b.totalReceived, b.dropped]).toEqual([1, 1, 0]);
    });
  });

  describe('clear and reset', () => {
    it('clear() drops the buffered frames (counted) and pending reads keep waiting', async () => {
      const b = filled(3);
      const read = b.read({ n: 4 });
      b.clear();
      expect([b.available, b.dropped, b.totalReceived]).toEqual([0, 3, 3]);
      for (let i = 10; i < 14; i++) b.push(frame(i));
      expect(ids(await read)).toEqual([10, 11, 12, 13]);
    });

    it('reset() reopens a closed buffer, empty, with its counters at zero', async () => {
      const b = filled(5, 3);
      b.close();
      b.reset();
      expect([b.closed, b.available, b.totalReceived, b.dropped]).toEqual([false, 0, 0, 0]);
      const read = b.read();
      expect(b.push(frame(7))).toBe(true);
      expect(ids(await read)).toEqual([7]);
    });

    it('keeps totalReceived = frames read + dropped + available', async () => {
      const b = new InputBuffer({ capacity: 4 });
      let read = 0;
      for (let i = 0; i < 50; i++) {
        b.push(frame(i));
        if (i % 7 === 0) read += (await b.read({ n: 1, mode: 'latest' })).length;
        if (i % 5 === 0) read += b.tryRead({ n: 2, mode: 'fifo' })?.length ?? 0;
        if (i === 33) b.clear();
      }
      expect(b.totalReceived).toBe(read + b.dropped + b.available);
    });
  });

  it('carries audio chunks as Int16Array with their sample rate', async () => {
    const b = new InputBuffer<Int16Array>({ name: 'mic' });
    b.push(new InputFrame({ data: new Int16Array([1, -1]), sampleRate: 48_000, ptsMs: 5, receivedAtMs: 7, metadata: { seq: 1 } }));
    const [chunk] = await b.read();
    expect(chunk).toEqual(new InputFrame({ data: new Int16Array([1, -1]), sampleRate: 48_000, ptsMs: 5, receivedAtMs: 7, metadata: { seq: 1 } }));
    expect([chunk!.width, chunk!.height]).toEqual([undefined, undefined]);
  });
});
