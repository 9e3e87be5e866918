import { describe, expect, it } from 'vitest';
import { silentLogger } from '@reactor/log';
import { AgonesErrorCode, DEFAULT_ALLOCATION_TIMEOUT_MS, DEFAULT_HEALTH_INTERVAL_MS, resolveAgonesOptions, startAgones } from '../src/index.js';

describe('resolveAgonesOptions', () => {
  it('applies the defaults: Ready on session end, pings every 2 s, 60 s for an allocated instance to get its client', () => {
    const o = resolveAgonesOptions({ logger: silentLogger });
    expect(o).toMatchObject({ onSessionEnd: 'ready', healthIntervalMs: DEFAULT_HEALTH_INTERVAL_MS, allocationTimeoutMs: DEFAULT_ALLOCATION_TIMEOUT_MS });
    expect([DEFAULT_HEALTH_INTERVAL_MS, DEFAULT_ALLOCATION_TIMEOUT_MS]).toEqual([2000, 60_000]);
  });

  it.each([
    [
      { onSessionEnd: 'restart' },
      'agones.onSessionEnd must be "ready" (keep the model warm for the next session) or "shutdown" (a fresh process), got "restart"',
    ],
    [{ healthIntervalMs: 10 }, 'agones.healthIntervalMs must be an integer from 50 to 5000 (ms), got 10'],
    [{ healthIntervalMs: 6000 }, 'agones.healthIntervalMs must be an integer from 50 to 5000 (ms), got 6000'],
    [{ allocationTimeoutMs: 60_001 }, 'agones.allocationTimeoutMs must be an integer from 1 to 60000 (ms), got 60001'],
    [{ allocationTimeoutMs: 1.5 }, 'agones.allocationTimeoutMs must be an integer from 1 to 60000 (ms), got 1.5'],
    [{ callTimeoutMs: 0 }, 'agones.callTimeoutMs must be an integer from 1 to 60000 (ms), got 0'],
    [{ sdk: 'grpc' }, 'agones.sdk must be a function that returns an AgonesSdk'],
  ])('refuses %j with invalid_agones_option, naming the option and the range', (options, message) => {
    expect(() => resolveAgonesOptions(options as never)).toThrow(expect.objectContaining({ code: AgonesErrorCode.InvalidOption, message }));
  });

  it('startAgones() checks its options before it connects to anything', () => {
    let made = 0;
    const server = { health: () => ({}) as never, host: { status: { state: 'ready', clients: 0 } as const }, instance: undefined };
    expect(() =>
      startAgones(server, {
        healthIntervalMs: 0,
        sdk: () => {
          made++;
          throw new Error('unreachable');
        },
      }),
    ).toThrow(/healthIntervalMs/);
    expect(made).toBe(0);
  });
});
