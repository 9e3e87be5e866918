/**
 * Where viewers reach this GameServer from outside the cluster: the node's address Agones
 * publishes (`status.address`) and the host port it gave one of the GameServer's ports
 * (`status.ports[]`, by name). `reactor run --agones` reads it before serving, so the WebRTC
 * transport binds that port (the chart declares it `portPolicy: Passthrough`: the container
 * port is the host port) and advertises that address in its ICE candidates.
 */
import { ReactorError } from '@reactor/runtime';
import { AgonesErrorCode } from './errors.js';
import { officialAgonesSdk, type AgonesSdk } from './sdk.js';

/** The GameServer port the chart declares for WebRTC media (UDP, Passthrough). */
export const WEBRTC_PORT_NAME = 'webrtc';

export interface GameServerEndpoint {
  /** `status.address`: the node's address (Agones prefers its external IP). */
  address: string;
  /** The host port of the named port, or undefined when the GameServer has none by that name. */
  port: number | undefined;
  /** Every port by name, for the message when the one asked for is missing. */
  ports: Record<string, number>;
}

export interface EndpointOptions {
  /** The port to look up (default {@link WEBRTC_PORT_NAME}). */
  portName?: string;
  /** How long to wait for the sidecar and for Agones to publish the address, ms (default 30000). */
  timeoutMs?: number;
  /** Makes the SDK client (default: the official SDK). */
  sdk?: () => AgonesSdk | Promise<AgonesSdk>;
}

/**
 * Asks the SDK sidecar for the GameServer until it has an address (Agones sets it once the pod is
 * scheduled, which is before the container starts, so normally at once).
 * @throws ReactorError `agones_sdk_unreachable` when the sidecar does not answer or no address
 *   is published within `timeoutMs`
 */
export async function gameServerEndpoint(options: EndpointOptions = {}): Promise<GameServerEndpoint> {
  const portName = options.portName ?? WEBRTC_PORT_NAME;
  const deadline = performance.now() + (options.timeoutMs ?? 30_000);
  const sdk = await (options.sdk ?? officialAgonesSdk)();
  let last: unknown;
  try {
    for (;;) {
      try {
        const gs = await withTimeout(sdk.getGameServer(), Math.max(1, deadline - performance.now()));
        if (gs.address !== '') return { address: gs.address, port: gs.ports[portName], ports: gs.ports };
        last = new Error(`the GameServer (state ${gs.state || 'unknown'}) has no status.address yet`);
      } catch (err) {
        last = err;
      }
      if (performance.now() >= deadline) break;
      await new Promise((r) => setTimeout(r, 250));
    }
  } finally {
    sdk.close();
  }
  throw new ReactorError(
    AgonesErrorCode.SdkUnreachable,
    `cannot read this GameServer's address from the Agones SDK sidecar in ${Math.round((options.timeoutMs ?? 30_000) / 1000)} s (${(last as Error)?.message ?? 'no answer'}): ` +
      'run under Agones (the chart), or set server.webrtc.advertiseAddress and its port yourself',
    { cause: last },
  );
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no answer in ${Math.round(ms)} ms`)), ms);
    p.then(
      (v) => (clearTimeout(t), resolve(v)),
      (e: unknown) => (clearTimeout(t), reject(e instanceof Error ? e : new Error(String(e)))),
    );
  });
}
