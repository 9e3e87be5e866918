import { describe, expect, it } from 'vitest';
import { ReactorApp } from '../src/index.js';
import { command, deferred, RecordingSink, useHosts, useRunners, waitForStatus } from '../src/testing.js';

class Idle extends ReactorApp {
  generate(): null {
    return null;
  }
}

describe('@reactor/runtime/testing', () => {
  it('useHosts closes every host it made when the registered cleanup runs (unload included)', async () => {
    let cleanup: (() => Promise<void>) | undefined;
    let unloaded = 0;
    class Tracked extends Idle {
      override unload(): void {
        unloaded++;
      }
    }
    const start = useHosts((fn) => (cleanup = fn));
    const a = start(Tracked);
    const b = start(Tracked);
    await Promise.all([a.load(), b.load()]);
    const sink = new RecordingSink();
    a.connect(sink);
    await sink.waitForSession('streaming');
    await cleanup!();
    expect(unloaded).toBe(2);
    expect(sink.events.at(-1)).toEqual({ kind: 'close', reason: 'the app host is shutting down' });
    expect(a.readiness().reasons.map((r) => r.code)).toEqual(['closing']);
  });

  it('the wait-for helpers resolve on the condition and reject with what they saw', async () => {
    let cleanup: (() => Promise<void>) | undefined;
    const start = useHosts((fn) => (cleanup = fn));
    const h = start(Idle);
    const ready = waitForStatus(h, 'ready');
    await h.load();
    await expect(ready).resolves.toMatchObject({ state: 'ready' });
    const sink = new RecordingSink();
    h.connect(sink);
    await expect(sink.waitForMessage((m) => m.type === 'flush', { timeoutMs: 20 })).rejects.toThrow(
      /RecordingSink.waitFor timed out after 20 ms; recorded: \["welcome:waiting"/,
    );
    await expect(waitForStatus(h, 'failed', 20)).rejects.toThrow('expected failed within 20 ms');
    expect(command('1', 'go')).toEqual({ type: 'command', id: '1', name: 'go' });
    await cleanup!();
  });

  it('useRunners returns each runner unchanged and shuts every one down when the registered cleanup runs, even if one fails', async () => {
    let cleanup: (() => Promise<void>) | undefined;
    const track = useRunners((fn) => (cleanup = fn));
    const log: string[] = [];
    const slow = deferred();
    const a = {
      name: 'a',
      shutdown: async () => {
        log.push('a');
        await slow.promise;
      },
    };
    const b = {
      name: 'b',
      shutdown: () => {
        log.push('b');
        return Promise.reject(new Error('rank 1 would not exit'));
      },
    };
    expect(track(a)).toBe(a);
    expect(track(b)).toBe(b);
    const done = cleanup!();
    // Both shut down at once: b's failure does not stop a's shutdown, and the cleanup waits for it.
    expect(log).toEqual(['a', 'b']);
    let settled = false;
    void done.catch(() => undefined).finally(() => (settled = true));
    await new Promise((r) => setImmediate(r));
    expect(settled).toBe(false);
    slow.resolve();
    await expect(done).rejects.toThrow('rank 1 would not exit');
    // Each runner is shut down once: the next test's cleanup has nothing left.
    await cleanup!();
    expect(log).toEqual(['a', 'b']);
  });
});
