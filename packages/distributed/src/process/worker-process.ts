/**
 * One rank's process as the parent sees it: spawn, send, pipe its output, notice its exit, stop
 * it. Lifecycle only; the lockstep logic lives in the runner.
 *
 * ```
 * starting --loaded--> ready --call--> busy --answer--> ready
 *     \                  \               \
 *      \                  `---stop()----> stopping --exit--> stopped
 *       `--unexpected exit (any state but stopping)---------> failed
 * ```
 * The state is this class's own: it changes only through {@link WorkerProcess.transition}
 * (`markLoaded()`, `beginCall()`, `endCall()`, `stop()`, the exit event); the runner reads it.
 * @internal
 */
import { type ChildProcess, spawn } from 'node:child_process';
import type { Readable } from 'node:stream';
import type { CrashInfo } from '../errors.js';
import type { ParentMessage } from '../protocol.js';
import { type TransitionTable, transition } from '../state-machine.js';

/** Where one rank process is in its life, as the parent sees it. */
export type WorkerProcessState = 'starting' | 'ready' | 'busy' | 'stopping' | 'stopped' | 'failed';

/** Every edge of a rank process's lifecycle. */
export const WORKER_PROCESS_TRANSITIONS: TransitionTable<WorkerProcessState> = {
  starting: ['ready', 'stopping', 'failed'],
  ready: ['busy', 'stopping', 'failed'],
  busy: ['ready', 'stopping', 'failed'],
  stopping: ['stopped'],
  stopped: [],
  failed: [],
};

/** Wait after the exit request before SIGTERM (healthy shutdown). */
export const EXIT_REQUEST_GRACE_MS = 5_000;
/** Wait after SIGTERM before SIGKILL. */
export const SIGTERM_GRACE_MS = 2_000;
/** Wait after SIGKILL for the exit event (the kernel is quick; this only bounds a bug). */
export const SIGKILL_WAIT_MS = 5_000;
/** After an unexpected exit, how long to wait for the rest of its stderr before reporting. */
export const STDERR_DRAIN_MS = 30;
/** Lines of stderr kept per rank for crash reports. */
export const STDERR_TAIL_LINES = 20;
/** Longest line of rank output passed on whole; longer ones are cut (a worker printing megabytes cannot flood the log). */
export const MAX_OUTPUT_LINE_CHARS = 16 * 1024;
/**
 * Most lines of one rank's output (stdout and stderr together) passed on per second; the rest
 * are counted and said in one line, `... N lines of rank output dropped`, once the second is over
 * (a worker printing many short lines cannot flood the log either).
 */
export const MAX_OUTPUT_LINES_PER_S = 200;
const OUTPUT_WINDOW_MS = 1_000;

/** Exit facts handed to the runner. */
export interface ExitInfo extends Omit<CrashInfo, 'during'> {
  /** True when the parent asked for the exit (stop()). */
  expected: boolean;
}

export interface WorkerProcessOptions {
  rank: number;
  /** Compiled child entry point. */
  childMain: string;
  /** Another program than `node <childMain>` (a Python rank): its path and arguments. */
  command?: { file: string; args: string[] };
  /** Pipe every rank's stdout to `onLine` (default: rank 0's only). */
  pipeAllStdout?: boolean;
  /** The runner's segment prefix; also on the command line so tests can find the process. */
  prefix: string;
  env: NodeJS.ProcessEnv;
  /** One line of rank output (already split; without the trailing newline). */
  onLine(stream: 'stdout' | 'stderr', line: string): void;
  onMessage(msg: unknown): void;
  onExit(info: ExitInfo): void;
}

export class WorkerProcess {
  private current: WorkerProcessState = 'starting';
  readonly rank: number;
  readonly pid: number;
  private readonly child: ChildProcess;
  private readonly tail: string[] = [];
  private exited = false;
  private readonly exitWaiters: (() => void)[] = [];
  private stopping: Promise<void> | null = null;
  private readonly closed: Promise<void>;

