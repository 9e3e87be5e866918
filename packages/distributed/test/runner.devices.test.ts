import { describe, expect, it } from 'vitest';
import { DistributedRunner } from '../src/index.js';
import { captureLogger, fixture, trackRunners } from './helpers.js';

// On this machine there is no GPU (the GPU side of assignDevices is unit-tested in devices.test.ts).
describe('DistributedRunner', () => {
  const track = trackRunners();

  describe('devices', () => {
    it("says once per process that ranks run on CPU because there is no GPU, and not when 'cpu' was asked", async () => {
      const { EchoWorker } = await fixture('echo');
      const notice = (lines: string[]) => lines.filter((l) => l.includes('No GPU found'));

      const asked = captureLogger();
      const a = track(new DistributedRunner(EchoWorker, { worldSize: 2, devices: 'cpu', logger: asked }));
      await a.start();
      expect(((await a.generate({})) as { device: string }).device).toBe('cpu');
      expect(notice(asked.lines)).toEqual([]);
      await a.shutdown();

      const first = captureLogger();
      const b = track(new DistributedRunner(EchoWorker, { worldSize: 2, logger: first }));
      await b.start();
      expect(notice(first.lines)).toEqual(['info No GPU found on this machine: 2 ranks run on CPU.']);
      await b.shutdown();

      const second = captureLogger();
      const c = track(new DistributedRunner(EchoWorker, { worldSize: 1, logger: second }));
      await c.start();
      expect(notice(second.lines)).toEqual([]);
      await c.shutdown();
    });
  });
});
