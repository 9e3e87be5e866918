import { randomUUID } from 'node:crypto';
import { type AppSchema, type ClipResult, type ErrorBody, type ServerMessage, type SessionStatus } from '@reactor/protocol';
import type { Logger } from '@reactor/log';
import type { LoadContext } from '../app/contract.js';
import { APP_BINDING, type AppBinding, type ClipOptions, type ReactorApp } from '../app/reactor-app.js';
import { type AppDefinition, describeApp } from '../app/registry.js';
import { hostContext, type HostContext } from '../app/weights.js';
import { AppLoadError, HostClosedError, HostOptionError, ReactorError, RuntimeErrorCode } from '../errors/errors.js';
import { admissionRefusal, type SessionAdmission } from './admission.js';
import { FRAME_HEALTH_REPORT_MS, FrameTimes } from './frame-health.js';
import { appNotice, appReadiness, type HostFacts, hostReadiness, hostStatus } from './host-status.js';
import { Broadcast } from './broadcast.js';
import { CommandDispatch } from './command-dispatch.js';
import { Control } from './control.js';
import { type ClientParts, HostClient, type HostSession } from './host-client.js';
import { errorText, type HostCounters, HostCore } from './host-core.js';
import { withTraceback } from './error-report.js';
import { type AppHostOptions, resolveHostOptions } from './host-options.js';
import { HostUploads } from './host-uploads.js';
import { InputTracks } from './input-tracks.js';
import { Members } from './members.js';
import { HOST_TRANSITIONS, type HostState, Lifecycle } from './lifecycle.js';
import { AppliedAcks } from './applied.js';
import { clockTrack } from './normalize.js';
import { Playout } from './playout.js';
import { Session } from './session.js';
import { LoadProgress, RankGpuBusy } from './runner-signals.js';
import { StepLoop } from './step-loop.js';
import { checkInFlight } from './step-pipeline.js';
import { Snapshots, type SnapshotsApi, snapshotsOf } from './snapshots.js';
import type { StepSample } from './step-stages.js';
import { loadTracingApi } from './step-tracing.js';
import type { AppHostApi, ClientHandle, ClientInfo, ClientSink, MediaListener, Readiness, UploadsApi } from './transport.js';
import { CHOSEN_SESSION_ID } from './transport.js';

export { DEFAULT_GRACE_PERIOD_MS, DEFAULT_REFUSAL_BACKOFF_MS, DEFAULT_STATS_INTERVAL_MS } from './host-options.js';
export type { AppHostOptions, SnapshotRingOptions } from './host-options.js';
export type { HostCounters } from './host-core.js';

let clientCounter = 0;

