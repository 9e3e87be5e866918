/**
 * Session snapshots and rewind (docs/snapshots.md): a ring of snapshots per session, taken
 * between steps under the step lock, and the built-in `rewind` command that restores one.
 *
 * A snapshot holds the session's `InputState` (every field), the app's declared fields
 * (`snapshot.fields`) and what the app's `snapshot()` returns (its model state: a runner's
 * `snapshot()`), encoded once into checked bytes (`snapshot-codec.ts`) and kept in the ring,
 * oldest dropped first past `ringBytes`. Each entry learns the seq and the time of the first
 * frame made after it (playout tells it), so a rewind can go back to a frame seq or a number
 * of seconds of played frames.
 */
import { type ErrorMessage, type ReplyMessage, WireErrorCode } from '@reactor/protocol';
import type { AppDefinition } from '../app/registry.js';
import { REWIND_COMMAND, type SnapshotSpec } from '../app/snapshot-spec.js';
import { decodeSnapshot, encodeSnapshot, type SnapshotHeader } from '../snapshot/snapshot-codec.js';
import { HostOptionError, NoSessionError } from '../errors/errors.js';
import { SnapshotError, SnapshotErrorCode } from '../snapshot/snapshot-errors.js';
import { errorReply, invalidParams } from './answers.js';
import type { HostClient, HostSession } from './host-client.js';
import { errorText, type HostCore } from './host-core.js';
import type { SnapshotRingOptions } from './host-options.js';
import type { Chunk } from './normalize.js';
import { SessionLog, type SessionLogJson } from './session-log.js';

/** The snapshot file format this host writes and reads. */
export const SNAPSHOT_FORMAT = 1;
/** Rewinds a session may make at once before the rate limit (`snapshot.rewindsPerSecond`) applies. */
export const REWIND_BURST = 3;

/** One snapshot of the ring. */
interface RingEntry {
  readonly bytes: Uint8Array;
  /** The session step it was taken before. */
  readonly step: number;
  /** Commands the session log held when it was taken (a replay takes its own there). */
  readonly logIndex: number;
  /** Seq of the first frame made after it; undefined until that frame plays. */
  firstSeq: number | undefined;
  /** When that frame played (`performance.now()`). */
  playedAt: number | undefined;
}

/** One session's ring and rate bucket. */
interface SessionRing {
  entries: RingEntry[];
  bytes: number;
  /** Steps that made output since the last snapshot. */
  since: number;
  /** The newest entry waiting to learn its first frame. */
  unmarked: RingEntry | undefined;
  /** Rewind tokens (refilled at `rewindsPerSecond`, at most {@link REWIND_BURST}). */
  tokens: number;
  refilledAt: number;
  /** Set after a snapshot failed (logged once): the session takes no more. */
  failed: boolean;
}

/** What `rewind` answers. */
export interface RewindResult {
  /** Seq of the first frame the restored snapshot was followed by (the point the stream went back to). */
  seq: number;
  /** Seconds between when that frame played and the rewind. */
  secondsBack: number;
  /** The size of the restored snapshot. */
  bytes: number;
  /** How long the restore took, ms. */
  restoreMs: number;
}

/** The longest a move's freeze holds commands when nobody thaws it (a router that died mid-move), ms. */
export const FREEZE_TIMEOUT_MS = 40_000;

/** Options of {@link SnapshotsApi.take}. */
export interface TakeOptions {
  /**
   * Freeze the session as the snapshot is taken (a move, docs/snapshots.md "Move"): from that
   * point on, under the same lock turn, its commands are held, not applied, until
   * {@link SnapshotsApi.thaw} (they then apply here, in arrival order) or the session ends (the
   * move went through: they are answered `no_session` and never applied here; the client re-sends
   * them on the new instance). A freeze nobody ends thaws itself after `freezeMs`.
   */
  freeze?: boolean;
  /** How long the freeze may last, ms (default {@link FREEZE_TIMEOUT_MS}). */
  freezeMs?: number;
}

