import { describe, expect, it } from 'vitest';
import { DistributedRunner } from '../src/index.js';
import { captureLogger, expectNothingLeft, fixture, trackRunners } from './helpers.js';

// This file's process never loads the native binding: REACTOR_SHM_NATIVE=0 makes it fail to
// load exactly as a missing build would, and the runner must fall back with a notice.
process.env.REACTOR_SHM_NATIVE = '0';

describe('shared memory', () => {
  const track = trackRunners();

  it('falls back to /dev/shm files with a logged notice when the native binding cannot load', async () => {
    const { EchoWorker } = await fixture('echo');
    const log = captureLogger();
    const runner = track(new DistributedRunner(EchoWorker, { worldSize: 2, logger: log }));
    await runner.start();
    expect(runner.shmBackend).toBe('file');
    expect(log.lines.filter((l) => l.includes('shared-memory binding'))).toEqual([
      'warn The native shared-memory binding (shm-typed-array) cannot load (disabled by REACTOR_SHM_NATIVE=0); using files in /dev/shm instead (each large payload costs an extra copy). Rebuild it with pnpm rebuild shm-typed-array.',
    ]);
    const bytes = 5 * 1024 * 1024;
    const a: any = (await runner.generateView({ payloadBytes: bytes, input: new Float32Array(1000).fill(0.25) })).value;
    expect(a.frames.byteLength).toBe(bytes);
    expect(a.frames[0]).toBe(1);
    const b: any = (await runner.generateView({ payloadBytes: bytes })).value;
    expect(b.frames[0]).toBe(2);
    // Same documented lifetime as the native path: the view is reused by the next generateView().
    expect(a.frames[0]).toBe(2);
    // generate() gives the caller its own copy here too.
    const owned: any = await runner.generate({ payloadBytes: bytes });
    await runner.generate({ payloadBytes: bytes });
    expect(owned.frames[0]).toBe(3);
    // worker.resultArray() is an ordinary array here; the result is the same.
    const c: any = await runner.generate({ sharedPayloadBytes: 1000 });
    expect(c.frames.byteLength).toBe(1000);
    expect(c.frames[0]).toBe(5);
    expect(c.extra).toEqual(new Float64Array([0, 0.5]));
    await runner.shutdown();
    expectNothingLeft(runner);
  });

  it("refuses shm: 'native' when the binding cannot load, naming the fix", async () => {
    const { EchoWorker } = await fixture('echo');
    const runner = track(new DistributedRunner(EchoWorker, { worldSize: 1, shm: 'native', logger: captureLogger() }));
    await expect(runner.start()).rejects.toMatchObject({
      code: 'shm_native_unavailable',
      message:
        "options.shm is 'native' but the shm-typed-array binding cannot load (disabled by REACTOR_SHM_NATIVE=0). Rebuild it (pnpm rebuild shm-typed-array) or use shm: 'auto'.",
    });
    expectNothingLeft(runner);
  });
});
