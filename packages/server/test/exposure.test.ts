import { describe, expect, it } from 'vitest';
import { isLoopbackHost, resolveServerOptions } from '../src/index.js';

describe('resolveServerOptions: exposure at startup', () => {
  it('refuses a non-loopback host without a token, saying why and what to do', () => {
    expect(() => resolveServerOptions({ host: '0.0.0.0' })).toThrow(
      new RangeError(
        'options.host is "0.0.0.0", not a loopback address, and no options.token is set: anyone who can reach it could watch and control the stream. ' +
          'Set options.token, bind 127.0.0.1, or pass insecure: true on a network you trust.',
      ),
    );
    expect(() => resolveServerOptions({ host: '::' })).toThrow(RangeError);
    expect(() => resolveServerOptions({ host: '192.168.1.20' })).toThrow(RangeError);
  });

  it('accepts it with a token, or with insecure: true; loopback needs neither', () => {
    expect(resolveServerOptions({ host: '0.0.0.0', token: 's3cret' }).host).toBe('0.0.0.0');
    expect(resolveServerOptions({ host: '0.0.0.0', insecure: true }).insecure).toBe(true);
    for (const host of ['127.0.0.1', '127.0.0.2', 'localhost', '::1']) expect(resolveServerOptions({ host }).insecure).toBe(false);
  });

  it('names a non-boolean insecure', () => {
    expect(() => resolveServerOptions({ insecure: 'yes' as unknown as boolean })).toThrow('options.insecure must be a boolean, got "yes"');
  });

  it('isLoopbackHost tells loopback bind addresses from the rest', () => {
    expect(['127.0.0.1', 'localhost', '::1', '[::1]'].map(isLoopbackHost)).toEqual([true, true, true, true]);
    expect(['0.0.0.0', '::', '10.0.0.1', 'example.com'].map(isLoopbackHost)).toEqual([false, false, false, false]);
  });
});