/** `AppHost.snapshots`: the current session's whole state as bytes, and back (between steps, under the step lock). */
export interface SnapshotsApi {
  /**
   * A snapshot of the current session now, between steps: checked bytes (docs/snapshots.md);
   * `{ freeze: true }` also freezes the session (a move: {@link TakeOptions.freeze}).
   * @throws NoSessionError (`no_session`); SnapshotError (`snapshot_value`, `snapshot_too_big`); what the app's `snapshot()` throws
   */
  take(options?: TakeOptions): Promise<Uint8Array>;
  /**
   * Ends the current freeze (a move that failed): the held commands apply now, in arrival order.
   * @returns how many commands were held (0: no freeze)
   */
  thaw(): number;
  /**
   * Restores snapshot bytes into the current session, between steps: queued frames are dropped
   * (clients told `flush`), waiting commands told `superseded`, the state sent again.
   * @throws NoSessionError; SnapshotError (`snapshot_corrupt`, `snapshot_truncated`, `snapshot_too_big`, `snapshot_app_mismatch`, `snapshot_version_mismatch`) with nothing changed; what the app's `restore()` throws
   */
  restore(bytes: Uint8Array): Promise<void>;
  /**
   * Keeps snapshot bytes for the session that starts next with id `sessionId` (a fork or a move
   * through the session router: docs/snapshots.md "Fork"): checked now, restored when that
   * session starts, before its first step. One is kept; a second replaces it.
   * @throws SnapshotError (`snapshot_corrupt`, `snapshot_truncated`, `snapshot_too_big`, `snapshot_app_mismatch`, `snapshot_version_mismatch`): nothing kept
   */
  seed(sessionId: string, bytes: Uint8Array): { bytes: number; step: number };
  /** The largest snapshot this app takes or reads (`snapshot.maxBytes`, reactor.yaml's `max_bytes`). */
  readonly maxBytes: number;
  /** The current session's log (commands at their steps, frame hashes: `reactor replay` runs it again); between sessions, the last one's. */
  log(): SessionLogJson | undefined;
}

const owners = new WeakMap<SnapshotsApi, Snapshots>();

/** @internal The {@link Snapshots} behind an `AppHost.snapshots`. */
export function snapshotsOf(api: SnapshotsApi | undefined): Snapshots | undefined {
  return api ? owners.get(api) : undefined;
}

/** What the snapshots need of the host's broadcast: the flush (clients cut) and the state message. */
interface SnapshotBroadcast {
  flush(): void;
  broadcastState(): void;
}

/** The host's snapshots: one ring per session, taken by the step loop, restored by `rewind`. */
export class Snapshots {
  private readonly rings = new WeakMap<HostSession, SessionRing>();
  private readonly logs = new WeakMap<HostSession, SessionLog>();
  /** The log of the session that ended last (a recording that stops at the session's end saves it). */
  private lastLog: SessionLogJson | undefined;
  /** Bytes held by every live ring, for `/metrics`. */
  private heldBytes = 0;
  /** Snapshot bytes waiting for the session with that id (`seed()`). */
  private pending: { sessionId: string; bytes: Uint8Array } | undefined;
  /** A move's freeze: the session whose commands are held, and the held commands' wake-ups (true: run, false: the session ended). */
  private freeze: { session: HostSession; held: Array<(run: boolean) => void>; timer: ReturnType<typeof setTimeout> | undefined } | undefined;
  readonly api: SnapshotsApi;

  /**
   * Refuses ring settings (the host's `snapshots` option, reactor.yaml's `snapshots:`) for an app
   * that takes no snapshots: checked before the app is built.
   * @throws HostOptionError (`invalid_host_option`)
   */
  static checkRing(def: AppDefinition, ring: SnapshotRingOptions | undefined): void {
    if (ring === undefined || def.snapshot) return;
    throw new HostOptionError(
      `options.snapshots (reactor.yaml's snapshots:) sets a rewind ring, but ${def.appClass.name} takes no snapshots: ` +
        'add @reactorApp({ snapshot: {} }) to the app (docs/snapshots.md), or remove the section',
    );
  }

