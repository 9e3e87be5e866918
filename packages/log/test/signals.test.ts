// The process signal registry: one process listener per signal while handlers are registered,
// gone once none are; `signalHandledElsewhere` sees both registered handlers and an application's
// own process.on listener.
import { describe, expect, it } from 'vitest';
import { onProcessExit, onProcessSignal, signalHandledElsewhere } from '../src/index.js';

const SIG = 'SIGUSR2';

describe('onProcessSignal', () => {
  it('delivers the signal to every handler through one process listener, removed with the last handler', async () => {
    const before = process.listenerCount(SIG);
    const got: string[] = [];
    const offA = onProcessSignal([SIG], (s) => got.push(`a:${s}`));
    const offB = onProcessSignal([SIG], (s) => got.push(`b:${s}`));
    expect(process.listenerCount(SIG)).toBe(before + 1);
    process.kill(process.pid, SIG);
    await expect.poll(() => got).toEqual(['a:SIGUSR2', 'b:SIGUSR2']);
    offA();
    expect(process.listenerCount(SIG)).toBe(before + 1);
    offB();
    expect(process.listenerCount(SIG)).toBe(before);
  });

  it('removes a once handler after its first delivery', async () => {
    const got: string[] = [];
    const keep = onProcessSignal([SIG], () => got.push('keep'));
    onProcessSignal([SIG], () => got.push('once'), { once: true });
    process.kill(process.pid, SIG);
    await expect.poll(() => got).toEqual(['keep', 'once']);
    process.kill(process.pid, SIG);
    await expect.poll(() => got).toEqual(['keep', 'once', 'keep']);
    keep();
  });

  it('says whether anything but a handler handles a signal: another handler, or a process listener of the app', () => {
    const mine = (): void => undefined;
    const off = onProcessSignal([SIG], mine);
    expect(signalHandledElsewhere(SIG, mine)).toBe(false);
    const other = onProcessSignal([SIG], () => undefined);
    expect(signalHandledElsewhere(SIG, mine)).toBe(true);
    other();
    const appOwn = (): void => undefined;
    process.on(SIG, appOwn);
    expect(signalHandledElsewhere(SIG, mine)).toBe(true);
    process.off(SIG, appOwn);
    expect(signalHandledElsewhere(SIG, mine)).toBe(false);
    off();
  });
});

describe('onProcessExit', () => {
  it('installs one exit listener while handlers are registered', () => {
    const before = process.listenerCount('exit');
    const offA = onProcessExit(() => undefined);
    const offB = onProcessExit(() => undefined);
    expect(process.listenerCount('exit')).toBe(before + 1);
    offA();
    offB();
    expect(process.listenerCount('exit')).toBe(before);
  });
});
