/**
 * A host that can be replaced under live connections: the server talks to a {@link HostSwitch},
 * which forwards to the current app host, and {@link HostSwitch.replace} moves every connected
 * client to a new one without closing its socket (`reactor dev`'s reload of the app half).
 *
 * Order of a replace: every client is detached from the old host (its `@disconnected` hooks run;
 * whatever the old host still says to it is dropped), the old host closes (the app's `unload()`),
 * the new host loads, `prepare` runs (e.g. sets the carried state in a session of the new host),
 * then each client is connected to the new host: it gets the new host's `welcome` (schema, state,
 * session) on the same socket, its video restarts at the next key frame with a new
 * `video_config`, the inbound tracks it published are published again for it (a refusal is a
 * `track_released`), and any `notice` is sent to it.
 *
 * While a replace runs, commands wait for the new host (answered by it, in order); a command
 * already handed to the old host is run by it to the end (it closes behind it) and answered;
 * `publish` is refused with `no_session` (publish again once the welcome arrived); frames of
 * inbound tracks are dropped;
 * uploads go to the host current when they are announced and end with its session (a replace
 * ends the old session, and with it its files: an upload announced before is `upload_not_found`
 * on the new host); the server's upload settings (`configure`) are applied to every new host.
 *
 * The server's own limits that follow the schema's tracks (largest inbound frame, video encoders)
 * are fixed when it starts: a new host must declare the same tracks ({@link sameTracks}).
 */
import type { AppSchema, CommandMessage, ErrorMessage, ReplyMessage, ServerMessage, SessionStatus, UploadInfo, UploadTicket } from '@reactor/protocol';
import type { Logger } from '@reactor/log';
import {
  AppHost,
  type AppHostOptions,
  type ClientHandle,
  type ClientInfo,
  type ClientSink,
  type InboundFrame,
  type Readiness,
  type ReactorApp,
  type UploadOptions,
  type UploadsApi,
} from '@reactor/runtime';
import { WireErrorCode } from '@reactor/protocol';
import type { ServableHost, StepSample } from './reactor-server.js';
import type { HostCounterView } from './base/servable-host.js';
import { ReactorServer } from './reactor-server.js';
import { listenThenLoad, splitServeOptions, type ServeOptions } from './serve.js';

/** The ids of the publications a switch makes again for a client (the host returns their answers to the switch, never to the client). */
const OWN_ID_PREFIX = 'reactor-switch-';

/** A host a switch can hold (it closes the ones it replaces). */
export type SwitchableHost = ServableHost & { close(): Promise<void> | void };

/** A sink that wants to know when it moves to a new host (the server's connections: video restarts at a key frame). */
export interface GenerationAwareSink extends ClientSink {
  newGeneration?(): void;
}

/** How {@link HostSwitch.replace} brings the new host up. */
export interface ReplaceOptions<H extends SwitchableHost> {
  /** Loads the new host (after the old one closed); a rejection leaves it in, failed, and is returned. */
  load?(host: H): Promise<void>;
  /** Runs once the new host loaded, before the clients are connected to it; may return a message for every client. */
  prepare?(host: H): Promise<ServerMessage | undefined> | ServerMessage | undefined;
  /** Runs instead of `prepare` when `load` failed; may return a message for every client (what they lost). */
  failed?(host: H, error: unknown): ServerMessage | undefined;
}

/** Same tracks (names, kinds, directions, limits): what the server fixed at its start. */
export function sameTracks(a: AppSchema, b: AppSchema): boolean {
  return JSON.stringify(a.tracks) === JSON.stringify(b.tracks);
}

/** One client of the switch, connected to the current host (or waiting for it during a replace). */
class SwitchClient implements ClientHandle {
  readonly #owner: HostSwitch;
  /** The connection's sink; a resumed connection brings a new one (`rebind`). */
  sink: GenerationAwareSink;
  readonly info: ClientInfo;
  inner: ClientHandle | undefined;
  /** The generation's sink wrapper is live: false once detached (what the old host still says is dropped). */
  #live: { on: boolean } = { on: false };
  /** Inbound tracks it publishes (published again on the next host). */
  readonly published = new Set<string>();
  gone = false;
  #lastId = '';

  constructor(owner: HostSwitch, sink: GenerationAwareSink, info: ClientInfo) {
    this.#owner = owner;
    this.sink = sink;
    this.info = info;
  }

  get id(): string {
    return this.inner?.id ?? this.#lastId;
  }

  /** Connects to `host` (its welcome goes to the sink now). */
  attach(host: SwitchableHost): void {
    const live = { on: true };
    this.#live = live;
    // Read at each call: `rebind` may hand the client a new connection's sink.
    const current = (): GenerationAwareSink => this.sink;
    const wrapper: ClientSink = {
      message: (m) => {
        if (!live.on) return;
        if (m.type === 'track_released') this.published.delete(m.track);
        current().message(m);
      },
      frame: (f) => {
        if (live.on) current().frame(f);
      },
      close: (reason) => {
        if (live.on) current().close(reason);
      },
      audio: (c) => {
        if (live.on) current().audio?.(c);
      },
      welcomeFields: (resumed, clientId) => (live.on ? current().welcomeFields?.(resumed, clientId) : undefined),
      statsFields: () => (live.on ? current().statsFields?.() : undefined),
    };
    this.inner = host.connect(wrapper, this.info);
    this.#lastId = this.inner.id;
  }

