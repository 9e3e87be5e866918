import { AsyncLocalStorage } from 'node:async_hooks';
import { BufferClosedError, BufferTimeoutError, InvalidReadError } from '../errors/errors.js';
import type { InputData, InputFrame } from './input-frame.js';

/** Default capacity of an inbound track's {@link InputBuffer} (frames or audio chunks). */
export const DEFAULT_INPUT_CAPACITY = 128;

/**
 * How a read picks its frames: `latest` takes the newest `n` and drops the older ones (a live
 * camera: always the freshest picture); `fifo` pops the oldest `n` and keeps the rest (every
 * frame, in order: audio, or video that must not skip).
 */
export type ReadMode = 'latest' | 'fifo';

/** Options of {@link InputBuffer.read}. */
export interface ReadOptions {
  /** Frames to return, exactly (default 1; at most the buffer's capacity). */
  n?: number;
  /** Which frames (default `'latest'`). */
  mode?: ReadMode;
  /** Give up after this many ms with a `BufferTimeoutError` (default: wait as long as it takes). */
  timeoutMs?: number;
  /** Give up when it aborts, rejecting with its `reason`. */
  signal?: AbortSignal;
}

/** Options of {@link InputBuffer.tryRead}. */
export interface TryReadOptions {
  n?: number;
  mode?: ReadMode;
}

/** Options of the {@link InputBuffer} constructor. */
export interface InputBufferOptions {
  /** The track's name, used in error messages (default `'input'`). */
  name?: string;
  /** Frames kept before the oldest is evicted (default 128). */
  capacity?: number;
}

interface PendingRead<D extends InputData> {
  readonly n: number;
  readonly mode: ReadMode;
  // Method signatures: they keep InputBuffer<Uint8Array> assignable to InputBuffer (covariant in D).
  resolve(frames: InputFrame<D>[]): void;
  reject(err: unknown): void;
  /** Undoes its timer and abort listener. */
  cleanup(): void;
}

/**
 * @internal The host's signal for the step running in this async context: it aborts when a
 * command or hook queues behind the step, so a step waiting in a read gives way (it is refused
 * and retried) instead of holding the step lock until a frame arrives.
 */
export const stepInterrupt = new AsyncLocalStorage<AbortSignal>();

/** Largest delay `setTimeout` honours; longer timeouts wait without a timer. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * The frames of one inbound track (`this.input.webcam`): a bounded queue the host fills with
 * what the track's publisher sends, and the app reads from its steps.
 *
 * - **Bounded**: at `capacity` (default 128), a new frame evicts the oldest, counted in `dropped`.
 * - **Reads return exactly `n` frames**, oldest first: `read()` waits for them, `tryRead()` takes
 *   them now or returns `null` and leaves the buffer untouched.
 * - **Several readers are served in call order**: a pending read is served before any later
 *   one, even one asking for fewer frames, and `tryRead()` returns `null` while a read is pending.
 *   A read that times out or is aborted leaves the line, and the next one is served if it can be.
 * - **Closing** (its publisher unpublished or left): frames still there can be read; a read
 *   that needs more rejects with `BufferClosedError`, pending ones at once, in call order; frames
 *   pushed afterwards are dropped. `reset()` reopens it (the host does when a client publishes
 *   the track, and at the end of every session).
 *
 * Counters: `totalReceived` (frames accepted), `dropped` (accepted frames that were never read:
 * evicted, skipped by a `latest` read, or cleared); so `totalReceived = read + dropped + available`.
 *
 * @typeParam D `Uint8Array` (video, RGB24) or `Int16Array` (audio, mono PCM).
 * @example
 * override async processInput() {
 *   const [frame] = await this.input.webcam.read({ mode: 'latest', timeoutMs: 1000 });
 *   return { rgb: frame!.data, width: frame!.width!, height: frame!.height! };
 * }
 */
export class InputBuffer<D extends InputData = InputData> {
  /** The track's name. */
  readonly name: string;
  /** Frames kept before the oldest is evicted. */
  readonly capacity: number;
  private readonly slots: (InputFrame<D> | undefined)[];
  private head = 0;
  private count = 0;
  private received = 0;
  private droppedCount = 0;
  private isClosed = false;
  private readonly readers: PendingRead<D>[] = [];

