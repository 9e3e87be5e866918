import { describe, expect, it } from 'vitest';
import { DistributedRunner, IllegalTransitionError, RUNNER_TRANSITIONS } from '../src/index.js';
import { canTransition, transition } from '../src/internal.js';
import { fixture, quiet, trackRunners } from './helpers.js';

describe('DistributedRunner', () => {
  const track = trackRunners();

  describe('state machine', () => {
    it('has exactly the documented edges', () => {
      expect(RUNNER_TRANSITIONS).toEqual({
        new: ['starting', 'shutdown'],
        starting: ['ready', 'shutdown'],
        ready: ['busy', 'unusable', 'shutdown'],
        busy: ['ready', 'unusable', 'shutdown'],
        unusable: ['shutdown'],
        shutdown: [],
      });
    });

    it.each([
      ['new', 'ready'],
      ['new', 'busy'],
      ['starting', 'busy'],
      ['starting', 'unusable'],
      ['ready', 'starting'],
      ['unusable', 'ready'],
      ['shutdown', 'starting'],
      ['shutdown', 'ready'],
    ] as const)('refuses %s -> %s with IllegalTransitionError', (from, to) => {
      expect(canTransition(RUNNER_TRANSITIONS, from, to)).toBe(false);
      const err = (() => {
        try {
          transition('DistributedRunner', RUNNER_TRANSITIONS, from, to);
          return null;
        } catch (e) {
          return e;
        }
      })();
      expect(err).toBeInstanceOf(IllegalTransitionError);
      expect(err).toMatchObject({ code: 'illegal_transition', machine: 'DistributedRunner', from, to });
      expect((err as Error).message).toBe(`DistributedRunner: illegal state transition ${from} -> ${to}.`);
    });

    it('walks new -> starting -> ready -> busy -> ready -> shutdown, healthy only in ready and busy', async () => {
      const { EchoWorker } = await fixture('echo');
      const runner = track(new DistributedRunner(EchoWorker, { worldSize: 1, logger: quiet }));
      const seen: [string, boolean][] = [[runner.stateName, runner.healthy]];
      const starting = runner.start();
      seen.push([runner.stateName, runner.healthy]);
      await starting;
      seen.push([runner.stateName, runner.healthy]);
      const call = runner.generate({});
      seen.push([runner.stateName, runner.healthy]);
      await call;
      seen.push([runner.stateName, runner.healthy]);
      await runner.shutdown();
      seen.push([runner.stateName, runner.healthy]);
      expect(seen).toEqual([
        ['new', false],
        ['starting', false],
        ['ready', true],
        ['busy', true],
        ['ready', true],
        ['shutdown', false],
      ]);
    });
  });
});
