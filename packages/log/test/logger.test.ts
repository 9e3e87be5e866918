import { describe, expect, it } from 'vitest';
import { consoleLogger, levelFromEnv, silentLogger, type Logger } from '../src/index.js';

function recorder() {
  const lines: [string, unknown[]][] = [];
  const put =
    (level: string) =>
    (...a: unknown[]) =>
      lines.push([level, a]);
  return { lines, sink: { debug: put('debug'), info: put('info'), warn: put('warn'), error: put('error') } };
}

describe('consoleLogger', () => {
  it('writes "[name] message" with fields as key=value, pino argument order, child bindings merged', () => {
    const r = recorder();
    const log = consoleLogger({ name: 'video', sink: r.sink });
    log.info('plain');
    log.warn({ rank: 1, phase: 'load step' }, 'slow rank');
    log.child({ rank: 2 }).child({ session: 'ab' }).error('crashed');
    expect(r.lines).toEqual([
      ['info', ['[video] plain']],
      ['warn', ['[video] slow rank rank=1 phase="load step"']],
      ['error', ['[video] crashed rank=2 session=ab']],
    ]);
  });

  it('writes an Error field as its message, left out when the line already says it (said once)', () => {
    const r = recorder();
    const log = consoleLogger({ sink: r.sink });
    const err = new Error('no module named x');
    log.error({ err }, 'load failed: no module named x');
    log.error({ err }, 'load failed');
    expect(r.lines).toEqual([
      ['error', ['[reactor] load failed: no module named x']],
      ['error', ['[reactor] load failed err="no module named x"']],
    ]);
  });

  it('drops lines below its level (default info)', () => {
    const r = recorder();
    consoleLogger({ sink: r.sink }).debug('hidden');
    consoleLogger({ sink: r.sink, level: 'error' }).warn('hidden too');
    consoleLogger({ sink: r.sink, level: 'debug' }).debug('shown');
    expect(r.lines).toEqual([['debug', ['[reactor] shown']]]);
  });

  it('refuses an unknown level, naming the option', () => {
    expect(() => consoleLogger({ level: 'loud' as never })).toThrow('options.level must be one of debug, info, warn, error, silent, got loud');
  });
});

describe('levelFromEnv', () => {
  it('reads the variable, falls back when unset, and names the variable when the value is wrong', () => {
    expect(levelFromEnv('info', 'L', { L: 'debug' })).toBe('debug');
    expect(levelFromEnv('warn', 'L', {})).toBe('warn');
    expect(() => levelFromEnv('info', 'L', { L: 'verbose' })).toThrow('L must be one of debug, info, warn, error, silent, got "verbose"');
  });
});

describe('silentLogger', () => {
  it('is a Logger whose child is itself', () => {
    const l: Logger = silentLogger;
    expect(l.child({ a: 1 })).toBe(silentLogger);
  });
});

describe('Logger', () => {
  it('is what a pino logger is: pino can be passed wherever a Logger is taken', async () => {
    const { pino } = await import('pino');
    const lines: string[] = [];
    const p = pino({ level: 'info' }, { write: (s: string) => lines.push(s) });
    const log: Logger = p;
    log.child({ rank: 1 }).warn({ phase: 'load' }, 'slow');
    expect(JSON.parse(lines[0]!)).toMatchObject({ level: 40, rank: 1, phase: 'load', msg: 'slow' });
  });
});
