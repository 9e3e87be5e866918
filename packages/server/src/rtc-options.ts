/**
 * `ServerOptions.webrtc` (`server.webrtc` in reactor.yaml): the WebRTC transport's ICE settings.
 * Checked once, when the server is made; an error names the option.
 */

/** A STUN or TURN server, as `RTCIceServer`. */
export interface IceServerOptions {
  urls: string | string[];
  username?: string;
  credential?: string;
}

/** The WebRTC transport (see docs/protocol.md, "WebRTC"). */
export interface WebRtcOptions {
  /** Whether clients may move their media to WebRTC (`rtc_offer`); default true. */
  enabled?: boolean;
  /** STUN/TURN servers the server's ICE agent uses (default none: host candidates only, fine on a LAN or loopback). */
  iceServers?: IceServerOptions[];
  /** UDP ports the peer connections bind, `[min, max]` (each peer connection takes one); default: any free port. */
  udpPortRange?: [number, number];
  /** One fixed UDP port: the server binds it and the next one (`udpPortRange: [port, port + 1]`: werift binds a socket per local address), so one peer connection at a time (werift has no port sharing). */
  port?: number;
  /** An address to advertise as an extra host candidate (a pod's node address, a NAT's public address). */
  advertiseAddress?: string;
  /** `relay`: only TURN relay candidates (for tests and locked-down networks); default `all`. */
  iceTransportPolicy?: 'all' | 'relay';
  /** How long ICE and DTLS may take before `rtc_state failed` (`rtc_ice_timeout`), ms; default 10000. */
  connectTimeoutMs?: number;
}

/** {@link WebRtcOptions} with defaults applied. */
export interface ResolvedWebRtcOptions {
  enabled: boolean;
  iceServers: IceServerOptions[];
  portRange: [number, number] | undefined;
  advertiseAddress: string | undefined;
  iceTransportPolicy: 'all' | 'relay';
  connectTimeoutMs: number;
}

const isPort = (n: unknown): n is number => typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= 65535;

/**
 * Applies the defaults and checks the options.
 * @throws {TypeError | RangeError} naming the option, e.g. `options.webrtc.udpPortRange must be [min, max] ...`.
 */
export function resolveWebRtcOptions(o: WebRtcOptions | undefined): ResolvedWebRtcOptions {
  const w = o ?? {};
  if (typeof w !== 'object' || w === null || Array.isArray(w)) throw new TypeError(`options.webrtc must be an object, got ${JSON.stringify(w)}`);
  if (w.enabled !== undefined && typeof w.enabled !== 'boolean')
    throw new TypeError(`options.webrtc.enabled must be true or false, got ${JSON.stringify(w.enabled)}`);
  const iceServers = w.iceServers ?? [];
  if (!Array.isArray(iceServers))
    throw new TypeError(`options.webrtc.iceServers must be an array of { urls, username?, credential? }, got ${JSON.stringify(iceServers)}`);
  iceServers.forEach((s, i) => {
    const urls = s && typeof s === 'object' ? (Array.isArray(s.urls) ? s.urls : [s.urls]) : [];
    if (urls.length === 0 || urls.some((u) => typeof u !== 'string' || !/^(stun|stuns|turn|turns):/.test(u))) {
      throw new TypeError(`options.webrtc.iceServers[${i}].urls must be stun:, stuns:, turn: or turns: URLs, got ${JSON.stringify(s?.urls)}`);
    }
    for (const k of ['username', 'credential'] as const) {
      if (s[k] !== undefined && typeof s[k] !== 'string') throw new TypeError(`options.webrtc.iceServers[${i}].${k} must be a string`);
    }
    if (urls.some((u) => u.startsWith('turn')) && (s.username === undefined || s.credential === undefined)) {
      throw new TypeError(`options.webrtc.iceServers[${i}] is a TURN server: it needs a username and a credential`);
    }
  });
  if (w.port !== undefined && w.udpPortRange !== undefined) throw new TypeError('options.webrtc takes port or udpPortRange, not both');
  let portRange: [number, number] | undefined;
  if (w.port !== undefined) {
    // werift binds one socket per local address, the advertised one first, and refuses a range of
    // one port: a fixed port takes the next one too (docs/webrtc.md).
    if (!isPort(w.port) || w.port === 65535) {
      throw new RangeError(`options.webrtc.port must be a UDP port from 1 to 65534 (the server binds it and the next one), got ${JSON.stringify(w.port)}`);
    }
    portRange = [w.port, w.port + 1];
  }
  if (w.udpPortRange !== undefined) {
    const r = w.udpPortRange;
    if (!Array.isArray(r) || r.length !== 2 || !isPort(r[0]) || !isPort(r[1]) || r[0] >= r[1]) {
      throw new RangeError(
        `options.webrtc.udpPortRange must be [min, max] with 1 <= min < max <= 65535 (at least two ports: one socket per local address), got ${JSON.stringify(r)}`,
      );
    }
    portRange = [r[0], r[1]];
  }
  if (w.advertiseAddress !== undefined && (typeof w.advertiseAddress !== 'string' || !/^[0-9a-fA-F.:]+$/.test(w.advertiseAddress))) {
    throw new TypeError(`options.webrtc.advertiseAddress must be an IPv4 or IPv6 address, got ${JSON.stringify(w.advertiseAddress)}`);
  }
  const policy = w.iceTransportPolicy ?? 'all';
  if (policy !== 'all' && policy !== 'relay') throw new TypeError(`options.webrtc.iceTransportPolicy must be "all" or "relay", got ${JSON.stringify(policy)}`);
  if (policy === 'relay' && !iceServers.some((s) => (Array.isArray(s.urls) ? s.urls : [s.urls]).some((u) => u.startsWith('turn')))) {
    throw new TypeError('options.webrtc.iceTransportPolicy "relay" needs a TURN server in options.webrtc.iceServers');
  }
  const timeout = w.connectTimeoutMs ?? 10_000;
  if (typeof timeout !== 'number' || !Number.isInteger(timeout) || timeout < 100 || timeout > 120_000) {
    throw new RangeError(`options.webrtc.connectTimeoutMs must be an integer from 100 to 120000, got ${JSON.stringify(timeout)}`);
  }
  return {
    enabled: w.enabled ?? true,
    iceServers: iceServers.map((s) => ({ ...s })),
    portRange,
    advertiseAddress: w.advertiseAddress,
    iceTransportPolicy: policy,
    connectTimeoutMs: timeout,
  };
}
