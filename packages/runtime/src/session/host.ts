import { randomUUID } from 'node:crypto';
import {
  type AppSchema,
  type ClipResult,
  type CommandMessage,
  type ErrorBody,
  type ErrorMessage,
  type ReplyMessage,
  type ServerMessage,
  type SessionStatus,
  type UploadInfo,
  type UploadTicket,
  type WelcomeMessage,
  WireErrorCode,
} from '@reactor/protocol';
import { consoleLogger, type Logger } from '@reactor/log';
import type { LoadContext } from '../app/contract.js';
import { APP_BINDING, type AppBinding, type AppReadiness, type ClipOptions, type ReactorApp } from '../app/reactor-app.js';
import { type AppDefinition, type CommandSpec, describeApp, type InputTrackSpec } from '../app/registry.js';
import { StepOutcome } from '../app/step-outcome.js';
import { hostContext, type HostContext } from '../app/weights.js';
import {
  AppLoadError,
  ApplicationError,
  BufferClosedError,
  BufferTimeoutError,
  CommandError,
  HostClosedError,
  HostOptionError,
  MessageNotDeclaredError,
  ReactorError,
  RuntimeErrorCode,
  UploadError,
} from '../errors/errors.js';
import { InputBuffer, stepInterrupt } from '../input/input-buffer.js';
import { InputFrame } from '../input/input-frame.js';
import type { AnyClass, HookKind } from '../metadata/keys.js';
import { toSnakeCase } from '../metadata/naming.js';
import { type Chunk, normalizeOutput } from './normalize.js';
import type { Output } from '../output/output.js';
import { Playout } from './playout.js';
import { truncateCodePoints, unknownKey } from '../state/field-errors.js';
import { errorReply, invalidParams } from './answers.js';
import type { Client } from './client.js';
import { HostClient } from './host-client.js';
import { HOST_TRANSITIONS, type HostState, Lifecycle } from './lifecycle.js';
import { ReadinessCode } from './readiness.js';
import { Session } from './session.js';
import { StepLock } from './step-lock.js';
import type {
  AppHostApi,
  ClientHandle,
  ClientInfo,
  ClientSink,
  InboundFrame,
  MediaListener,
  NotReadyReason,
  OutputAudio,
  OutputFrame,
  Readiness,
  UploadsApi,
} from './transport.js';
import { CHOSEN_SESSION_ID } from './transport.js';
import type { FieldSpec } from '../state/field-set.js';
import { mimeMatches } from '../upload/sniff.js';
import type { UploadedFile } from '../upload/uploaded-file.js';
import {
  type ResolvedUploadOptions,
  UnresolvedUpload,
  type UploadFieldLimit,
  type UploadOptions,
  UploadStore,
  type UploadTarget,
  resolveUploadOptions,
  sweepOrphanUploadFolders,
} from '../upload/upload-store.js';

/** Default grace period before a session without clients ends (60 s). */
export const DEFAULT_GRACE_PERIOD_MS = 60_000;
/** Default wait before a refused step (`ApplicationError`) is retried when nothing changes. */
export const DEFAULT_REFUSAL_BACKOFF_MS = 50;
/** Default period of `stats` messages. */
export const DEFAULT_STATS_INTERVAL_MS = 1_000;

/** Options of {@link AppHost}. */
export interface AppHostOptions {
  /** How long a session outlives its last client, ms (default 60 000; 0 ends it at once). */
  gracePeriodMs?: number;
  /**
   * The weights folder (the CLI passes the manifest's `runtime.weights_path`, resolved against
   * the manifest's folder). `REACTOR_WEIGHTS_PATH` overrides it.
   */
  weightsPath?: string;
  /**
   * Where log lines go (default: `consoleLogger()` of `@reactor/log`). The app logs through
   * `this.logger`, a child of this one with the app's name (`{ app: 'VideoApp' }`).
   */
  logger?: Logger;
  /** Retry delay after a refused step when nothing changes, ms (default 50). */
  refusalBackoffMs?: number;
  /** Period of `stats` messages, ms (default 1000; 0 turns them off). */
  statsIntervalMs?: number;
  /** Upload limits, waits, folder and image decoder (see `UploadOptions`; a server sets them through `uploads.configure()`). */
  uploads?: UploadOptions;
  /**
   * One controller at a time (default `false`): the first `controller` client of a session steers;
   * other controllers are refused `not_controller` for what only a controller may do, until they
   * `requestControl()` and the holder releases control (or leaves).
   */
  singleController?: boolean;
}

/** Cumulative counters of a host, for metrics. */
export interface HostCounters {
  sessions: number;
  steps: number;
  refusedSteps: number;
  modelErrors: number;
  framesPlayed: number;
  /** Audio chunks played out (one per audio track per frame that carries audio). */
  audioChunksPlayed: number;
  commands: number;
  commandErrors: number;
  /** Frames dropped by transports for slow clients (sum of `reportDropped`). */
  framesDropped: number;
  /** Inbound frames (video frames, audio chunks) that entered a track's `InputBuffer`, every track together. */
  inputFramesAccepted: number;
  /** Inbound frames evicted unread because their buffer was full (the app reads slower than the publisher sends). */
  inputFramesEvicted: number;
}

let clientCounter = 0;

/**
 * Runs one app: loads it, keeps one session at a time for any number of clients, runs the step
 * loop, dispatches commands and hooks under the step lock, paces frames out to every client.
 * Transports (the WebSocket server, tests) talk to it through {@link AppHostApi}.
 *
 * Three lifecycles, each an explicit state machine (`session/lifecycle.ts`): the host
 * (`created -> loading -> ready | failed -> closing -> closed`), each session
 * (`starting -> waiting -> streaming <-> orphaned -> closing -> ended`) and each client
 * (`waiting -> joining -> joined -> leaving -> gone`).
 *
 * @example
 * const host = new AppHost(VideoApp, { gracePeriodMs: 60_000, weightsPath: '/weights' });
 * await host.load({ configPath: 'config.yaml', manifestGpuCount: 2 });
 * const client = host.connect(sink);            // welcome arrives on the sink
 * await client.command({ type: 'command', id: '1', name: 'set_prompt', params: { prompt: 'sea' } });
 * client.disconnect();
 * await host.close();
 */
export class AppHost implements AppHostApi {
  /** The app's published schema. */
  readonly schema: AppSchema;
  /** The app instance (one per host). */
  readonly app: ReactorApp<any, any, any, any>;
  /** Cumulative counters (for `/metrics`). */
  readonly counters: HostCounters = {
    sessions: 0,
    steps: 0,
    refusedSteps: 0,
    modelErrors: 0,
    framesPlayed: 0,
    audioChunksPlayed: 0,
    commands: 0,
    commandErrors: 0,
    framesDropped: 0,
    inputFramesAccepted: 0,
    inputFramesEvicted: 0,
  };

  private readonly def: AppDefinition;
  private readonly logger: Logger;
  private readonly gracePeriodMs: number;
  private readonly refusalBackoffMs: number;
  private readonly statsIntervalMs: number;
  private readonly singleController: boolean;
  private readonly lock = new StepLock();
  private readonly ctx: HostContext;
  private readonly lifecycle = new Lifecycle<HostState>('host', 'created', HOST_TRANSITIONS);
  /** Where the host stood when `close()` began (what `status` reports from then on). */
  private stateBeforeClose: HostState = 'created';
  private readonly clients = new Map<string, HostClient>();
  private readonly statusListeners = new Set<(status: SessionStatus) => void>();
  private readonly stepListeners = new Set<(step: { elapsedMs: number; failed: boolean }) => void>();
  /** Taps on every played-out frame and audio chunk (the server's clip ring and recorder). */
  private readonly mediaListeners = new Set<MediaListener>();
  private clipper: ((options: ClipOptions) => Promise<ClipResult>) | undefined;
  /** The app's `load()` while it runs and after (`close()` waits for it before `unload()`). */
  private loading: Promise<void> | undefined;
  private loadError: ErrorBody | undefined;
  private lastSessionError: ErrorBody | undefined;
  private session: Session | undefined;
  private closing: Promise<void> | undefined;
  private lastStatusJson = '';
  private changeVersion = 0;
  private changeWaiters: Array<() => void> = [];
  private readonly loops = new Set<Promise<void>>();
  private readonly warned = new WeakSet<object>();
  /** One buffer per inbound track (wire name), for the host's life; reset at every session's end. */
  private readonly buffers: ReadonlyMap<string, InputBuffer>;
  /** Inbound tracks whose malformed frames were already logged (once per track). */
  private readonly badFrameWarned = new Set<string>();
  /** Tasks (commands, hooks, session ends) queued for the step lock and not started yet. */
  private tasksWaiting = 0;
  private uploadOptions: ResolvedUploadOptions;

