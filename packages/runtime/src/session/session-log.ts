/**
 * The session log (issue 41, docs/snapshots.md "Replay"): what a session did, enough to run it
 * again: each command that changed state with the step that first read it, and a SHA-256 of
 * every frame each step made (the first video track, as the model made it), to check a replay
 * against. Seeds are in the state (a world's `seed` field), so the commands carry them.
 * Bounded: past {@link MAX_LOG_COMMANDS} commands or {@link MAX_LOG_FRAMES} frames the log is
 * marked `truncated` and stops growing.
 */
import { createHash } from 'node:crypto';

/** The log's format marker and version. */
export const SESSION_LOG_FORMAT = 'reactor-session-log';
export const SESSION_LOG_VERSION = 1;
export const MAX_LOG_COMMANDS = 100_000;
export const MAX_LOG_FRAMES = 200_000;

/** One command of the log: run before step `step` (1-based, `StepOutcome.step`). */
export interface LoggedCommand {
  step: number;
  name: string;
  params: Record<string, unknown>;
}

/** The log as JSON. */
export interface SessionLogJson {
  format: typeof SESSION_LOG_FORMAT;
  version: number;
  app: string;
  appVersion: string;
  schemaHash: string;
  sessionId: string;
  startedAt: string;
  /** Steps that ran `generate()`. */
  steps: number;
  commands: LoggedCommand[];
  /** SHA-256 (hex, 16 digits) of each frame of the first video track, in the order the steps made them, with its step. */
  frames: Array<[step: number, sha256: string]>;
  /** Why a replay cannot follow it (a rewind, an uploaded file); absent: it can. */
  unreplayable?: string;
  truncated?: boolean;
}

/** One session's log, kept by the host while the session runs. */
export class SessionLog {
  readonly #json: SessionLogJson;

  constructor(app: string, appVersion: string, schemaHash: string, sessionId: string) {
    this.#json = {
      format: SESSION_LOG_FORMAT,
      version: SESSION_LOG_VERSION,
      app,
      appVersion,
      schemaHash,
      sessionId,
      startedAt: new Date().toISOString(),
      steps: 0,
      commands: [],
      frames: [],
    };
  }

  /** A command changed state; `step` is the one that first reads it. Params that are not plain JSON make the log unreplayable. */
  command(step: number, name: string, params: Record<string, unknown>): void {
    if (this.#json.commands.length >= MAX_LOG_COMMANDS) {
      this.#json.truncated = true;
      return;
    }
    let plain: Record<string, unknown>;
    try {
      plain = JSON.parse(JSON.stringify(params)) as Record<string, unknown>;
    } catch {
      return this.unreplayable(`command ${name} at step ${step} has params that are not JSON`);
    }
    if (Object.values(params).some((v) => v !== null && typeof v === 'object' && !Array.isArray(v) && Object.getPrototypeOf(v) !== Object.prototype)) {
      this.unreplayable(`command ${name} at step ${step} carries an uploaded file`);
    }
    this.#json.commands.push({ step, name, params: plain });
  }

  /** How many commands the log holds now (a snapshot taken now follows exactly these). */
  get commandCount(): number {
    return this.#json.commands.length;
  }

  /**
   * A rewind before step `step` restored the snapshot taken once the log held `atCommand`
   * commands, before step `toStep + 1`: logged as a `rewind` command, so a replay takes its own
   * snapshot at that point and restores it here (docs/snapshots.md "Replay").
   */
  rewound(step: number, toStep: number, atCommand: number): void {
    this.command(step, 'rewind', { toStep, atCommand });
  }

  /** A step (1-based) made these frames of the first video track. */
  frames(step: number, rgbs: readonly Uint8Array[]): void {
    this.#json.steps = Math.max(this.#json.steps, step);
    for (const rgb of rgbs) {
      if (this.#json.frames.length >= MAX_LOG_FRAMES) {
        this.#json.truncated = true;
        return;
      }
      this.#json.frames.push([step, createHash('sha256').update(rgb).digest('hex').slice(0, 16)]);
    }
  }

  /** A step ran `generate()` (with or without frames). */
  stepped(step: number): void {
    this.#json.steps = Math.max(this.#json.steps, step);
  }

  /** Something a replay cannot follow happened (the first reason is kept). */
  unreplayable(reason: string): void {
    this.#json.unreplayable ??= reason;
  }

  /** The log as it stands (a copy). */
  toJSON(): SessionLogJson {
    return structuredClone(this.#json);
  }
}