  /**
   * The snapshots of an app that declares them (`@reactorApp({ snapshot })`), or undefined;
   * `ring` (checked by {@link Snapshots.checkRing}) overrides its ring settings.
   */
  static of(core: HostCore, broadcast: SnapshotBroadcast, ring?: SnapshotRingOptions): Snapshots | undefined {
    const spec = core.def.snapshot;
    if (!spec) return undefined;
    const set = Object.fromEntries(Object.entries(ring ?? {}).filter(([, v]) => v !== undefined));
    return new Snapshots(core, Object.freeze({ ...spec, ...set }), broadcast);
  }

  private constructor(
    private readonly core: HostCore,
    readonly spec: SnapshotSpec,
    private readonly broadcast: SnapshotBroadcast,
  ) {
    this.api = {
      take: (options) =>
        core.task(async () => {
          const session = this.current();
          const bytes = await this.capture(session);
          // Under the same lock turn as the capture: no command can apply between the two.
          if (options?.freeze === true) this.startFreeze(session, options.freezeMs ?? FREEZE_TIMEOUT_MS);
          return bytes;
        }),
      thaw: () => this.thaw('thawed'),
      restore: (bytes) =>
        core.task(async () => {
          const session = this.current();
          await this.restore(session, bytes);
          this.afterRestore(session);
          this.logOf(session).unreplayable(`a snapshot was restored before step ${session.steps + 1}`);
        }),
      maxBytes: this.spec.maxBytes,
      seed: (sessionId, bytes) => {
        const { header } = this.check(bytes);
        this.pending = { sessionId, bytes: bytes.slice() };
        return { bytes: bytes.byteLength, step: header.step };
      },
      log: () => {
        const s = this.core.session;
        return s ? this.logOf(s).toJSON() : this.lastLog;
      },
    };
    owners.set(this.api, this);
  }

  private startFreeze(session: HostSession, ms: number): void {
    if (this.freeze?.session !== session) {
      this.thaw('thawed');
      this.freeze = { session, held: [], timer: undefined };
      this.core.logger.info(`session ${session.id} frozen for a move: its commands are held until the move ends`);
    }
    const f = this.freeze;
    clearTimeout(f.timer);
    f.timer = setTimeout(() => {
      if (this.freeze !== f) return;
      this.core.logger.warn(`the move of session ${session.id} did not end within ${ms} ms: the session thaws and its held commands apply here`);
      this.thaw('thawed');
    }, ms);
    f.timer.unref();
  }

  /** Whether `session` is frozen for a move (a command is then held: {@link whenThawed}). */
  frozen(session: HostSession): boolean {
    return this.freeze?.session === session && !session.over;
  }

  /** Waits for the freeze to end: true when it thawed (the held command runs now), false when the session ended frozen (moved away). */
  whenThawed(): Promise<boolean> {
    const f = this.freeze;
    if (!f) return Promise.resolve(true);
    if (f.held.length === 0) this.core.logger.info(`session ${f.session.id} is frozen for a move: holding its commands until the move ends`);
    return new Promise<boolean>((resolve) => f.held.push(resolve));
  }

  /** Ends the freeze: `thawed` runs the held commands (in arrival order), `ended` drops them. */
  private thaw(how: 'thawed' | 'ended'): number {
    const f = this.freeze;
    if (!f) return 0;
    this.freeze = undefined;
    clearTimeout(f.timer);
    const n = f.held.length;
    if (how === 'thawed') this.core.logger.info(`session ${f.session.id} thawed: ${n} held command(s) apply here`);
    else if (n > 0)
      this.core.logger.info(
        `session ${f.session.id} ended frozen (moved): ${n} held command(s) were not applied here; the clients send them again on the new instance`,
      );
    for (const wake of f.held) wake(how === 'thawed');
    return n;
  }

  /** The session's log (made at its first use). */
  logOf(session: HostSession): SessionLog {
    let log = this.logs.get(session);
    if (!log) {
      const { app } = this.core.def.schema;
      log = new SessionLog(app.name, app.version, this.spec.schemaHash, session.id);
      this.logs.set(session, log);
    }
    return log;
  }

