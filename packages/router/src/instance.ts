/** A GameServer as the router needs it, read from its Kubernetes object. */

/** The label Agones puts on every GameServer of a fleet. */
export const FLEET_LABEL = 'agones.dev/fleet';
/**
 * The label that names the session an instance holds. The router sets it in the allocation;
 * an instance allocated without the router sets the same one through the Agones SDK
 * (`SetLabel('reactor-session', id)`: Agones prefixes SDK labels with `agones.dev/sdk-`).
 * The id is the one the instance's session carries too (`session.sessionId` of the client).
 */
export const SESSION_LABEL = 'agones.dev/sdk-reactor-session';
/**
 * The label a draining instance sets through the SDK (`SetLabel('reactor-draining', deadline)`)
 * the moment it gets SIGTERM: the router's allocations exclude it (`DoesNotExist`), so a pod
 * being deleted, evicted or drained is never handed to a new user.
 */
export const DRAINING_LABEL = 'agones.dev/sdk-reactor-draining';
/** The annotation `DELETE /sessions/{id}` puts on the GameServer: the instance ends that session and goes back to Ready. */
export const RELEASE_ANNOTATION = 'reactor.dev/release-session';
/**
 * The annotation a router puts on a draining instance's GameServer before it moves its session
 * (value: `<router id> <Unix ms>`), with the object's `resourceVersion` as a precondition: of
 * several routers that see the same drain, exactly one claims the move; the others leave it.
 */
export const MOVE_CLAIM_ANNOTATION = 'reactor.dev/move-claim';
/** How long a claim holds, ms: a router that claimed a move and died frees it after this. */
export const MOVE_CLAIM_TTL_MS = 60_000;
/** The annotation the moving router puts on the old instance once the session is on the new one (value: its name): every router closes its relayed sockets there with 4307. */
export const MOVED_TO_ANNOTATION = 'reactor.dev/moved-to';
/** The annotation the router's `DELETE /instances/{name}` puts on a GameServer (value: when, ISO 8601): the instance drains as on SIGTERM. */
export const DRAIN_ANNOTATION = 'reactor.dev/drain';
/** A session id is a Kubernetes label value: 1-63 characters, alphanumerics, `-`, `_`, `.`, alphanumeric at both ends. */
export const SESSION_ID_PATTERN = /^[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;

/** One GameServer as the router needs it. */
export interface Instance {
  /** The GameServer's name (also the `/s/{instance}` path segment). */
  name: string;
  /** `status.state`: `Ready`, `Allocated`, `Shutdown`, ... */
  state: string;
  /** The pod's address and the instance's port (the GameServer's first port). */
  address: string;
  port: number;
  /** The session it holds (its {@link SESSION_LABEL}), if any. */
  sessionId: string | undefined;
  /** It carries {@link DRAINING_LABEL}: it is shutting down and takes no new session. */
  draining?: boolean;
  /** Its session was moved to the instance of this name ({@link MOVED_TO_ANNOTATION}). */
  movedTo?: string;
}

/** The parts of a GameServer object the router reads. */
export interface GameServerObject {
  metadata?: { name?: string; labels?: Record<string, string>; annotations?: Record<string, string>; resourceVersion?: string };
  status?: { state?: string; address?: string; ports?: Array<{ name?: string; port?: number }> };
}

export function toInstance(obj: GameServerObject): Instance | undefined {
  const name = obj.metadata?.name;
  if (!name) return undefined;
  const labels = obj.metadata?.labels ?? {};
  return {
    name,
    state: obj.status?.state ?? 'Unknown',
    address: obj.status?.address ?? '',
    port: firstPort(obj.status?.ports),
    sessionId: labels[SESSION_LABEL] || undefined,
    draining: labels[DRAINING_LABEL] !== undefined,
    ...(obj.metadata?.annotations?.[MOVED_TO_ANNOTATION] ? { movedTo: obj.metadata.annotations[MOVED_TO_ANNOTATION] } : {}),
  };
}

/** The GameServer's port named `default` (the Agones default name), else its first. */
export function firstPort(ports: Array<{ name?: string; port?: number }> = []): number {
  return (ports.find((p) => p.name === 'default') ?? ports[0])?.port ?? 0;
}