  /**
   * File uploads into the current session (the server's upload routes call it): announce, then
   * write the bytes; commands refer to a stored file by its id.
   */
  readonly uploads: UploadsApi = {
    configure: (options) => {
      this.uploadOptions = resolveUploadOptions(options ?? {}, this.uploadOptions);
    },
    announce: (request) => this.announceUpload(request),
    write: (uploadId, body, options) => this.writeUpload(uploadId, body, options),
    sweep: () => sweepOrphanUploadFolders(this.uploadOptions.dir),
  };

  /**
   * Registers the app class (all whole-class checks run here) and builds its instance.
   * @throws AppDefinitionError naming class and member; HostOptionError (`invalid_host_option`) for a bad option.
   */
  constructor(appClass: new () => ReactorApp<any, any, any, any>, options: AppHostOptions = {}) {
    this.gracePeriodMs = nonNegative(options.gracePeriodMs, DEFAULT_GRACE_PERIOD_MS, 'gracePeriodMs');
    this.refusalBackoffMs = nonNegative(options.refusalBackoffMs, DEFAULT_REFUSAL_BACKOFF_MS, 'refusalBackoffMs');
    this.statsIntervalMs = nonNegative(options.statsIntervalMs, DEFAULT_STATS_INTERVAL_MS, 'statsIntervalMs');
    if (options.singleController !== undefined && typeof options.singleController !== 'boolean') {
      throw new HostOptionError(`options.singleController must be a boolean, got ${JSON.stringify(options.singleController)}`);
    }
    this.singleController = options.singleController ?? false;
    if (options.weightsPath !== undefined && typeof options.weightsPath !== 'string') {
      throw new HostOptionError(`options.weightsPath must be a string, got ${typeof options.weightsPath}`);
    }
    if (options.logger !== undefined && !isLogger(options.logger)) {
      throw new HostOptionError(
        'options.logger must be a Logger of @reactor/log (debug, info, warn, error and child methods), e.g. consoleLogger() or silentLogger',
      );
    }
    this.logger = options.logger ?? consoleLogger();
    this.uploadOptions = resolveUploadOptions(options.uploads ?? {});
    this.def = describeApp(appClass);
    this.schema = this.def.schema;
    this.ctx = { weightsPath: options.weightsPath, logger: this.logger.child({ app: this.def.appClass.name }) };
    this.app = hostContext.run(this.ctx, () => new appClass());
    this.buffers = new Map(this.def.inputTracks.map((t) => [t.name, new InputBuffer({ name: t.name, capacity: t.capacity })]));
    const input = Object.freeze(Object.fromEntries(this.def.inputTracks.map((t) => [t.property, this.buffers.get(t.name)!])));
    const binding: AppBinding = {
      state: () => this.session?.state,
      send: (message) => this.broadcastMessage(message),
      flush: () => this.flush(),
      clip: (options) =>
        this.clipper
          ? this.clipper(options)
          : Promise.reject(
              new ReactorError(RuntimeErrorCode.ClipsDisabled, 'this host keeps no clip ring: serve the app with `recording:` clips set in reactor.yaml'),
            ),
      broadcastState: () => this.broadcastState(),
      weightsPath: this.ctx.weightsPath,
      logger: this.ctx.logger,
      input,
    };
    this.app[APP_BINDING] = binding;
  }

  /** Where the host stands: loading, ready, a session's phase, or failed. */
  get status(): SessionStatus {
    const clients = this.clients.size;
    const host = this.lifecycle.is('closing', 'closed') ? this.stateBeforeClose : this.lifecycle.state;
    if (host === 'created' || host === 'loading') return { state: 'loading', clients };
    if (host === 'failed') return { state: 'failed', clients, ...(this.loadError ? { error: this.loadError } : {}) };
    const s = this.session;
    if (!s) return { state: 'ready', clients, ...(this.lastSessionError ? { error: this.lastSessionError } : {}) };
    const phase = s.lifecycle.state;
    const state = phase === 'starting' || phase === 'waiting' ? 'waiting' : phase === 'ended' ? 'closing' : phase;
    return {
      state,
      sessionId: s.id,
      clients,
      ...(s.error ? { error: s.error } : {}),
      ...(state === 'streaming' && s.lastRefusal !== undefined ? { refused: s.lastRefusal } : {}),
    };
  }

  /**
   * Whether a new user would get a stream now, and if not, every reason why: the app is loading
   * (`loading`), its load failed (`load_failed`), the host is closing (`closing`), the current
   * session is ending so a new client has to wait (`session_closing`), or the app itself says
   * it is not ready ({@link ReactorApp.readiness}: its own codes, e.g. `runner_unhealthy`,
   * `rank_stalled`, `runner_restarting`; a bare message as `app_not_ready`).
   */
  readiness(): Readiness {
    const reasons: NotReadyReason[] = [];
    switch (this.lifecycle.state) {
      case 'created':
      case 'loading':
        reasons.push({ code: ReadinessCode.Loading, message: 'the app is loading' });
        break;
      case 'failed':
        reasons.push({ code: ReadinessCode.LoadFailed, message: `the app failed to load: ${this.loadError?.message ?? 'unknown error'}` });
        break;
      case 'closing':
      case 'closed':
        reasons.push({ code: ReadinessCode.Closing, message: 'the app host is shutting down' });
        break;
      case 'ready':
        if (this.session?.lifecycle.is('closing')) {
          reasons.push({ code: ReadinessCode.SessionClosing, message: 'the current session is ending; a new one starts when it has' });
        }
        reasons.push(...this.appReadiness());
        break;
    }
    return { ready: reasons.length === 0, reasons };
  }

  /** The app's own report ({@link ReactorApp.readiness}), as reasons. */
  private appReadiness(): NotReadyReason[] {
    let report: AppReadiness;
    try {
      report = hostContext.run(this.ctx, () => this.app.readiness());
    } catch (err) {
      return [{ code: ReadinessCode.AppNotReady, message: `${this.def.appClass.name}.readiness() threw: ${errorText(err)}` }];
    }
    if (report === true) return [];
    const name = this.def.appClass.name;
    const items: readonly unknown[] = Array.isArray(report) ? report : [report];
    const wrong = (value: unknown): NotReadyReason => ({
      code: ReadinessCode.AppNotReady,
      message: `${name}.readiness() returned ${describe(value)}; return true or the reason it is not ready (a message, or { code, message } with a snake_case code)`,
    });
    if (items.length === 0) return [wrong(report)];
    return items.map((item): NotReadyReason => {
      if (typeof item === 'string') return { code: ReadinessCode.AppNotReady, message: item };
      if (isReason(item)) return { code: item.code, message: item.message };
      return wrong(item);
    });
  }

  /** Calls `listener` on every status change; returns the unsubscribe function. */
  onStatus(listener: (status: SessionStatus) => void): () => void {
    this.statusListeners.add(listener);
    return () => this.statusListeners.delete(listener);
  }

  /** Calls `listener` after every step's `generate()` with its model time (failed steps too); returns the unsubscribe function. */
  onStep(listener: (step: { elapsedMs: number; failed: boolean }) => void): () => void {
    this.stepListeners.add(listener);
    return () => this.stepListeners.delete(listener);
  }

  /**
   * Calls `listener` with every frame and audio chunk as it is played out, after the clients'
   * sinks (same objects: read-only); returns the unsubscribe function. For transports that keep
   * what was streamed (the server's clip ring and recorder).
   */
  onMedia(listener: MediaListener): () => void {
    this.mediaListeners.add(listener);
    return () => this.mediaListeners.delete(listener);
  }

  /** Sets what `this.output.clip()` calls (the server's clip ring); `undefined` removes it. */
  setClipper(clipper: ((options: ClipOptions) => Promise<ClipResult>) | undefined): void {
    this.clipper = clipper;
  }