  /** A command changed the state of `session` (under the lock): logged with the step that first reads it. */
  logCommand(session: HostSession, name: string, params: Record<string, unknown>): void {
    this.logOf(session).command(session.steps + session.inFlight + 1, name, params);
  }

  private current(): HostSession {
    const s = this.core.session;
    if (!s || s.over) throw new NoSessionError('no session is running: a snapshot is taken of (and restored into) the current session');
    return s;
  }

  /** Clients cut to the restored state: queued frames dropped, waiting commands superseded, the state sent. */
  private afterRestore(session: HostSession): void {
    this.broadcast.flush();
    session.acks.rewound();
    this.broadcast.broadcastState();
  }

  private ring(session: HostSession): SessionRing {
    let r = this.rings.get(session);
    if (!r) {
      r = { entries: [], bytes: 0, since: this.spec.everySteps, unmarked: undefined, tokens: REWIND_BURST, refilledAt: performance.now(), failed: false };
      this.rings.set(session, r);
    }
    return r;
  }

  /** The header every snapshot of this app carries. */
  private header(step: number): SnapshotHeader {
    const { app } = this.core.def.schema;
    return { format: SNAPSHOT_FORMAT, app: app.name, version: app.version, schemaHash: this.spec.schemaHash, takenAt: new Date().toISOString(), step };
  }

  /**
   * Encodes the session's whole state now (under the step lock, between steps).
   * @throws SnapshotError (`snapshot_value`, `snapshot_too_big`) and what the app's `snapshot()` throws
   */
  async capture(session: HostSession): Promise<Uint8Array> {
    const { app, def } = this.core;
    const state: Record<string, unknown> = {};
    for (const f of def.state.fields) state[f.property] = (session.state as unknown as Record<string, unknown>)[f.property];
    const fields: Record<string, unknown> = {};
    for (const f of this.spec.fields) fields[f] = (app as unknown as Record<string, unknown>)[f];
    const model = typeof app.snapshot === 'function' ? await app.snapshot() : null;
    return encodeSnapshot(this.header(session.steps), { state, fields, model: model ?? null }, this.spec.maxBytes);
  }

  /**
   * Checks snapshot bytes against this app and puts them back: the model first (the app's
   * `restore()`), then the app's fields and the state, so a model that refuses leaves the
   * session as it was.
   * @throws SnapshotError (`snapshot_corrupt`, `snapshot_truncated`, `snapshot_too_big`, `snapshot_app_mismatch`, `snapshot_version_mismatch`) before anything changes
   */
  async restore(session: HostSession, bytes: Uint8Array): Promise<void> {
    const { app } = this.core;
    const { header, body } = this.check(bytes);
    const { state, fields, model } = body as { state: Record<string, unknown>; fields: Record<string, unknown>; model: unknown };
    if (typeof app.restore === 'function') await app.restore(model);
    for (const [k, v] of Object.entries(fields ?? {})) (app as unknown as Record<string, unknown>)[k] = v;
    for (const [k, v] of Object.entries(state ?? {})) (session.state as unknown as Record<string, unknown>)[k] = v;
    this.core.logger.info({ step: header.step, bytes: bytes.byteLength }, `restored a snapshot taken before step ${header.step}`);
  }

  /**
   * Restores the seeded snapshot into a session that just started with its id (under the lock,
   * before its first step); false when none waits for it.
   * @throws what {@link restore} throws (the session then cannot start from it)
   */
  async applySeed(session: HostSession): Promise<boolean> {
    const seed = this.pending;
    if (!seed || seed.sessionId !== session.id) return false;
    this.pending = undefined;
    await this.restore(session, seed.bytes);
    this.logOf(session).unreplayable('the session started from a snapshot (a fork or a move)');
    return true;
  }

