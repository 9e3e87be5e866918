/**
 * `@reactor/router`: the stateless session router of a Reactor fleet on Kubernetes with Agones
 * (`reactor route`): `POST /sessions` allocates an instance, `GET /sessions/{id}` finds the one
 * that holds a session, `/s/{instance}/...` relays to it. See docs/scale-out.md.
 */
export { SessionRouter, route, INSTANCE_PATH_PREFIX, SESSION_ID_HEADER } from './session-router.js';
export type { SessionAnswer, QueueLine } from './session-router.js';
export { QUEUE_HEARTBEAT_MS } from './session-router.js';
export { SessionQueue, DEFAULT_QUEUE_MAX_LENGTH, DEFAULT_QUEUE_MAX_WAIT_MS, DEFAULT_QUEUE_POLL_MS } from './session-queue.js';
export type { QueueOutcome, QueuePosition, QueueTicket } from './session-queue.js';
export { resolveRouterOptions, DEFAULT_ROUTER_PORT, DEFAULT_INSTANCE_TOKEN_TTL_S } from './options.js';
export type { RouterOptions, ResolvedRouterOptions } from './options.js';
export { AgonesRegistry, FLEET_LABEL, SESSION_LABEL, SESSION_ID_PATTERN, DRAINING_LABEL, RELEASE_ANNOTATION } from './registry.js';
export { GameServerCache } from './gameserver-cache.js';
export { RouterCloseCode } from './ws-relay.js';
export type { Instance, RegistryOptions, AllocationOutcome } from './registry.js';
export { loadKubeConfig } from './kube-config.js';
export type { KubeConfigSource, LoadedKubeConfig } from './kube-config.js';
export { RouterMetrics } from './metrics.js';
export { RouterError, RouterErrorCode } from './errors.js';
