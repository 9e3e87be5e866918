import { describe, expect, it } from 'vitest';
import { StepLock } from '../../src/session/step-lock.js';
import { deferred } from '../../src/testing.js';

describe('StepLock', () => {
  it('runs tasks one at a time, in call order, and keeps going after a task fails', async () => {
    const lock = new StepLock();
    const log: string[] = [];
    const gate = deferred();
    const a = lock.run(async () => {
      log.push('a:start');
      await gate.promise;
      log.push('a:end');
      return 'a';
    });
    const b = lock.run(() => {
      log.push('b');
      throw new Error('b failed');
    });
    const c = lock.run(() => {
      log.push('c');
      return 'c';
    });
    await new Promise((r) => setImmediate(r));
    expect(log).toEqual(['a:start']);
    expect(lock.locked).toBe(true);
    gate.resolve();
    expect(await a).toBe('a');
    await expect(b).rejects.toThrow('b failed');
    expect(await c).toBe('c');
    expect(log).toEqual(['a:start', 'a:end', 'b', 'c']);
    expect(lock.locked).toBe(false);
  });
});
