/**
 * An informer-style cache of the fleet's GameServers: one LIST, then a WATCH from the list's
 * resource version, so the router answers lookups and relays from memory instead of calling the
 * Kubernetes API per request. A watch that ends is resumed from the last version seen (a
 * `410 Gone` or a failure lists again); every `resyncMs` the cache lists again and resumes
 * watching, so a missed event never lasts. Every API call has a timeout.
 */
import { Watch, type CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node';
import type { Logger } from '@reactor/log';
import { toInstance, type GameServerObject, type Instance } from './instance.js';

/** Options of {@link GameServerCache}. */
export interface GameServerCacheOptions {
  namespace: string;
  /** The `labelSelector` of the list and the watch (the fleet's label). */
  labelSelector: string;
  /** Longest wait for one LIST, ms. */
  timeoutMs: number;
  /** A full LIST this often, ms, whatever the watch says. */
  resyncMs: number;
  /** First wait before a retry after a failure, ms (doubled each time, at most 5 s). */
  retryMs?: number;
  /** Told of every state change the cache sees (for the metrics). */
  onStateChange?: (name: string, from: string | undefined, to: string | undefined) => void;
  /** Told when an instance the cache knows turns draining (SIGTERM: its draining label appeared). */
  onDraining?: (instance: Instance) => void;
  /** Told when an instance's session was moved off it (a router put {@link MOVED_TO_ANNOTATION} on it). */
  onMoved?: (instance: Instance) => void;
  /** Says what a failure means (default: its message). */
  describe?: (what: string, err: unknown) => string;
  logger: Logger;
}

/** How long the cache trusts an allocation it learnt from the router itself over older Ready objects, ms. */
const LEARNT_MS = 5000;

/** A cached object, with when the router learnt it itself (an allocation's answer), if it did. */
type Learnt = Instance & { version: number; learntAt?: number };

/** A watch event as the API sends it. */
type WatchPhase = 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';

/** The cache. {@link start} it once; {@link stop} ends the watch and the timers. */
export class GameServerCache {
  readonly #api: CustomObjectsApi;
  readonly #watch: Watch;
  readonly #o: GameServerCacheOptions;
  readonly #path: string;
  #objects = new Map<string, Instance & { version: number }>();
  #version = '';
  #synced = false;
  #lastError: string | undefined;
  #stopped = false;
  #watchAbort: AbortController | undefined;
  #retry: ReturnType<typeof setTimeout> | undefined;
  #resync: ReturnType<typeof setInterval> | undefined;
  #failures = 0;
  /** Bumped by each watch started or ended: events and ends of an older watch are ignored. */
  #generation = 0;
  #firstSync: Promise<void>;
  #resolveFirst!: () => void;
  /** Bumped on every change the cache takes in (a watch event, a LIST, the router's own allocation). */
  changes = 0;
  /** LISTs and watch (re)starts made, for tests and metrics. */
  lists = 0;
  watches = 0;

  constructor(kubeConfig: KubeConfig, api: CustomObjectsApi, options: GameServerCacheOptions) {
    this.#api = api;
    this.#watch = new Watch(kubeConfig);
    this.#o = options;
    this.#path = `/apis/agones.dev/v1/namespaces/${encodeURIComponent(options.namespace)}/gameservers`;
    this.#firstSync = new Promise((r) => (this.#resolveFirst = r));
  }

  /** Starts listing and watching; resolves after the first LIST succeeded (it keeps retrying until then). */
  start(): Promise<void> {
    void this.#relist();
    this.#resync = setInterval(() => void this.#relist(), this.#o.resyncMs);
    this.#resync.unref();
    return this.#firstSync;
  }

  stop(): void {
    this.#stopped = true;
    this.#generation++;
    clearTimeout(this.#retry);
    clearInterval(this.#resync);
    this.#watchAbort?.abort();
    this.#resolveFirst();
  }

  /** Whether a LIST has succeeded (the cache holds the fleet). */
  get synced(): boolean {
    return this.#synced;
  }

  /** Why the last LIST or watch failed, while it has not recovered. */
  get lastError(): string | undefined {
    return this.#lastError;
  }

  get(name: string): Instance | undefined {
    const i = this.#objects.get(name);
    return i && strip(i);
  }

  list(): Instance[] {
    return [...this.#objects.values()].map(strip);
  }

  /**
   * Puts what the router itself just learnt (an allocation's answer) into the cache, ahead of
   * the watch event that will confirm it; events older than the allocation do not undo it.
   */
  learn(instance: Instance): void {
    const known = this.#objects.get(instance.name);
    this.changes++;
    // The watch was faster than the allocation's answer: the event confirming it is in already,
    // so a Ready that follows is newer, not an old one still on its way (it would be ignored).
    if (known?.state === instance.state && known.sessionId === instance.sessionId && (known as Learnt).learntAt === undefined) return;
    this.#objects.set(instance.name, { ...known, ...instance, version: known?.version ?? 0, learntAt: Date.now() } as Learnt);
  }

  async #relist(): Promise<void> {
    if (this.#stopped) return;
    this.lists++;
    let res: { items?: GameServerObject[]; metadata?: { resourceVersion?: string } };
    try {
      res = (await withTimeout(
        this.#api.listNamespacedCustomObject({
          group: 'agones.dev',
          version: 'v1',
          namespace: this.#o.namespace,
          plural: 'gameservers',
          labelSelector: this.#o.labelSelector,
        }),
        this.#o.timeoutMs,
        'listing GameServers',
      )) as typeof res;
    } catch (err) {
      this.#failed('listing GameServers', err);
      return;
    }
    if (this.#stopped) return;
    const next = new Map<string, Instance & { version: number }>();
    for (const obj of res.items ?? []) {
      const i = toInstance(obj);
      if (!i) continue;
      next.set(i.name, this.#merge(i, Number(obj.metadata?.resourceVersion ?? 0)));
    }
    for (const [name, i] of next) if (this.#objects.get(name)?.state !== i.state) this.#o.onStateChange?.(name, this.#objects.get(name)?.state, i.state);
    for (const [name, i] of this.#objects) if (!next.has(name)) this.#o.onStateChange?.(name, i.state, undefined);
    const drained = [...next.values()].filter((i) => i.draining && this.#objects.get(i.name)?.draining === false);
    const moved = [...next.values()].filter((i) => i.movedTo !== undefined && this.#objects.get(i.name)?.movedTo !== i.movedTo);
    this.#objects = next;
    for (const i of drained) this.#o.onDraining?.(i);
    for (const i of moved) this.#o.onMoved?.(i);
    this.changes++;
    this.#version = res.metadata?.resourceVersion ?? '';
    this.#synced = true;
    this.#recovered();
    this.#resolveFirst();
    this.#startWatch();
  }

  /**
   * An object as listed or watched, unless what the router learnt itself is newer: after its own
   * allocation, a Ready object (from before it, still on its way) is ignored until the watch
   * shows the allocation (Allocated with that session), or for {@link LEARNT_MS} at most.
   */
  #merge(i: Instance, version: number): Instance & { version: number } {
    const known = this.#objects.get(i.name) as Learnt | undefined;
    if (known?.learntAt !== undefined && !(i.state === 'Allocated' && i.sessionId === known.sessionId)) {
      if (Date.now() - known.learntAt < LEARNT_MS && i.state === 'Ready') return known;
    }
    return { ...i, version };
  }

  #startWatch(): void {
    // The generation first: the old watch's end (its abort may report synchronously) is then ignored.
    const generation = ++this.#generation;
    const old = this.#watchAbort;
    this.#watchAbort = undefined;
    old?.abort();
    if (this.#stopped) return;
    this.watches++;
    void this.#watch
      .watch(
        this.#path,
        { resourceVersion: this.#version, labelSelector: this.#o.labelSelector, allowWatchBookmarks: true },
        (phase: string, obj: GameServerObject & { code?: number }) => {
          if (generation === this.#generation) this.#onEvent(phase as WatchPhase, obj);
        },
        (err: unknown) => this.#onWatchEnd(generation, err),
      )
      .then((controller: AbortController) => {
        if (generation === this.#generation && !this.#stopped) this.#watchAbort = controller;
        else controller.abort();
      });
  }

  #onEvent(phase: WatchPhase, obj: GameServerObject & { code?: number }): void {
    if (phase === 'ERROR') {
      // 410 Gone: the version is too old; list again.
      if (obj.code === 410) this.#version = '';
      return;
    }
    const rv = obj.metadata?.resourceVersion;
    if (rv) this.#version = rv;
    if (phase === 'BOOKMARK') return;
    const i = toInstance(obj);
    if (!i) return;
    this.changes++;
    const was = this.#objects.get(i.name);
    const before = was?.state;
    if (phase === 'DELETED') this.#objects.delete(i.name);
    else this.#objects.set(i.name, this.#merge(i, Number(rv ?? 0)));
    const now = this.#objects.get(i.name);
    const after = now?.state;
    if (before !== after) this.#o.onStateChange?.(i.name, before, after);
    if (now?.draining && was?.draining === false) this.#o.onDraining?.(now);
    if (now?.movedTo !== undefined && was?.movedTo !== now.movedTo) this.#o.onMoved?.(now);
  }

  #onWatchEnd(generation: number, err: unknown): void {
    if (this.#stopped || generation !== this.#generation) return;
    this.#generation++;
    if (err) {
      const code = (err as { statusCode?: number; code?: number }).statusCode ?? (err as { code?: number }).code;
      if (code === 410) this.#version = '';
      this.#failed('watching GameServers', err);
      return;
    }
    // A clean end (the API server's watch timeout, or it restarted): resume from the last version.
    if (this.#version === '') void this.#relist();
    else this.#startWatch();
  }

  #failed(what: string, err: unknown): void {
    if (this.#stopped) return;
    const message = this.#o.describe?.(what, err) ?? `${what} failed: ${(err as Error)?.message ?? String(err)}`;
    if (this.#lastError === undefined) this.#o.logger.warn(`GameServer cache: ${message}; retrying (lookups use the last known state)`);
    this.#lastError = message;
    this.#failures++;
    clearTimeout(this.#retry);
    const wait = Math.min(5000, (this.#o.retryMs ?? 250) * 2 ** Math.min(this.#failures - 1, 5));
    this.#retry = setTimeout(() => void this.#relist(), wait);
    this.#retry.unref();
  }

  #recovered(): void {
    if (this.#lastError !== undefined) this.#o.logger.info('GameServer cache: the Kubernetes API answers again');
    this.#lastError = undefined;
    this.#failures = 0;
  }
}

function strip(i: Instance & { version?: number; learntAt?: number }): Instance {
  return {
    name: i.name,
    state: i.state,
    address: i.address,
    port: i.port,
    sessionId: i.sessionId,
    draining: i.draining,
    ...(i.movedTo !== undefined && { movedTo: i.movedTo }),
  };
}

/** `p`, or a rejection after `ms` (the request may still finish; its answer is then ignored). */
export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(Object.assign(new Error(`${what}: no answer from the Kubernetes API within ${ms} ms`), { timedOut: true })), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}
