/**
 * The fake Agones SDK sidecar (test/fixtures/agones/sidecar.ts) against the official Node SDK
 * (`@google-cloud/agones-sdk`), in this process: each SDK call changes the GameServer in the
 * shared `FakeAgonesCluster` as Agones would. This exercises the fake, not a real cluster; the
 * instance side (`reactor run --agones`) is tested in agones-instance.test.ts.
 */
import sdkModule from '@google-cloud/agones-sdk';
import { afterEach, describe, expect, it } from 'vitest';
import { FakeAgonesCluster, SDK_LABEL_PREFIX } from './fixtures/agones/cluster.js';
import { AGONES_REQUEST_RATE_LIMIT_MS, FakeAgonesSidecar } from './fixtures/agones/sidecar.js';
import { until } from '@reactor/test-kit';

// The package's types declare a default export; at run time (CommonJS) the class is the module itself.
const AgonesSDK = sdkModule as unknown as typeof sdkModule.default;
type AgonesSDK = InstanceType<typeof AgonesSDK>;

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function setup(requestRateLimitMs = 0): Promise<{ cluster: FakeAgonesCluster; sidecar: FakeAgonesSidecar; sdk: AgonesSDK }> {
  const cluster = new FakeAgonesCluster({ healthPeriodMs: 200, healthFailureThreshold: 3, healthInitialDelayMs: 200 });
  cluster.addServer('gs-1', '10.0.0.1', 7000);
  // These tests pin the fake's state machine call by call: writes at once (its rate limit has its own test below).
  const sidecar = await FakeAgonesSidecar.start(cluster, 'gs-1', { requestRateLimitMs });
  cleanups.push(() => sidecar.stop());
  process.env['AGONES_SDK_GRPC_PORT'] = String(sidecar.port);
  const sdk = new AgonesSDK();
  cleanups.push(() => sdk.close());
  return { cluster, sidecar, sdk };
}

describe('FakeAgonesSidecar (a fake sidecar driven by the official SDK, not a real cluster)', () => {
  it("writes state and labels behind Agones' 500 ms request-rate-limit by default: the call answers at once, the GameServer changes later", async () => {
    const { cluster, sidecar, sdk } = await setup(AGONES_REQUEST_RATE_LIMIT_MS);
    await sdk.ready();
    const t = Date.now();
    expect(cluster.get('gs-1').state).toBe('Scheduled');
    await until(() => cluster.get('gs-1').state === 'Ready', 'Ready', 5000, 10);
    expect(Date.now() - t).toBeGreaterThanOrEqual(AGONES_REQUEST_RATE_LIMIT_MS - 50);
    // Labels set while a write waits join it.
    await sdk.setLabel('reactor-draining', '1');
    await sdk.setLabel('other', 'x');
    expect(cluster.get('gs-1').labels['agones.dev/sdk-reactor-draining']).toBeUndefined();
    await sidecar.settled();
    expect(cluster.get('gs-1').labels).toMatchObject({ 'agones.dev/sdk-reactor-draining': '1', 'agones.dev/sdk-other': 'x' });
  });

  it('moves the GameServer Ready -> Allocated -> Ready -> Shutdown and answers GetGameServer with it', async () => {
    const { cluster, sidecar, sdk } = await setup();
    expect(cluster.get('gs-1').state).toBe('Scheduled');
    await sdk.ready();
    expect(cluster.get('gs-1').state).toBe('Ready');
    await sdk.allocate();
    expect(cluster.get('gs-1').state).toBe('Allocated');
    const gs = await sdk.getGameServer();
    expect(gs.objectMeta.name).toBe('gs-1');
    expect(gs.status.state).toBe('Allocated');
    expect(gs.status.address).toBe('10.0.0.1');
    expect(gs.status.portsList).toEqual([{ name: 'default', port: 7000 }]);
    expect(gs.spec.health).toMatchObject({ periodSeconds: 1, failureThreshold: 3 });
    await sdk.ready();
    expect(cluster.get('gs-1').state).toBe('Ready');
    await sdk.shutdown();
    expect(cluster.get('gs-1').state).toBe('Shutdown');
    // Agones never brings a Shutdown server back.
    await sdk.ready();
    expect(cluster.get('gs-1').state).toBe('Shutdown');
    expect(sidecar.calls.map((c) => c.method)).toEqual(['Ready', 'Allocate', 'GetGameServer', 'Ready', 'Shutdown', 'Ready']);
  });

  it('puts SetLabel/SetAnnotation under agones.dev/sdk- and refuses a label value Kubernetes would refuse', async () => {
    const { cluster, sdk } = await setup();
    await sdk.setLabel('session', 'abc-123');
    await sdk.setAnnotation('note', 'any text: at all');
    expect(cluster.get('gs-1').labels[`${SDK_LABEL_PREFIX}session`]).toBe('abc-123');
    expect(cluster.get('gs-1').annotations[`${SDK_LABEL_PREFIX}note`]).toBe('any text: at all');
    await expect(sdk.setLabel('session', 'not valid!')).rejects.toThrow(/invalid label value/);
    const gs = await sdk.getGameServer();
    expect(gs.objectMeta.labelsMap).toContainEqual([`${SDK_LABEL_PREFIX}session`, 'abc-123']);
  });

  it('streams every change to WatchGameServer', async () => {
    const { cluster, sdk } = await setup();
    const seen: string[] = [];
    sdk.watchGameServer(
      (gs) => seen.push(gs.status.state),
      () => undefined,
    );
    await until(() => seen.length === 1, 'the first watch message', 5000, 10);
    await sdk.ready();
    cluster.allocate([{ matchLabels: {} }]);
    await until(() => seen.includes('Allocated'), 'Allocated in the watch stream', 5000, 10);
    expect(seen).toEqual(['Scheduled', 'RequestReady', 'Ready', 'Allocated']);
  });

  it('counts Health messages as pings; the health controller marks the server Unhealthy once they stop', async () => {
    const { cluster, sidecar, sdk } = await setup();
    await sdk.ready();
    const stop = cluster.startHealthChecks();
    cleanups.push(stop);
    for (let i = 0; i < 3; i++) {
      sdk.health(() => undefined);
      await until(() => sidecar.pings.length === i + 1, `ping ${i + 1}`, 5000, 10);
    }
    expect(cluster.get('gs-1').lastHealthAt).toBe(sidecar.pings[2]);
    await until(() => cluster.get('gs-1').state === 'Unhealthy', 'Unhealthy after the pings stopped', 5000, 10);
    expect(Date.now() - sidecar.pings[2]!).toBeGreaterThanOrEqual(600);
  });

  it('Reserve(s) holds the server Reserved, then returns it to Ready', async () => {
    const { cluster, sdk } = await setup();
    await sdk.ready();
    await sdk.reserve(1);
    expect(cluster.get('gs-1').state).toBe('Reserved');
    await until(() => cluster.get('gs-1').state === 'Ready', 'Ready after the reservation', 10_000, 10);
  });

  it('fails calls with UNAVAILABLE once stopped, and serves again after restart()', async () => {
    const { cluster, sidecar, sdk } = await setup();
    await sdk.ready();
    await sidecar.stop();
    await expect(sdk.allocate()).rejects.toMatchObject({ code: 14 });
    await sidecar.restart();
    // grpc-js reconnects by itself, with back-off; connect() waits for the channel to be up.
    await sdk.connect();
    await sdk.allocate();
    expect(cluster.get('gs-1').state).toBe('Allocated');
  });
});
