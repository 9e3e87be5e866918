/**
 * One connection's `client_stats` reports: checked against what the server knows of that
 * connection, then counted into the server's metrics (`reactor_command_to_pixel_seconds`,
 * `reactor_time_to_first_frame_seconds`, `reactor_client_*_total`), all or nothing.
 *
 * The shape (keys, types, ranges, at most 64 samples) is checked by `parseClientStats` in
 * `@reactor/protocol`; here, what a client could still skew the figures with:
 * - at most {@link MAX_REPORTS_PER_SECOND} reports a second (refused ones included);
 * - a sample names a command of the schema, and this connection sent that command and got its
 *   `reply` (one sample per replied command; a client cannot report more than it did);
 * - a sample is no longer than the connection has been open;
 * - freezes and their time, and dropped frames, no more than the connection's age and the frames
 *   sent to it allow; one time to first frame per connection, after a frame was sent.
 * A report that breaks any of these is answered `invalid_client_stats` and counts for nothing.
 */
import type { ClientStatsMessage } from '@reactor/protocol';
import type { ServerMetrics } from '../base/metrics.js';

/** The shortest interval between two reports a client is asked to keep (`welcome.clientStats.intervalMs`). */
export const CLIENT_STATS_INTERVAL_MS = 1000;
/** Reports a connection may send in any one second; more are refused. */
export const MAX_REPORTS_PER_SECOND = 2;
/** Samples a command may be owed at most (replies not yet reported); beyond, the oldest credit is lost. */
const MAX_CREDITS_PER_COMMAND = 256;
/** Clock slack between a client's measure and the server's: the two clocks start at different moments. */
const SLACK_MS = 1000;
/** Shortest gap that is a freeze. */
const FREEZE_MS = 200;

/** What a connection's stats intake needs from the connection. */
export interface ClientStatsContext {
  metrics: ServerMetrics;
  /** The wire names of the app's commands now (the schema may change under `reactor dev`). */
  commandNames(): readonly string[];
  /** Frames written to this connection so far. */
  framesSent(): number;
  /** Answers the client `invalid_client_stats` with this message. */
  refuse(message: string): void;
  /** Clock, ms (default `performance.now`). */
  now?: () => number;
}

/** One connection's reports (see the module comment). */
export class ClientStatsIntake {
  readonly #c: ClientStatsContext;
  readonly #now: () => number;
  readonly #openedAt: number;
  /** Replied commands not yet reported, by name. */
  readonly #credits = new Map<string, number>();
  /** When the last reports arrived (at most {@link MAX_REPORTS_PER_SECOND}). */
  readonly #recent: number[] = [];
  #freezes = 0;
  #freezeMs = 0;
  #dropped = 0;
  #firstFrame = false;

  constructor(c: ClientStatsContext) {
    this.#c = c;
    this.#now = c.now ?? (() => performance.now());
    this.#openedAt = this.#now();
  }

  /** A command of this connection got its `reply`: one sample of it may be reported. */
  replied(name: string): void {
    this.#credits.set(name, Math.min(MAX_CREDITS_PER_COMMAND, (this.#credits.get(name) ?? 0) + 1));
  }

  /** A well-formed report: counted, or refused whole. */
  receive(msg: ClientStatsMessage): void {
    const now = this.#now();
    const problem = this.#check(msg, now);
    if (problem !== undefined) {
      this.#c.metrics.clientStatsReports.inc({ outcome: 'refused' });
      this.#c.refuse(`client_stats refused, nothing of it counted: ${problem}`);
      return;
    }
    const m = this.#c.metrics;
    const transport = msg.transport;
    for (const s of msg.samples) {
      this.#credits.set(s.command, this.#credits.get(s.command)! - 1);
      m.commandToPixelSeconds.observe({ command: s.command, transport }, s.ms / 1000);
    }
    if (msg.firstFrameMs !== undefined) {
      this.#firstFrame = true;
      m.timeToFirstFrameSeconds.observe({ transport }, msg.firstFrameMs / 1000);
    }
    this.#freezes += msg.freezes;
    this.#freezeMs += msg.freezeMs;
    this.#dropped += msg.dropped;
    if (msg.freezes > 0) m.clientFreezes.inc({ transport }, msg.freezes);
    if (msg.freezeMs > 0) m.clientFreezeSeconds.inc({ transport }, msg.freezeMs / 1000);
    if (msg.dropped > 0) m.clientFramesDropped.inc({ transport }, msg.dropped);
    m.clientStatsReports.inc({ outcome: 'accepted' });
  }

  /** Why the report cannot be counted, or undefined. */
  #check(msg: ClientStatsMessage, now: number): string | undefined {
    while (this.#recent.length > 0 && now - this.#recent[0]! >= 1000) this.#recent.shift();
    this.#recent.push(now);
    if (this.#recent.length > MAX_REPORTS_PER_SECOND) {
      return `more than ${MAX_REPORTS_PER_SECOND} reports in one second; send at most one every welcome.clientStats.intervalMs`;
    }
    const age = now - this.#openedAt;
    const names = this.#c.commandNames();
    const owed = new Map<string, number>();
    for (const s of msg.samples) {
      if (!names.includes(s.command)) return `a sample names ${JSON.stringify(s.command.slice(0, 64))}, which is not a command of this app`;
      const n = (owed.get(s.command) ?? 0) + 1;
      owed.set(s.command, n);
      if (n > (this.#credits.get(s.command) ?? 0)) {
        return `more samples of "${s.command}" than this connection sent such commands and got their reply (${this.#credits.get(s.command) ?? 0} not yet reported)`;
      }
      if (s.ms > age + SLACK_MS) return `a sample of ${s.ms} ms is longer than this connection has been open (${Math.round(age)} ms)`;
    }
    if (msg.firstFrameMs !== undefined) {
      if (this.#firstFrame) return 'firstFrameMs was already reported on this connection (it is sent once)';
      if (this.#c.framesSent() === 0) return 'firstFrameMs before the server sent this connection any frame';
    }
    if (this.#freezeMs + msg.freezeMs > age + SLACK_MS)
      return `more freeze time (${Math.round(this.#freezeMs + msg.freezeMs)} ms in all) than this connection has been open`;
    if (this.#freezes + msg.freezes > Math.floor(age / FREEZE_MS) + 1)
      return `more freezes (${this.#freezes + msg.freezes} in all) than gaps of ${FREEZE_MS} ms fit in this connection's time`;
    const sent = this.#c.framesSent();
    if (this.#dropped + msg.dropped > sent) return `more dropped frames (${this.#dropped + msg.dropped} in all) than the server sent this connection (${sent})`;
    return undefined;
  }
}
