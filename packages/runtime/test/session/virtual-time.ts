import { vi } from 'vitest';

/**
 * Virtual time for a pacing test: timers, `performance.now()` and `Date` move only through
 * `vi.advanceTimersByTimeAsync`, so timers fire when due, as on a quiet machine. Undo it with
 * `vi.useRealTimers()`.
 */
export function useVirtualTime(): void {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'setImmediate', 'clearImmediate', 'performance', 'Date'] });
}
