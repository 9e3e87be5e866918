/**
 * The router's one registry: Agones objects in the Kubernetes API. An allocation is a
 * `GameServerAllocation` (Agones moves one Ready GameServer of the fleet to Allocated,
 * atomically, and labels it with the session id); a session is found again as the Allocated
 * GameServer carrying that label. The router keeps no state of its own.
 */
import { ApiException, CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node';
import type { Logger } from '@reactor/log';
import { RouterError, RouterErrorCode } from './errors.js';

/** The label Agones puts on every GameServer of a fleet. */
export const FLEET_LABEL = 'agones.dev/fleet';
/**
 * The label that names the session an instance holds. The router sets it in the allocation;
 * an instance allocated without the router sets the same one through the Agones SDK
 * (`SetLabel('reactor-session', id)`: Agones prefixes SDK labels with `agones.dev/sdk-`).
 */
export const SESSION_LABEL = 'agones.dev/sdk-reactor-session';
/** A session id is a Kubernetes label value: 1-63 characters, alphanumerics, `-`, `_`, `.`, alphanumeric at both ends. */
export const SESSION_ID_PATTERN = /^[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;

const AGONES_GROUP = 'agones.dev';
const ALLOCATION_GROUP = 'allocation.agones.dev';
const VERSION = 'v1';

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
}

/** Options of {@link AgonesRegistry}. */
export interface RegistryOptions {
  namespace: string;
  fleet: string;
  /** Allocation attempts after a 409 Conflict (or an allocation in `Contention`) before giving up. */
  conflictRetries: number;
  /** First back-off after a conflict, ms (doubled each time, with jitter, at most 250 ms). */
  conflictBackoffMs: number;
  /** Called on every conflict met (retried or not), for the metrics. */
  onConflict?: () => void;
  logger: Logger;
}

/** What one allocation came to. */
export type AllocationOutcome = { allocated: true; instance: Instance; conflicts: number } | { allocated: false; conflicts: number };

interface GameServerObject {
  metadata?: { name?: string; labels?: Record<string, string> };
  status?: { state?: string; address?: string; ports?: Array<{ name?: string; port?: number }> };
}

/** The Kubernetes calls of the router, with their failures mapped to {@link RouterError}s. */
export class AgonesRegistry {
  readonly #api: CustomObjectsApi;
  readonly #o: RegistryOptions;

  constructor(kubeConfig: KubeConfig, options: RegistryOptions) {
    this.#api = kubeConfig.makeApiClient(CustomObjectsApi);
    this.#o = options;
  }

  /**
   * Allocates one Ready GameServer of the fleet to a new session, retrying a 409 Conflict up to
   * `conflictRetries` times.
   * @throws {RouterError} `allocation_conflict` past the retries; `registry_unavailable` when the API fails.
   */
  async allocate(sessionId: string): Promise<AllocationOutcome> {
    const body = {
      apiVersion: `${ALLOCATION_GROUP}/${VERSION}`,
      kind: 'GameServerAllocation',
      spec: {
        selectors: [{ matchLabels: { [FLEET_LABEL]: this.#o.fleet }, gameServerState: 'Ready' }],
        metadata: { labels: { [SESSION_LABEL]: sessionId } },
      },
    };
    for (let attempt = 0; ; attempt++) {
      let conflict: string;
      try {
        const res = (await this.#api.createNamespacedCustomObject({
          group: ALLOCATION_GROUP,
          version: VERSION,
          namespace: this.#o.namespace,
          plural: 'gameserverallocations',
          body,
        })) as { status?: { state?: string; gameServerName?: string; address?: string; ports?: Array<{ name?: string; port?: number }> } };
        const s = res.status ?? {};
        if (s.state === 'Allocated') {
          if (!s.gameServerName || !s.address)
            throw new RouterError(RouterErrorCode.RegistryUnavailable, `the allocation answer names no GameServer or address: ${JSON.stringify(s)}`);
          const instance: Instance = { name: s.gameServerName, state: 'Allocated', address: s.address, port: firstPort(s.ports), sessionId };
          return { allocated: true, instance, conflicts: attempt };
        }
        if (s.state === 'UnAllocated') return { allocated: false, conflicts: attempt };
        if (s.state !== 'Contention')
          throw new RouterError(RouterErrorCode.RegistryUnavailable, `the allocation answered an unknown state ${JSON.stringify(s.state)}`);
        conflict = 'Contention';
      } catch (err) {
        if (!(err instanceof ApiException) || err.code !== 409) throw this.#failure('creating a GameServerAllocation', err);
        conflict = '409 Conflict';
      }
      this.#o.onConflict?.();
      if (attempt >= this.#o.conflictRetries) {
        throw new RouterError(
          RouterErrorCode.AllocationConflict,
          `the allocation met ${conflict} ${attempt + 1} times in a row (fleet "${this.#o.fleet}"); retry shortly`,
        );
      }
      this.#o.logger.debug(`allocation for session ${sessionId} met ${conflict}; retry ${attempt + 1} of ${this.#o.conflictRetries}`);
      const backoff = Math.min(250, this.#o.conflictBackoffMs * 2 ** attempt);
      await new Promise((r) => setTimeout(r, backoff / 2 + Math.random() * (backoff / 2)));
    }
  }

  /**
   * The Allocated GameServer of the fleet that holds a session, or `undefined`.
   * @throws {RouterError} `registry_unavailable`.
   */
  async findSession(sessionId: string): Promise<Instance | undefined> {
    const found = (await this.#list(`${FLEET_LABEL}=${this.#o.fleet},${SESSION_LABEL}=${sessionId}`)).filter((i) => i.state === 'Allocated');
    if (found.length > 1)
      this.#o.logger.warn(`session ${sessionId} is on ${found.length} instances (${found.map((i) => i.name).join(', ')}); routing to ${found[0]!.name}`);
    return found[0];
  }

  /**
   * A GameServer of the fleet by name, or `undefined` when there is none (or it belongs to another fleet).
   * @throws {RouterError} `registry_unavailable`.
   */
  async getInstance(name: string): Promise<Instance | undefined> {
    let obj: GameServerObject;
    try {
      obj = (await this.#api.getNamespacedCustomObject({
        group: AGONES_GROUP,
        version: VERSION,
        namespace: this.#o.namespace,
        plural: 'gameservers',
        name,
      })) as GameServerObject;
    } catch (err) {
      if (err instanceof ApiException && err.code === 404) return undefined;
      throw this.#failure(`reading GameServer ${name}`, err);
    }
    if (obj.metadata?.labels?.[FLEET_LABEL] !== this.#o.fleet) return undefined;
    return toInstance(obj);
  }

  /**
   * One cheap call that proves the API answers and the router may read GameServers (readiness).
   * @throws {RouterError} `registry_unavailable`.
   */
  async check(): Promise<void> {
    try {
      await this.#api.listNamespacedCustomObject({ group: AGONES_GROUP, version: VERSION, namespace: this.#o.namespace, plural: 'gameservers', limit: 1 });
    } catch (err) {
      throw this.#failure('listing GameServers', err);
    }
  }

  async #list(labelSelector: string): Promise<Instance[]> {
    let res: { items?: GameServerObject[] };
    try {
      res = (await this.#api.listNamespacedCustomObject({
        group: AGONES_GROUP,
        version: VERSION,
        namespace: this.#o.namespace,
        plural: 'gameservers',
        labelSelector,
      })) as {
        items?: GameServerObject[];
      };
    } catch (err) {
      throw this.#failure('listing GameServers', err);
    }
    return (res.items ?? []).map(toInstance).filter((i): i is Instance => i !== undefined);
  }

  /** A Kubernetes API failure as a `registry_unavailable` error that says what to check. */
  #failure(what: string, err: unknown): RouterError {
    if (err instanceof RouterError) return err;
    const where = `namespace "${this.#o.namespace}"`;
    if (err instanceof ApiException) {
      const hint =
        err.code === 401 || err.code === 403
          ? `: the router's service account may not do this; grant it get/list on gameservers.agones.dev and create on gameserverallocations.allocation.agones.dev in ${where}`
          : err.code === 404
            ? `: is Agones installed (its CRDs) and the namespace right (${where})?`
            : '';
      return new RouterError(RouterErrorCode.RegistryUnavailable, `${what} failed: the Kubernetes API answered ${err.code}${hint}`, { cause: err });
    }
    return new RouterError(RouterErrorCode.RegistryUnavailable, `${what} failed: cannot reach the Kubernetes API: ${(err as Error)?.message ?? String(err)}`, {
      cause: err,
    });
  }
}

function toInstance(obj: GameServerObject): Instance | undefined {
  const name = obj.metadata?.name;
  if (!name) return undefined;
  return {
    name,
    state: obj.status?.state ?? 'Unknown',
    address: obj.status?.address ?? '',
    port: firstPort(obj.status?.ports),
    sessionId: obj.metadata?.labels?.[SESSION_LABEL],
  };
}

/** The GameServer's port named `default` (the Agones default name), else its first. */
function firstPort(ports: Array<{ name?: string; port?: number }> = []): number {
  return (ports.find((p) => p.name === 'default') ?? ports[0])?.port ?? 0;
}
