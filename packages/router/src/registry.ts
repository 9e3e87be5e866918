/**
 * The router's one registry: Agones objects in the Kubernetes API. An allocation is a
 * `GameServerAllocation` (Agones moves one Ready GameServer of the fleet to Allocated,
 * atomically, and labels it with the session id); a session is found again as the Allocated
 * GameServer carrying that label. Lookups read a {@link GameServerCache} (list + watch) kept
 * from the API, not the API itself; the router keeps no state the API does not hold.
 */
import { ApiException, CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';
import type { Logger } from '@reactor/log';
import { RouterError, RouterErrorCode } from './errors.js';
import { GameServerCache, withTimeout } from './gameserver-cache.js';
import {
  DRAIN_ANNOTATION,
  DRAINING_LABEL,
  FLEET_LABEL,
  MOVE_CLAIM_ANNOTATION,
  MOVE_CLAIM_TTL_MS,
  MOVED_TO_ANNOTATION,
  RELEASE_ANNOTATION,
  SESSION_LABEL,
  firstPort,
  toInstance,
  type GameServerObject,
  type Instance,
} from './instance.js';

export { DRAINING_LABEL, FLEET_LABEL, RELEASE_ANNOTATION, SESSION_ID_PATTERN, SESSION_LABEL } from './instance.js';
export type { Instance } from './instance.js';

const AGONES_GROUP = 'agones.dev';
const ALLOCATION_GROUP = 'allocation.agones.dev';
const VERSION = 'v1';

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
  /** Called on every GameServer state change the cache sees. */
  onStateChange?: (name: string, from: string | undefined, to: string | undefined) => void;
  /** Called when an instance turns draining (its SIGTERM label appeared): the router may move its session. */
  onDraining?: (instance: Instance) => void;
  /** Called when an instance's session was moved off it (by this router or another): its relayed sockets follow. */
  onMoved?: (instance: Instance) => void;
  /** Longest wait for one Kubernetes API call, ms. */
  apiTimeoutMs: number;
  /** A full LIST of the fleet's GameServers this often, ms (the watch keeps the cache current between). */
  resyncMs: number;
  logger: Logger;
}

/** What one allocation came to. */
export type AllocationOutcome = { allocated: true; instance: Instance; conflicts: number } | { allocated: false; conflicts: number };

/** The Kubernetes calls of the router, with their failures mapped to {@link RouterError}s. */
export class AgonesRegistry {
  readonly #api: CustomObjectsApi;
  readonly #o: RegistryOptions;
  /** The fleet's GameServers as last listed and watched. */
  readonly cache: GameServerCache;