  /**
   * Runs the app's `load(context)` once, with `configPath` and `manifestGpuCount` as given (see
   * `LoadContext`). Status goes loading -> ready (and a session starts if clients are waiting)
   * or -> failed with the reason.
   * @throws HostOptionError (`invalid_host_option`) for a `configPath` that is not a string or a `manifestGpuCount` that is not a non-negative integer.
   * @throws AppLoadError (`load_failed`, cause = what load() threw; `already_loaded` on a second call); HostClosedError (`host_closed`).
   */
  async load(options: { configPath?: string; manifestGpuCount?: number } = {}): Promise<void> {
    const { configPath, manifestGpuCount } = options;
    if (configPath !== undefined && typeof configPath !== 'string')
      throw new HostOptionError(`load() options.configPath must be a string, got ${typeof configPath}`);
    if (manifestGpuCount !== undefined && !(Number.isInteger(manifestGpuCount) && manifestGpuCount >= 0)) {
      throw new HostOptionError(`load() options.manifestGpuCount must be a non-negative integer, got ${JSON.stringify(manifestGpuCount)}`);
    }
    if (this.lifecycle.is('closing', 'closed')) throw new HostClosedError();
    if (!this.lifecycle.is('created')) {
      throw new AppLoadError(
        RuntimeErrorCode.AlreadyLoaded,
        `${this.def.appClass.name} is already ${this.lifecycle.is('loading') ? 'loading' : 'loaded'}; load() runs once per host`,
      );
    }
    this.lifecycle.to('loading');
    this.publishStatus();
    const context: LoadContext = { configPath, manifestGpuCount, logger: this.app.logger };
    try {
      // An async wrapper, so a synchronous load() (or one that throws at once) is tracked too.
      this.loading = hostContext.run(this.ctx, async () => this.app.load(context));
      await this.loading;
    } catch (cause) {
      this.loadError = { code: RuntimeErrorCode.LoadFailed, message: `${this.def.appClass.name}.load() failed: ${errorText(cause)}` };
      if (this.lifecycle.is('loading')) this.lifecycle.to('failed');
      else this.stateBeforeClose = 'failed';
      this.logger.error({ err: cause }, this.loadError.message);
      this.publishStatus();
      throw new AppLoadError(RuntimeErrorCode.LoadFailed, this.loadError.message, { cause });
    }
    // close() began while load() ran: the host stays closing.
    if (!this.lifecycle.is('loading')) return;
    this.lifecycle.to('ready');
    this.publishStatus();
    this.startSessionIfWaiting();
  }

  /** Registers a client; its welcome message is on the sink when this returns. */
  connect(sink: ClientSink, info: ClientInfo = {}): ClientHandle {
    const client = new HostClient(this.clientOwner, `c${++clientCounter}-${randomUUID().slice(0, 8)}`, sink, { ...info });
    if (this.lifecycle.is('closing', 'closed')) {
      client.lifecycle.to('gone');
      sink.message(this.welcome(client));
      sink.close('the app host is closed');
      return client;
    }
    this.clients.set(client.id, client);
    const s = this.session;
    if (s && !s.over) {
      this.join(s, client);
    } else if (!s && this.lifecycle.is('ready')) {
      this.join(this.createSession(info.sessionId), client);
    }
    // Otherwise it waits (`waiting`) until a session can take it: startSessionIfWaiting().
    this.publishStatus(client);
    sink.message(this.welcome(client));
    this.notifyChange();
    return client;
  }

  /**
   * Ends the session (disconnected and sessionEnded hooks run), closes every client's sink and
   * stops all timers, then calls the app's `unload()`. Idempotent: every call resolves when all of that is done.
   */
  close(): Promise<void> {
    // Every caller waits for the same shutdown, unload() included.
    this.closing ??= this.closeOnce();
    return this.closing;
  }

  /**
   * Ends the running session now, as its last viewer leaving would (end hooks run, the runner
   * stays loaded), and closes its clients. `reason` is a text (a session router's
   * `DELETE /sessions`, a drain's deadline: the clients' close reason) or an error (a transport's
   * session limit, `session_time_limit` / `idle_timeout`: clients see the session status with
   * the error first). Resolves false when no session runs.
   */
  async endCurrentSession(reason: string | ErrorBody): Promise<boolean> {
    const s = this.session;
    if (!s || s.over) return false;
    const [error, kick] = typeof reason === 'string' ? [undefined, reason] : [reason, undefined];
    await this.behindStep(async () => {
      if (this.session === s && !s.over) await this.endSession(s, error, kick);
    });
    return true;
  }

  private async closeOnce(): Promise<void> {
    this.stateBeforeClose = this.lifecycle.state;
    this.lifecycle.to('closing');
    await this.behindStep(async () => {
      const s = this.session;
      if (s) await this.endSession(s, undefined, 'the app host is shutting down');
    });
    // Clients still waiting for a session (the app was loading, or had failed).
    for (const c of [...this.clients.values()]) {
      this.clients.delete(c.id);
      if (c.lifecycle.is('waiting', 'joining')) c.lifecycle.to('gone');
      this.safe(c.sink, () => c.sink.close('the app host is shutting down'));
    }
    this.notifyChange();
    await Promise.all([...this.loops]);
    if (this.loading) {
      // A load still running (SIGTERM during start-up) finishes first, so unload() sees what it built.
      await this.loading.then(
        () => undefined,
        () => undefined,
      );
      try {
        await hostContext.run(this.ctx, () => this.app.unload());
      } catch (err) {
        this.logger.error({ err }, `${this.def.appClass.name}.unload() threw (ignored)`);
      }
    }
    this.lifecycle.to('closed');
  }

  // ---- clients ----------------------------------------------------------------------------

  /** What a {@link HostClient} may call back. */
  private readonly clientOwner = {
    toAppMessage: (message: object) => this.toAppMessage(message),
    dispatch: (client: HostClient, msg: CommandMessage) => this.dispatch(client, msg),
    detach: (client: HostClient) => this.detach(client),
    publish: (client: HostClient, id: string, track: string) => this.answer(client, this.publish(client, id, track)),
    unpublish: (client: HostClient, id: string, track: string) => this.answer(client, this.unpublish(client, id, track)),
    publishes: (client: HostClient, track: string) => client.session?.publishers.get(track) === client,
    pushFrame: (client: HostClient, track: string, frame: InboundFrame) => this.pushFrame(client, track, frame),
    countDropped: (count: number) => {
      this.counters.framesDropped += count;
    },
    rebind: (client: HostClient, sink: ClientSink) => this.rebind(client, sink),
    requestControl: (client: HostClient, id: string) => this.answer(client, this.requestControl(client, id)),
    releaseControl: (client: HostClient, id: string) => this.answer(client, this.releaseControl(client, id)),
  };

  // ---- roles and control --------------------------------------------------------------------

  /** A resumed client: its new sink gets a welcome (`resumed: true`) with the current state; everything else carries on. */
  private rebind(client: HostClient, sink: ClientSink): void {
    if (!client.connected) {
      sink.close('this client has left; connect again for a new identity');
      return;
    }
    client.sink = sink;
    this.safe(sink, () => sink.message({ ...this.welcome(client), resumed: true }));
  }

  /** Whether `client` steers: any controller, or in single-controller mode the one holding control. */
  private steers(client: HostClient): boolean {
    if (client.role !== 'controller') return false;
    return !this.singleController || client.session?.controller === client;
  }

  /** The error for a command or publication `client` may not make because of its role, or undefined. */
  private roleError(client: HostClient, id: string, roles: readonly string[], what: string): ErrorMessage | undefined {
    if (roles.includes(client.role) && (client.role !== 'controller' || this.steers(client))) return undefined;
    // A controller without control may still do what a spectator may.
    if (client.role === 'controller' && roles.includes('spectator')) return undefined;
    if (client.role === 'controller' && roles.includes('controller')) {
      const holder = client.session?.controller;
      return errorReply(
        id,
        WireErrorCode.NotController,
        `${what}: ${holder ? `client ${holder.id} holds control` : 'nobody holds control'} of this session (single-controller mode); send request_control and wait for a control message naming you`,
      );
    }
    return errorReply(
      id,
      WireErrorCode.ForbiddenRole,
      `${what}: your role "${client.role}" may not; it takes ${roles.map((r) => `"${r}"`).join(' or ')} (a token with that role)`,
    );
  }

  private controlStatus(session: Session | undefined): { controller: string | null; queue: string[] } {
    return { controller: session?.controller?.id ?? null, queue: session ? session.controlQueue.map((c) => c.id) : [] };
  }

  /** Tells every client of the session who steers now. */
  private publishControl(session: Session): void {
    if (!this.singleController || this.session !== session) return;
    const msg: ServerMessage = { type: 'control', ...this.controlStatus(session) };
    for (const c of session.members) if (c.connected) this.safe(c.sink, () => c.sink.message(msg));
  }

  /**
   * Control passes to the first client waiting for it; when its holder left (not released it)
   * and nobody waits, to the controller of the session that joined first; else to nobody.
   */
  private handOver(session: Session, holderLeft = false): void {
    let next = session.controlQueue.shift();
    while (next && !(next.connected && next.session === session)) next = session.controlQueue.shift();
    if (!next && holderLeft) next = [...session.members].find((c) => c.connected && c.role === 'controller');
    session.controller = next;
    if (next) this.logger.info({ client: next.id }, `control passes to client ${next.id}`);
  }

