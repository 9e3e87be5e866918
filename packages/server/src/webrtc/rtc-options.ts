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
  /**
   * STUN/TURN servers the clients get in `welcome.webrtc` (default: {@link iceServers}): set it
   * when clients reach the same TURN by another name (a public hostname) or use other servers.
   */
  clientIceServers?: IceServerOptions[];
  /**
   * coturn's `static-auth-secret` (`use-auth-secret`, the TURN REST API): every TURN server of
   * {@link iceServers} and {@link clientIceServers} written without a username and credential gets
   * time-limited ones minted from it, per client (`<expiry>:<clientId>`) and per server peer
   * connection, instead of a long-term password that every viewer could read.
   */
  turnSecret?: string;
  /** How long a minted TURN credential is valid, seconds (default 86400: longer than a session lasts). */
  turnCredentialTtlS?: number;
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
  /** What `welcome.webrtc.iceServers` is made from (credentials minted per client when {@link turn} is set). */
  clientIceServers: IceServerOptions[];
  /** Minting of TURN credentials (`turnSecret`); undefined: TURN servers carry their own. */
  turn: { secret: string; ttlS: number } | undefined;
  portRange: [number, number] | undefined;
  advertiseAddress: string | undefined;
  iceTransportPolicy: 'all' | 'relay';
  connectTimeoutMs: number;
}

const isPort = (n: unknown): n is number => typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= 65535;

const urlsOf = (s: IceServerOptions): string[] => (Array.isArray(s.urls) ? s.urls : [s.urls]);
/** Whether one of the server's URLs is `turn:` or `turns:`. */
export const isTurn = (s: IceServerOptions): boolean => urlsOf(s).some((u) => u.startsWith('turn'));

/** Checks one list of ICE servers (`name`: its option); a TURN server may leave its credentials to `turnSecret`. */
function checkIceServers(list: unknown, name: string, minted: boolean): IceServerOptions[] {
  if (!Array.isArray(list)) throw new TypeError(`options.webrtc.${name} must be an array of { urls, username?, credential? }, got ${JSON.stringify(list)}`);
  list.forEach((s: IceServerOptions, i) => {
    const urls = s && typeof s === 'object' ? urlsOf(s) : [];
    if (urls.length === 0 || urls.some((u) => typeof u !== 'string' || !/^(stun|stuns|turn|turns):/.test(u))) {
      throw new TypeError(`options.webrtc.${name}[${i}].urls must be stun:, stuns:, turn: or turns: URLs, got ${JSON.stringify(s?.urls)}`);
    }
    for (const k of ['username', 'credential'] as const) {
      if (s[k] !== undefined && typeof s[k] !== 'string') throw new TypeError(`options.webrtc.${name}[${i}].${k} must be a string`);
    }
    if (!isTurn(s)) return;
    if ((s.username === undefined) !== (s.credential === undefined)) {
      throw new TypeError(
        `options.webrtc.${name}[${i}] has a ${s.username === undefined ? 'credential' : 'username'} alone: give both, or neither to mint them from options.webrtc.turnSecret`,
      );
    }
    if (s.username === undefined && !minted) {
      throw new TypeError(
        `options.webrtc.${name}[${i}] is a TURN server: it needs a username and a credential, or options.webrtc.turnSecret (coturn's static-auth-secret) to mint them`,
      );
    }
  });
  return list as IceServerOptions[];
}

/**
 * Applies the defaults and checks the options.
 * @throws {TypeError | RangeError} naming the option, e.g. `options.webrtc.udpPortRange must be [min, max] ...`.
 */
export function resolveWebRtcOptions(o: WebRtcOptions | undefined): ResolvedWebRtcOptions {
  const w = o ?? {};
  if (typeof w !== 'object' || w === null || Array.isArray(w)) throw new TypeError(`options.webrtc must be an object, got ${JSON.stringify(w)}`);
  if (w.enabled !== undefined && typeof w.enabled !== 'boolean')
    throw new TypeError(`options.webrtc.enabled must be true or false, got ${JSON.stringify(w.enabled)}`);
  const secret = w.turnSecret;
  if (secret !== undefined && (typeof secret !== 'string' || secret === '')) {
    throw new TypeError(
      `options.webrtc.turnSecret must be a non-empty string (coturn's static-auth-secret), got ${typeof secret === 'string' ? 'an empty string' : typeof secret}`,
    );
  }
  const iceServers = checkIceServers(w.iceServers ?? [], 'iceServers', secret !== undefined);
  const clientIceServers = w.clientIceServers === undefined ? iceServers : checkIceServers(w.clientIceServers, 'clientIceServers', secret !== undefined);
  const ttlS = w.turnCredentialTtlS ?? 86_400;
  if (typeof ttlS !== 'number' || !Number.isInteger(ttlS) || ttlS < 60 || ttlS > 2_592_000) {
    throw new RangeError(`options.webrtc.turnCredentialTtlS must be an integer from 60 to 2592000 (seconds), got ${JSON.stringify(ttlS)}`);
  }
  if (w.turnCredentialTtlS !== undefined && secret === undefined) {
    throw new TypeError('options.webrtc.turnCredentialTtlS is set without options.webrtc.turnSecret: only minted TURN credentials expire');
  }
  if (secret !== undefined && ![...iceServers, ...clientIceServers].some((s) => isTurn(s) && s.username === undefined)) {
    throw new TypeError(
      'options.webrtc.turnSecret is set but no TURN server takes it: write a TURN server without username and credential in options.webrtc.iceServers or options.webrtc.clientIceServers',
    );
  }
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
  if (policy === 'relay' && !iceServers.some(isTurn)) {
    throw new TypeError('options.webrtc.iceTransportPolicy "relay" needs a TURN server in options.webrtc.iceServers');
  }
  if (policy === 'relay' && !clientIceServers.some(isTurn)) {
    throw new TypeError('options.webrtc.iceTransportPolicy "relay" needs a TURN server in options.webrtc.clientIceServers too: clients get the same policy');
  }
  const timeout = w.connectTimeoutMs ?? 10_000;
  if (typeof timeout !== 'number' || !Number.isInteger(timeout) || timeout < 100 || timeout > 120_000) {
    throw new RangeError(`options.webrtc.connectTimeoutMs must be an integer from 100 to 120000, got ${JSON.stringify(timeout)}`);
  }
  return {
    enabled: w.enabled ?? true,
    iceServers: iceServers.map((s) => ({ ...s })),
    clientIceServers: clientIceServers.map((s) => ({ ...s })),
    turn: secret === undefined ? undefined : { secret, ttlS },
    portRange,
    advertiseAddress: w.advertiseAddress,
    iceTransportPolicy: policy,
    connectTimeoutMs: timeout,
  };
}
