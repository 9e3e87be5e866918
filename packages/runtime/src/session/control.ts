/**
 * Roles and control: who may run a command or publish a track, and, in single-controller mode,
 * which controller steers the session and who waits for control.
 */
import { type ErrorMessage, type ReplyMessage, type ServerMessage, WireErrorCode } from '@reactor/protocol';
import { errorReply } from './answers.js';
import type { HostClient, HostSession } from './host-client.js';
import type { HostCore } from './host-core.js';

/** Roles and (single-controller mode) the control of each session. */
export class Control {
  constructor(private readonly core: HostCore) {}

  private get singleController(): boolean {
    return this.core.singleController;
  }

  /** Whether `client` steers: any controller, or in single-controller mode the one holding control. */
  steers(client: HostClient): boolean {
    if (client.role !== 'controller') return false;
    return !this.singleController || client.session?.controller === client;
  }

  /** The error for a command or publication `client` may not make because of its role, or undefined. */
  roleError(client: HostClient, id: string, roles: readonly string[], what: string): ErrorMessage | undefined {
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

  controlStatus(session: HostSession | undefined): { controller: string | null; queue: string[] } {
    return { controller: session?.controller?.id ?? null, queue: session ? session.controlQueue.map((c) => c.id) : [] };
  }

  /** Tells every client of the session who steers now. */
  publishControl(session: HostSession): void {
    if (!this.singleController || this.core.session !== session) return;
    const msg: ServerMessage = { type: 'control', ...this.controlStatus(session) };
    for (const c of session.members) if (c.connected) this.core.safe(c.sink, () => c.sink.message(msg));
  }

  /**
   * Control passes to the first client waiting for it; when its holder left (not released it)
   * and nobody waits, to the controller of the session that joined first; else to nobody.
   */
  private handOver(session: HostSession, holderLeft = false): void {
    let next = session.controlQueue.shift();
    while (next && !(next.connected && next.session === session)) next = session.controlQueue.shift();
    if (!next && holderLeft) next = [...session.members].find((c) => c.connected && c.role === 'controller');
    session.controller = next;
    if (next) this.core.logger.info({ client: next.id }, `control passes to client ${next.id}`);
  }

  /** A client joined `session`: in single-controller mode the first controller takes control. */
  joined(session: HostSession, client: HostClient): void {
    if (this.singleController && !session.controller && client.role === 'controller') {
      session.controller = client;
      this.publishControl(session);
    }
  }

  /** A client left `session`: it leaves the queue, and control passes on when it held it. */
  left(session: HostSession, client: HostClient): void {
    if (!this.singleController) return;
    const queued = session.controlQueue.indexOf(client);
    if (queued >= 0) session.controlQueue.splice(queued, 1);
    if (session.controller === client) this.handOver(session, true);
    if (queued >= 0 || session.controller !== client) this.publishControl(session);
  }

  requestControl(client: HostClient, id: string): ReplyMessage | ErrorMessage {
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

  releaseControl(client: HostClient, id: string): ReplyMessage | ErrorMessage {
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
}