  /** Leaves the current host (the socket stays open). */
  detach(): void {
    this.#live.on = false;
    const inner = this.inner;
    this.inner = undefined;
    inner?.disconnect();
  }

  /** Publishes again, on the new host, what it published on the old one. */
  republish(): void {
    for (const track of [...this.published]) {
      const answer = this.inner!.publish(`${OWN_ID_PREFIX}${track}`, track);
      if (answer.type === 'error') {
        this.published.delete(track);
        this.sink.message({ type: 'track_released', track, reason: `the app was reloaded and the track could not be published again: ${answer.message}` });
      }
    }
  }

  async command(msg: CommandMessage): Promise<ReplyMessage | ErrorMessage> {
    await this.#owner.settled;
    if (this.gone || !this.inner) return { type: 'error', id: msg.id, code: WireErrorCode.NoSession, message: 'the client left' };
    return this.inner.command(msg);
  }

  publish(id: string, track: string): ReplyMessage | ErrorMessage {
    if (!this.inner) {
      return { type: 'error', id, code: WireErrorCode.NoSession, message: 'the app is being reloaded; publish again once the new welcome has arrived' };
    }
    const answer = this.inner.publish(id, track);
    if (answer.type === 'reply') this.published.add(track);
    return answer;
  }

  unpublish(id: string, track: string): ReplyMessage | ErrorMessage {
    if (!this.inner) {
      this.published.delete(track);
      return { type: 'reply', id };
    }
    const answer = this.inner.unpublish(id, track);
    if (answer.type === 'reply') this.published.delete(track);
    return answer;
  }

  publishes(track: string): boolean {
    // During a replace the track stays its (its frames are dropped until the new host takes them).
    return this.inner ? this.inner.publishes(track) : this.published.has(track);
  }

  pushFrame(track: string, frame: InboundFrame): boolean {
    return this.inner ? this.inner.pushFrame(track, frame) : this.published.has(track);
  }

  disconnect(): void {
    if (this.gone) return;
    this.gone = true;
    this.detach();
    this.#owner.forget(this);
  }

  reportDropped(count: number): void {
    this.inner?.reportDropped(count);
  }

  /** A resumed connection: its sink takes this client's messages from now on (the host's handle keeps its identity). */
  rebind(sink: ClientSink): void {
    this.sink = sink as GenerationAwareSink;
  }

  requestControl(id: string): ReplyMessage | ErrorMessage {
    if (!this.inner)
      return { type: 'error', id, code: WireErrorCode.NoSession, message: 'the app is being reloaded; ask again once the new welcome has arrived' };
    return this.inner.requestControl(id);
  }

  controlError(id: string, what: string): ErrorMessage | undefined {
    return this.inner?.controlError(id, what);
  }

  releaseControl(id: string): ReplyMessage | ErrorMessage {
    if (!this.inner)
      return { type: 'error', id, code: WireErrorCode.NoSession, message: 'the app is being reloaded; release again once the new welcome has arrived' };
    return this.inner.releaseControl(id);
  }
}

/** See the module comment. */
export class HostSwitch implements ServableHost {
  #current: SwitchableHost;
  readonly #clients = new Set<SwitchClient>();
  readonly #statusListeners = new Set<(status: SessionStatus) => void>();
  readonly #stepListeners = new Set<(step: StepSample) => void>();
  #off: (() => void)[] = [];
  #uploadOptions: UploadOptions = {};
  #closed = false;
  #replacing = false;
  #returning: { message: ServerMessage; left: number } | undefined;
  /** Settles when no replace runs. */
  settled: Promise<void> = Promise.resolve();
  readonly #log: Logger | undefined;