  /** @throws InvalidReadError (`invalid_read`) when `capacity` is not a positive integer. */
  constructor(options: InputBufferOptions = {}) {
    this.name = options.name ?? 'input';
    const capacity = options.capacity ?? DEFAULT_INPUT_CAPACITY;
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new InvalidReadError(`InputBuffer "${this.name}": capacity must be a positive integer (frames), got ${String(capacity)}`);
    }
    this.capacity = capacity;
    this.slots = new Array<InputFrame<D> | undefined>(capacity).fill(undefined);
  }

  /** Frames in the buffer now. */
  get available(): number {
    return this.count;
  }

  /** Frames accepted since the last `reset()` (frames pushed while closed are not). */
  get totalReceived(): number {
    return this.received;
  }

  /** Accepted frames that were never read (evicted when full, skipped by a `latest` read, cleared), since the last `reset()`. */
  get dropped(): number {
    return this.droppedCount;
  }

  /** Whether the track's publisher is gone: no new frame is accepted until `reset()`. */
  get closed(): boolean {
    return this.isClosed;
  }

  /** Reads waiting for frames. */
  get pendingReads(): number {
    return this.readers.length;
  }

  /**
   * Adds a frame (the host does, for each frame the publisher sends), evicting the oldest when
   * full, and serves waiting reads. Returns `false` (frame dropped, not counted) when closed.
   */
  push(frame: InputFrame<D>): boolean {
    if (this.isClosed) return false;
    this.received++;
    if (this.count === this.capacity) {
      this.slots[this.head] = undefined;
      this.head = (this.head + 1) % this.capacity;
      this.count--;
      this.droppedCount++;
    }
    this.slots[(this.head + this.count) % this.capacity] = frame;
    this.count++;
    this.serve();
    return true;
  }

  /**
   * Resolves to exactly `n` frames, oldest first: with `mode: 'latest'` (default) the newest `n`
   * (older ones are dropped), with `'fifo'` the oldest `n` (the rest stay). Waits until there are
   * `n` frames and every earlier read has been served.
   *
   * @throws InvalidReadError (`invalid_read`) at once for `n` outside 1..capacity, an unknown `mode` or a bad `timeoutMs`.
   * @throws BufferClosedError (`buffer_closed`) when the buffer is or becomes closed with fewer than `n` frames left.
   * @throws BufferTimeoutError (`buffer_timeout`) after `timeoutMs` without the frames (none is taken).
   * @throws the signal's `reason` when `signal` aborts (none is taken).
   */
  read(options: ReadOptions = {}): Promise<InputFrame<D>[]> {
    let n: number;
    let mode: ReadMode;
    let timeoutMs: number | undefined;
    try {
      ({ n, mode } = this.check('read', options));
      timeoutMs = this.checkTimeout(options.timeoutMs);
    } catch (err) {
      return Promise.reject(err);
    }
    if (options.signal?.aborted) return Promise.reject(options.signal.reason);
    if (this.readers.length === 0) {
      if (this.count >= n) return Promise.resolve(this.take(n, mode));
      if (this.isClosed) return Promise.reject(this.closedError(n));
    }
    // About to wait: a step's read gives way when a command or hook is queued behind the step.
    const signals = [options.signal, stepInterrupt.getStore()].filter((s): s is AbortSignal => s !== undefined);
    const aborted = signals.find((s) => s.aborted);
    if (aborted) return Promise.reject(aborted.reason);
    return new Promise<InputFrame<D>[]>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const listeners = signals.map((signal) => {
        const onAbort = (): void => this.abandon(reader, signal.reason);
        signal.addEventListener('abort', onAbort, { once: true });
        return () => signal.removeEventListener('abort', onAbort);
      });
      const reader: PendingRead<D> = {
        n,
        mode,
        resolve,
        reject,
        cleanup: () => {
          if (timer) clearTimeout(timer);
          for (const remove of listeners) remove();
        },
      };
      this.readers.push(reader);
      if (timeoutMs !== undefined && timeoutMs <= MAX_TIMER_MS) {
        timer = setTimeout(() => {
          this.abandon(
            reader,
            new BufferTimeoutError(
              this.name,
              `no ${n === 1 ? 'frame' : `${n} frames`} on input track "${this.name}" within ${timeoutMs} ms (${this.count} buffered); is a client publishing it?`,
            ),
          );
        }, timeoutMs);
      }
    });
  }

  /**
   * Takes exactly `n` frames now (same `mode`s as {@link read}), or returns `null` and leaves the
   * buffer untouched when there are fewer, or when a `read()` is waiting (it comes first).
   * @throws InvalidReadError (`invalid_read`) for `n` outside 1..capacity or an unknown `mode`.
   */
  tryRead(options: TryReadOptions = {}): InputFrame<D>[] | null {
    const { n, mode } = this.check('tryRead', options);
    if (this.readers.length > 0 || this.count < n) return null;
    return this.take(n, mode);
  }

  /** Drops every buffered frame (counted in `dropped`); pending reads keep waiting. */
  clear(): void {
    this.droppedCount += this.count;
    this.discard();
  }

  /**
   * Closes the buffer (the host does when the track's publisher unpublishes or leaves): new
   * frames are dropped; pending reads are served in call order from what is left, and those that
   * cannot be reject with `BufferClosedError`. Idempotent.
   */
  close(): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.serve();
  }

  /** Reopens the buffer, empty, with its counters at zero (a new publisher, a new session). Pending reads keep waiting. */
  reset(): void {
    this.isClosed = false;
    this.discard();
    this.received = 0;
    this.droppedCount = 0;
  }

  // ---- internals -----------------------------------------------------------------------------

  /** Serves pending reads in call order; once closed, rejects those the rest cannot satisfy. */
  private serve(): void {
    while (this.readers.length > 0) {
      const head = this.readers[0]!;
      if (this.count >= head.n) {
        this.readers.shift();
        head.cleanup();
        head.resolve(this.take(head.n, head.mode));
      } else if (this.isClosed) {
        this.readers.shift();
        head.cleanup();
        head.reject(this.closedError(head.n));
      } else {
        return;
      }
    }
  }

  /** A pending read leaves the line (timeout, abort); the reads behind it may now be served. */
  private abandon(reader: PendingRead<D>, reason: unknown): void {
    const i = this.readers.indexOf(reader);
    if (i < 0) return;
    this.readers.splice(i, 1);
    reader.cleanup();
    reader.reject(reason);
    this.serve();
  }

  private take(n: number, mode: ReadMode): InputFrame<D>[] {
    if (mode === 'latest' && this.count > n) {
      const skip = this.count - n;
      for (let i = 0; i < skip; i++) this.slots[(this.head + i) % this.capacity] = undefined;
      this.head = (this.head + skip) % this.capacity;
      this.count = n;
      this.droppedCount += skip;
    }
    const out: InputFrame<D>[] = new Array<InputFrame<D>>(n);
    for (let i = 0; i < n; i++) {
      const at = (this.head + i) % this.capacity;
      out[i] = this.slots[at]!;
      this.slots[at] = undefined;
    }
    this.head = (this.head + n) % this.capacity;
    this.count -= n;
    return out;
  }

  private discard(): void {
    this.slots.fill(undefined);
    this.head = 0;
    this.count = 0;
  }

  private closedError(n: number): BufferClosedError {
    return new BufferClosedError(
      this.name,
      `input track "${this.name}" is closed (its publisher unpublished or left) with ${this.count} of the ${n} frame${n === 1 ? '' : 's'} asked for; it reopens when a client publishes it again`,
    );
  }

  private check(method: string, options: TryReadOptions): { n: number; mode: ReadMode } {
    if (options === null || typeof options !== 'object') {
      throw new InvalidReadError(`InputBuffer "${this.name}".${method}() takes an options object ({ n, mode }), got ${String(options)}`);
    }
    const n = options.n ?? 1;
    if (!Number.isInteger(n) || n < 1 || n > this.capacity) {
      throw new InvalidReadError(
        `InputBuffer "${this.name}".${method}(): n must be an integer from 1 to the buffer's capacity ${this.capacity}, got ${String(n)}` +
          (Number.isInteger(n) && n > this.capacity ? "; raise the track's capacity (@Video({ capacity }) / @Audio({ capacity }))" : ''),
      );
    }
    const mode = options.mode ?? 'latest';
    if (mode !== 'latest' && mode !== 'fifo') {
      throw new InvalidReadError(`InputBuffer "${this.name}".${method}(): mode must be 'latest' or 'fifo', got ${JSON.stringify(mode)}`);
    }
    return { n, mode };
  }

  private checkTimeout(timeoutMs: number | undefined): number | undefined {
    if (timeoutMs === undefined) return undefined;
    if (typeof timeoutMs !== 'number' || Number.isNaN(timeoutMs) || timeoutMs < 0) {
      throw new InvalidReadError(`InputBuffer "${this.name}".read(): timeoutMs must be a non-negative number of ms, got ${String(timeoutMs)}`);
    }
    return timeoutMs;
  }
}