  /** Decodes and checks snapshot bytes for this app (nothing changes). */
  check(bytes: Uint8Array): { header: SnapshotHeader; body: unknown } {
    const decoded = decodeSnapshot(bytes, this.spec.maxBytes);
    const { header } = decoded;
    const { app } = this.core.def.schema;
    if (header.app !== app.name) {
      throw new SnapshotError(SnapshotErrorCode.AppMismatch, `the snapshot is of app ${JSON.stringify(header.app)}, not of ${JSON.stringify(app.name)}`);
    }
    if (header.format !== SNAPSHOT_FORMAT || header.version !== app.version || header.schemaHash !== this.spec.schemaHash) {
      throw new SnapshotError(
        SnapshotErrorCode.VersionMismatch,
        `the snapshot is of ${app.name} ${header.version} (schema ${String(header.schemaHash).slice(0, 12)}, format ${header.format}); ` +
          `this is ${app.version} (schema ${this.spec.schemaHash.slice(0, 12)}, format ${SNAPSHOT_FORMAT}): a snapshot restores only into the version that took it`,
      );
    }
    return decoded;
  }

  /** The step loop made output: whether a snapshot is due before the next step. */
  due(session: HostSession): boolean {
    const r = this.ring(session);
    return !r.failed && r.since >= this.spec.everySteps;
  }

  /** Takes a snapshot into the session's ring (under the lock, before a step); a failure is logged once and stops the ring. */
  async take(session: HostSession): Promise<void> {
    const r = this.ring(session);
    let bytes: Uint8Array;
    try {
      bytes = await this.capture(session);
    } catch (err) {
      r.failed = true;
      this.core.counters.snapshotFailures++;
      this.core.logger.warn({ err }, `a snapshot of session ${session.id} failed, so it keeps no more (rewind has the older ones): ${errorText(err)}`);
      return;
    }
    const entry: RingEntry = { bytes, step: session.steps, logIndex: this.logOf(session).commandCount, firstSeq: undefined, playedAt: undefined };
    r.entries.push(entry);
    r.bytes += bytes.byteLength;
    this.heldBytes += bytes.byteLength;
    r.since = 0;
    r.unmarked = entry;
    this.core.counters.snapshots++;
    while (r.bytes > this.spec.ringBytes && r.entries.length > 1) this.drop(r, r.entries.shift()!);
    this.core.counters.snapshotBytes = this.heldBytes;
  }

  private drop(r: SessionRing, e: RingEntry): void {
    r.bytes -= e.bytes.byteLength;
    this.heldBytes -= e.bytes.byteLength;
  }

  /**
   * A step ran (`chunk`: what it made, if anything): the log learns its frames; the newest
   * snapshot learns its first frame when the chunk's first slot plays.
   */
  stepped(session: HostSession, chunk: Chunk | undefined, clock: number): void {
    const log = this.logOf(session);
    log.stepped(session.steps);
    if (!chunk) return;
    log.frames(
      session.steps,
      (chunk[clock] ?? []).flatMap((s) => (s.rgb ? [s.rgb] : [])),
    );
    const r = this.ring(session);
    r.since++;
    const entry = r.unmarked;
    const first = chunk[clock]?.[0];
    if (!entry || !first) return;
    r.unmarked = undefined;
    first.played = (seq, at) => {
      entry.firstSeq = seq;
      entry.playedAt = at;
    };
  }

  /** The session ended: its ring goes. */
  ended(session: HostSession): void {
    if (this.freeze?.session === session) this.thaw('ended');
    const log = this.logs.get(session);
    if (log) this.lastLog = log.toJSON();
    this.logs.delete(session);
    const r = this.rings.get(session);
    if (!r) return;
    for (const e of r.entries) this.drop(r, e);
    r.entries = [];
    this.rings.delete(session);
    this.core.counters.snapshotBytes = this.heldBytes;
  }

