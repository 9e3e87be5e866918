/**
 * `POST /sessions/{id}/fork`: a new session from a snapshot of a running one, on another
 * instance (docs/snapshots.md "Fork"). The router allocates an instance as `POST /sessions`
 * does (a 429, or with `?wait=` a place in the waiting line, when none is free), then streams
 * the running session's snapshot from its instance (`GET /snapshot`) to the new one
 * (`PUT /snapshot?session=<new id>`), which checks it at once and starts that session from it
 * when its first viewer joins. The original session goes on untouched; the answer is the
 * `POST /sessions` answer for the fork, plus `forkOf`, `bytes` and `step`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '@reactor/log';
import { sendRouterError } from './answers.js';
import { RouterErrorCode } from './errors.js';
import type { AllocationPrepare, SessionAllocator } from './allocation.js';
import type { AgonesRegistry, Instance } from './registry.js';

/** The longest a snapshot may take to go from one instance to the other, ms (a take waits for the step in flight). */
export const FORK_TRANSFER_TIMEOUT_MS = 30_000;

/** What a fork needs from the router. */
export interface ForkContext {
  log: Logger;
  registry: AgonesRegistry;
  allocator: SessionAllocator;
  /** The instances' static token (`--token`): the snapshot routes take only it. */
  token: string | undefined;
}

type Refusal = NonNullable<Awaited<ReturnType<AllocationPrepare>>['refusal']>;

/** Codes an instance's snapshot route answers that the fork passes on as they are. */
const PASSED_ON = new Set<string>([
  RouterErrorCode.SnapshotUnsupported,
  RouterErrorCode.SnapshotCorrupt,
  RouterErrorCode.SnapshotTruncated,
  RouterErrorCode.SnapshotAppMismatch,
  RouterErrorCode.SnapshotVersionMismatch,
  RouterErrorCode.SnapshotTooBig,
]);

const base = (i: Instance): string => `http://${i.address.includes(':') ? `[${i.address}]` : i.address}:${i.port}`;

/**
 * Answers `POST /sessions/{id}/fork` for a session the caller found on `source`.
 */
export async function forkSession(c: ForkContext, req: IncomingMessage, res: ServerResponse, sourceId: string, source: Instance): Promise<void> {
  const token = c.token;
  if (token === undefined) {
    return sendRouterError(
      res,
      503,
      RouterErrorCode.ForkFailed,
      "this router has no --token: an instance's snapshot routes take only the instances' static token; start reactor route with the fleet's token",
    );
  }
  const prepare: AllocationPrepare = async (target, sessionId) => {
    const outcome = await transfer(token, source, target, sessionId);
    if ('bytes' in outcome) {
      c.log.info(`session ${sessionId} on instance ${target.name} is a fork of ${sourceId} (instance ${source.name}, ${outcome.bytes} bytes)`);
      return { extra: { forkOf: sourceId, bytes: outcome.bytes, step: outcome.step } };
    }
    const refusal = outcome;
    c.log.warn(`fork of session ${sourceId} to instance ${target.name} failed (${refusal.code}): ${refusal.message}; releasing it`);
    // The target holds nothing for anyone now: give it back (an instance under Agones returns to Ready at once).
    await c.registry.release(sessionId, target).catch(() => undefined);
    return { refusal };
  };
  return c.allocator.handle(req, res, prepare);
}

/**
 * Streams the snapshot from `source` to `target` for `sessionId`: what the target kept, or the
 * refusal. `freeze` (a move) freezes the source session as the snapshot is taken: its commands
 * are held until the caller thaws it ({@link thaw}) or releases it.
 */
export async function transfer(
  token: string,
  source: Instance,
  target: Instance,
  sessionId: string,
  freeze = false,
): Promise<{ bytes: number; step: number } | Refusal> {
  const headers = { authorization: `Bearer ${token}` };
  const signal = AbortSignal.timeout(FORK_TRANSFER_TIMEOUT_MS);
  let taken: Response;
  try {
    taken = await fetch(`${base(source)}/snapshot${freeze ? '?freeze=1' : ''}`, { headers, signal });
  } catch (err) {
    return failed(`instance ${source.name} did not give the session's snapshot (${(err as Error).message})`);
  }
  if (taken.status !== 200 || !taken.body) return refusedBy(source, 'give the snapshot', taken);
  let kept: Response;
  try {
    kept = await fetch(`${base(target)}/snapshot?session=${encodeURIComponent(sessionId)}`, {
      method: 'PUT',
      headers: { ...headers, 'content-type': 'application/octet-stream' },
      body: taken.body,
      signal,
      duplex: 'half',
    } as RequestInit);
  } catch (err) {
    await taken.body.cancel().catch(() => undefined);
    return failed(`instance ${target.name} did not take the snapshot (${(err as Error).message}); the original session goes on`);
  }
  if (kept.status !== 202) return refusedBy(target, 'take the snapshot', kept);
  const body = (await kept.json()) as { bytes: number; step: number };
  return { bytes: body.bytes, step: body.step };
}

/** Ends the freeze a move's {@link transfer} put on `source` (the move failed): its held commands apply there. How many were held; undefined when it did not answer. */
export async function thaw(token: string, source: Instance): Promise<number | undefined> {
  try {
    const r = await fetch(`${base(source)}/snapshot/thaw`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}` },
      signal: AbortSignal.timeout(5_000),
    });
    if (r.status !== 200) {
      await r.body?.cancel().catch(() => undefined);
      return undefined;
    }
    return ((await r.json()) as { thawed?: number }).thawed ?? 0;
  } catch {
    return undefined;
  }
}

function failed(message: string): Refusal {
  return { status: 502, code: RouterErrorCode.ForkFailed, message };
}

/** An instance's refusal: its snapshot code as it is (with its status), anything else `fork_failed`. */
async function refusedBy(instance: Instance, what: string, r: Response): Promise<Refusal> {
  const text = await r.text().catch(() => '');
  let error: { code?: unknown; message?: unknown } | undefined;
  try {
    error = (JSON.parse(text) as { error?: { code?: unknown; message?: unknown } }).error;
  } catch {
    error = undefined;
  }
  const code = typeof error?.code === 'string' ? error.code : undefined;
  const message = typeof error?.message === 'string' ? error.message : text.slice(0, 200);
  if (code !== undefined && PASSED_ON.has(code)) return { status: r.status, code: code as RouterErrorCode, message: `instance ${instance.name}: ${message}` };
  return failed(`instance ${instance.name} would not ${what}: ${r.status} ${code ?? ''} ${message}; the original session goes on`.replace(/ +/g, ' '));
}
