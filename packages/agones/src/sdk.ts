/**
 * The seam between the instance and Agones: the few SDK calls the integration makes
 * ({@link AgonesSdk}), and the adapter over the official `@google-cloud/agones-sdk`
 * ({@link officialAgonesSdk}), which is imported on first use only, so a server that does not
 * run under Agones never loads gRPC.
 */

/** The GameServer as the instance needs to see it. */
export interface GameServerView {
  /** `metadata.name`: the instance's name in the fleet. */
  name: string;
  /** `status.state`: `Scheduled`, `RequestReady`, `Ready`, `Reserved`, `Allocated`, `Shutdown`, `Unhealthy`. */
  state: string;
  /** `metadata.labels` (SDK-set ones carry the `agones.dev/sdk-` prefix). */
  labels: Record<string, string>;
  /** `metadata.annotations` (the session router's release request among them). */
  annotations: Record<string, string>;
  /** `status.address`: the node's address Agones publishes for this server ('' before the pod is scheduled). */
  address: string;
  /** `status.ports`: each of the GameServer's ports by name, the host port Agones gave it. */
  ports: Record<string, number>;
}

/** The SDK calls the integration makes; every promise rejects when the sidecar fails or does not answer. */
export interface AgonesSdk {
  ready(): Promise<void>;
  allocate(): Promise<void>;
  shutdown(): Promise<void>;
  /** One `Health()` ping on the SDK's health stream; rejects once that stream is broken. */
  health(): Promise<void>;
  /** `SetLabel(key, value)`: Agones stores it as `agones.dev/sdk-<key>`. */
  setLabel(key: string, value: string): Promise<void>;
  getGameServer(): Promise<GameServerView>;
  /** Streams the GameServer on every change until `onEnd` (the stream failed); returns nothing to stop: {@link AgonesSdk.close} ends it. */
  watchGameServer(onChange: (gs: GameServerView) => void, onEnd: (err: Error) => void): void;
  /** Ends the streams and the connection. */
  close(): void;
}

/** The official SDK object, as far as the adapter uses it (its `.d.ts` omits `healthStream`). */
interface OfficialSdk {
  ready(): Promise<unknown>;
  allocate(): Promise<unknown>;
  shutdown(): Promise<unknown>;
  health(errorCallback: (error: unknown) => void): void;
  setLabel(key: string, value: string): Promise<unknown>;
  getGameServer(): Promise<OfficialGameServer>;
  watchGameServer(callback: (gs: OfficialGameServer) => void, errorCallback: (error: unknown) => void): void;
  close(): void;
  /** The client stream `health()` writes to, created on its first call. */
  healthStream?: { on(event: 'error' | 'close', listener: (err?: Error) => void): unknown };
}

interface OfficialGameServer {
  objectMeta?: { name?: string; labelsMap?: Array<[string, string]>; annotationsMap?: Array<[string, string]> };
  status?: { state?: string; address?: string; portsList?: Array<{ name?: string; port?: number }> };
}

function view(gs: OfficialGameServer): GameServerView {
  return {
    name: gs.objectMeta?.name ?? '',
    state: gs.status?.state ?? '',
    labels: Object.fromEntries(gs.objectMeta?.labelsMap ?? []),
    annotations: Object.fromEntries(gs.objectMeta?.annotationsMap ?? []),
    address: gs.status?.address ?? '',
    ports: Object.fromEntries((gs.status?.portsList ?? []).filter((p) => p.name && p.port).map((p) => [p.name!, p.port!])),
  };
}

function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

/**
 * An {@link AgonesSdk} over the official `@google-cloud/agones-sdk` (grpc-js), which dials the
 * sidecar at `localhost:$AGONES_SDK_GRPC_PORT` (default 9357). The package is imported here, on
 * first use.
 */
export async function officialAgonesSdk(): Promise<AgonesSdk> {
  const mod = await import('@google-cloud/agones-sdk');
  // The package is CommonJS whose module.exports is the class, while its types declare a default export.
  const exported = mod.default as unknown as (new () => OfficialSdk) | { default: new () => OfficialSdk };
  const Sdk = typeof exported === 'function' ? exported : exported.default;
  const sdk = new Sdk();
  let healthBroken: Error | undefined;
  let watchingHealth = false;
  return {
    ready: async () => void (await sdk.ready()),
    allocate: async () => void (await sdk.allocate()),
    shutdown: async () => void (await sdk.shutdown()),
    health: () =>
      new Promise<void>((resolve, reject) => {
        if (healthBroken) return reject(healthBroken);
        let settled = false;
        sdk.health((error) => {
          settled = true;
          reject(asError(error));
        });
        // The SDK swallows the stream's own failure; listen for it, so the next ping says so.
        const stream = sdk.healthStream;
        if (stream && !watchingHealth) {
          watchingHealth = true;
          stream.on('error', (err) => (healthBroken = asError(err ?? new Error('the health stream failed'))));
          stream.on('close', () => (healthBroken ??= new Error('the health stream closed')));
        }
        // The write is buffered by grpc-js; a broken stream shows on this ping or the next.
        setImmediate(() => {
          if (settled) return;
          if (healthBroken) reject(healthBroken);
          else resolve();
        });
      }),
    setLabel: async (key, value) => void (await sdk.setLabel(key, value)),
    getGameServer: async () => view(await sdk.getGameServer()),
    watchGameServer: (onChange, onEnd) =>
      sdk.watchGameServer(
        (gs) => onChange(view(gs)),
        (err) => onEnd(asError(err)),
      ),
    close: () => sdk.close(),
  };
}
