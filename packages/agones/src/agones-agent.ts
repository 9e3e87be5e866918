/**
 * The instance's side of Agones: it follows the server's health and sessions and tells the
 * GameServer's SDK sidecar what they mean.
 *
 * | the server | Agones |
 * |---|---|
 * | loaded, `/health/ready` says ready | `Ready()` |
 * | healthy (ready, or a passing state: loading, a session ending, the runner restarting, draining) | a `Health()` ping every `healthIntervalMs` |
 * | not healthy (load failed, runner unhealthy, a rank stalled, ...) | no pings: Agones marks it `Unhealthy` and replaces it |
 * | a session starts | `Allocate()` and `SetLabel('reactor-session', id)`, unless the router allocated it (it labelled it then) |
 * | the session ends | `SetLabel('reactor-session', '')` and `Ready()` (model warm), or `Shutdown()` |
 * | allocated by the router, no session within `allocationTimeoutMs` | `Ready()` |
 * | the router's `DELETE /sessions/{id}` (the annotation `reactor.dev/release-session` = the id) | the session ends; `Ready()` |
 * | the router's `DELETE /instances/{name}` (the annotation `reactor.dev/drain`) | `options.onDrainRequest()`: by default the process sends itself SIGTERM (below) |
 * | SIGTERM | leaves the pool first: `SetLabel('reactor-draining', deadline)` (the router's allocations exclude it) and, idle, `Shutdown()` at once; a running session goes on up to `drainTimeoutMs`; then the server closes (pings go on meanwhile) and `Shutdown()` |
 *
 * SDK failures never reach the server: they are logged (once per outage) and retried on the
 * next tick with a fresh SDK client.
 */
import { CloseCode, WireErrorCode, type SessionStatus } from '@reactor/protocol';
import { holdShutdown, type Logger } from '@reactor/log';
import type { HealthReport, ServableHost } from '@reactor/server';
import { AgonesErrorCode } from './errors.js';
import { resolveAgonesOptions, type AgonesOptions, type ResolvedAgonesOptions } from './options.js';
import { officialAgonesSdk, type AgonesSdk, type GameServerView } from './sdk.js';

/**
 * The SDK label key of the session id: Agones stores it as `agones.dev/sdk-reactor-session`, the
 * label the router (`reactor route`) puts on a GameServer it allocates and looks sessions up by.
 */
export const SESSION_LABEL = 'reactor-session';
/** {@link SESSION_LABEL} as it appears on the GameServer. */
const SESSION_LABEL_KEY = `agones.dev/sdk-${SESSION_LABEL}`;
/** The SDK label a draining instance sets (value: the drain's deadline, Unix seconds); the router's allocations exclude it. */
export const DRAINING_LABEL = 'reactor-draining';
/** The annotation the session router's `DELETE /sessions/{id}` sets: the instance ends that session and returns to the fleet. */
export const RELEASE_ANNOTATION = 'reactor.dev/release-session';
/** The annotation the router's `DELETE /instances/{name}` puts on the GameServer: the instance drains as on SIGTERM. */
export const DRAIN_ANNOTATION = 'reactor.dev/drain';

/**
 * Readiness reasons that pass on their own: the instance is not ready but still healthy, so the
 * pings go on (stopping them would get a loading or draining instance killed by Agones; a
 * `gpu_full` one waits for its GPU's session slot: `Ready()` once it holds one, never replaced; a
 * `gpu_busy` one waits for the sessions on its GPU to meet their frame deadlines again).
 */
export const TRANSIENT_READINESS_CODES: ReadonlySet<string> = new Set(['loading', 'session_closing', 'runner_restarting', 'closing', 'gpu_full', 'gpu_busy']);

/** The server the agent follows: `ReactorServer` is one. */
export interface AgonesServer {
  health(): HealthReport;
  readonly host: Pick<ServableHost, 'status' | 'onStatus' | 'endCurrentSession'>;
  /** Set to the GameServer name once known (it then appears in the session descriptor). */
  instance: string | undefined;
  /** The drain began: `/health/ready` says 503 `closing` at once (a router checks it before handing the instance out), sessions go on. */
  beginDrain?(): void;
  readonly options?: { readonly logger: Logger };
}

