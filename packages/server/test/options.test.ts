import { describe, expect, it } from 'vitest';
import { installShutdownHandlers, resolveServerOptions } from '../src/index.js';

describe('resolveServerOptions', () => {
  it('applies the documented defaults', () => {
    const o = resolveServerOptions();
    expect(o).toMatchObject({
      host: '127.0.0.1',
      port: 8080,
      encoding: 'jpeg',
      jpegQuality: 80,
      maxMessageBytes: 65536,
      commandRate: 50,
      commandBurst: 50,
      heartbeatMs: 15000,
      maxQueuedFrames: 2,
      path: '/ws',
    });
    expect(o.token).toBeUndefined();
    expect(resolveServerOptions({ commandRate: 7 }).commandBurst).toBe(7);
  });

  it.each([
    [{ port: 70000 }, 'options.port must be an integer from 0 to 65535, got 70000'],
    [{ jpegQuality: 0 }, 'options.jpegQuality must be an integer from 1 to 100, got 0'],
    [{ commandRate: 0 }, 'options.commandRate must be a positive number, got 0'],
    [{ heartbeatMs: 1.5 }, 'options.heartbeatMs must be an integer from 10 to 3600000, got 1.5'],
    [{ maxQueuedFrames: 0 }, 'options.maxQueuedFrames must be an integer from 1 to 1000, got 0'],
    [{ maxFrameBytes: 10 }, 'options.maxFrameBytes must be an integer from 64 to 1073741824, got 10'],
    [{ path: 'ws' }, 'options.path must start with "/", got "ws"'],
    [{ allowedOrigins: 'https://a.example' as unknown as string[] }, 'options.allowedOrigins must be an array of origins'],
    [{ host: '' }, 'options.host must be a non-empty string'],
  ])('rejects %j', (opts, message) => {
    expect(() => resolveServerOptions(opts)).toThrow(message);
  });
});

describe('installShutdownHandlers', () => {
  it('closes the server and exits 0 on the signal; a second signal while closing exits 1', async () => {
    let release!: () => void;
    let closes = 0;
    const server = {
      close: () => {
        closes++;
        return new Promise<void>((r) => (release = r));
      },
    };
    const codes: number[] = [];
    const signals: string[] = [];
    const off = installShutdownHandlers(server, { signals: ['SIGUSR2'], exit: (c) => codes.push(c), onSignal: (s) => signals.push(s) });
    try {
      process.kill(process.pid, 'SIGUSR2');
      await expect.poll(() => closes).toBe(1);
      process.kill(process.pid, 'SIGUSR2');
      await expect.poll(() => codes).toEqual([1]);
      release();
      await expect.poll(() => codes).toEqual([1, 0]);
      expect(signals).toEqual(['SIGUSR2']);
    } finally {
      off();
    }
  });

  it('exits 1 when closing fails', async () => {
    const codes: number[] = [];
    const off = installShutdownHandlers({ close: () => Promise.reject(new Error('stuck')) }, { signals: ['SIGUSR2'], exit: (c) => codes.push(c) });
    const origError = console.error;
    console.error = () => undefined;
    try {
      process.kill(process.pid, 'SIGUSR2');
      await expect.poll(() => codes).toEqual([1]);
    } finally {
      console.error = origError;
      off();
    }
  });
});