  private requestControl(client: HostClient, id: string): ReplyMessage | ErrorMessage {
    if (!this.singleController) return { type: 'reply', id, result: { controller: client.role === 'controller', singleController: false } };
    const session = client.session;
    if (!session || session.over || !client.lifecycle.is('joining', 'joined'))
      return errorReply(id, WireErrorCode.NoSession, 'no session is running; ask for control once the session status is streaming');
    if (client.role !== 'controller')
      return errorReply(id, WireErrorCode.ForbiddenRole, `request_control: your role "${client.role}" may not steer; it takes a controller's token`);
    if (session.controller === client) return { type: 'reply', id, result: { controller: true } };
    if (!session.controller) {
      session.controller = client;
      this.publishControl(session);
      return { type: 'reply', id, result: { controller: true } };
    }
    if (!session.controlQueue.includes(client)) session.controlQueue.push(client);
    this.publishControl(session);
    return { type: 'reply', id, result: { controller: false, position: session.controlQueue.indexOf(client) + 1 } };
  }

  private releaseControl(client: HostClient, id: string): ReplyMessage | ErrorMessage {
    const session = client.session;
    if (!this.singleController || !session || session.controller !== client) {
      const queued = session ? session.controlQueue.indexOf(client) : -1;
      if (queued >= 0) {
        // Leaves the queue instead.
        session!.controlQueue.splice(queued, 1);
        this.publishControl(session!);
        return { type: 'reply', id, result: { controller: false } };
      }
      return errorReply(
        id,
        WireErrorCode.NotHoldingControl,
        `release_control: this client does not hold control${this.singleController ? '' : ' (the server is not in single-controller mode)'}`,
      );
    }
    this.handOver(session);
    this.publishControl(session);
    return { type: 'reply', id, result: { controller: false } };
  }

  /** `waiting` -> `joining`: the client is a member; its `@connected` hooks run in their turn. */
  private join(session: Session, client: HostClient): void {
    client.lifecycle.to('joining');
    client.session = session;
    session.members.add(client);
    if (this.singleController && !session.controller && client.role === 'controller') {
      session.controller = client;
      this.publishControl(session);
    }
    void this.task(async () => {
      if (session.over) return;
      // A client that left before its turn is gone: the app never saw it, so no hook runs.
      if (client.lifecycle.is('joining')) {
        client.lifecycle.to('joined');
        await this.runHooks('connected', client);
      }
      this.settle(session);
    });
  }

  // ---- inbound tracks ----------------------------------------------------------------------

  /** Sends a publish/unpublish answer to the client's sink and returns it. */
  private answer(client: HostClient, answer: ReplyMessage | ErrorMessage): ReplyMessage | ErrorMessage {
    if (client.connected) this.safe(client.sink, () => client.sink.message(answer));
    return answer;
  }

  /** Checks that `track` names an inbound track; the error answer otherwise. */
  private inboundTrackError(id: string, track: string): ErrorMessage | undefined {
    if (this.def.inputTrackByName.has(track)) return undefined;
    const shown = JSON.stringify(truncateCodePoints(String(track)));
    if (this.def.tracks.some((t) => t.name === track)) {
      return errorReply(
        id,
        WireErrorCode.WrongTrackDirection,
        `track ${shown} is an outbound track (the app streams it); only inbound tracks can be published`,
      );
    }
    const inbound = this.def.inputTracks.map((t) => t.name);
    return errorReply(id, WireErrorCode.UnknownTrack, `unknown track ${shown}; this app's inbound tracks: ${inbound.join(', ') || '(none)'}`);
  }

  /** First publisher wins for the session; a re-claim, even by the holder, is refused. */
  private publish(client: HostClient, id: string, track: string): ReplyMessage | ErrorMessage {
    const bad = this.inboundTrackError(id, track);
    if (bad) return bad;
    const grant = client.info.publish ?? (client.role === 'controller' ? '*' : []);
    if (grant !== '*' && !grant.includes(track)) {
      return client.role === 'controller'
        ? errorReply(
            id,
            WireErrorCode.PublishNotGranted,
            `track "${track}" is not among the tracks your token lets you publish (${grant.join(', ') || 'none'}); ask for a token whose pub claim lists it`,
          )
        : errorReply(
            id,
            WireErrorCode.ForbiddenRole,
            `publish "${track}": your role "${client.role}" may not publish; it takes a controller's token (or one whose pub claim lists the track)`,
          );
    }
    const session = client.session;
    if (!session || session.over || !client.lifecycle.is('joining', 'joined')) {
      return errorReply(id, WireErrorCode.NoSession, 'no session is running; publish once the session status is streaming');
    }
    const holder = session.publishers.get(track);
    if (holder) {
      const who = holder === client ? 'this client already publishes it (unpublish first)' : `client ${holder.id} publishes it`;
      return errorReply(
        id,
        WireErrorCode.PublishRefused,
        `track "${track}" is taken for this session: ${who}; it is free again when its publisher unpublishes or leaves`,
      );
    }
    if (this.singleController && client.role === 'controller' && !this.steers(client)) {
      const refused = this.roleError(client, id, ['controller'], `publish "${track}"`);
      if (refused) return refused;
    }
    session.publishers.set(track, client);
    this.buffers.get(track)!.reset();
    this.notifyChange();
    void this.task(() => this.announce(session, client, track));
    return { type: 'reply', id };
  }

  private unpublish(client: HostClient, id: string, track: string): ReplyMessage | ErrorMessage {
    const bad = this.inboundTrackError(id, track);
    if (bad) return bad;
    const session = client.session;
    if (!session || session.publishers.get(track) !== client) {
      return errorReply(id, WireErrorCode.NotPublisher, `this client does not publish track "${track}"; nothing to unpublish`);
    }
    session.publishers.delete(track);
    this.buffers.get(track)!.close();
    this.notifyChange();
    void this.task(() => this.unannounce(session, client, track));
    return { type: 'reply', id };
  }

  /** `@trackPublished(track, client)`, under the lock, if `client` still holds `track` and the app knows the client. */
  private async announce(session: Session, client: HostClient, track: string): Promise<void> {
    if (session.over || session.publishers.get(track) !== client || !client.lifecycle.is('joined') || session.announced.has(track)) return;
    session.announced.set(track, client);
    await this.runHooks('trackPublished', undefined, track, client);
  }

  /** `@trackUnpublished(track, client)`, under the lock, once for each `@trackPublished` that ran. */
  private async unannounce(session: Session, client: HostClient, track: string): Promise<void> {
    if (session.announced.get(track) !== client) return;
    session.announced.delete(track);
    await this.runHooks('trackUnpublished', undefined, track, client);
  }

  /** A decoded inbound frame into its track's buffer; dropped (`false`) unless `client` publishes `track` in a live session. */
  private pushFrame(client: HostClient, track: string, frame: InboundFrame): boolean {
    const session = client.session;
    if (!session || session.over || session.publishers.get(track) !== client) return false;
    const spec = this.def.inputTrackByName.get(track)!;
    const problem = inboundFrameProblem(spec, frame);
    if (problem !== undefined) {
      // The transport checks frames before they get here: this is a transport bug, logged once per track.
      if (!this.badFrameWarned.has(track)) {
        this.badFrameWarned.add(track);
        this.logger.warn({ track, client: client.id }, `dropped an inbound frame of track "${track}": ${problem} (further ones are dropped silently)`);
      }
      return false;
    }
    const buffer = this.buffers.get(track)!;
    const evicts = buffer.available === buffer.capacity;
    const accepted = buffer.push(
      new InputFrame({
        data: frame.data,
        // An audio frame's header carries its sample count as `width`: not a frame size.
        width: spec.kind === 'video' ? frame.width : undefined,
        height: spec.kind === 'video' ? frame.height : undefined,
        sampleRate: spec.kind === 'audio' ? spec.sampleRate : undefined,
        ptsMs: frame.ptsMs,
        receivedAtMs: frame.receivedAtMs,
        metadata: frame.metadata,
      }),
    );
    if (!accepted) return false;
    this.counters.inputFramesAccepted++;
    if (evicts) this.counters.inputFramesEvicted++;
    // Wakes a loop whose step was refused for want of input.
    this.notifyChange();
    return true;
  }

  /** Releases every track `client` publishes (it left): their buffers close. */
  private releaseTracks(session: Session, client: HostClient): void {
    for (const [track, holder] of session.publishers) {
      if (holder !== client) continue;
      session.publishers.delete(track);
      this.buffers.get(track)!.close();
    }
  }

  /** Closes every input buffer: pending reads reject with `BufferClosedError`. */
  private closeBuffers(): void {
    for (const b of this.buffers.values()) b.close();
  }