/** The close frame a drain's deadline gives the viewers still there (close code 4003, reason `drain_deadline: ...`). */
export interface DrainClose {
  code: number;
  reason: string;
}

/** What the agent last told Agones. */
type Told = 'nothing' | 'ready' | 'allocated' | 'shutdown';

/** A session id as a label value: Kubernetes allows 63 characters of `[A-Za-z0-9_.-]`, alphanumeric at both ends. */
function labelValue(id: string): string {
  const v = id
    .replace(/[^A-Za-z0-9_.-]/g, '-')
    .slice(0, 63)
    .replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, '');
  return v;
}

/** A gRPC status code of an error, if it has one. */
function grpcCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}

/** Follows a server and drives its GameServer through the SDK sidecar. Create it with {@link startAgones}. */
export class AgonesAgent {
  readonly options: ResolvedAgonesOptions;
  readonly #server: AgonesServer;
  readonly #log: Logger;
  #phase: 'new' | 'running' | 'draining' | 'stopped' = 'new';
  #sdk: AgonesSdk | undefined;
  #connecting: Promise<AgonesSdk> | undefined;
  #gs: GameServerView | undefined;
  #told: Told = 'nothing';
  /** The session id the GameServer is labelled with (a session of ours runs). */
  #labelled: string | undefined;
  #allocatedSince: number | undefined;
  #allocationTimer: ReturnType<typeof setTimeout> | undefined;
  #tick: ReturnType<typeof setInterval> | undefined;
  #offStatus: (() => void) | undefined;
  #reconciling: Promise<void> | undefined;
  #again = false;
  #outage: string | undefined;
  #healthy = true;
  #pings = 0;
  /** The release request (session id) already acted on. */
  #released: string | undefined;
  /** The router's drain request was seen (acted on once). */
  #drainAsked = false;
  /** Leaving the pool (the draining label, `Shutdown()` when idle), once SIGTERM came. */
  #leaving: Promise<void> | undefined;

  constructor(server: AgonesServer, options: AgonesOptions = {}) {
    this.#server = server;
    this.options = resolveAgonesOptions(options, server.options?.logger);
    const log = this.options.logger;
    this.#log = typeof log.child === 'function' ? log.child({ component: 'agones' }) : log;
  }

  /** The GameServer as last seen (undefined until the sidecar first answered). */
  get gameServer(): GameServerView | undefined {
    return this.#gs ? { ...this.#gs, labels: { ...this.#gs.labels } } : undefined;
  }

  /** `Health()` pings sent so far. */
  get pings(): number {
    return this.#pings;
  }