  /**
   * The `rewind` command (under the step lock): `seq` or `seconds`, checked; the newest
   * snapshot at or before that point restored; newer snapshots dropped (that future is gone);
   * queued frames dropped and clients told to cut; commands waiting for a frame told
   * `superseded`, and this command's own `applied` names the first frame after the rewind.
   */
  async rewind(client: HostClient, session: HostSession, params: Record<string, unknown>, id: string): Promise<ReplyMessage | ErrorMessage> {
    const keys = Object.keys(params);
    const extra = keys.filter((k) => k !== 'seq' && k !== 'seconds');
    const { seq, seconds } = params as { seq?: unknown; seconds?: unknown };
    const details = extra.map((k) => ({ field: k, constraint: 'whitelistValidation', message: `property ${k} should not exist` }));
    if ((seq === undefined) === (seconds === undefined)) details.push({ field: 'seq', constraint: 'oneOf', message: 'give exactly one of seq and seconds' });
    if (seq !== undefined && !(typeof seq === 'number' && Number.isInteger(seq) && seq >= 0))
      details.push({ field: 'seq', constraint: 'isInt', message: 'seq must be a non-negative integer (a frame seq)' });
    if (seconds !== undefined && !(typeof seconds === 'number' && Number.isFinite(seconds) && seconds > 0))
      details.push({ field: 'seconds', constraint: 'isPositive', message: 'seconds must be a positive number' });
    if (details.length > 0) return invalidParams(id, REWIND_COMMAND, details);

    const r = this.ring(session);
    const now = performance.now();
    r.tokens = Math.min(REWIND_BURST, r.tokens + ((now - r.refilledAt) / 1000) * this.spec.rewindsPerSecond);
    r.refilledAt = now;
    if (r.tokens < 1) {
      const waitMs = Math.ceil(((1 - r.tokens) / this.spec.rewindsPerSecond) * 1000);
      return errorReply(
        id,
        WireErrorCode.RewindRateLimited,
        `rewind: at most ${this.spec.rewindsPerSecond} a second (bursts of ${REWIND_BURST}) per session; try again in ${waitMs} ms`,
      );
    }
    const played = r.entries.filter((e) => e.firstSeq !== undefined);
    const newest = played.at(-1);
    const target =
      seq !== undefined ? played.findLast((e) => e.firstSeq! <= (seq as number)) : played.findLast((e) => e.playedAt! <= now - (seconds as number) * 1000);
    if (!target || !newest) {
      const oldest = played[0];
      const range = oldest
        ? `the ring holds frames ${oldest.firstSeq} to ${newest!.firstSeq} (${((now - oldest.playedAt!) / 1000).toFixed(1)} s back at most)`
        : 'the ring holds no snapshot yet';
      return errorReply(
        id,
        WireErrorCode.RewindOutOfRange,
        `rewind: nothing to go back to at ${seq !== undefined ? `seq ${String(seq)}` : `${String(seconds)} s back`}: ${range}`,
      );
    }
    r.tokens -= 1;
    const t0 = performance.now();
    try {
      await this.restore(session, target.bytes);
    } catch (err) {
      const code = err instanceof SnapshotError ? ` [${err.code}]` : '';
      this.core.logger.error({ err }, `rewind of session ${session.id} failed: ${errorText(err)}`);
      return errorReply(id, WireErrorCode.RewindFailed, `rewind failed: ${errorText(err)}${code}; the session goes on from where it was`);
    }
    const restoreMs = performance.now() - t0;
    // The future after the target is gone; the target itself stays (a second rewind may reuse it).
    while (r.entries.at(-1) !== target) this.drop(r, r.entries.pop()!);
    r.unmarked = undefined;
    r.since = 0;
    this.core.counters.snapshotBytes = this.heldBytes;
    this.core.counters.rewinds++;
    this.afterRestore(session);
    this.logOf(session).rewound(session.steps + 1, target.step, target.logIndex);
    session.acks.changed({ client, id, key: `event:${REWIND_COMMAND}` });
    const result: RewindResult = {
      seq: target.firstSeq!,
      secondsBack: Math.round((t0 - target.playedAt!) / 10) / 100,
      bytes: target.bytes.byteLength,
      restoreMs: Math.round(restoreMs * 10) / 10,
    };
    return { type: 'reply', id, result };
  }
}
