/**
 * Move on drain (docs/snapshots.md "Move"): when an instance holding a session turns draining
 * (SIGTERM under Agones: its draining label appears), the router moves the session, if the app
 * takes snapshots: it allocates another instance for the same session id (ahead of the waiting
 * line), streams the snapshot across as a fork does, then closes the relayed viewer sockets with
 * 4307 `session_moved: /s/{new instance}` (`@reactor/client` reconnects there at once) and
 * releases the session on the old instance, which ends it and exits once empty. The snapshot is
 * taken with a freeze: from it on, the old instance holds the session's commands instead of
 * applying them (the client sends them again on the new one after the 4307); a failed move
 * thaws it and the held commands apply there. A target that
 * fails (no instance free, it dies mid-transfer, it refuses the bytes) is released and the
 * session stays where it was, to its drain deadline as before: nothing is lost.
 */
import type { Logger } from '@reactor/log';
import type { SessionAllocator } from './allocation.js';
import { thaw, transfer } from './fork.js';
import type { AgonesRegistry, Instance } from './registry.js';
import { RouterErrorCode } from './errors.js';
import { RouterCloseCode } from './ws-relay.js';

/** What a move needs from the router. */
export interface MoveContext {
  log: Logger;
  registry: AgonesRegistry;
  allocator: SessionAllocator;
  /** The instances' static token (the snapshot routes take only it); without it nothing moves. */
  token: string | undefined;
  /** Closes the sockets this router relays to an instance. */
  closeRelays(name: string, code: number, reason: string): void;
  /** This router's id in a move's claim ({@link AgonesRegistry.claimMove}): of several routers, one moves a session. */
  routerId: string;
  /** Told how each move ended (the metrics). */
  outcome?(result: 'moved' | 'failed' | 'unsupported' | 'no_free_instance' | 'claimed_elsewhere'): void;
}

const base = (i: Instance): string => `http://${i.address.includes(':') ? `[${i.address}]` : i.address}:${i.port}`;

/** The 4307 close reason that sends a viewer to `target`. */
export const movedReason = (target: string): string => `${RouterErrorCode.SessionMoved}: /s/${target}`;

/** Sessions being moved now (one move per session at a time). */
const moving = new Set<string>();

/** Moves the session of `source` (just turned draining) to another instance; resolves when it is done or given up. Never rejects. */
export async function moveSession(c: MoveContext, source: Instance): Promise<void> {
  const sessionId = source.sessionId;
  if (c.token === undefined || source.state !== 'Allocated' || !sessionId || moving.has(sessionId)) return;
  moving.add(sessionId);
  const started = performance.now();
  let target: Instance | undefined;
  let frozen = false;
  try {
    // Only an app with snapshots can move: its schema has the built-in rewind command.
    const schema = await fetch(`${base(source)}/schema`, { headers: { authorization: `Bearer ${c.token}` }, signal: AbortSignal.timeout(5_000) })
      .then((r) => r.json() as Promise<{ commands?: { name: string }[] }>)
      .catch(() => undefined);
    if (!schema?.commands?.some((x) => x.name === 'rewind')) {
      c.outcome?.('unsupported');
      c.log.info(`instance ${source.name} drains with session ${sessionId}; its app takes no snapshots, so the session stays to its drain deadline`);
      return;
    }
    // Several routers see the same drain: the one that claims the move (an annotation with the object's resourceVersion as precondition) moves it.
    const claim = await c.registry.claimMove(source, c.routerId);
    if (!claim.claimed) {
      c.outcome?.('claimed_elsewhere');
      c.log.info(`instance ${source.name} drains with session ${sessionId}: router ${claim.holder} claimed its move; leaving it`);
      return;
    }
    target = await c.allocator.allocateFor(sessionId);
    if (!target) {
      c.outcome?.('no_free_instance');
      c.log.warn(`instance ${source.name} drains with session ${sessionId}: no free instance to move it to; it stays to its drain deadline`);
      return;
    }
    // The snapshot freezes the session: from it on, its commands are held there, not applied (and lost) there.
    frozen = true;
    const result = await transfer(c.token, source, target, sessionId, true);
    if (!('bytes' in result)) {
      c.outcome?.('failed');
      const held = await thaw(c.token, source);
      frozen = false;
      c.log.warn(
        `moving session ${sessionId} from ${source.name} to ${target.name} failed (${result.code}): ${result.message}; it stays on ${source.name}` +
          (held === undefined ? ' (its thaw did not answer: it thaws by itself)' : `, thawed (${held} held command(s) apply there)`),
      );
      await c.registry.release(sessionId, target).catch(() => undefined);
      return;
    }
    frozen = false;
    // The viewers reconnect to the new instance (this router's at once, every other router's when its watch sees the annotation); the old one ends the session (the release) and exits once empty.
    c.closeRelays(source.name, RouterCloseCode.SessionMoved, movedReason(target.name));
    await c.registry
      .markMoved(source, target)
      .catch((err: unknown) => c.log.warn(`marking ${source.name} moved failed: ${String(err)}; other routers' viewers stay there until the session ends`));
    await c.registry.release(sessionId, source).catch((err: unknown) => c.log.warn(`releasing session ${sessionId} on ${source.name} failed: ${String(err)}`));
    c.outcome?.('moved');
    c.log.info(
      `session ${sessionId} moved from draining ${source.name} to ${target.name} (${result.bytes} bytes, ${Math.round(performance.now() - started)} ms)`,
    );
  } catch (err) {
    c.outcome?.('failed');
    c.log.warn(`moving session ${sessionId} off ${source.name} failed: ${(err as Error)?.message ?? String(err)}; it stays there`);
    if (frozen) await thaw(c.token!, source);
    if (target) await c.registry.release(sessionId, target).catch(() => undefined);
  } finally {
    moving.delete(sessionId);
  }
}