  /** Starts following the server: connects to the sidecar, pings, and reconciles on every status change and tick. */
  start(): this {
    if (this.#phase !== 'new') return this;
    this.#phase = 'running';
    const off = this.#server.host.onStatus?.(() => this.#reconcile());
    if (typeof off === 'function') this.#offStatus = off;
    this.#tick = setInterval(() => this.#onTick(), this.options.healthIntervalMs);
    this.#tick.unref();
    this.#onTick();
    return this;
  }

  /**
   * The server begins its drain (SIGTERM): no more state changes, pings go on until
   * {@link shutdown}; and the instance leaves the pool at once (the draining label, which the
   * router's allocations exclude, and `Shutdown()` when no session runs), because Agones keeps a
   * terminating pod's GameServer Ready and allocatable until then.
   */
  drain(): void {
    if (this.#phase === 'running' || this.#phase === 'new') this.#phase = 'draining';
    // Before any SDK call: the draining label lands only after the sidecar's rate limit (500 ms), readiness now.
    this.#server.beginDrain?.();
    // The runner's signal backstop waits past the drain instead of cutting the session at 10 s.
    if (!this.#leaving) holdShutdown(Date.now() + this.options.drainTimeoutMs);
    this.#clearAllocationTimer();
    this.#leaving ??= this.#leavePool();
  }

  /**
   * After {@link drain}: resolves when no session runs any more (it ended, or the instance was
   * idle), or after `drainTimeoutMs`; the caller then closes the server. Never rejects.
   * @returns the close the viewers still there get: `undefined` (the server's default), or at the
   *   deadline close code 4003 with the reason `drain_deadline: ...` (pass it to `server.close()`).
   */
  async drainSessions(): Promise<DrainClose | undefined> {
    this.drain();
    await this.#leaving;
    const host = this.#server.host;
    if (host.status.sessionId === undefined) return undefined;
    const limit = this.options.drainTimeoutMs;
    this.#log.info(`draining: the running session may go on for up to ${limit} ms (agones.drainTimeoutMs)`);
    return new Promise<DrainClose | undefined>((resolve) => {
      const sub: { off?: (() => void) | void } = {};
      const done = (close?: DrainClose): void => {
        clearTimeout(timer);
        clearInterval(poll);
        if (typeof sub.off === 'function') sub.off();
        resolve(close);
      };
      const timer = setTimeout(() => {
        this.#log.warn(`drain deadline (${limit} ms) reached with the session still running: closing its viewers (${CloseCode.DrainDeadline} drain_deadline)`);
        done({
          code: CloseCode.DrainDeadline,
          reason: `${WireErrorCode.DrainDeadline}: the instance is shutting down and the session outlived its ${Math.round(limit / 1000)} s drain; start a new session`,
        });
      }, limit);
      // A status listener, and a poll in case the host has none.
      sub.off = host.onStatus?.((st) => st.sessionId === undefined && done());
      const poll = setInterval(() => host.status.sessionId === undefined && done(), 250);
      poll.unref();
    });
  }

  async #leavePool(): Promise<void> {
    try {
      const sdk = await this.#connect();
      const deadline = Math.ceil((Date.now() + this.options.drainTimeoutMs) / 1000);
      await this.#call('SetLabel()', () => sdk.setLabel(DRAINING_LABEL, String(deadline)));
      if (this.#server.host.status.sessionId === undefined) {
        // Idle (or allocated to a client that has not arrived): nothing to finish, leave now.
        await this.#call('Shutdown()', () => sdk.shutdown());
        this.#told = 'shutdown';
        this.#log.info('SIGTERM while idle: Shutdown() at once, so no new session is sent here');
      } else this.#log.info('SIGTERM during a session: labelled draining, no new session is sent here');
    } catch (err) {
      this.#fail('leaving the pool', err);
    }
  }

  /**
   * After the server's drain: `Shutdown()` (Agones deletes the GameServer), then stops pinging
   * and closes the SDK. Never rejects: a failure is logged.
   */
  async shutdown(): Promise<void> {
    if (this.#phase === 'stopped') return;
    this.drain();
    await this.#leaving;
    try {
      const sdk = await this.#connect();
      await this.#call('Shutdown()', () => sdk.shutdown());
      this.#told = 'shutdown';
      this.#log.info('told Agones Shutdown() after the drain');
    } catch (err) {
      this.#fail('Shutdown()', err);
    }
    this.stop();
  }

  /** Stops everything without telling Agones anything (the process is about to exit on a failure). */
  stop(): void {
    this.#phase = 'stopped';
    if (this.#tick) clearInterval(this.#tick);
    this.#clearAllocationTimer();
    this.#offStatus?.();
    this.#drop();
  }

  /** Whether the server is healthy for Agones: ready, or not ready only for passing reasons. */
  #isHealthy(h: HealthReport): boolean {
    return h.ready || h.reasons.every((r) => TRANSIENT_READINESS_CODES.has(r.code));
  }

  #onTick(): void {
    if (this.#phase === 'stopped') return;
    const h = this.#server.health();
    const healthy = this.#isHealthy(h);
    if (healthy !== this.#healthy) {
      this.#healthy = healthy;
      if (healthy) this.#log.info('healthy again: Health() pings resume');
      else
        this.#log.warn(
          `not healthy (${h.reasons.map((r) => `${r.code}: ${r.message}`).join('; ')}): Health() pings stop, so Agones marks this GameServer Unhealthy and replaces it unless it recovers first`,
        );
    }
    if (healthy) void this.#ping();
    this.#reconcile();
  }

  async #ping(): Promise<void> {
    try {
      const sdk = await this.#connect();
      await this.#call('Health()', () => sdk.health());
      this.#pings++;
      this.#recovered();
    } catch (err) {
      this.#fail('Health()', err);
    }
  }

  /**
   * Draining, the router moved the session to another instance (docs/snapshots.md "Move") and
   * released it here: end it, so the drain ends now and the instance exits.
   */
  #releaseWhileDraining(): void {
    const session = this.#server.host.status.sessionId;
    const release = this.#gs?.annotations?.[RELEASE_ANNOTATION];
    if (session === undefined || release !== session || this.#released === release) return;
    this.#released = release;
    this.#log.info(`session ${session} released by the session router while draining (moved to another instance): ending it`);
    void this.#server.host.endCurrentSession?.('the session moved to another instance');
  }

  /** The router asked for a drain ({@link DRAIN_ANNOTATION}): once, `onDrainRequest()` (a SIGTERM to itself by default). */
  #drainIfAsked(): void {
    const asked = this.#gs?.annotations?.[DRAIN_ANNOTATION];
    if (asked === undefined || this.#drainAsked || this.#phase === 'stopped') return;
    this.#drainAsked = true;
    if (this.#phase === 'draining') return;
    this.#log.info(`the session router asked this instance to drain (DELETE /instances, ${asked}): draining as on SIGTERM`);
    this.options.onDrainRequest();
  }

  /** Runs {@link #reconcileOnce} now, or once more after the run in progress. */
  #reconcile(): void {
    if (this.#phase !== 'running') return;
    if (this.#reconciling) {
      this.#again = true;
      return;
    }
    this.#reconciling = (async () => {
      do {
        this.#again = false;
        try {
          await this.#reconcileOnce();
          this.#recovered();
        } catch (err) {
          this.#fail('reconcile', err);
        }
      } while (this.#again && this.#phase === 'running');
    })().finally(() => (this.#reconciling = undefined));
  }

  async #reconcileOnce(): Promise<void> {
    const sdk = await this.#connect();
    if (this.#phase !== 'running' || this.#told === 'shutdown') return;
    const status: SessionStatus = this.#server.host.status;
    const session = status.sessionId;
    const release = this.#gs?.annotations?.[RELEASE_ANNOTATION];
    if (session !== undefined) {
      this.#allocatedSince = undefined;
      this.#clearAllocationTimer();
      if (this.#labelled === session && release === session && this.#released !== release) {
        // The router's DELETE /sessions/{id}: end it; its end returns the instance to the fleet below.
        this.#released = release;
        this.#log.info(`session ${session} released by the session router (DELETE /sessions): ending it`);
        await this.#server.host.endCurrentSession?.('the session was released (DELETE /sessions)');
        return;
      }
      if (this.#labelled === session) return;
      const gs = await this.#call('GetGameServer()', () => sdk.getGameServer());
      this.#gs = gs;
      const routed = gs.state === 'Allocated' && (gs.labels[SESSION_LABEL_KEY] ?? '') !== '';
      if (routed) {
        // The router allocated it under its own session id (the one its clients look up): keep that label.
        this.#labelled = session;
        this.#told = 'allocated';
        this.#log.info(`session ${session} started on GameServer ${gs.name}, allocated by the router as session ${gs.labels[SESSION_LABEL_KEY]}`);
        return;
      }
      if (gs.state !== 'Allocated') {
        await this.#call('Allocate()', () => sdk.allocate());
        this.#gs = { ...gs, state: 'Allocated' };
        this.#log.info(`session ${session} started on an instance the router did not allocate: Allocate()`);
      }
      await this.#call('SetLabel()', () => sdk.setLabel(SESSION_LABEL, labelValue(session)));
      this.#labelled = session;
      this.#told = 'allocated';
      this.#log.info(`session ${session}: GameServer ${gs.name} Allocated, labelled ${SESSION_LABEL_KEY}=${labelValue(session)}`);
      return;
    }
    const h = this.#server.health();
    if (this.#labelled !== undefined) {
      const ended = this.#labelled;
      if (this.options.onSessionEnd === 'shutdown') {
        await this.#call('Shutdown()', () => sdk.shutdown());
        this.#labelled = undefined;
        this.#told = 'shutdown';
        this.#log.info(`session ${ended} ended: Shutdown() (agones.onSessionEnd: shutdown), Agones replaces this instance with a fresh one`);
        return;
      }
      // Back to the fleet only once a new user would get a stream; a broken runner stops the pings instead.
      if (!h.ready) return;
      // A stale label would let a joiner of the old session find this instance once it is allocated again.
      await this.#call('SetLabel()', () => sdk.setLabel(SESSION_LABEL, ''));
      await this.#call('Ready()', () => sdk.ready());
      this.#labelled = undefined;
      this.#told = 'ready';
      this.#gs = this.#gs && { ...this.#gs, state: 'Ready' };
      this.#log.info(`session ${ended} ended: Ready() again, model loaded (warm)`);
      return;
    }
    if (this.#gs?.state === 'Allocated' && this.#told !== 'nothing') {
      // Allocated by the router for a session whose first client has not arrived yet.
      const waitingFor = this.#gs.labels[SESSION_LABEL_KEY];
      if (waitingFor && release === waitingFor && this.#released !== release) {
        this.#released = release;
        await this.#call('SetLabel()', () => sdk.setLabel(SESSION_LABEL, ''));
        await this.#call('Ready()', () => sdk.ready());
        this.#allocatedSince = undefined;
        this.#clearAllocationTimer();
        this.#told = 'ready';
        this.#gs = { ...this.#gs, state: 'Ready' };
        this.#log.info(`session ${waitingFor} released by the session router before anyone joined: Ready() again`);
        return;
      }
      const now = Date.now();
      if (this.#allocatedSince === undefined) {
        this.#allocatedSince = now;
        this.#log.info(`allocated by the router; waiting up to ${this.options.allocationTimeoutMs} ms for the session's first client`);
        this.#allocationTimer = setTimeout(() => this.#reconcile(), this.options.allocationTimeoutMs);
        this.#allocationTimer.unref();
        return;
      }
      if (now - this.#allocatedSince < this.options.allocationTimeoutMs) return;
      const fresh = await this.#call('GetGameServer()', () => sdk.getGameServer());
      this.#gs = fresh;
      if (fresh.state !== 'Allocated') return;
      await this.#call('SetLabel()', () => sdk.setLabel(SESSION_LABEL, ''));
      await this.#call('Ready()', () => sdk.ready());
      this.#allocatedSince = undefined;
      this.#told = 'ready';
      this.#gs = { ...fresh, state: 'Ready' };
      this.#log.warn(`allocated, but no client joined within ${this.options.allocationTimeoutMs} ms (agones.allocationTimeoutMs): Ready() again`);
      return;
    }
    this.#allocatedSince = undefined;
    this.#clearAllocationTimer();
    if (this.#told === 'nothing' && h.ready) {
      await this.#call('Ready()', () => sdk.ready());
      this.#told = 'ready';
      if (this.#gs) this.#gs = { ...this.#gs, state: 'Ready' };
      this.#log.info(`loaded and ready: Ready() (GameServer ${this.#server.instance ?? '?'})`);
    }
  }

  /** The SDK client, connected: a new one (GetGameServer, then a watch) after a failure dropped the last. */
  #connect(): Promise<AgonesSdk> {
    if (this.#sdk) return Promise.resolve(this.#sdk);
    this.#connecting ??= (async () => {
      const sdk = await (this.options.sdk ?? officialAgonesSdk)();
      try {
        const gs = await this.#call('GetGameServer()', () => sdk.getGameServer());
        this.#gs = gs;
        if (gs.name && this.#server.instance !== gs.name) this.#server.instance = gs.name;
        sdk.watchGameServer(
          (next) => {
            if (this.#sdk !== sdk) return;
            this.#gs = next;
            this.#drainIfAsked();
            if (this.#phase === 'draining') this.#releaseWhileDraining();
            else this.#reconcile();
          },
          (err) => {
            if (this.#sdk === sdk && this.#phase !== 'stopped') this.#fail('WatchGameServer()', err);
          },
        );
        this.#sdk = sdk;
        return sdk;
      } catch (err) {
        sdk.close();
        throw err;
      }
    })().finally(() => (this.#connecting = undefined));
    return this.#connecting;
  }

  /** `fn()` with the call timeout. */
  async #call<T>(what: string, fn: () => Promise<T>): Promise<T> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(Object.assign(new Error(`${what} got no answer within ${this.options.callTimeoutMs} ms`), { code: 4 })),
        this.options.callTimeoutMs,
      );
    });
    try {
      return await Promise.race([fn(), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Logs a failure (once per outage), drops the client so the next tick makes a new one. */
  #fail(what: string, err: unknown): void {
    const code = grpcCode(err);
    const message = (err as Error)?.message ?? String(err);
    // UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED, or no status at all (a broken stream): the sidecar is not there.
    const unreachable = code === undefined || code === 14 || code === 4 || code === 1;
    const errorCode = unreachable ? AgonesErrorCode.SdkUnreachable : AgonesErrorCode.SdkCallFailed;
    const key = `${errorCode}:${what}`;
    if (this.#outage === undefined || (!unreachable && this.#outage !== key)) {
      const port = process.env['AGONES_SDK_GRPC_PORT'] ?? '9357';
      this.#log.error(
        unreachable
          ? `[${errorCode}] cannot reach the Agones SDK sidecar at localhost:${port} (AGONES_SDK_GRPC_PORT) for ${what}: ${message}. The server keeps serving; retrying every ${this.options.healthIntervalMs} ms. Outside an Agones GameServer pod, run without --agones`
          : `[${errorCode}] the Agones SDK sidecar refused ${what}: ${message}; retrying on the next change`,
      );
    } else this.#log.debug(`${what} failed again: ${message}`);
    this.#outage = key;
    if (unreachable) this.#drop();
  }

  #recovered(): void {
    if (this.#outage === undefined) return;
    this.#outage = undefined;
    this.#log.info('the Agones SDK sidecar answers again');
  }

  #drop(): void {
    const sdk = this.#sdk;
    this.#sdk = undefined;
    try {
      sdk?.close();
    } catch {
      // already closed
    }
  }

  #clearAllocationTimer(): void {
    clearTimeout(this.#allocationTimer);
    this.#allocationTimer = undefined;
  }
}

/**
 * Runs `server` as an Agones GameServer: `Ready()` once loaded, health pings, `Allocate()` and a
 * session label when a session starts, `Ready()` (or `Shutdown()`) when it ends. Call
 * {@link AgonesAgent.drain} when the server begins closing and {@link AgonesAgent.shutdown}
 * after it closed.
 *
 * @throws ReactorError `invalid_agones_option` for a bad option.
 * @example
 * const server = await serve(MyApp, { host: '0.0.0.0', port: 8080, token });
 * const agones = startAgones(server, { onSessionEnd: 'ready' });
 * process.on('SIGTERM', async () => { agones.drain(); await server.close(); await agones.shutdown(); process.exit(0); });
 */
export function startAgones(server: AgonesServer, options: AgonesOptions = {}): AgonesAgent {
  return new AgonesAgent(server, options).start();
}