  /** A client left (the transport's `disconnect()`). */
  private detach(client: HostClient): void {
    if (!client.connected) return;
    this.clients.delete(client.id);
    const s = client.session;
    s?.members.delete(client);
    if (s) this.releaseTracks(s, client);
    if (s && this.singleController) {
      const queued = s.controlQueue.indexOf(client);
      if (queued >= 0) s.controlQueue.splice(queued, 1);
      if (s.controller === client) this.handOver(s, true);
      if (queued >= 0 || s.controller !== client) this.publishControl(s);
    }
    if (client.lifecycle.is('joined') && s && !s.lifecycle.is('ended')) {
      client.lifecycle.to('leaving');
      s.leaving.add(client);
    } else {
      client.lifecycle.to('gone');
    }
    this.publishStatus();
    this.notifyChange();
    if (!s || s.lifecycle.is('ended')) return;
    void this.task(async () => {
      await this.finishLeaving(s, client);
      this.settle(s);
    });
  }

  /** `leaving` -> `gone`, running `@disconnected`; a no-op for a client already gone (the session's end ran it). */
  private async finishLeaving(session: Session, client: HostClient): Promise<void> {
    if (!session.leaving.delete(client)) return;
    client.lifecycle.to('gone');
    for (const [track, holder] of [...session.announced]) if (holder === client) await this.unannounce(session, client, track);
    await this.runHooks('disconnected', client);
  }

  /** Runs `@disconnected` for every client that left the session, in the order they left. */
  private async drainLeaving(session: Session): Promise<void> {
    for (let next = first(session.leaving); next; next = first(session.leaving)) await this.finishLeaving(session, next);
  }

  private welcome(client: HostClient): WelcomeMessage {
    const s = this.session;
    return {
      type: 'welcome',
      protocol: this.schema.protocol,
      clientId: client.id,
      app: this.schema.app,
      schema: this.schema,
      // A client still waiting for a session gets `{}` here and the state when it joins one.
      state: s && !s.over && client.session === s ? this.def.state.snapshot(s.state) : {},
      session: this.status,
      role: client.role,
      ...(this.singleController && { control: this.controlStatus(client.session === s ? s : undefined) }),
    };
  }

  // ---- sessions ---------------------------------------------------------------------------

  /** A new session; `chosenId` (a session router's id, see `ClientInfo.sessionId`) when it is label-safe. */
  private createSession(chosenId?: string): Session {
    const state = this.def.state.createDefaults();
    const playout = new Playout(
      this.def.tracks,
      this.def.bufferSize,
      performance.now(),
      (frame) => this.emitFrame(session, frame),
      (chunk) => this.emitAudio(session, chunk),
    );
    const session: Session = new Session(state, playout, chosenId !== undefined && CHOSEN_SESSION_ID.test(chosenId) ? chosenId : undefined);
    this.session = session;
    this.lastSessionError = undefined;
    this.counters.sessions++;
    // Streaming begins once the first client's @connected hooks have run (their task follows this one).
    void this.task(async () => {
      if (session.over) return;
      await this.runHooks('sessionStarted');
      if (session.lifecycle.is('starting')) session.lifecycle.to('waiting');
    });
    return session;
  }

  /** Starts a session for the clients that wait for one, once the app is loaded and no session runs. */
  private startSessionIfWaiting(): void {
    if (!this.lifecycle.is('ready') || this.session) return;
    const waiting = [...this.clients.values()].filter((c) => c.lifecycle.is('waiting'));
    if (waiting.length === 0) return;
    const s = this.createSession(waiting.find((c) => c.info.sessionId !== undefined)?.info.sessionId);
    for (const c of waiting) this.join(s, c);
    this.publishStatus();
    // Their welcome carried no state: they get it as soon as they are in the session.
    const msg: ServerMessage = { type: 'state', state: this.def.state.snapshot(s.state) };
    for (const c of waiting) this.safe(c.sink, () => c.sink.message(msg));
  }

  /** Brings a started session's state in line with its members: `streaming` (loop and stats run) or `orphaned` (grace timer runs). */
  private settle(session: Session): void {
    if (this.session !== session || !session.live) return;
    if (session.members.size > 0) {
      if (session.graceTimer) clearTimeout(session.graceTimer);
      session.graceTimer = undefined;
      if (!session.lifecycle.is('streaming')) session.lifecycle.to('streaming');
      this.ensureLoop(session);
      this.ensureStats(session);
    } else if (!session.lifecycle.is('orphaned')) {
      session.lifecycle.to('orphaned');
      session.graceTimer = setTimeout(() => {
        session.graceTimer = undefined;
        void this.task(async () => {
          if (this.session === session && session.lifecycle.is('orphaned') && session.members.size === 0) await this.endSession(session, undefined, undefined);
        });
      }, this.gracePeriodMs);
      session.graceTimer.unref();
    }
    this.publishStatus();
  }

  /**
   * Ends a session; runs under the step lock. With `error`, clients are told (session status
   * with the error) and their sinks closed; with `kickReason` (host shutdown), sinks are closed.
   *
   * The order at a session's end, for every way it ends, is written here and nowhere else:
   * 1. the session goes `closing`: timers stop, playout stops, clients see `closing`;
   * 2. `@disconnected` for each client that had already left, in the order they left;
   * 3. `@disconnected` for each client this end removes (error or shutdown), in join order
   *    (only for clients whose `@connected` ran);
   * 4. `@sessionEnded`;
   * 5. the session is `ended` and its state dropped; removed clients' sinks are closed;
   * 6. clients that arrived while it was closing get a new session.
   */
  private async endSession(session: Session, error: ErrorBody | undefined, kickReason: string | undefined): Promise<void> {
    if (session.over) return;
    session.lifecycle.to('closing');
    session.error = error;
    session.clearTimers();
    session.playout.close();
    this.publishStatus();
    this.notifyChange();
    this.releaseAllTracks(session, error ? `the session ended: ${error.message}` : (kickReason ?? 'the session ended'));
    await this.drainLeaving(session);
    const kicked = error !== undefined || kickReason !== undefined ? [...session.members] : [];
    for (const c of kicked) {
      this.clients.delete(c.id);
      session.members.delete(c);
      if (c.lifecycle.is('joined')) {
        c.lifecycle.to('leaving');
        session.leaving.add(c);
      } else if (c.lifecycle.is('joining')) {
        c.lifecycle.to('gone');
      }
      await this.finishLeaving(session, c);
    }
    // Clients that left while those hooks ran.
    await this.drainLeaving(session);
    await this.runHooks('sessionEnded');
    // The session's files go with it, after the hooks that may still read them.
    if (session.uploads) {
      try {
        await session.uploads.close();
      } catch (err) {
        this.logger.error({ err }, "removing the session's uploads failed");
      }
    }
    session.lifecycle.to('ended');
    session.announced.clear();
    for (const b of this.buffers.values()) b.reset();
    this.session = undefined;
    this.lastSessionError = error;
    const reason = error ? `the session ended: ${error.message}` : (kickReason ?? 'session ended');
    for (const c of kicked) this.safe(c.sink, () => c.sink.close(reason));
    this.publishStatus();
    this.startSessionIfWaiting();
  }

  /**
   * The session is ending: every track's publisher still connected gets `track_released`, the
   * buffers close (no frame enters any more; `@trackUnpublished` hooks follow with the clients'
   * `@disconnected`), and the tracks are free for the next session.
   */
  private releaseAllTracks(session: Session, reason: string): void {
    for (const [track, holder] of session.publishers) {
      if (holder.connected) this.safe(holder.sink, () => holder.sink.message({ type: 'track_released', track, reason }));
    }
    session.publishers.clear();
    this.closeBuffers();
  }

  private ensureStats(session: Session): void {
    if (session.statsTimer || this.statsIntervalMs === 0) return;
    let last = performance.now();
    session.statsTimer = setInterval(() => {
      if (!session.lifecycle.is('streaming')) return;
      const now = performance.now();
      const seconds = Math.max(1e-3, (now - last) / 1000);
      last = now;
      const fps = session.playout.takeWindow() / seconds;
      const stepMs = session.windowSteps > 0 ? session.windowModelMs / session.windowSteps : 0;
      session.windowSteps = 0;
      session.windowModelMs = 0;
      for (const c of session.members) {
        this.safe(c.sink, () => c.sink.message({ type: 'stats', steps: session.steps, stepMs: round(stepMs), fps: round(fps), dropped: c.dropped }));
      }
    }, this.statsIntervalMs);
    session.statsTimer.unref();
  }

  // ---- the step loop ----------------------------------------------------------------------

  private ensureLoop(session: Session): void {
    if (session.loop || !this.lifecycle.is('ready')) return;
    // The handle is in place before the loop starts, so the loop can clear it the moment it stops.
    const handle = {};
    session.loop = handle;
    const p = hostContext.run(this.ctx, () => this.runLoop(session, handle));
    this.loops.add(p);
    void p.finally(() => this.loops.delete(p));
  }