  constructor(kubeConfig: KubeConfig, options: RegistryOptions) {
    this.#api = kubeConfig.makeApiClient(CustomObjectsApi);
    this.#o = options;
    this.cache = new GameServerCache(kubeConfig, this.#api, {
      namespace: options.namespace,
      labelSelector: `${FLEET_LABEL}=${options.fleet}`,
      timeoutMs: options.apiTimeoutMs,
      resyncMs: options.resyncMs,
      describe: (what, err) => this.#failure(what, err).message,
      ...(options.onStateChange ? { onStateChange: options.onStateChange } : {}),
      ...(options.onDraining ? { onDraining: options.onDraining } : {}),
      ...(options.onMoved ? { onMoved: options.onMoved } : {}),
      logger: options.logger,
    });
  }

  /** Starts the cache; resolves once it first listed the fleet (it keeps retrying until then). */
  start(): Promise<void> {
    return this.cache.start();
  }

  stop(): void {
    this.cache.stop();
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
        // A draining instance (SIGTERM: pod deleted, evicted, node drained) is still Ready until it shuts down: never hand it out.
        selectors: [
          { matchLabels: { [FLEET_LABEL]: this.#o.fleet }, matchExpressions: [{ key: DRAINING_LABEL, operator: 'DoesNotExist' }], gameServerState: 'Ready' },
        ],
        metadata: { labels: { [SESSION_LABEL]: sessionId } },
      },
    };
    for (let attempt = 0; ; attempt++) {
      let conflict: string;
      try {
        const res = (await withTimeout(
          this.#api.createNamespacedCustomObject({
            group: ALLOCATION_GROUP,
            version: VERSION,
            namespace: this.#o.namespace,
            plural: 'gameserverallocations',
            body,
          }),
          this.#o.apiTimeoutMs,
          'creating a GameServerAllocation',
        )) as { status?: { state?: string; gameServerName?: string; address?: string; ports?: Array<{ name?: string; port?: number }> } };
        const s = res.status ?? {};
        if (s.state === 'Allocated') {
          if (!s.gameServerName || !s.address)
            throw new RouterError(RouterErrorCode.RegistryUnavailable, `the allocation answer names no GameServer or address: ${JSON.stringify(s)}`);
          const instance: Instance = { name: s.gameServerName, state: 'Allocated', address: s.address, port: firstPort(s.ports), sessionId };
          this.cache.learn(instance);
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
   * The Allocated GameServer of the fleet that holds a session, or `undefined`: from the cache
   * (a LIST, with its timeout, only while the cache has not synced yet).
   * @throws {RouterError} `registry_unavailable` when the cache has never synced and the API fails.
   */
  async findSession(sessionId: string): Promise<Instance | undefined> {
    const all = this.cache.synced ? this.cache.list() : await this.#list(`${FLEET_LABEL}=${this.#o.fleet},${SESSION_LABEL}=${sessionId}`);
    // A session being moved off a draining instance is on both for a moment: the one not draining holds it.
    const found = all.filter((i) => i.state === 'Allocated' && i.sessionId === sessionId).sort((a, b) => Number(a.draining) - Number(b.draining));
    if (found.filter((i) => !i.draining).length > 1)
      this.#o.logger.warn(`session ${sessionId} is on ${found.length} instances (${found.map((i) => i.name).join(', ')}); routing to ${found[0]!.name}`);
    return found[0];
  }

  /**
   * A GameServer of the fleet by name, or `undefined` when there is none (or it belongs to
   * another fleet): from the cache; one GET (with its timeout) when the cache does not have it
   * Allocated yet (another router allocated it a moment ago, before the watch told this one).
   * @throws {RouterError} `registry_unavailable`.
   */
  async getInstance(name: string): Promise<Instance | undefined> {
    const cached = this.cache.get(name);
    if (cached && cached.state !== 'Ready') return cached;
    let obj: GameServerObject;
    try {
      obj = await this.#read(name);
    } catch (err) {
      if (err instanceof ApiException && err.code === 404) return undefined;
      throw this.#failure(`reading GameServer ${name}`, err);
    }
    if (obj.metadata?.labels?.[FLEET_LABEL] !== this.#o.fleet) return undefined;
    return toInstance(obj);
  }

  /**
   * Asks the instance holding `sessionId` to end it and go back to Ready: a merge patch of the
   * {@link RELEASE_ANNOTATION} on its GameServer, which the instance sees through the SDK's watch.
   * @returns the instance, or `undefined` when no instance holds the session.
   * @throws {RouterError} `registry_unavailable`.
   */
  async release(sessionId: string, on?: Instance): Promise<Instance | undefined> {
    const instance = on ?? (await this.findSession(sessionId));
    if (!instance) return undefined;
    try {
      await this.#annotate(instance.name, { [RELEASE_ANNOTATION]: sessionId });
    } catch (err) {
      if (err instanceof ApiException && err.code === 404) return undefined;
      throw this.#failure(`patching GameServer ${instance.name}`, err);
    }
    return instance;
  }

  /**
   * Claims the move of `instance`'s session for router `owner` (docs/snapshots.md "Move"): reads
   * its GameServer and, unless another router holds a claim younger than {@link MOVE_CLAIM_TTL_MS},
   * puts {@link MOVE_CLAIM_ANNOTATION} on it with the `resourceVersion` it read as a precondition
   * (Kubernetes answers 409 Conflict when the object changed meanwhile: another router claimed it
   * first). Exactly one of the routers that see a drain gets `claimed`.
   * @returns `claimed`, or `taken` with the claim's holder
   * @throws {RouterError} `registry_unavailable`.
   */
  async claimMove(instance: Instance, owner: string): Promise<{ claimed: true } | { claimed: false; holder: string }> {
    for (let attempt = 0; ; attempt++) {
      let obj: GameServerObject;
      try {
        obj = await this.#read(instance.name);
      } catch (err) {
        throw this.#failure(`reading GameServer ${instance.name}`, err);
      }
      const held = obj.metadata?.annotations?.[MOVE_CLAIM_ANNOTATION];
      if (held !== undefined) {
        const [holder = '?', at = '0'] = held.split(' ');
        if (holder === owner) return { claimed: true };
        if (Date.now() - Number(at) < MOVE_CLAIM_TTL_MS) return { claimed: false, holder };
      }
      try {
        await this.#annotate(instance.name, { [MOVE_CLAIM_ANNOTATION]: `${owner} ${Date.now()}` }, obj.metadata?.resourceVersion);
        return { claimed: true };
      } catch (err) {
        // The object changed since it was read (another router's claim, or any other change): read it again.
        if (err instanceof ApiException && err.code === 409 && attempt < this.#o.conflictRetries) continue;
        throw this.#failure(`claiming the move of GameServer ${instance.name}`, err);
      }
    }
  }

  /**
   * Tells every router that `instance`'s session is now on `target` ({@link MOVED_TO_ANNOTATION}):
   * each closes the sockets it relays there with 4307 `session_moved`.
   * @throws {RouterError} `registry_unavailable`.
   */
  async markMoved(instance: Instance, target: Instance): Promise<void> {
    try {
      await this.#annotate(instance.name, { [MOVED_TO_ANNOTATION]: target.name });
    } catch (err) {
      throw this.#failure(`patching GameServer ${instance.name}`, err);
    }
  }

  /**
   * Asks an instance to drain (the router's `DELETE /instances/{name}`): {@link DRAIN_ANNOTATION}
   * on its GameServer; the instance sees it through the SDK's watch and drains as on SIGTERM
   * (it labels itself draining, so the routers move its session, and exits once empty).
   * @returns false when the GameServer is gone (404)
   * @throws {RouterError} `registry_unavailable`.
   */
  async drain(instance: Instance): Promise<boolean> {
    try {
      await this.#annotate(instance.name, { [DRAIN_ANNOTATION]: new Date().toISOString() });
      return true;
    } catch (err) {
      if (err instanceof ApiException && err.code === 404) return false;
      throw this.#failure(`patching GameServer ${instance.name}`, err);
    }
  }

  /** One GET of a GameServer (with the API timeout); the API's error as it came. */
  async #read(name: string): Promise<GameServerObject> {
    return (await withTimeout(
      this.#api.getNamespacedCustomObject({ group: AGONES_GROUP, version: VERSION, namespace: this.#o.namespace, plural: 'gameservers', name }),
      this.#o.apiTimeoutMs,
      `reading GameServer ${name}`,
    )) as GameServerObject;
  }

  /** A merge patch of annotations on a GameServer, with `resourceVersion` as a precondition when given (409 when it changed). */
  async #annotate(name: string, annotations: Record<string, string>, resourceVersion?: string): Promise<void> {
    await withTimeout(
      this.#api.patchNamespacedCustomObject(
        {
          group: AGONES_GROUP,
          version: VERSION,
          namespace: this.#o.namespace,
          plural: 'gameservers',
          name,
          body: { metadata: { annotations, ...(resourceVersion !== undefined && { resourceVersion }) } },
        },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      ),
      this.#o.apiTimeoutMs,
      `patching GameServer ${name}`,
    );
  }

  /**
   * Whether the router can serve: the cache has listed the fleet and its last LIST or watch
   * succeeded (readiness). Makes no API call.
   * @throws {RouterError} `registry_unavailable` with the cache's last failure.
   */
  async check(): Promise<void> {
    const problem = this.cache.lastError ?? (this.cache.synced ? undefined : 'the GameServer cache has not listed the fleet yet');
    if (problem !== undefined) throw new RouterError(RouterErrorCode.RegistryUnavailable, problem);
  }

  /** The fleet's GameServers as the cache holds them. */
  instances(): Instance[] {
    return this.cache.list();
  }

  async #list(labelSelector: string): Promise<Instance[]> {
    let res: { items?: GameServerObject[] };
    try {
      res = (await withTimeout(
        this.#api.listNamespacedCustomObject({ group: AGONES_GROUP, version: VERSION, namespace: this.#o.namespace, plural: 'gameservers', labelSelector }),
        this.#o.apiTimeoutMs,
        'listing GameServers',
      )) as { items?: GameServerObject[] };
    } catch (err) {
      throw this.#failure('listing GameServers', err);
    }
    return (res.items ?? []).map(toInstance).filter((i): i is Instance => i !== undefined);
  }

  /** A Kubernetes API failure as a `registry_unavailable` error that says what to check. */
  #failure(what: string, err: unknown): RouterError {
    if (err instanceof RouterError) return err;
    const where = `namespace "${this.#o.namespace}"`;
    // The watch fails with a plain Error carrying `statusCode`; the API client with an ApiException.
    const status = err instanceof ApiException ? err.code : (err as { statusCode?: unknown } | null)?.statusCode;
    if (typeof status === 'number') {
      const hint =
        status === 401 || status === 403
          ? `: the router's service account may not do this; grant it get/list/watch/patch on gameservers.agones.dev and create on gameserverallocations.allocation.agones.dev in ${where}`
          : status === 404
            ? `: is Agones installed (its CRDs) and the namespace right (${where})?`
            : '';
      return new RouterError(RouterErrorCode.RegistryUnavailable, `${what} failed: the Kubernetes API answered ${status}${hint}`, { cause: err });
    }
    return new RouterError(RouterErrorCode.RegistryUnavailable, `${what} failed: cannot reach the Kubernetes API: ${(err as Error)?.message ?? String(err)}`, {
      cause: err,
    });
  }
}
