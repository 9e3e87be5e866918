/**
 * The client's async iterators: one event type as an `AsyncIterableIterator` with a bounded
 * buffer, ended by the client's close or the caller's signal.
 */
import type { IterateOptions, ReactorClientEvents } from './client-types.js';
import type { TypedEmitter } from './base/emitter.js';

/** Iterates `client`'s events of `type`; `closed`: the client is closed already (the iterator ends at once). */
export function iterate<K extends 'frame' | 'message' | 'status' | 'audio'>(
  client: Pick<TypedEmitter<ReactorClientEvents>, 'on'>,
  closed: boolean,
  type: K,
  options: IterateOptions,
): AsyncIterableIterator<ReactorClientEvents[K]> {
  type T = ReactorClientEvents[K];
  const bufferSize = options.bufferSize ?? 8;
  const buffer: T[] = [];
  let waiting: ((r: IteratorResult<T>) => void) | undefined;
  let done = false;
  const finish = (): void => {
    if (done) return;
    done = true;
    offValue();
    offStatus();
    options.signal?.removeEventListener('abort', finish);
    waiting?.({ value: undefined, done: true });
    waiting = undefined;
  };
  const offValue = client.on(type, (v: T) => {
    if (waiting) {
      const w = waiting;
      waiting = undefined;
      w({ value: v, done: false });
      return;
    }
    buffer.push(v);
    if (buffer.length > bufferSize) buffer.shift();
  });
  const offStatus = client.on('status', (s) => {
    if (s.state === 'closed') queueMicrotask(finish);
  });
  options.signal?.addEventListener('abort', finish, { once: true });
  if (closed || options.signal?.aborted) finish();
  const it: AsyncIterableIterator<T> = {
    next: () => {
      if (buffer.length > 0) return Promise.resolve({ value: buffer.shift()!, done: false });
      if (done) return Promise.resolve({ value: undefined, done: true });
      return new Promise((res) => (waiting = res));
    },
    return: () => {
      finish();
      return Promise.resolve({ value: undefined, done: true });
    },
    [Symbol.asyncIterator]: () => it,
  };
  return it;
}