  private async runLoop(session: Session, handle: object): Promise<void> {
    try {
      await this.loopSteps(session);
    } finally {
      if (session.loop === handle) session.loop = undefined;
    }
  }

  private async loopSteps(session: Session): Promise<void> {
    while (session.lifecycle.is('streaming') && this.session === session) {
      const version = this.changeVersion;
      let chunk: Chunk | undefined;
      let refused = false;
      await this.lock.run(async () => {
        if (!session.lifecycle.is('streaming')) return;
        const r = await this.step(session);
        if (r === 'refused') refused = true;
        else chunk = r;
      }, 'step');
      if (refused) {
        await this.waitForChange(version, this.refusalBackoffMs);
        // Whatever woke it, let I/O and timers run before the next try.
        await yieldToEventLoop();
        continue;
      }
      if (chunk) {
        // Media leaves outside the lock: commands run while this waits for room.
        await session.playout.push(chunk);
      }
      // A model that answers synchronously would otherwise keep the loop in microtasks and
      // starve I/O (sockets, timers): give the event loop one turn per step.
      await yieldToEventLoop();
    }
  }

  /** One step, under the lock. Returns the media to emit, `'refused'`, or undefined (nothing / session ended). */
  private async step(session: Session): Promise<Chunk | 'refused' | undefined> {
    const interrupt = new AbortController();
    // Tasks queued behind this step: a read that would wait gives way at once.
    if (this.tasksWaiting > 0) interrupt.abort(stepGaveWay());
    session.stepInterrupt = interrupt;
    try {
      return await stepInterrupt.run(interrupt.signal, () => this.runStep(session));
    } finally {
      session.stepInterrupt = undefined;
    }
  }

  private async runStep(session: Session): Promise<Chunk | 'refused' | undefined> {
    const app = this.app;
    let input: unknown;
    try {
      input = await app.processInput();
    } catch (err) {
      if (err instanceof ApplicationError || isInputUnavailable(err)) return this.refuse(session, err.message);
      await this.failSession(session, 'processInput', err);
      return undefined;
    }
    const t0 = performance.now();
    let result: unknown;
    let error: unknown;
    try {
      result = await app.generate(input);
    } catch (err) {
      // A model that reads a closed (or silent) input track is waiting for a publisher, not broken.
      if (isInputUnavailable(err)) return this.refuse(session, err.message);
      if (session.stepInterrupt?.signal.aborted && err === session.stepInterrupt.signal.reason) return this.refuse(session, (err as Error).message, false);
      error = err ?? new Error('generate() threw a nullish value');
      this.counters.modelErrors++;
    }
    if (session.lastRefusal !== undefined) {
      session.lastRefusal = undefined;
      this.publishStatus();
    }
    const elapsedMs = performance.now() - t0;
    session.steps++;
    session.windowSteps++;
    session.windowModelMs += elapsedMs;
    this.counters.steps++;
    for (const l of this.stepListeners) this.safe(l, () => l({ elapsedMs, failed: error !== undefined }));
    let output: Output | null | undefined;
    try {
      output = await app.processOutput(new StepOutcome(result, error, elapsedMs));
      if (output === null || output === undefined) return undefined;
      return normalizeOutput(this.def, output, elapsedMs);
    } catch (err) {
      await this.failSession(session, 'processOutput', err);
      return undefined;
    }
  }

  /** Counts a refused step and logs its reason once (until a step runs or the reason changes). */
  /**
   * A refused step: logged, and (unless `tell` is false: a step that gave way to a command) the
   * reason goes into the session status (`refused`) while it lasts, so clients can say why no
   * frame comes (`paused`, a runner that could not be rebuilt, a track with no publisher).
   */
  private refuse(session: Session, reason: string, tell = true): 'refused' {
    this.counters.refusedSteps++;
    if (tell && session.lastRefusal !== reason) {
      session.lastRefusal = reason;
      this.logger.info(`step refused: ${reason}`);
      this.publishStatus();
    }
    return 'refused';
  }

  private async failSession(session: Session, where: string, err: unknown): Promise<void> {
    this.logger.error({ err }, `${this.def.appClass.name}.${where}() threw; ending the session`);
    const code = typeof (err as { code?: unknown })?.code === 'string' ? ` [${(err as { code: string }).code}]` : '';
    await this.endSession(session, { code: RuntimeErrorCode.SessionFailed, message: `${where}() failed: ${errorText(err)}${code}` }, undefined);
  }

