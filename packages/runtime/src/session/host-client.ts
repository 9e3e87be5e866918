import type { AppliedMessage, CommandMessage, ErrorMessage, ReplyMessage, ServerMessage } from '@reactor/protocol';
import type { Client } from './client.js';
import { CLIENT_TRANSITIONS, type ClientState, Lifecycle } from './lifecycle.js';
import type { Session } from './session.js';
import type { ClientHandle, ClientInfo, ClientSink, InboundFrame } from './transport.js';

/** How many of a client's last `applied` messages a resumed connection gets again. */
const RECENT_APPLIED = 32;

/** A session of the host, whose members are {@link HostClient}s. */
export type HostSession = Session<HostClient>;

/**
 * The host's parts a client calls into, handed to it as they are (no forwarders): each method
 * takes the client first. Declared here by shape, since each part's own file names
 * {@link HostClient} (a type import back would be a cycle).
 */
export interface ClientParts {
  readonly broadcast: { toAppMessage(message: object): ServerMessage };
  readonly commands: { dispatch(client: HostClient, msg: CommandMessage): Promise<ReplyMessage | ErrorMessage> };
  readonly members: { detach(client: HostClient): void; rebind(client: HostClient, sink: ClientSink): void };
  readonly tracks: {
    publish(client: HostClient, id: string, track: string): ReplyMessage | ErrorMessage;
    unpublish(client: HostClient, id: string, track: string): ReplyMessage | ErrorMessage;
    publishes(client: HostClient, track: string): boolean;
    pushFrame(client: HostClient, track: string, frame: InboundFrame): boolean;
  };
  readonly control: {
    requestControl(client: HostClient, id: string): ReplyMessage | ErrorMessage;
    releaseControl(client: HostClient, id: string): ReplyMessage | ErrorMessage;
    steers(client: HostClient): boolean;
    roleError(client: HostClient, id: string, roles: readonly string[], what: string): ErrorMessage | undefined;
  };
  /** The host's counters: a transport's dropped frames are added to `framesDropped`. */
  readonly counters: { framesDropped: number };
}

/** One connected client: the transport's handle and the app's `Client`. */
export class HostClient implements Client, ClientHandle {
  readonly lifecycle = new Lifecycle<ClientState>('client', 'waiting', CLIENT_TRANSITIONS);
  /** Frames its transport dropped (its `stats.dropped`). */
  dropped = 0;
  /** The session it joined (set on `joining`). */
  session: HostSession | undefined;
  /**
   * While a command of this client waits for its uploads: the chain its later commands queue
   * on, so they still run in arrival order.
   */
  uploadChain: Promise<unknown> | undefined;

  /** Where its messages and frames go (a resumed client's new connection replaces it). */
  sink: ClientSink;
  /** Its last {@link RECENT_APPLIED} `applied` messages, sent again after a resumed welcome (those sent while it was dropped were lost). */
  readonly recentApplied: AppliedMessage[] = [];

  constructor(
    private readonly host: ClientParts,
    readonly id: string,
    sink: ClientSink,
    readonly info: ClientInfo,
  ) {
    this.sink = sink;
  }

  /** Its role (`controller` when the transport names none). */
  get role(): string {
    return this.info.role ?? 'controller';
  }

  /** Still connected: `waiting`, `joining` or `joined`. */
  get connected(): boolean {
    return this.lifecycle.is('waiting', 'joining', 'joined');
  }

  send(message: object): void {
    const msg = this.host.broadcast.toAppMessage(message);
    if (this.connected) this.sink.message(msg);
  }

  /** One of its commands reached a frame (or never will): told to it while connected, kept for a resume. */
  applied(msg: AppliedMessage): void {
    if (!this.connected) return;
    this.recentApplied.push(msg);
    if (this.recentApplied.length > RECENT_APPLIED) this.recentApplied.shift();
    this.sink.message(msg);
  }

  command(msg: CommandMessage): Promise<ReplyMessage | ErrorMessage> {
    return this.host.commands.dispatch(this, msg);
  }

  publish(id: string, track: string): ReplyMessage | ErrorMessage {
    return this.host.tracks.publish(this, id, track);
  }

  unpublish(id: string, track: string): ReplyMessage | ErrorMessage {
    return this.host.tracks.unpublish(this, id, track);
  }

  publishes(track: string): boolean {
    return this.host.tracks.publishes(this, track);
  }

  pushFrame(track: string, frame: InboundFrame): boolean {
    return this.host.tracks.pushFrame(this, track, frame);
  }

  disconnect(): void {
    this.host.members.detach(this);
  }

  rebind(sink: ClientSink): void {
    this.host.members.rebind(this, sink);
  }

  requestControl(id: string): ReplyMessage | ErrorMessage {
    return this.host.control.requestControl(this, id);
  }

  releaseControl(id: string): ReplyMessage | ErrorMessage {
    return this.host.control.releaseControl(this, id);
  }

  /** Refuses a controller that does not steer (single-controller mode, another holds control); undefined otherwise. */
  controlError(id: string, what: string): ErrorMessage | undefined {
    const { control } = this.host;
    return this.role === 'controller' && !control.steers(this) ? control.roleError(this, id, ['controller'], what) : undefined;
  }

  reportDropped(count: number): void {
    if (Number.isFinite(count) && count > 0) {
      this.dropped += count;
      this.host.counters.framesDropped += count;
    }
  }
}
