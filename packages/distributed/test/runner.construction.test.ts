import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { DistributedRunner, DistributedWorker } from '../src/index.js';
import { fixture, quiet, rankProcesses, useTempDirs } from './helpers.js';

function errorOf(fn: () => unknown): Error {
  try {
    fn();
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a throw');
}

describe('DistributedRunner', () => {
  const tempDir = useTempDirs();

  describe('construction', () => {
    it('rejects a class that lacks reset() before any process starts', async () => {
      const { EchoWorker } = await fixture('echo');
      // A plain-JS author can forget a method; TypeScript would have caught it.
      class NoReset {
        static moduleUrl = EchoWorker.moduleUrl as string;
        load() {}
        generate() {}
      }
      const err = errorOf(() => new DistributedRunner(NoReset as never, { worldSize: 1 }));
      expect(err).toBeInstanceOf(TypeError);
      expect(err.message).toMatchInlineSnapshot(
        `"Worker class NoReset has no reset() method. A DistributedWorker implements load(args), generate(input) and reset()."`,
      );
    });

    it('rejects a class that does not say where its module is', () => {
      class Nowhere extends DistributedWorker {
        load() {}
        generate() {}
        reset() {}
      }
      // @ts-expect-error moduleUrl is required by the types, and checked at run time for JavaScript callers
      const err = errorOf(() => new DistributedRunner(Nowhere, { worldSize: 1 }));
      expect(err).toBeInstanceOf(TypeError);
      expect(err.message).toMatchInlineSnapshot(
        `"Worker class Nowhere does not say where its module is, so a rank process cannot load it. Add \`static moduleUrl = import.meta.url;\` to the class and export the class from that module."`,
      );
    });

    it('rejects a TypeScript worker whose compiled sibling is missing, naming the fix', () => {
      const dir = tempDir('reactor-ts-worker-');
      mkdirSync(join(dir, 'src'));
      const file = join(dir, 'src', 'my-worker.ts');
      writeFileSync(file, 'export {};\n');
      class MyWorker extends DistributedWorker {
        static override moduleUrl = pathToFileURL(file).href;
        load() {}
        generate() {}
        reset() {}
      }
      const err = errorOf(() => new DistributedRunner(MyWorker, { worldSize: 1 }));
      expect(err).toBeInstanceOf(TypeError);
      expect(err.message.replaceAll(dir, '<dir>')).toMatchInlineSnapshot(
        `"MyWorker is defined in TypeScript (<dir>/src/my-worker.ts); rank processes run its compiled sibling <dir>/dist/my-worker.js, which does not exist. Build the package (pnpm build), or point MyWorker.moduleUrl at compiled JavaScript."`,
      );
    });

    it('rejects a TypeScript worker outside a src/ folder (nothing to map to compiled JS)', () => {
      class HereWorker extends DistributedWorker {
        static override moduleUrl = import.meta.url;
        load() {}
        generate() {}
        reset() {}
      }
      const err = errorOf(() => new DistributedRunner(HereWorker, { worldSize: 1 }));
      expect(err).toBeInstanceOf(TypeError);
      expect(err.message).toMatch(/outside a src\/ folder.*Point HereWorker\.moduleUrl at compiled JavaScript\.$/s);
    });

    it.each([0, -1, 1.5, Number.NaN, '2'])('rejects worldSize %s with a RangeError naming the option', async (worldSize) => {
      const { EchoWorker } = await fixture('echo');
      const err = errorOf(() => new DistributedRunner(EchoWorker, { worldSize: worldSize as number }));
      expect(err).toBeInstanceOf(RangeError);
      expect(err.message).toBe(`options.worldSize must be a positive integer, got ${String(worldSize)}.`);
    });

    it('rejects loadArgs that cannot be cloned, naming the fix', async () => {
      const { EchoWorker } = await fixture('echo');
      const err = errorOf(() => new DistributedRunner(EchoWorker, { worldSize: 1, loadArgs: { onFrame: () => 1 } }));
      expect(err).toBeInstanceOf(TypeError);
      expect(err.message).toMatchInlineSnapshot(
        `"options.loadArgs cannot be sent to a rank process: () => 1 could not be cloned. Pass plain data (objects, arrays, strings, numbers, typed arrays); build functions, sockets and handles inside load()."`,
      );
    });

    it('rejects more ranks than GPUs unless CPU ranks are asked for', async () => {
      const { EchoWorker } = await fixture('echo');
      const before = process.env.REACTOR_GPU_COUNT;
      process.env.REACTOR_GPU_COUNT = '1';
      try {
        const err = errorOf(() => new DistributedRunner(EchoWorker, { worldSize: 2 }));
        expect(err).toBeInstanceOf(RangeError);
        expect(err.message).toMatchInlineSnapshot(
          `"options.worldSize is 2 but this machine has 1 GPU: each rank needs its own GPU. Lower worldSize to at most 1, or pass devices: 'cpu' to run the ranks on CPU."`,
        );
        expect(() => new DistributedRunner(EchoWorker, { worldSize: 2, devices: 'cpu' })).not.toThrow();
      } finally {
        if (before === undefined) delete process.env.REACTOR_GPU_COUNT;
        else process.env.REACTOR_GPU_COUNT = before;
      }
    });

    it('rejects bad timeouts and options before any process starts', async () => {
      const { EchoWorker } = await fixture('echo');
      expect(errorOf(() => new DistributedRunner(EchoWorker, { worldSize: 1, callTimeoutMs: 0 })).message).toBe(
        'options.callTimeoutMs must be a positive number of milliseconds (or Infinity), got 0.',
      );
      expect(errorOf(() => new DistributedRunner(EchoWorker, { worldSize: 1, shm: 'posix' as never })).message).toBe(
        "options.shm (or REACTOR_SHM_BACKEND) must be 'auto', 'native' or 'file', got \"posix\".",
      );
      expect(errorOf(() => new DistributedRunner(EchoWorker, { worldSize: 2, devices: [0, 0] })).message).toMatch(/options\.devices/);
    });

    it('starts no process when construction fails, and none before start()', async () => {
      const { EchoWorker } = await fixture('echo');
      const runner = new DistributedRunner(EchoWorker, { worldSize: 2, logger: quiet });
      expect(runner.pids).toEqual([]);
      expect(rankProcesses(runner.segmentPrefix)).toEqual([]);
      expect(runner.healthy).toBe(false); // healthy only once start() has succeeded
      expect(runner.worldSize).toBe(2);
      await runner.shutdown();
    });

    it('rejects, at start(), a class its module does not export (before spawning)', async () => {
      const { makeHidden } = await fixture('not-exported');
      const runner = new DistributedRunner(makeHidden(), { worldSize: 1, logger: quiet });
      const err = await runner.start().then(
        () => null,
        (e: Error) => e,
      );
      expect(err).toBeInstanceOf(TypeError);
      expect(err!.message).toMatch(
        /^Worker class HiddenWorker is not exported by its module .*not-exported\.mjs, so a rank process cannot load it\. Export it/,
      );
      expect(runner.pids).toEqual([]);
    });
  });
});