  /** Resolves on the next change (command, client, flush) after `version`, or after `ms`. */
  private waitForChange(version: number, ms: number): Promise<void> {
    if (this.changeVersion !== version) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        this.changeWaiters = this.changeWaiters.filter((w) => w !== done);
        resolve();
      }, ms);
      this.changeWaiters.push(done);
    });
  }

  private notifyChange(): void {
    this.changeVersion++;
    const waiters = this.changeWaiters;
    if (waiters.length === 0) return;
    this.changeWaiters = [];
    for (const w of waiters) w();
  }

  // ---- commands ---------------------------------------------------------------------------

  /** Runs one command for `client` under the lock; the answer goes to its sink and is returned. */
  private async dispatch(client: HostClient, msg: CommandMessage): Promise<ReplyMessage | ErrorMessage> {
    const id = typeof msg?.id === 'string' ? msg.id : '';
    let answer: ReplyMessage | ErrorMessage;
    try {
      const refs = this.uploadRefs(client, msg);
      if (refs.length === 0 && client.uploadChain === undefined) {
        answer = await this.task(() => this.execute(client, msg, id));
      } else {
        // Upload references are resolved outside the lock (a wait for bytes must not hold the
        // step loop), and the client's later commands queue behind this one: arrival order holds.
        const run = (client.uploadChain ?? Promise.resolve()).then(async () => {
          const resolved = await this.resolveUploads(client, refs, id);
          if (!(resolved instanceof Map)) return resolved;
          return this.task(() => this.execute(client, msg, id, resolved));
        });
        const chain = run.catch(() => undefined);
        client.uploadChain = chain;
        void chain.then(() => {
          if (client.uploadChain === chain) client.uploadChain = undefined;
        });
        answer = await run;
      }
    } catch (err) {
      this.logger.error({ err }, 'command dispatch failed');
      answer = errorReply(id, WireErrorCode.InternalError, 'the command failed inside the server; the server log has the details');
    }
    if (answer.type === 'error') this.counters.commandErrors++;
    if (client.connected) this.safe(client.sink, () => client.sink.message(answer));
    this.notifyChange();
    return answer;
  }

  private async execute(client: HostClient, msg: CommandMessage, id: string, uploads?: Map<string, UploadedFile>): Promise<ReplyMessage | ErrorMessage> {
    this.counters.commands++;
    const name = msg?.name;
    const spec = typeof name === 'string' ? this.def.commands.get(name) : undefined;
    if (!spec) {
      const shown = typeof name === 'string' ? truncateCodePoints(name) : name;
      return errorReply(
        id,
        WireErrorCode.UnknownCommand,
        `unknown command ${JSON.stringify(shown)}; this app has: ${[...this.def.commands.keys()].join(', ') || '(none)'}`,
      );
    }
    const refused = this.roleError(client, id, spec.roles, `command ${spec.name}`);
    if (refused) return refused;
    const session = this.session;
    if (!client.lifecycle.is('joining', 'joined') || !session || session.over || client.session !== session) {
      return errorReply(
        id,
        WireErrorCode.NoSession,
        `no session is running${this.status.state === 'loading' ? ' yet: the app is still loading' : ''}; try again once the session status is streaming`,
      );
    }
    // Absent params mean none; `null` is not absent (the docs say an object or nothing) and is refused below.
    let params = msg.params === undefined ? {} : msg.params;
    if (typeof params !== 'object' || params === null || Array.isArray(params)) {
      return {
        type: 'error',
        id,
        code: WireErrorCode.InvalidParams,
        message: 'params must be a JSON object',
        details: [{ field: 'params', constraint: 'isObject', message: 'params must be an object' }],
      };
    }
    if (uploads && uploads.size > 0) params = { ...params, ...Object.fromEntries(uploads) };
    return spec.kind === 'setter' ? this.runSetter(spec, session, params, id) : this.runEvent(spec, client, params, id);
  }

  // ---- uploads ------------------------------------------------------------------------------

  /** The upload fields a command may carry (the setter's field, or the event's upload params). */
  private uploadFieldsOf(name: unknown): readonly FieldSpec[] {
    const spec = typeof name === 'string' ? this.def.commands.get(name) : undefined;
    if (!spec) return [];
    if (spec.kind === 'setter') return spec.field?.upload ? [spec.field] : [];
    return spec.params?.publicFields.filter((f) => f.upload) ?? [];
  }

  /**
   * The well-formed upload references (`{"uploadId": "<string>"}`) in a command for a session
   * this client is in; anything else is left to validation (`invalid_params`) or to the checks
   * `execute()` makes first (`unknown_command`, `no_session`).
   */
  private uploadRefs(client: HostClient, msg: CommandMessage): Array<{ field: FieldSpec; uploadId: string }> {
    const fields = this.uploadFieldsOf(msg?.name);
    const params = msg?.params;
    if (fields.length === 0 || typeof params !== 'object' || params === null || Array.isArray(params)) return [];
    if (!client.session || client.session.over) return [];
    const refs: Array<{ field: FieldSpec; uploadId: string }> = [];
    for (const field of fields) {
      const v = (params as Record<string, unknown>)[field.wire];
      if (typeof v !== 'object' || v === null || Array.isArray(v)) continue;
      const keys = Object.keys(v);
      const uploadId = (v as Record<string, unknown>).uploadId;
      if (keys.length === 1 && typeof uploadId === 'string') refs.push({ field, uploadId });
    }
    return refs;
  }

  /**
   * Resolves each reference to its stored file (waiting up to `resolveWaitMs` for bytes still
   * arriving) and checks it against its field: the files by wire name, or the error answer
   * (`unresolved_upload`, `upload_rejected`).
   */
  private async resolveUploads(
    client: HostClient,
    refs: ReadonlyArray<{ field: FieldSpec; uploadId: string }>,
    id: string,
  ): Promise<Map<string, UploadedFile> | ErrorMessage> {
    const files = new Map<string, UploadedFile>();
    const session = client.session;
    if (!session || session.over) return files; // execute() answers no_session
    const waitMs = this.uploadOptions.resolveWaitMs;
    const results = await Promise.all(
      refs.map(async ({ field, uploadId }) => {
        try {
          if (!session.uploads)
            throw new UnresolvedUpload(
              `no upload ${JSON.stringify(uploadId.slice(0, 64))} in this session: upload the file first (POST /uploads, then PUT its bytes)`,
            );
          return { field, file: await session.uploads.resolve(uploadId, waitMs) };
        } catch (err) {
          return { field, error: (err as Error).message };
        }
      }),
    );
    for (const r of results) {
      if (r.error !== undefined) return errorReply(id, WireErrorCode.UnresolvedUpload, `${r.field.wire}: ${r.error}`);
      const { field, file } = r as { field: FieldSpec; file: UploadedFile };
      const { maxBytes, mimeTypes } = field.upload!;
      if (maxBytes !== undefined && file.size > maxBytes) {
        return errorReply(
          id,
          WireErrorCode.UploadRejected,
          `${field.wire} takes files of at most ${maxBytes} bytes; upload ${JSON.stringify(truncateCodePoints(file.name))} has ${file.size}`,
        );
      }
      if (mimeTypes !== undefined && !mimeMatches(file.mimeType, mimeTypes)) {
        return errorReply(
          id,
          WireErrorCode.UploadRejected,
          `${field.wire} takes ${mimeTypes.join(', ')}; upload ${JSON.stringify(truncateCodePoints(file.name))} is ${file.mimeType}`,
        );
      }
      files.set(field.wire, file);
    }
    return files;
  }

  /** `uploads.announce()`: into the current session's store (made on first use). */
  private announceUpload(request: unknown): UploadTicket {
    const session = this.session;
    if (!session || session.over || this.lifecycle.is('closing', 'closed')) {
      throw new UploadError(RuntimeErrorCode.UploadNoSession, 'no session is running, so there is nothing to upload to; connect a client first, then upload');
    }
    session.uploads ??= new UploadStore(
      () => this.uploadOptions,
      (file, clientId) => this.fileStored(session, file, clientId),
    );
    return session.uploads.announce(request, (target) => this.uploadLimit(target));
  }

  /**
   * What an announced file must fit: the upload field its announcement names (`command`, and
   * `field` when the command has several), else every upload field of the app together (the
   * largest `maxBytes` when each declares one, the union of their types when each declares
   * them). An app with a `@fileUploaded` hook takes any upload the server takes when none is named.
   * @throws UploadError `upload_invalid_request` for a command or field the app does not have.
   */
  private uploadLimit(target: UploadTarget): UploadFieldLimit | undefined {
    const bad = (why: string): UploadError => new UploadError(RuntimeErrorCode.UploadInvalidRequest, why);
    const all = [...this.def.commands.keys()].flatMap((c) => this.uploadFieldsOf(c).map((field) => ({ command: c, field })));
    const list = (fs: ReadonlyArray<{ command: string; field: FieldSpec }>): string => fs.map((f) => `${f.command}.${f.field.wire}`).join(', ');
    let fields = all;
    let what: string;
    if (target.command !== undefined) {
      const shown = JSON.stringify(target.command.slice(0, 64));
      if (!this.def.commands.has(target.command)) throw bad(`no command ${shown}; the upload fields of this app: ${list(all) || '(none)'}`);
      fields = all.filter((f) => f.command === target.command);
      if (fields.length === 0) throw bad(`command ${shown} takes no file; the upload fields of this app: ${list(all) || '(none)'}`);
      if (target.field !== undefined) {
        const own = fields;
        fields = own.filter((f) => f.field.wire === target.field);
        if (fields.length === 0)
          throw bad(`command ${shown} has no upload field ${JSON.stringify(target.field.slice(0, 64))}; its upload fields: ${list(own)}`);
      }
      what = fields.length === 1 ? list(fields) : `each of ${list(fields)}`;
    } else {
      if (all.length === 0 || this.def.hooks.fileUploaded.length > 0) return undefined;
      what = all.length === 1 ? list(all) : `any upload field of this app (${list(all)})`;
    }
    const sizes = fields.map((f) => f.field.upload!.maxBytes);
    const types = fields.map((f) => f.field.upload!.mimeTypes);
    return {
      maxBytes: sizes.every((b) => b !== undefined) ? Math.max(...(sizes as number[])) : undefined,
      mimeTypes: types.every((t) => t !== undefined) ? [...new Set(types.flat() as string[])] : undefined,
      what,
    };
  }

  /** `uploads.write()`: an upload of the current session. */
  private async writeUpload(uploadId: string, body: AsyncIterable<Uint8Array>, options?: { contentLength?: number }): Promise<UploadInfo> {
    const store = this.session?.uploads;
    if (!store || typeof uploadId !== 'string') {
      throw new UploadError(
        RuntimeErrorCode.UploadNotFound,
        `no upload ${JSON.stringify(String(uploadId).slice(0, 64))}: never announced, expired, or of a session that ended; announce the file again with POST /uploads`,
      );
    }
    const file = await store.write(uploadId, body, options);
    return file.toJSON();
  }

  /** A file's bytes are stored: `@fileUploaded` hooks run in their turn, with the uploader when it is in the session. */
  private fileStored(session: Session, file: UploadedFile, clientId: string | undefined): void {
    this.notifyChange();
    if (this.def.hooks.fileUploaded.length === 0) return;
    void this.task(async () => {
      if (this.session !== session || session.over) return;
      const c = clientId === undefined ? undefined : this.clients.get(clientId);
      const client = c && c.session === session && c.lifecycle.is('joined') ? c : undefined;
      for (const method of this.def.hooks.fileUploaded) {
        try {
          await (this.app as unknown as Record<string, (f: UploadedFile, c?: Client) => unknown>)[method]!.call(this.app, file, client);
        } catch (err) {
          this.logger.error({ err }, `@fileUploaded hook ${this.def.appClass.name}.${method} threw (ignored)`);
        }
      }
    });
  }

  private async runSetter(spec: CommandSpec, session: Session, params: Record<string, unknown>, id: string): Promise<ReplyMessage | ErrorMessage> {
    const field = spec.field!;
    const details = Object.keys(params)
      .filter((k) => k !== field.wire)
      .map(unknownKey);
    if (!Object.prototype.hasOwnProperty.call(params, field.wire)) {
      details.push({ field: field.wire, constraint: 'required', message: `${field.wire} is required` });
    } else {
      details.push(...(await this.def.state.validateField(field, params[field.wire])));
    }
    if (details.length > 0) return invalidParams(id, spec.name, details);
    (session.state as unknown as Record<string, unknown>)[field.property] = params[field.wire];
    this.broadcastState();
    return { type: 'reply', id };
  }

  private async runEvent(spec: CommandSpec, client: HostClient, params: Record<string, unknown>, id: string): Promise<ReplyMessage | ErrorMessage> {
    let value: object = {};
    if (spec.params) {
      const v = await spec.params.validatePayload(params);
      if (!v.ok) return invalidParams(id, spec.name, v.errors);
      value = v.value;
    } else {
      const extra = Object.keys(params);
      if (extra.length > 0) return invalidParams(id, spec.name, extra.map(unknownKey));
    }
    try {
      const handler = (this.app as unknown as Record<string, (p: object, c: Client) => unknown>)[spec.method!]!;
      const result = await handler.call(this.app, value, client);
      return result === undefined ? { type: 'reply', id } : { type: 'reply', id, result };
    } catch (err) {
      if (err instanceof CommandError) return errorReply(id, err.code, err.message);
      this.logger.error({ err }, `command ${spec.name} (${this.def.appClass.name}.${spec.method}) threw`);
      return errorReply(id, WireErrorCode.InternalError, `command ${spec.name} failed inside the app; the server log has the details`);
    }
  }

  // ---- messages and media -----------------------------------------------------------------

  /** Builds the wire message for a declared message instance. */
  private toAppMessage(message: object): ServerMessage {
    const spec = message !== null && typeof message === 'object' ? this.def.messages.get(message.constructor as AnyClass) : undefined;
    if (!spec) {
      const what = message !== null && typeof message === 'object' ? message.constructor.name : typeof message;
      throw new MessageNotDeclaredError(`${what} is not a declared message type of ${this.def.appClass.name}; add it to @reactorApp({ messages: [...] })`);
    }
    const data: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(message)) data[toSnakeCase(k)] = v;
    return { type: 'message', name: spec.name, data };
  }

  /**
   * `this.send()`: to every client of the session whose `@connected` hooks have run. A client
   * still `joining` is not there yet for the app: its `@connected` hook greets it (the first
   * client of a session would otherwise get a `@sessionStarted` broadcast and its greeting).
   */
  private broadcastMessage(message: object): void {
    const msg = this.toAppMessage(message);
    const s = this.session;
    if (!s || s.lifecycle.is('ended')) return;
    for (const c of s.members) if (c.lifecycle.is('joined')) this.safe(c.sink, () => c.sink.message(msg));
  }

  private broadcastState(): void {
    const s = this.session;
    if (!s || s.lifecycle.is('ended')) return;
    const msg: ServerMessage = { type: 'state', state: this.def.state.snapshot(s.state) };
    for (const c of s.members) this.safe(c.sink, () => c.sink.message(msg));
  }

  private flush(): void {
    const s = this.session;
    if (!s || s.lifecycle.is('ended')) return;
    const nextSeq = s.playout.flush();
    const msg: ServerMessage = { type: 'flush', nextSeq };
    for (const c of s.members) this.safe(c.sink, () => c.sink.message(msg));
    // A flush from a command or hook wakes a refused loop; one from inside a step does not
    // count as a change (the step itself decides), or a step that flushes and refuses would spin.
    if (this.lock.holder !== 'step') this.notifyChange();
  }

  private emitFrame(session: Session, frame: OutputFrame): void {
    this.counters.framesPlayed++;
    for (const c of session.members) {
      try {
        c.sink.frame(frame);
      } catch (err) {
        this.safe(c.sink, () => {
          throw err;
        });
      }
    }
    for (const l of this.mediaListeners) this.safe(l, () => l.frame(frame));
  }

  private emitAudio(session: Session, chunk: OutputAudio): void {
    this.counters.audioChunksPlayed++;
    for (const c of session.members) {
      try {
        c.sink.audio?.(chunk);
      } catch (err) {
        this.safe(c.sink, () => {
          throw err;
        });
      }
    }
    for (const l of this.mediaListeners) this.safe(l, () => l.audio(chunk));
  }

  // ---- plumbing ---------------------------------------------------------------------------

  /** Runs `fn` under the step lock, inside this host's context. */
  private task<T>(fn: () => Promise<T>): Promise<T> {
    return this.behindStep(() => hostContext.run(this.ctx, fn));
  }

  /**
   * Runs `fn` under the step lock as a task that a step must not hold up: a step waiting in an
   * `InputBuffer` read (now, or one that starts before this task's turn) gives way: the read
   * rejects, the step is refused and retried after the task. Commands and hooks never wait for a frame.
   */
  private behindStep<T>(fn: () => Promise<T>): Promise<T> {
    this.tasksWaiting++;
    if (this.lock.holder === 'step') this.session?.stepInterrupt?.abort(stepGaveWay());
    return this.lock.run(() => {
      this.tasksWaiting--;
      return fn();
    });
  }

  /** Runs the app's `kind` hooks in order, with `client` (or, for track hooks, `track, client`); a throw is logged and ignored. */
  private async runHooks(kind: HookKind, client?: HostClient, ...trackArgs: [string, HostClient] | []): Promise<void> {
    const args: unknown[] = trackArgs.length > 0 ? trackArgs : [client];
    for (const method of this.def.hooks[kind]) {
      try {
        await (this.app as unknown as Record<string, (...a: unknown[]) => unknown>)[method]!.apply(this.app, args);
      } catch (err) {
        this.logger.error({ err }, `@${kind} hook ${this.def.appClass.name}.${method} threw (ignored)`);
      }
    }
  }

  /** Calls into a sink or listener, which must not throw; one that does is logged and must not break the host. */
  private safe(owner: object, fn: () => void): void {
    try {
      fn();
    } catch (err) {
      // Once per sink: a broken one would otherwise log every frame.
      if (this.warned.has(owner)) return;
      this.warned.add(owner);
      this.logger.warn({ err }, 'a client sink or status listener threw (ignored)');
    }
  }

  /** Sends the status to every client (but `except`, which gets it in its welcome) when it changed. */
  private publishStatus(except?: HostClient): void {
    const status = this.status;
    const json = JSON.stringify(status);
    if (json === this.lastStatusJson) return;
    this.lastStatusJson = json;
    const msg: ServerMessage = { type: 'session', session: status };
    for (const c of this.clients.values()) if (c !== except && c.connected) this.safe(c.sink, () => c.sink.message(msg));
    for (const l of this.statusListeners) this.safe(l, () => l(status));
  }
}

