/**
 * `server.webrtc` as `ServerOptions.webrtc`, with the `REACTOR_WEBRTC_*` environment applied
 * over it (the environment wins, as `REACTOR_TOKEN` and `REACTOR_AUTH_*` do): a pod sets its node
 * address and port range from its spec without editing reactor.yaml.
 */
import type { IceServerOptions, WebRtcOptions } from '@reactor/server';
import { ReactorError } from '@reactor/runtime';
import { CliErrorCode } from './errors.js';
import type { IceServerSection, WebRtcSection } from './manifest-sections.js';

function bad(name: string, value: string, want: string): ReactorError {
  return new ReactorError(CliErrorCode.CliUsage, `${name}=${JSON.stringify(value.slice(0, 80))} is not ${want}; unset it or fix it`);
}

/**
 * The WebRTC options of `server.webrtc` and the environment (undefined when neither says anything).
 * @throws ReactorError `cli_usage` naming a `REACTOR_WEBRTC_*` variable that cannot be read.
 */
export function webRtcOptions(w: WebRtcSection | undefined, env: NodeJS.ProcessEnv = process.env): WebRtcOptions | undefined {
  const o: WebRtcOptions = {};
  if (w?.enabled !== undefined) o.enabled = w.enabled;
  const servers = (list: IceServerSection[]): IceServerOptions[] =>
    list.map((s) => ({
      urls: s.urls,
      ...(s.username !== undefined && { username: s.username }),
      ...(s.credential !== undefined && { credential: s.credential }),
    }));
  if (w?.ice_servers !== undefined) o.iceServers = servers(w.ice_servers);
  if (w?.client_ice_servers !== undefined) o.clientIceServers = servers(w.client_ice_servers);
  if (w?.turn_secret !== undefined) o.turnSecret = w.turn_secret;
  if (w?.turn_credential_ttl_s !== undefined) o.turnCredentialTtlS = w.turn_credential_ttl_s;
  if (w?.udp_port_range !== undefined) o.udpPortRange = w.udp_port_range;
  if (w?.port !== undefined) o.port = w.port;
  if (w?.advertise_address !== undefined) o.advertiseAddress = w.advertise_address;
  if (w?.ice_transport_policy !== undefined) o.iceTransportPolicy = w.ice_transport_policy;
  if (w?.connect_timeout_ms !== undefined) o.connectTimeoutMs = w.connect_timeout_ms;

  const enabled = env['REACTOR_WEBRTC_ENABLED'];
  if (enabled !== undefined && enabled !== '') {
    if (!/^(1|0|true|false)$/i.test(enabled)) throw bad('REACTOR_WEBRTC_ENABLED', enabled, '1, 0, true or false');
    o.enabled = /^(1|true)$/i.test(enabled);
  }
  for (const [name, key] of [
    ['REACTOR_WEBRTC_ICE_SERVERS', 'iceServers'],
    ['REACTOR_WEBRTC_CLIENT_ICE_SERVERS', 'clientIceServers'],
  ] as const) {
    const json = env[name];
    if (json === undefined || json === '') continue;
    try {
      o[key] = JSON.parse(json) as IceServerOptions[];
    } catch {
      throw bad(name, json, 'JSON such as [{"urls":"turn:turn.example.com:3478","username":"u","credential":"p"}]');
    }
  }
  const secret = env['REACTOR_WEBRTC_TURN_SECRET'];
  if (secret !== undefined && secret !== '') o.turnSecret = secret;
  const range = env['REACTOR_WEBRTC_UDP_PORT_RANGE'];
  if (range !== undefined && range !== '') {
    const m = /^(\d{1,5})-(\d{1,5})$/.exec(range);
    if (!m) throw bad('REACTOR_WEBRTC_UDP_PORT_RANGE', range, 'a range such as 40000-40100');
    o.udpPortRange = [Number(m[1]), Number(m[2])];
    delete o.port;
  }
  const port = env['REACTOR_WEBRTC_PORT'];
  if (port !== undefined && port !== '') {
    if (!/^\d{1,5}$/.test(port)) throw bad('REACTOR_WEBRTC_PORT', port, 'a UDP port number');
    o.port = Number(port);
    delete o.udpPortRange;
  }
  const advertise = env['REACTOR_WEBRTC_ADVERTISE_ADDRESS'];
  if (advertise !== undefined && advertise !== '') o.advertiseAddress = advertise;
  const policy = env['REACTOR_WEBRTC_ICE_TRANSPORT_POLICY'];
  if (policy !== undefined && policy !== '') {
    if (policy !== 'all' && policy !== 'relay') throw bad('REACTOR_WEBRTC_ICE_TRANSPORT_POLICY', policy, '"all" or "relay"');
    o.iceTransportPolicy = policy;
  }
  return Object.keys(o).length === 0 ? undefined : o;
}