/**
 * Runs one app: loads it, keeps one session at a time for any number of clients, runs the step
 * loop, dispatches commands and hooks under the step lock, paces frames out to every client.
 * Transports (the WebSocket server, tests) talk to it through {@link AppHostApi}.
 *
 * A facade: the host keeps the lifecycles (load, clients joining and leaving, session creation,
 * grace and end, close) and hands the rest to its parts, which share one {@link HostCore}: the
 * step loop ({@link StepLoop}), command dispatch with upload references ({@link CommandDispatch}),
 * uploads ({@link HostUploads}), input tracks ({@link InputTracks}), roles and control
 * ({@link Control}) and broadcast ({@link Broadcast}).
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
  /** The app's published schema, as clients get it (see `HostCore.servedSchema`). */
  get schema(): AppSchema {
    return this.core.servedSchema;
  }
  /** The app instance (one per host). */
  readonly app: ReactorApp<any, any, any, any>;
  /** Cumulative counters (for `/metrics`). */
  readonly counters: HostCounters;

  private readonly def: AppDefinition;
  private readonly logger: Logger;
  private readonly gracePeriodMs: number;
  private readonly ctx: HostContext;
  private readonly core: HostCore;
  private readonly broadcast: Broadcast;
  private readonly control: Control;
  private readonly tracks: InputTracks;
  private readonly files: HostUploads;
  private readonly commands: CommandDispatch;
  private readonly steps: StepLoop;
  /** The current session's snapshots, taken and restored between steps (an app with `@reactorApp({ snapshot })`; docs/snapshots.md). */
  readonly snapshots: SnapshotsApi | undefined;
  private readonly members: Members;
  /** The parts a {@link HostClient} calls into (`host-client.ts`'s `ClientParts`), as they are. */
  private readonly clientParts: ClientParts;
  private readonly progress: LoadProgress;
  private readonly gpu: RankGpuBusy;
  private readonly lifecycle = new Lifecycle<HostState>('host', 'created', HOST_TRANSITIONS);
  /** Where the host stood when `close()` began (what `status` reports from then on). */
  private stateBeforeClose: HostState = 'created';
  private clipper: ((options: ClipOptions) => Promise<ClipResult>) | undefined;
  /** The app's `load()` while it runs and after (`close()` waits for it before `unload()`). */
  private loading: Promise<void> | undefined;
  private loadError: ErrorBody | undefined;
  private lastSessionError: ErrorBody | undefined;
  private closing: Promise<void> | undefined;
  /** Asked before each new session (`options.admission`; issue 42). */
  private readonly admission: SessionAdmission | undefined;
  /** Reports the session's frame times to the admission each second (when it takes reports). */
  private healthTimer: NodeJS.Timeout | undefined;

  /**
   * File uploads into the current session (the server's upload routes call it): announce, then
   * write the bytes; commands refer to a stored file by its id.
   */
  readonly uploads: UploadsApi;

  /**
   * Registers the app class (all whole-class checks run here) and builds its instance.
   * @throws AppDefinitionError naming class and member; HostOptionError (`invalid_host_option`) for a bad option.
   */
  constructor(appClass: new () => ReactorApp<any, any, any, any>, options: AppHostOptions = {}) {
    const resolved = resolveHostOptions(options);
    this.gracePeriodMs = resolved.gracePeriodMs;
    this.logger = resolved.logger;
    this.admission = resolved.admission;
    this.def = describeApp(appClass);
    Snapshots.checkRing(this.def, resolved.snapshots);
    this.ctx = { weightsPath: resolved.weightsPath, logger: this.logger.child({ app: this.def.appClass.name }) };
    this.app = hostContext.run(this.ctx, () => new appClass());
    const core = new HostCore(this.def, this.app, this.ctx, this.logger, resolved.singleController);
    this.core = core;
    this.counters = core.counters;
    const status = (): SessionStatus => this.status;
    this.broadcast = new Broadcast(core, status, resolved.statsIntervalMs);
    this.control = new Control(core);
    this.tracks = new InputTracks(core, this.control);
    this.files = new HostUploads(core, resolved.uploads, () => this.lifecycle.is('closing', 'closed'));
    this.uploads = this.files.api;
    const snapshots = Snapshots.of(core, this.broadcast, resolved.snapshots);
    this.snapshots = snapshots?.api;
    this.commands = new CommandDispatch(
      core,
      this.control,
      this.files,
      status,
      () => this.broadcast.broadcastState(),
      () => this.broadcast.flush(),
      snapshots,
    );
    this.steps = new StepLoop(
      core,
      this.broadcast,
      () => this.lifecycle.is('ready'),
      (session, error) => this.endSession(session, error, undefined),
      resolved.refusalBackoffMs,
      snapshots,
    );
    this.members = new Members(core, this.control, this.tracks, this.broadcast, status, (session) => this.settle(session));
    this.clientParts = {
      broadcast: this.broadcast,
      commands: this.commands,
      members: this.members,
      tracks: this.tracks,
      control: this.control,
      counters: this.counters,
    };
    this.progress = new LoadProgress(this.ctx, () => this.broadcast.publishStatus());
    this.gpu = new RankGpuBusy(this.ctx);
    const binding: AppBinding = {
      state: () => this.core.session?.state,
      send: (message) => this.broadcast.broadcastMessage(message),
      flush: () => this.broadcast.flush(),
      clip: (options) =>
        this.clipper
          ? this.clipper(options)
          : Promise.reject(
              new ReactorError(RuntimeErrorCode.ClipsDisabled, 'this host keeps no clip ring: serve the app with `recording:` clips set in reactor.yaml'),
            ),
      broadcastState: () => this.broadcast.broadcastState(),
      restartSignal: () => this.core.session?.urgentRestart?.signal,
      weightsPath: this.ctx.weightsPath,
      logger: this.ctx.logger,
      input: this.tracks.input,
    };
    this.app[APP_BINDING] = binding;
  }

  /** The current session. */
  private get session(): HostSession | undefined {
    return this.core.session;
  }

  private get clients(): Map<string, HostClient> {
    return this.core.clients;
  }

  /** Where the host stands: loading, ready, a session's phase, or failed. */
  get status(): SessionStatus {
    return hostStatus(this.statusFacts());
  }

  /**
   * Whether a new user would get a stream now, and if not, every reason why: the app is loading
   * (`loading`), its load failed (`load_failed`), the host is closing (`closing`), the current
   * session is ending so a new client has to wait (`session_closing`), or the app itself says
   * it is not ready ({@link ReactorApp.readiness}: its own codes, e.g. `runner_unhealthy`,
   * `rank_stalled`, `runner_restarting`; a bare message as `app_not_ready`).
   */
  readiness(): Readiness {
    return hostReadiness(this.statusFacts(), this.lifecycle.state, () => {
      // A running session takes new clients without a new admission; an idle host asks it.
      const refused = this.session ? undefined : admissionRefusal(this.admission);
      return [...(refused ? [refused] : []), ...appReadiness(this.app, this.def.appClass.name, this.ctx)];
    });
  }

  private statusFacts(): HostFacts {
    return {
      host: this.lifecycle.is('closing', 'closed') ? this.stateBeforeClose : this.lifecycle.state,
      clients: this.clients.size,
      loadError: this.loadError,
      lastSessionError: this.lastSessionError,
      session: this.session,
      progress: this.progress.current,
      notice: this.lifecycle.is('ready') ? appNotice(this.app) : undefined,
    };
  }

  /** Calls `listener` on every status change; returns the unsubscribe function. */
  onStatus(listener: (status: SessionStatus) => void): () => void {
    return this.broadcast.onStatus(listener);
  }

  /**
   * Calls `listener` after every step that ran `generate()` (failed steps too) with where its
   * time went ({@link StepSample}); returns the unsubscribe function.
   */
  onStep(listener: (step: StepSample) => void): () => void {
    return this.steps.onStep(listener);
  }

  /**
   * The GPU busy ratio (0..1) of each rank of the app's runners that reported one in the last
   * 3 s (Python ranks on CUDA, workers with `gpuBusy()`); ranks that did not are absent (unknown).
   */
  rankGpuBusy(): { rank: number; ratio: number }[] {
    return this.gpu.read();
  }

  /**
   * Calls `listener` with every frame and audio chunk as it is played out, after the clients'
   * sinks (same objects: read-only); returns the unsubscribe function. For transports that keep
   * what was streamed (the server's clip ring and recorder).
   */
  onMedia(listener: MediaListener): () => void {
    return this.broadcast.onMedia(listener);
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
    this.progress.start();
    this.gpu.start();
    this.startHealthReports();
    this.broadcast.publishStatus();
    const name = this.def.appClass.name;
    const context: LoadContext = {
      configPath,
      manifestGpuCount,
      logger: this.app.logger,
      reportProgress: (ratio, stage) => this.progress.report(ratio, stage, `${name}.load(): context.reportProgress()`),
    };
    try {
      // An async wrapper, so a synchronous load() (or one that throws at once) is tracked too.
      this.loading = hostContext.run(this.ctx, async () => {
        // OpenTelemetry, when installed: imported once, before the app's first step.
        await loadTracingApi();
        await this.app.load(context);
        checkInFlight(this.app.inFlight, name);
      });
      await this.loading;
    } catch (cause) {
      this.progress.stop();
      this.loadError = { code: RuntimeErrorCode.LoadFailed, message: withTraceback(`${this.def.appClass.name}.load() failed: ${errorText(cause)}`, cause) };
      if (this.lifecycle.is('loading')) this.lifecycle.to('failed');
      else this.stateBeforeClose = 'failed';
      this.logger.error({ err: cause }, this.loadError.message);
      this.broadcast.publishStatus();
      throw new AppLoadError(RuntimeErrorCode.LoadFailed, this.loadError.message, { cause });
    }
    this.progress.stop();
    // close() began while load() ran: the host stays closing.
    if (!this.lifecycle.is('loading')) return;
    this.lifecycle.to('ready');
    this.broadcast.publishStatus();
    this.startSessionIfWaiting();
  }

  /** Registers a client; its welcome message is on the sink when this returns. */
  connect(sink: ClientSink, info: ClientInfo = {}): ClientHandle {
    const client = new HostClient(this.clientParts, `c${++clientCounter}-${randomUUID().slice(0, 8)}`, sink, { ...info });
    if (this.lifecycle.is('closing', 'closed')) {
      client.lifecycle.to('gone');
      sink.message(this.members.welcome(client, sink));
      sink.close('the app host is closed');
      return client;
    }
    this.clients.set(client.id, client);
    const s = this.session;
    if (s && !s.over) {
      this.members.join(s, client);
    } else if (!s && this.lifecycle.is('ready')) {
      const refused = admissionRefusal(this.admission);
      if (refused) {
        client.sink.message(this.members.welcome(client, client.sink));
        this.refuse(client, refused);
        return client;
      }
      this.members.join(this.createSession(info.sessionId), client);
    }
    // Otherwise it waits (`waiting`) until a session can take it: startSessionIfWaiting().
    this.broadcast.publishStatus(client);
    sink.message(this.members.welcome(client, sink));
    this.core.notifyChange();
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
    await this.core.behindStep(async () => {
      if (this.session === s && !s.over) await this.endSession(s, error, kick);
    }, 'cancel');
    return true;
  }

  private async closeOnce(): Promise<void> {
    this.stateBeforeClose = this.lifecycle.state;
    this.lifecycle.to('closing');
    await this.core.behindStep(async () => {
      const s = this.session;
      if (s) await this.endSession(s, undefined, 'the app host is shutting down');
    }, 'cancel');
    // Clients still waiting for a session (the app was loading, or had failed).
    for (const c of [...this.clients.values()]) {
      this.clients.delete(c.id);
      if (c.lifecycle.is('waiting', 'joining')) c.lifecycle.to('gone');
      this.core.safe(c.sink, () => c.sink.close('the app host is shutting down'));
    }
    this.core.notifyChange();
    await this.steps.stopped();
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
    this.progress.stop();
    this.gpu.stop();
    if (this.healthTimer) clearInterval(this.healthTimer);
    this.healthTimer = undefined;
    try {
      this.admission?.close?.();
    } catch (err) {
      this.logger.error({ err }, 'closing the session admission threw (ignored)');
    }
    this.lifecycle.to('closed');
  }

  // ---- sessions ---------------------------------------------------------------------------

  /** Every second from the load on: the running session's frame times (or none) to the admission's `report()`. */
  private startHealthReports(): void {
    if (typeof this.admission?.report !== 'function' || this.healthTimer) return;
    this.reportHealth();
    this.healthTimer = setInterval(() => this.reportHealth(), FRAME_HEALTH_REPORT_MS);
    this.healthTimer.unref();
  }

  private reportHealth(): void {
    const s = this.session;
    try {
      this.admission?.report?.(s && !s.over ? s.frameTimes?.read() : undefined);
    } catch (err) {
      this.logger.error({ err }, "the session admission's report() threw (ignored)");
    }
  }

  /**
   * A client (welcomed) that would start a session the admission refuses: an `error` with the
   * refusal's code (`gpu_full`), then its sink closed. It never joins anything.
   */
  private refuse(client: HostClient, refused: { code: string; message: string }): void {
    this.clients.delete(client.id);
    client.lifecycle.to('gone');
    this.logger.warn(`a new session was refused (${refused.code}): ${refused.message}`);
    this.core.safe(client.sink, () => client.sink.message({ type: 'error', code: refused.code, message: refused.message }));
    this.core.safe(client.sink, () => client.sink.close(refused.message));
  }

  /** A new session; `chosenId` (a session router's id, see `ClientInfo.sessionId`) when it is label-safe. */
  private createSession(chosenId?: string): HostSession {
    const state = this.def.state.createDefaults();
    const acks = new AppliedAcks<HostClient>(
      this.def.tracks[clockTrack(this.def.tracks)]?.name,
      (client, msg) => this.core.safe(client.sink, () => client.applied(msg)),
      () => session.steps + session.inFlight + 1,
    );
    const clock = clockTrack(this.def.tracks);
    const playout = new Playout(
      this.def.tracks,
      this.def.bufferSize,
      performance.now(),
      (frame) => {
        if (frame.trackIndex === clock) session.frameTimes?.played();
        this.broadcast.emitFrame(session, frame);
      },
      (chunk) => this.broadcast.emitAudio(session, chunk),
      acks,
    );
    const session: HostSession = new Session<HostClient>(
      state,
      playout,
      acks,
      chosenId !== undefined && CHOSEN_SESSION_ID.test(chosenId) ? chosenId : undefined,
    );
    // Played-frame times are kept only for an admission that takes reports (`gpu.admit: deadline`'s lease): not on every host's frame path.
    session.frameTimes = this.healthTimer
      ? new FrameTimes(session.id, this.def.tracks[clock]?.kind === 'video' ? this.def.tracks[clock].fps : undefined)
      : undefined;
    this.core.session = session;
    this.lastSessionError = undefined;
    this.counters.sessions++;
    // Streaming begins once the first client's @connected hooks have run (their task follows this one).
    void this.core.task(async () => {
      if (session.over) return;
      await this.core.runHooks('sessionStarted');
      if (!(await this.startFromSeed(session))) return;
      if (session.lifecycle.is('starting')) session.lifecycle.to('waiting');
    });
    return session;
  }

  /**
   * A session whose id a fork or a move seeded (`AppHost.snapshots.seed()`) starts from that
   * snapshot, before its first step; false when the restore failed and the session ended with it.
   */
  private async startFromSeed(session: HostSession): Promise<boolean> {
    try {
      if (await snapshotsOf(this.snapshots)?.applySeed(session)) this.broadcast.broadcastState();
      return true;
    } catch (err) {
      this.logger.error({ err }, 'the session could not start from its seeded snapshot');
      const code = (err as { code?: unknown })?.code;
      await this.endSession(
        session,
        { code: typeof code === 'string' ? code : RuntimeErrorCode.SessionFailed, message: `the session could not start from its snapshot: ${errorText(err)}` },
        undefined,
      );
      return false;
    }
  }

  /** Starts a session for the clients that wait for one, once the app is loaded and no session runs. */
  private startSessionIfWaiting(): void {
    if (!this.lifecycle.is('ready') || this.session) return;
    const waiting = [...this.clients.values()].filter((c) => c.lifecycle.is('waiting'));
    if (waiting.length === 0) return;
    const refused = admissionRefusal(this.admission);
    if (refused) {
      // Their welcome went out while the app loaded.
      for (const c of waiting) this.refuse(c, refused);
      this.broadcast.publishStatus();
      return;
    }
    const s = this.createSession(waiting.find((c) => c.info.sessionId !== undefined)?.info.sessionId);
    for (const c of waiting) this.members.join(s, c);
    this.broadcast.publishStatus();
    // Their welcome carried no state: they get it as soon as they are in the session.
    const msg: ServerMessage = { type: 'state', state: this.def.state.snapshot(s.state) };
    for (const c of waiting) this.core.safe(c.sink, () => c.sink.message(msg));
  }

  /** Brings a started session's state in line with its members: `streaming` (loop and stats run) or `orphaned` (grace timer runs). */
  private settle(session: HostSession): void {
    if (this.session !== session || !session.live) return;
    if (session.members.size > 0) {
      if (session.graceTimer) clearTimeout(session.graceTimer);
      session.graceTimer = undefined;
      if (!session.lifecycle.is('streaming')) session.lifecycle.to('streaming');
      this.steps.ensureLoop(session);
      this.broadcast.ensureStats(session);
    } else if (!session.lifecycle.is('orphaned')) {
      session.lifecycle.to('orphaned');
      session.graceTimer = setTimeout(() => {
        session.graceTimer = undefined;
        void this.core.task(async () => {
          if (this.session === session && session.lifecycle.is('orphaned') && session.members.size === 0) await this.endSession(session, undefined, undefined);
        }, 'cancel');
      }, this.gracePeriodMs);
      session.graceTimer.unref();
    }
    this.broadcast.publishStatus();
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
  private async endSession(session: HostSession, error: ErrorBody | undefined, kickReason: string | undefined): Promise<void> {
    if (session.over) return;
    session.lifecycle.to('closing');
    session.error = error;
    session.clearTimers();
    session.playout.close();
    session.acks.end();
    this.broadcast.publishStatus();
    this.core.notifyChange();
    this.tracks.releaseAllTracks(session, error ? `the session ended: ${error.message}` : (kickReason ?? 'the session ended'));
    await this.members.drainLeaving(session);
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
      await this.members.finishLeaving(session, c);
    }
    // Clients that left while those hooks ran.
    await this.members.drainLeaving(session);
    await this.core.runHooks('sessionEnded');
    // The session's files go with it, after the hooks that may still read them.
    if (session.uploads) {
      try {
        await session.uploads.close();
      } catch (err) {
        this.logger.error({ err }, "removing the session's uploads failed");
      }
    }
    session.lifecycle.to('ended');
    snapshotsOf(this.snapshots)?.ended(session);
    session.announced.clear();
    this.tracks.resetBuffers();
    this.core.session = undefined;
    this.lastSessionError = error;
    // The GPU's other instances read at once that this one's session no longer runs.
    if (this.healthTimer) this.reportHealth();
    const reason = error ? `the session ended: ${error.message}` : (kickReason ?? 'session ended');
    for (const c of kicked) this.core.safe(c.sink, () => c.sink.close(reason));
    this.broadcast.publishStatus();
    this.startSessionIfWaiting();
  }

  /**
   * The session is ending: every track's publisher still connected gets `track_released`, the
   * buffers close (no frame enters any more; `@trackUnpublished` hooks follow with the clients'
   * `@disconnected`), and the tracks are free for the next session.
   */
}
