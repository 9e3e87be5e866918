import { createServer, type AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { checkNode, checkPort, checkShm } from '../src/doctor.js';

describe('reactor doctor checks', () => {
  it('checkNode fails below the minimum version and says what to install', () => {
    expect(checkNode('20.20.2').status).toBe('ok');
    expect(checkNode('22.1.0').status).toBe('ok');
    expect(checkNode('20.18.0')).toEqual({ name: 'node', status: 'fail', detail: 'Node 20.18.0 is older than 20.19', fix: 'install Node 20.19 or newer' });
  });

  it('checkShm fails when /dev/shm cannot hold the configured frames, giving both sizes', () => {
    expect(checkShm(1024).status).toBe('ok');
    const c = checkShm(2 ** 60);
    expect(c.status).toBe('fail');
    expect(c.detail).toMatch(/^\/dev\/shm has [\d.]+ MiB free of [\d.]+ MiB; the configured frames need \d+\.\d MiB$/);
    expect(c.fix).toMatch(/--shm-size=/);
    expect(checkShm(1, '/nonexistent-shm').status).toBe('fail');
  });

  it('checkPort fails for a port in use and passes for a free one', async () => {
    const srv = createServer();
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const { port } = srv.address() as AddressInfo;
    try {
      const busy = await checkPort('127.0.0.1', port);
      expect(busy.status).toBe('fail');
      expect(busy.detail).toBe(`127.0.0.1:${port} is not available (EADDRINUSE)`);
    } finally {
      await new Promise((r) => srv.close(r));
    }
    expect((await checkPort('127.0.0.1', port)).status).toBe('ok');
  });
});
