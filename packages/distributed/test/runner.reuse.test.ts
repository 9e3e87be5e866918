// Rank reuse (what `reactor dev` switches on): a healthy runner's shutdown() parks its ranks, and
// the next runner with the same fingerprint gets them back without loading again; anything that
// changes what the ranks loaded starts new ones, and nothing is left once reuse is switched off.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { DistributedRunner } from '../src/index.js';
import { RankPool, moduleTreeHash } from '../src/internal.js';
import { captureLogger, eventually, expectNothingLeft, fixture, isAlive, useTempDirs } from './helpers.js';

const tempDir = useTempDirs();
// The pool `reactor dev` owns: installed, it parks healthy runners at shutdown(); create() hands a parked one back.
const ranks = new RankPool();
const enableRankReuse = (): void => void ranks.install();
const disableRankReuse = (): Promise<void> => ranks.close();
const parkedRankPids = (): number[] => ranks.parkedPids();
afterEach(async () => {
  await disableRankReuse();
});

const { EchoWorker, RolloutExhausted } = await fixture('echo');
// Each rank writes one stderr line in load() (ranks other than 0 show only stderr).
const loadLines = (logger: ReturnType<typeof captureLogger>): string[] => logger.lines.filter((l) => /warn from rank \d/.test(l));

describe('DistributedRunner', () => {
  describe('rank reuse', () => {
    it('hands a parked runner, ranks loaded, to the next runner with the same worker, options and loadArgs', async () => {
      enableRankReuse();
      const logger = captureLogger();
      const first = new DistributedRunner(EchoWorker, { worldSize: 2, devices: 'cpu', logger, loadArgs: { tag: 'a' } });
      await first.start();
      const pids = first.pids;
      await logger.waitFor(/warn from rank 1/);
      await logger.waitFor(/warn from rank 0/);
      expect(loadLines(logger)).toHaveLength(2);
      await first.shutdown();
      expect(parkedRankPids().sort()).toEqual([...pids].sort());
      expect(pids.every(isAlive)).toBe(true);

      const second = ranks.create(EchoWorker, { worldSize: 2, devices: 'cpu', logger, loadArgs: { tag: 'a' } });
      expect(second).toBe(first);
      const unhealthy: Error[] = [];
      second.on('unhealthy', (e) => unhealthy.push(e));
      await second.start();
      expect(second.pids).toEqual(pids);
      expect(parkedRankPids()).toEqual([]);
      expect(loadLines(logger)).toHaveLength(2);
      expect(logger.lines).toContain(`info reusing the 2 loaded ranks (pid ${pids.join(', ')}): the model half did not change`);
      expect(await second.generate({ value: 5 })).toMatchObject({ rank: 0 });
      // The model's own errors come back as the classes of the module the new instance imports.
      await expect(second.generate({ throwOn: [0, 1] })).rejects.toBeInstanceOf(RolloutExhausted);

      await disableRankReuse();
      await second.shutdown();
      expectNothingLeft(second);
      expect(unhealthy).toEqual([]);
    });

    it('gives a new DistributedRunner (what an app under reactor dev makes) the parked ranks: a new object, the same ranks, the events its own', async () => {
      enableRankReuse();
      const logger = captureLogger();
      const first = new DistributedRunner(EchoWorker, { worldSize: 1, devices: 'cpu', logger, loadArgs: { tag: 'n' } });
      await first.start();
      const pids = first.pids;
      await first.shutdown();
      const second = new DistributedRunner(EchoWorker, { worldSize: 1, devices: 'cpu', logger, loadArgs: { tag: 'n' } });
      expect(second).not.toBe(first);
      expect(parkedRankPids()).toEqual([]);
      await second.start();
      expect(second.pids).toEqual(pids);
      expect(logger.lines).toContain(`info reusing the 1 loaded rank (pid ${pids.join(', ')}): the model half did not change`);
      expect(await second.generate({ value: 3 })).toMatchObject({ rank: 0 });
      const exits: number[] = [];
      second.on('rankExit', (info) => exits.push(info.pid));
      process.kill(pids[0]!, 'SIGKILL');
      await eventually(() => exits.length === 1, 10_000, 'the new runner to hear of its rank exit');
      expect(exits).toEqual(pids);
      await disableRankReuse();
      await second.shutdown();
      expectNothingLeft(second);
    });

    it('starts new ranks when loadArgs differ, and stops the parked ones first', async () => {
      enableRankReuse();
      const logger = captureLogger();
      const first = new DistributedRunner(EchoWorker, { worldSize: 1, devices: 'cpu', logger, loadArgs: { tag: 'a' } });
      await first.start();
      const [old] = first.pids;
      await first.shutdown();
      const second = ranks.create(EchoWorker, { worldSize: 1, devices: 'cpu', logger, loadArgs: { tag: 'b' } });
      expect(second).not.toBe(first);
      await second.start();
      // The parked runner of the same worker was stopped before the new ranks started.
      expect(isAlive(old!)).toBe(false);
      expectNothingLeft(first);
      expect(second.pids).not.toContain(old);
      await eventually(() => loadLines(logger).length === 2, 10_000, 'the new rank to log its load');
      await disableRankReuse();
      await second.shutdown();
      expectNothingLeft(second);
    });

    it('does not hand back a parked runner whose rank died, and stops it', async () => {
      enableRankReuse();
      const first = new DistributedRunner(EchoWorker, { worldSize: 1, devices: 'cpu', logger: captureLogger(), loadArgs: {} });
      await first.start();
      await first.shutdown();
      process.kill(first.pids[0]!, 'SIGKILL');
      await eventually(() => !first.healthy, 10_000, 'the parked runner to notice its rank died');
      const second = ranks.create(EchoWorker, { worldSize: 1, devices: 'cpu', logger: captureLogger(), loadArgs: {} });
      expect(second).not.toBe(first);
      await second.start();
      expect(second.healthy).toBe(true);
      await disableRankReuse();
      await second.shutdown();
      expectNothingLeft(first);
      expectNothingLeft(second);
    });

    it('stops every parked runner when reuse is switched off, and shutdown() stops for real after that', async () => {
      enableRankReuse();
      const runner = new DistributedRunner(EchoWorker, { worldSize: 2, devices: 'cpu', logger: captureLogger(), loadArgs: {} });
      await runner.start();
      await runner.shutdown();
      expect(runner.stateName).toBe('ready');
      await disableRankReuse();
      expect(runner.stateName).toBe('shutdown');
      expectNothingLeft(runner);
    });
  });

  describe('moduleTreeHash', () => {
    it('changes with the module or a module it imports by a relative path, not with other files', () => {
      const dir = tempDir('reactor-tree-hash-');
      const write = (name: string, text: string) => writeFileSync(join(dir, name), text);
      write('worker.js', "import { model } from './model.js';\nexport const w = () => import('./lazy.js');\nimport '@reactor/distributed';\n");
      write('model.js', "export * from './layers/conv.js';\nexport const model = 1;\n");
      write('lazy.js', 'export const lazy = 1;\n');
      write('app.js', "import './worker.js';\n");
      const url = pathToFileURL(join(dir, 'worker.js')).href;
      const base = moduleTreeHash(url);
      expect(moduleTreeHash(`${url}?reactor-dev=3`)).toBe(base);
      write('app.js', "import './worker.js';\nexport const changed = true;\n");
      expect(moduleTreeHash(url)).toBe(base);
      write('lazy.js', 'export const lazy = 2;\n');
      const lazy = moduleTreeHash(url);
      expect(lazy).not.toBe(base);
      // A missing import hashes as missing: creating it changes the hash.
      mkdirSync(join(dir, 'layers'));
      write('layers/conv.js', 'export const conv = 1;\n');
      expect(moduleTreeHash(url)).not.toBe(lazy);
    });
  });
});