  constructor(private readonly opts: WorkerProcessOptions) {
    this.rank = opts.rank;
    // detached: the rank leads its own process group, so a kill reaches whatever it started.
    const file = opts.command?.file ?? process.execPath;
    const args = opts.command?.args ?? [opts.childMain, `--reactor-runner=${opts.prefix}`, `--rank=${opts.rank}`];
    this.child = spawn(file, args, {
      stdio: ['ignore', opts.rank === 0 || opts.pipeAllStdout ? 'pipe' : 'ignore', 'pipe', 'ipc'],
      detached: true,
      env: opts.env,
      serialization: 'json',
    });
    if (this.child.pid === undefined) {
      // spawn failures surface as an 'error' event right after; report them as an exit.
      this.pid = -1;
    } else {
      this.pid = this.child.pid;
    }
    if (this.child.stdout) this.pipeLines(this.child.stdout, 'stdout');
    if (this.child.stderr) this.pipeLines(this.child.stderr, 'stderr');
    this.child.on('message', (m) => opts.onMessage(m));
    this.child.on('error', (err) => {
      if (this.child.pid === undefined) {
        this.tail.push(`spawn failed: ${err.message}`);
        this.handleExit(null, null);
      } else {
        // A failed send or kill: the 'exit' event that follows tells the story.
        this.tail.push(`[parent] ${err.message}`);
        if (this.tail.length > STDERR_TAIL_LINES) this.tail.shift();
      }
    });
    this.child.on('exit', (code, signal) => this.handleExit(code, signal));
    // 'close': the process has exited and its stdio streams have ended.
    this.closed = new Promise((resolve) => this.child.once('close', () => resolve()));
  }

  /** The rank's state (read-only from outside: it changes through this class's own methods). */
  get state(): WorkerProcessState {
    return this.current;
  }

  /** The one place the state changes. @throws IllegalTransitionError on an edge the lifecycle does not have */
  private transition(next: WorkerProcessState): void {
    this.current = transition(`WorkerProcess(rank ${this.rank})`, WORKER_PROCESS_TRANSITIONS, this.current, next);
  }

  /** The rank finished `load()`. */
  markLoaded(): void {
    this.transition('ready');
  }

  /** A call was sent to the rank. */
  beginCall(): void {
    this.transition('busy');
  }

  /** The rank answered the call in flight. */
  endCall(): void {
    if (this.current === 'busy') this.transition('ready');
  }

  /** Resolves once the process has exited and its output streams have ended. */
  whenClosed(): Promise<void> {
    return this.closed;
  }