/** Why a step's read gave way (a refusal: the step is retried). */
function stepGaveWay(): ApplicationError {
  return new ApplicationError('a read of an input track gave way to a command or hook queued behind the step; the step is retried');
}

/** A step error that means "no input yet" (the track's publisher left, or a read timed out): the step is refused, not failed. */
function isInputUnavailable(err: unknown): err is BufferClosedError | BufferTimeoutError {
  return err instanceof BufferClosedError || err instanceof BufferTimeoutError;
}

/** Why an inbound frame does not fit its track (the transport should have refused it), or undefined. */
function inboundFrameProblem(spec: InputTrackSpec, frame: InboundFrame): string | undefined {
  if (frame === null || typeof frame !== 'object') return 'not a frame object';
  if (spec.kind === 'audio') {
    if (!(frame.data instanceof Int16Array) || frame.data.length === 0) return 'audio data must be a non-empty Int16Array of mono PCM samples';
    if (frame.sampleRate !== undefined && frame.sampleRate !== spec.sampleRate)
      return `sample rate ${frame.sampleRate} Hz, the track's is ${spec.sampleRate} Hz`;
    return undefined;
  }
  const { width, height, data } = frame;
  if (!(data instanceof Uint8Array)) return 'video data must be a Uint8Array of RGB24 bytes';
  if (!Number.isInteger(width) || !Number.isInteger(height) || width! < 1 || height! < 1) return `bad frame size ${String(width)}x${String(height)}`;
  if (width! > spec.maxWidth! || height! > spec.maxHeight!) return `frame ${width}x${height} exceeds the track's limit ${spec.maxWidth}x${spec.maxHeight}`;
  if (data.length !== width! * height! * 3) return `${data.length} bytes for a ${width}x${height} RGB24 frame (needs ${width! * height! * 3})`;
  return undefined;
}

function first<T>(set: Set<T>): T | undefined {
  for (const x of set) return x;
  return undefined;
}

function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

function nonNegative(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0)
    throw new HostOptionError(`options.${name} must be a non-negative number of ms, got ${String(value)}`);
  return value;
}

function isLogger(value: unknown): value is Logger {
  if (value === null || typeof value !== 'object') return false;
  const v = value as Record<string, unknown>;
  return ['debug', 'info', 'warn', 'error', 'child'].every((m) => typeof v[m] === 'function');
}

function errorText(err: unknown): string {
  if (err instanceof Error) return `${err.name}: ${err.message}`;
  return String(err);
}

/** A `{ code, message }` readiness reason with a snake_case code and a string message. */
function isReason(value: unknown): value is { code: string; message: string } {
  if (typeof value !== 'object' || value === null) return false;
  const { code, message } = value as Record<string, unknown>;
  return typeof code === 'string' && /^[a-z][a-z0-9_]*$/.test(code) && typeof message === 'string';
}

function describe(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}