  readonly #uploads: UploadsApi = {
    configure: (options) => {
      this.#uploadOptions = { ...this.#uploadOptions, ...options };
      this.#current.uploads?.configure(options);
    },
    announce: (request): UploadTicket => this.#currentUploads().announce(request),
    write: (id, body, options): Promise<UploadInfo> => this.#currentUploads().write(id, body, options),
  };

  constructor(host: SwitchableHost, logger?: Logger) {
    this.#current = host;
    this.#log = logger;
    this.#listen(host);
  }

  /** The host the clients talk to now. */
  get current(): SwitchableHost {
    return this.#current;
  }

  get schema(): AppSchema {
    return this.#current.schema;
  }

  get status(): SessionStatus {
    return this.#current.status;
  }

  get counters(): HostCounterView | undefined {
    return this.#current.counters;
  }

  /** The current host's session snapshots (its session log, saved with a recording). */
  get snapshots(): ServableHost['snapshots'] {
    return this.#current.snapshots;
  }

  get uploads(): UploadsApi | undefined {
    return this.#current.uploads ? this.#uploads : undefined;
  }

  readiness(): Readiness {
    return this.#current.readiness();
  }

  /** A client joins the current host (during a replace: the new one, once it is up; the welcome comes then). */
  connect(sink: ClientSink, info: ClientInfo = {}): ClientHandle {
    const client = new SwitchClient(this, sink, { ...info });
    this.#clients.add(client);
    // A replace in flight attaches it with the others, once the new host is up.
    if (!this.#replacing) {
      client.attach(this.#current);
      const r = this.#returning;
      if (info.returning && r && r.left > 0) {
        r.left--;
        sink.message(r.message);
      }
    }
    return client;
  }

  onStatus(listener: (status: SessionStatus) => void): () => void {
    this.#statusListeners.add(listener);
    return () => this.#statusListeners.delete(listener);
  }

  onStep(listener: (step: StepSample) => void): () => void {
    this.#stepListeners.add(listener);
    return () => this.#stepListeners.delete(listener);
  }

  rankGpuBusy(): readonly { rank: number; ratio: number }[] {
    return this.#current.rankGpuBusy?.() ?? [];
  }

  /**
   * Moves every client to `next` (see the module comment); the old host is closed. Resolves once
   * the clients are connected to it, with the load error if `load` failed (the host stays in, failed).
   * @throws Error when the switch is closed or a replace is already running.
   */
  async replace<H extends SwitchableHost>(next: H, options: ReplaceOptions<H> = {}): Promise<{ loadError?: unknown }> {
    if (this.#closed) throw new Error('the host switch is closed');
    if (this.#replacing) throw new Error('a replace is already running; wait for it');
    this.#replacing = true;
    let done!: () => void;
    this.settled = new Promise((r) => (done = r));
    try {
      for (const c of this.#clients) c.detach();
      for (const off of this.#off) off();
      this.#off = [];
      const old = this.#current;
      try {
        await old.close();
      } catch (err) {
        this.#log?.error(`closing the previous app failed: ${(err as Error).stack ?? String(err)}`);
      }
      this.#current = next;
      this.#listen(next);
      next.uploads?.configure(this.#uploadOptions);
      let loadError: unknown;
      let notice: ServerMessage | undefined;
      try {
        await options.load?.(next);
        notice = await options.prepare?.(next);
      } catch (err) {
        loadError = err;
        notice = options.failed?.(next, err);
      }
      if (this.#closed) return loadError === undefined ? {} : { loadError };
      for (const c of this.#clients) {
        c.sink.newGeneration?.();
        c.attach(next);
        c.republish();
        if (notice) c.sink.message(notice);
      }
      for (const l of this.#statusListeners) l(next.status);
      return loadError === undefined ? {} : { loadError };
    } finally {
      this.#replacing = false;
      done();
    }
  }

  /**
   * The next `count` clients that come back (they asked to resume an identity this host's server
   * does not hold: `ClientInfo.returning`) get `message` after their welcome: what a restart
   * before this server lost of the session they return to.
   */
  noticeReturning(message: ServerMessage, count: number): void {
    this.#returning = count > 0 ? { message, left: count } : undefined;
  }

  /** Sends `message` to every connected client (e.g. a `state_reset` when something under them started over without a replace). */
  notify(message: ServerMessage): void {
    for (const c of this.#clients) c.sink.message(message);
  }

  /** Closes the current host (its clients' sinks are closed by it). */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#current.close();
  }

  /** @internal A client left. */
  forget(client: SwitchClient): void {
    this.#clients.delete(client);
  }

  #currentUploads(): UploadsApi {
    const u = this.#current.uploads;
    if (!u) throw new Error('this app host takes no uploads');
    return u;
  }

  #listen(host: SwitchableHost): void {
    const offStatus = host.onStatus?.((s) => {
      for (const l of this.#statusListeners) l(s);
    });
    const offStep = host.onStep?.((s) => {
      for (const l of this.#stepListeners) l(s);
    });
    if (typeof offStatus === 'function') this.#off.push(offStatus);
    if (typeof offStep === 'function') this.#off.push(offStep);
  }
}

/**
 * `serve()` with the app host behind a {@link HostSwitch} (`server.host`), so that a later
 * generation of the app can be swapped in under live connections: the same options, checks and
 * background load as `serve()`.
 */
export async function serveSwitchable(
  appClass: new () => ReactorApp<any, any, any, any>,
  options: ServeOptions = {},
): Promise<ReactorServer & { readonly host: HostSwitch }> {
  const { hostOptions, serverOptions, load } = splitServeOptions(options);
  const host = new AppHost(appClass, hostOptions);
  const hostSwitch = new HostSwitch(host, options.logger);
  return listenThenLoad(new ReactorServer(hostSwitch, serverOptions) as ReactorServer & { readonly host: HostSwitch }, host, load);
}

/** The host options and load context `serveSwitchable` used, to build the next generation's host alike. */
export function hostOptionsOf(options: ServeOptions): { hostOptions: AppHostOptions; load: { configPath?: string; manifestGpuCount?: number } } {
  const { hostOptions, load } = splitServeOptions(options);
  return { hostOptions, load };
}