  private pipeLines(stream: Readable, name: 'stdout' | 'stderr'): void {
    let partial = '';
    // Characters of an over-long line dropped so far (the line was already passed on, cut).
    let dropped = -1;
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      let start = 0;
      for (let nl = chunk.indexOf('\n'); nl >= 0; nl = chunk.indexOf('\n', start)) {
        const piece = chunk.slice(start, nl);
        start = nl + 1;
        if (dropped >= 0) {
          this.line(name, `... (${dropped + piece.length} more characters of that line dropped)`);
          dropped = -1;
        } else {
          this.line(name, cut(partial + piece));
        }
        partial = '';
      }
      const rest = chunk.slice(start);
      if (dropped >= 0) dropped += rest.length;
      else {
        partial += rest;
        if (partial.length > MAX_OUTPUT_LINE_CHARS) {
          this.line(name, cut(partial));
          dropped = partial.length - MAX_OUTPUT_LINE_CHARS;
          partial = '';
        }
      }
    });
    stream.on('end', () => {
      if (dropped >= 0) this.line(name, `... (${dropped} more characters of that line dropped)`);
      else if (partial) this.line(name, cut(partial));
      partial = '';
      this.flushDropped();
    });
  }

  /** The output rate limit's current window: when it began, lines passed on, lines dropped. */
  private readonly output = { start: -Infinity, lines: 0, dropped: 0, timer: null as NodeJS.Timeout | null };

  private line(name: 'stdout' | 'stderr', line: string): void {
    // The crash report's tail keeps the last lines even of a flood: they are the ones that tell.
    if (name === 'stderr') {
      this.tail.push(line);
      if (this.tail.length > STDERR_TAIL_LINES) this.tail.shift();
    }
    const w = this.output;
    const now = performance.now();
    if (now - w.start >= OUTPUT_WINDOW_MS) {
      this.flushDropped();
      w.start = now;
      w.lines = 0;
    }
    if (w.lines < MAX_OUTPUT_LINES_PER_S) {
      w.lines++;
      this.opts.onLine(name, line);
      return;
    }
    w.dropped++;
    // Said when the second is over, even if the flood stops (no later line would say it).
    w.timer ??= setTimeout(() => this.flushDropped(), Math.max(0, w.start + OUTPUT_WINDOW_MS - now)).unref();
  }

  /** Says how many lines the rate limit dropped since it last said so. */
  private flushDropped(): void {
    const w = this.output;
    if (w.timer) clearTimeout(w.timer);
    w.timer = null;
    if (w.dropped === 0) return;
    const n = w.dropped;
    w.dropped = 0;
    this.opts.onLine('stderr', `... ${n} line${n > 1 ? 's' : ''} of rank output dropped (over ${MAX_OUTPUT_LINES_PER_S} lines a second)`);
  }

  private handleExit(code: number | null, signal: NodeJS.Signals | null): void {
    if (this.exited) return;
    this.exited = true;
    const expected = this.current === 'stopping';
    this.transition(expected ? 'stopped' : 'failed');
    for (const w of this.exitWaiters.splice(0)) w();
    // One-shot: the drain timer and a late stderr 'end' may both fire.
    let reported = false;
    const report = () => {
      if (reported) return;
      reported = true;
      this.opts.onExit({ rank: this.rank, pid: this.pid, exitCode: code, signal, stderrTail: [...this.tail], expected });
    };
    if (expected || !this.child.stderr || this.child.stderr.readableEnded) {
      report();
      return;
    }
    // The last stderr lines usually say why; they may still be in the pipe.
    const timer = setTimeout(report, STDERR_DRAIN_MS);
    this.child.stderr.once('end', () => {
      clearTimeout(timer);
      report();
    });
  }

  get hasExited(): boolean {
    return this.exited;
  }

  send(msg: ParentMessage): void {
    if (this.exited || !this.child.connected) return;
    this.child.send(msg);
  }

  /** Sends `signal` to the rank's whole process group. */
  killGroup(signal: NodeJS.Signals): void {
    if (this.pid <= 0) return;
    try {
      process.kill(-this.pid, signal);
    } catch {
      // group already gone
    }
  }

  /** Keeps (or stops keeping) the parent's event loop alive for this process. */
  setRef(ref: boolean): void {
    const handles = [this.child, this.child.channel, this.child.stdout, this.child.stderr] as ({ ref?(): void; unref?(): void } | null | undefined)[];
    for (const h of handles) {
      if (ref) h?.ref?.();
      else h?.unref?.();
    }
  }

  private waitExit(ms: number): Promise<boolean> {
    if (this.exited) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), ms);
      this.exitWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  /**
   * Stops the rank, escalating: exit request (only when `ask`) -> wait -> SIGTERM -> wait ->
   * SIGKILL, each to the process group. Idempotent.
   */
  stop(ask: boolean, graceMs = EXIT_REQUEST_GRACE_MS): Promise<void> {
    if (!this.stopping) this.stopping = this.escalate(ask, graceMs);
    return this.stopping;
  }

  private async escalate(ask: boolean, graceMs: number): Promise<void> {
    this.beginStopping();
    this.setRef(true);
    if (!this.exited && ask) {
      this.send({ t: 'exit' });
      await this.waitExit(graceMs);
    }
    if (!this.exited) {
      this.killGroup('SIGTERM');
      await this.waitExit(SIGTERM_GRACE_MS);
    }
    if (!this.exited) {
      this.killGroup('SIGKILL');
      await this.waitExit(SIGKILL_WAIT_MS);
    }
    // Anything the rank started is in its group: make sure none of it survives.
    this.killGroup('SIGKILL');
    this.setRef(false);
  }

  /** Synchronous last resort for process exit: SIGKILL the group now. */
  killNow(): void {
    this.beginStopping();
    this.killGroup('SIGKILL');
  }

  /** From here on an exit is expected (a process that already exited keeps its final state). */
  private beginStopping(): void {
    if (!this.exited && this.current !== 'stopping') this.transition('stopping');
  }
}

/** A line cut to {@link MAX_OUTPUT_LINE_CHARS}, saying how much was cut. */
function cut(line: string): string {
  return line.length <= MAX_OUTPUT_LINE_CHARS ? line : `${line.slice(0, MAX_OUTPUT_LINE_CHARS)} ... (line cut at ${MAX_OUTPUT_LINE_CHARS} characters)`;
}
