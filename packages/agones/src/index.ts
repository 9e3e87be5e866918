/**
 * `@reactor/agones`: runs a Reactor server as an Agones GameServer (`reactor run --agones`):
 * `Ready()` once loaded, health pings while healthy, `Allocate()` and a session label when a
 * session starts, `Ready()` or `Shutdown()` when it ends, `Shutdown()` after the SIGTERM drain.
 * The official `@google-cloud/agones-sdk` (gRPC) is loaded on first use. See docs/scale-out.md.
 */
export { AgonesAgent, startAgones, SESSION_LABEL, DRAINING_LABEL, RELEASE_ANNOTATION, DRAIN_ANNOTATION, TRANSIENT_READINESS_CODES } from './agones-agent.js';
export type { AgonesServer, DrainClose } from './agones-agent.js';
export {
  resolveAgonesOptions,
  DEFAULT_HEALTH_INTERVAL_MS,
  MIN_HEALTH_INTERVAL_MS,
  MAX_HEALTH_INTERVAL_MS,
  DEFAULT_ALLOCATION_TIMEOUT_MS,
  MAX_ALLOCATION_TIMEOUT_MS,
  DEFAULT_CALL_TIMEOUT_MS,
} from './options.js';
export type { AgonesOptions, ResolvedAgonesOptions, SessionEndAction } from './options.js';
export { officialAgonesSdk } from './sdk.js';
export type { AgonesSdk, GameServerView } from './sdk.js';
export { AgonesErrorCode } from './errors.js';
export { gameServerEndpoint, WEBRTC_PORT_NAME } from './endpoint.js';
export type { GameServerEndpoint, EndpointOptions } from './endpoint.js';
