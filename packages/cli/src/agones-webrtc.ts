/**
 * `reactor run --agones`: where WebRTC media is reachable from outside the cluster. The chart's
 * `webrtc.enabled` gives the GameServer a UDP port named `webrtc` with `portPolicy: Passthrough`
 * (the container port is the host port Agones picked); this reads that port and the node's
 * address (`status.address`) from the SDK sidecar before the server starts, and makes them
 * `server.webrtc.port` and `advertiseAddress`. What the manifest or the environment set itself
 * wins; a GameServer without the port keeps the defaults (viewers then need TURN or the
 * WebSocket), and so does a sidecar that does not answer: the instance serves either way.
 */
import { isIP } from 'node:net';
import type { Logger } from '@reactor/log';
import type { ServerOptions } from '@reactor/server';

type WebRtc = NonNullable<ServerOptions['webrtc']>;

/** Reads the GameServer (default: `@reactor/agones`' `gameServerEndpoint`, imported on use). */
export type EndpointReader = () => Promise<{ address: string; port: number | undefined; ports: Record<string, number> }>;

const defaultReader: EndpointReader = async () => {
  const { gameServerEndpoint } = await import('@reactor/agones');
  return gameServerEndpoint({ timeoutMs: 10_000 });
};

/**
 * The UDP port Agones gave, as options werift takes: it refuses a one-port range ([p, p], which
 * is what `port: p` becomes: "should not be same value" on the first offer), and tries a range's
 * ports from its first up, so [p, p + 1] binds p while p is free (the first WebRTC viewer); a
 * second concurrent viewer gets p + 1, which the node does not forward, and falls back to TURN
 * or the WebSocket, as it would with one port.
 */
function onePort(p: number): Pick<WebRtc, 'port' | 'udpPortRange'> {
  return p < 65535 ? { udpPortRange: [p, p + 1] } : { port: p };
}

/** `server.webrtc` with the GameServer's `webrtc` port and node address filled in where it leaves them open. */
export async function agonesWebRtc(webrtc: WebRtc | undefined, logger: Logger, read: EndpointReader = defaultReader): Promise<WebRtc | undefined> {
  if (webrtc?.enabled === false) return webrtc;
  if (webrtc?.port !== undefined || webrtc?.udpPortRange !== undefined || webrtc?.advertiseAddress !== undefined) {
    logger.info('WebRTC: server.webrtc sets its own port or address; the GameServer\'s "webrtc" port is not used');
    return webrtc;
  }
  let e: Awaited<ReturnType<EndpointReader>>;
  try {
    e = await read();
  } catch (err) {
    logger.warn(`WebRTC: ${(err as Error).message}; serving WebRTC on ephemeral ports, which viewers outside the cluster reach only through TURN`);
    return webrtc;
  }
  if (e.port === undefined) {
    logger.warn(
      `WebRTC: the GameServer has no port named "webrtc" (it has: ${Object.keys(e.ports).join(', ') || 'none'}); ` +
        "viewers outside the cluster reach WebRTC only through TURN (server.webrtc.iceServers), else they play over the WebSocket. The chart's webrtc.enabled adds the port",
    );
    return webrtc;
  }
  if (isIP(e.address) === 0) {
    logger.warn(
      `WebRTC: the GameServer's address ${JSON.stringify(e.address)} is not an IP address (ICE candidates need one); media on UDP port ${e.port} with this host's own addresses`,
    );
    return { ...webrtc, ...onePort(e.port) };
  }
  logger.info(`WebRTC: media on ${e.address}:${e.port} (UDP; the GameServer's "webrtc" port on its node)`);
  return { ...webrtc, ...onePort(e.port), advertiseAddress: e.address };
}
