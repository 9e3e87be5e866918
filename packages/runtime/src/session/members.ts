/**
 * The clients of a host's sessions: joining (`@connected`), leaving (`@disconnected`, the tracks
 * they published released, control passed on), resuming on a new connection, and the welcome
 * each connection gets.
 */
import type { SessionStatus, WelcomeMessage } from '@reactor/protocol';
import type { Broadcast } from './broadcast.js';
import type { Control } from './control.js';
import type { HostClient, HostSession } from './host-client.js';
import type { HostCore } from './host-core.js';
import type { InputTracks } from './input-tracks.js';
import type { ClientSink } from './transport.js';

/** Clients joining and leaving the session, for the host. */
export class Members {
  constructor(
    private readonly core: HostCore,
    private readonly control: Control,
    private readonly tracks: InputTracks,
    private readonly broadcast: Broadcast,
    /** The host's status now (`AppHost.status`). */
    private readonly status: () => SessionStatus,
    /** Brings a session in line with its members (the host's `settle`: streaming or orphaned). */
    private readonly settle: (session: HostSession) => void,
  ) {}

  /** A resumed client: its new sink gets a welcome (`resumed: true`) with the current state; everything else carries on. */
  rebind(client: HostClient, sink: ClientSink): void {
    if (!client.connected) {
      sink.close('this client has left; connect again for a new identity');
      return;
    }
    client.sink = sink;
    this.core.safe(sink, () => sink.message(this.welcome(client, sink, true)));
    // What was sent while it was away was dropped: its last outcomes come again (a client ignores ids it no longer waits for).
    for (const msg of client.recentApplied) this.core.safe(sink, () => sink.message(msg));
  }

  /** `waiting` -> `joining`: the client is a member; its `@connected` hooks run in their turn. */
  join(session: HostSession, client: HostClient): void {
    client.lifecycle.to('joining');
    client.session = session;
    session.members.add(client);
    this.control.joined(session, client);
    void this.core.task(async () => {
      if (session.over) return;
      // A client that left before its turn is gone: the app never saw it, so no hook runs.
      if (client.lifecycle.is('joining')) {
        client.lifecycle.to('joined');
        await this.core.runHooks('connected', client);
      }
      this.settle(session);
    });
  }

  /** A client left (the transport's `disconnect()`). */
  detach(client: HostClient): void {
    if (!client.connected) return;
    this.core.clients.delete(client.id);
    const s = client.session;
    s?.members.delete(client);
    if (s) this.tracks.releaseTracks(s, client);
    if (s) this.control.left(s, client);
    if (client.lifecycle.is('joined') && s && !s.lifecycle.is('ended')) {
      client.lifecycle.to('leaving');
      s.leaving.add(client);
    } else {
      client.lifecycle.to('gone');
    }
    this.broadcast.publishStatus();
    this.core.notifyChange();
    if (!s || s.lifecycle.is('ended')) return;
    void this.core.task(async () => {
      await this.finishLeaving(s, client);
      this.settle(s);
    });
  }

  /** `leaving` -> `gone`, running `@disconnected`; a no-op for a client already gone (the session's end ran it). */
  async finishLeaving(session: HostSession, client: HostClient): Promise<void> {
    if (!session.leaving.delete(client)) return;
    client.lifecycle.to('gone');
    for (const [track, holder] of [...session.announced]) if (holder === client) await this.tracks.unannounce(session, client, track);
    await this.core.runHooks('disconnected', client);
  }

  /** Runs `@disconnected` for every client that left the session, in the order they left. */
  async drainLeaving(session: HostSession): Promise<void> {
    for (let next = first(session.leaving); next; next = first(session.leaving)) await this.finishLeaving(session, next);
  }

  /**
   * The welcome for `client` on `sink` (`resumed`: a resumed client's new connection), then the
   * fields its connection adds ({@link ClientSink.welcomeFields}).
   */
  welcome(client: HostClient, sink: ClientSink, resumed = false): WelcomeMessage {
    const s = this.core.session;
    const welcome: WelcomeMessage = {
      type: 'welcome',
      protocol: this.core.def.schema.protocol,
      clientId: client.id,
      app: this.core.def.schema.app,
      schema: this.core.servedSchema,
      // A client still waiting for a session gets `{}` here and the state when it joins one.
      state: s && !s.over && client.session === s ? this.core.def.state.snapshot(s.state) : {},
      session: this.status(),
      role: client.role,
      ...(this.core.singleController && { control: this.control.controlStatus(client.session === s ? s : undefined) }),
      ...(resumed && { resumed: true }),
    };
    const own = sink.welcomeFields?.(resumed, client.id);
    return own ? { ...welcome, ...own } : welcome;
  }
}

function first<T>(set: Set<T>): T | undefined {
  for (const x of set) return x;
  return undefined;
}
