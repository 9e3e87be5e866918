/**
 * `gameServerEndpoint()` (@reactor/agones) through the official SDK against the fake sidecar
 * (test/fixtures/agones/sidecar.ts, not a real cluster): the node address and the host port of
 * the GameServer's `webrtc` port, as `reactor run --agones` reads them before serving WebRTC; a
 * missing port is reported as missing; no sidecar is a clear error within the timeout.
 */
import { createServer, type AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { gameServerEndpoint } from '@reactor/agones';
import { FakeAgonesCluster } from './fixtures/agones/cluster.js';
import { FakeAgonesSidecar } from './fixtures/agones/sidecar.js';

const cleanups: Array<() => unknown> = [];
const savedPort = process.env['AGONES_SDK_GRPC_PORT'];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  if (savedPort === undefined) delete process.env['AGONES_SDK_GRPC_PORT'];
  else process.env['AGONES_SDK_GRPC_PORT'] = savedPort;
});

async function sidecarFor(ports: Record<string, number>): Promise<FakeAgonesCluster> {
  const cluster = new FakeAgonesCluster();
  cluster.addServer('gs-1', '203.0.113.7', 7000, {}, { ports });
  const sidecar = await FakeAgonesSidecar.start(cluster, 'gs-1');
  cleanups.push(() => sidecar.stop());
  process.env['AGONES_SDK_GRPC_PORT'] = String(sidecar.port);
  return cluster;
}

describe('gameServerEndpoint (official SDK, fake sidecar)', () => {
  it("reads the node address and the webrtc port's host port", async () => {
    await sidecarFor({ webrtc: 7420 });
    const e = await gameServerEndpoint({ timeoutMs: 5000 });
    expect(e).toEqual({ address: '203.0.113.7', port: 7420, ports: { default: 7000, webrtc: 7420 } });
  });

  it('says the port is missing (undefined) and lists the ports there are', async () => {
    await sidecarFor({});
    const e = await gameServerEndpoint({ timeoutMs: 5000 });
    expect(e.port).toBeUndefined();
    expect(e.ports).toEqual({ default: 7000 });
  });

  it('fails with agones_sdk_unreachable and the fix when no sidecar answers', async () => {
    // A port that refuses: a listener opened and closed.
    const srv = createServer();
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const port = (srv.address() as AddressInfo).port;
    await new Promise((r) => srv.close(r));
    process.env['AGONES_SDK_GRPC_PORT'] = String(port);
    const err = await gameServerEndpoint({ timeoutMs: 1500 }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'agones_sdk_unreachable' });
    expect((err as Error).message).toMatch(/cannot read this GameServer's address .* set server\.webrtc\.advertiseAddress/);
  });
});
