/**
 * `connect()`: a {@link ReactorClient} once its welcome arrived, straight to an instance or
 * through a session router (`options.session`), trying another instance when the one it was
 * given turns out unreachable.
 */
import type { AppTypes, UntypedApp } from './app-types.js';
import type { ConnectOptions } from './client-types.js';
import { ReactorClient } from './client.js';
import { SessionRouteError } from './base/errors.js';
import { HttpErrorCode } from './base/protocol.js';
import { requestSession } from './session-route.js';
import { WebRtcFailedError, WebRtcLink } from './rtc/rtc-link.js';

/**
 * Opens the WebRTC link `options.transport` asks for: `webrtc` fails without it, `auto` keeps
 * the WebSocket (WebCodecs or JPEG, as the caller selected) when it does not connect in time.
 * @throws {WebRtcFailedError} `webrtc_failed` with `transport: 'webrtc'` when WebRTC did not connect (the client is closed).
 */
async function withTransport<T extends AppTypes>(client: ReactorClient<T>, options: ConnectOptions): Promise<ReactorClient<T>> {
  const transport = options.transport ?? 'websocket';
  if (transport === 'websocket') return client;
  const link = WebRtcLink.start(client as unknown as ReactorClient, options.webrtc);
  client.rtc = link;
  try {
    await link.ready;
  } catch (err) {
    if (transport === 'webrtc') {
      client.close();
      throw err instanceof WebRtcFailedError ? err : new WebRtcFailedError((err as Error).message);
    }
    // auto: the WebSocket carries the media, as without a transport option; `client.rtc.reason` says why.
  }
  return client;
}

/**
 * Connects to a Reactor server and resolves once the welcome message has arrived.
 *
 * @param url The server's base URL (`http://127.0.0.1:8080`) or its WebSocket URL (`ws://127.0.0.1:8080/ws`);
 *   with `options.session`, the session router's URL.
 * @throws {ConnectionError} `connection_failed` when the socket cannot be opened or is refused
 *   (wrong token: the server answers 401; disallowed origin: 403), or the router cannot be reached.
 * @throws {SessionRouteError} with `options.session`: the router's refusal, `no_free_instance`
 *   (429, `retryAfterMs`) or `unknown_session` (404), ...
 * @throws {ProtocolMismatchError} when the server speaks another protocol version.
 * @example
 * const client = await connect('http://127.0.0.1:8080', { WebSocket });
 * await client.send('set_prompt', { prompt: 'A beach at dusk.' });
 * // through a session router: a new session, then a second viewer joins it
 * const host = await connect('https://play.example.com', { session: 'new', WebSocket });
 * const guest = await connect('https://play.example.com', { session: host.route!.sessionId, WebSocket });
 */
export async function connect<T extends AppTypes = UntypedApp>(url: string, options: ConnectOptions = {}): Promise<ReactorClient<T>> {
  if (options.session === undefined) {
    const client = new ReactorClient<T>(url, options);
    const release = client.holdEarlyMessages();
    try {
      await client.ready;
      return await withTransport(client, options);
    } finally {
      release();
    }
  }
  for (let attempt = 1; ; attempt++) {
    const route = await requestSession(url, {
      session: options.session,
      ...(options.token !== undefined ? { token: options.token } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
      ...(options.allocationRetry ? { allocationRetry: options.allocationRetry } : {}),
      ...(options.waitS !== undefined ? { waitS: options.waitS } : {}),
      ...(options.onQueue ? { onQueue: options.onQueue } : {}),
      ...(options.role ? { role: options.role } : {}),
    });
    // A router that mints instance tokens: the instance takes that token, never the router's key.
    // Through a router, reconnecting is bounded: a session whose instance is gone is lost, and the router says so.
    const routed: ConnectOptions = { ...options, reconnect: options.reconnect ?? { maxAttempts: ROUTED_RECONNECT_ATTEMPTS } };
    const client = new ReactorClient<T>(route.url, route.token !== undefined ? { ...routed, token: route.token } : routed);
    client.route = route;
    const release = client.holdEarlyMessages();
    try {
      await client.ready;
      return await withTransport(client, options);
    } catch (err) {
      client.close();
      const code = (err as { code?: string }).code;
      if (code !== HttpErrorCode.InstanceUnreachable && code !== HttpErrorCode.UnknownInstance) throw err;
      // The instance died between the router's answer and the socket: a new session asks for another one;
      // a joiner's session is lost with its instance.
      if (options.session !== 'new' || attempt >= NEW_INSTANCE_ATTEMPTS) {
        throw new SessionRouteError(
          code,
          options.session === 'new'
            ? `${attempt} instances in a row were unreachable: ${(err as Error).message}`
            : `session ${options.session} is lost: ${(err as Error).message}; start a new one with session: 'new'`,
          502,
          undefined,
        );
      }
    } finally {
      release();
    }
  }
}

/** Instances `connect(router, { session: 'new' })` tries when the one it was given turns out unreachable. */
const NEW_INSTANCE_ATTEMPTS = 3;
/**
 * Reconnect attempts in a row of a client connected through a session router (default of
 * `reconnect.maxAttempts` there): with the default back-off about 20 s. A router's answer that
 * the instance is gone (4404/4502) ends the client at once; this bounds the rest (the router
 * itself unreachable).
 */
const ROUTED_RECONNECT_ATTEMPTS = 6;
