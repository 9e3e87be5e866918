// Server entry (HTTP + WebSocket): see docs/protocol.md and docs/viewer.md.
export { ReactorServer, serveHost, CLOSE_GRACE_MS } from './reactor-server.js';
export type { ServableHost, StepSample, HealthReport } from './reactor-server.js';
export { resolveServerOptions, LOOPBACK_HOSTS, isLoopbackHost } from './options.js';
export type { ServerOptions, ServerLogger, ResolvedServerOptions } from './options.js';
export { ServerMetrics } from './metrics.js';
export type { DropReason } from './metrics.js';
export type { ConnectionInfo } from './connection.js';
export { MAX_FRAMES_IN_FLIGHT, MAX_COMMAND_ID_LENGTH, MAX_PENDING_COMMANDS } from './connection.js';
export { installShutdownHandlers } from './shutdown.js';
export type { ShutdownOptions } from './shutdown.js';
export { serve } from './serve.js';
export type { ServeOptions } from './serve.js';
