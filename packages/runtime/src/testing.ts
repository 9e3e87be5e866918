/**
 * `@reactor/runtime/testing`: what an app's tests need to drive it in-process, without a
 * server: a recording {@link ClientSink}, a recording {@link Logger}, wait-for helpers, a model
 * stand-in answered by the test ({@link Gate}), and fixtures that close every host
 * ({@link useHosts}) and shut down every model runner ({@link useRunners}) after each test.
 * Framework-agnostic: the fixtures take the test runner's `afterEach`.
 *
 * @example
 * import { afterEach, expect, it } from 'vitest';
 * import { RecordingSink, useHosts, command } from '@reactor/runtime/testing';
 *
 * const start = useHosts(afterEach);
 * it('sets the prompt', async () => {
 *   const host = start(VideoApp);
 *   await host.load();
 *   const sink = new RecordingSink();
 *   const client = host.connect(sink);
 *   await sink.waitForSession('streaming');
 *   expect(await client.command(command('1', 'set_prompt', { prompt: 'sea' }))).toEqual({ type: 'reply', id: '1' });
 * });
 */
import type { SessionStatus, ServerMessage } from '@reactor/protocol';
import type { LogFields, LogFn, Logger } from '@reactor/log';
import type { ReactorApp } from './app/reactor-app.js';
import { AppHost, type AppHostOptions } from './session/host.js';
import type { AppHostApi, ClientHandle, ClientInfo, ClientSink, OutputAudio, OutputFrame } from './session/transport.js';

/**
 * `host.connect(sink, info)` as a transport does it: every answer the handle returns (command,
 * publish, unpublish, request and release of control) is also written to `sink`, as the server
 * sends it to its socket (the host itself never writes an answer to the sink). For tests that
 * check the order of everything a client receives.
 */
export function connectAsTransport(host: AppHostApi, sink: ClientSink, info?: ClientInfo): ClientHandle {
  // Like a socket: once the host closed the client (or it left), no answer goes out any more.
  let open = true;
  const handle = host.connect(
    {
      message: (msg) => sink.message(msg),
      frame: (frame) => sink.frame(frame),
      audio: (chunk) => sink.audio?.(chunk),
      close: (reason) => {
        open = false;
        sink.close(reason);
      },
    },
    info,
  );
  const send = <T extends ServerMessage>(answer: T): T => {
    if (open) sink.message(answer);
    return answer;
  };
  return {
    get id() {
      return handle.id;
    },
    command: (msg) => handle.command(msg).then(send),
    publish: (id, track) => send(handle.publish(id, track)),
    unpublish: (id, track) => send(handle.unpublish(id, track)),
    publishes: (track) => handle.publishes(track),
    pushFrame: (track, frame) => handle.pushFrame(track, frame),
    disconnect: () => {
      open = false;
      handle.disconnect();
    },
    rebind: (next) => handle.rebind(next),
    requestControl: (id) => send(handle.requestControl(id)),
    releaseControl: (id) => send(handle.releaseControl(id)),
    controlError: (id, what) => handle.controlError(id, what),
    reportDropped: (count) => handle.reportDropped(count),
  };
}

/** How long the wait-for helpers wait by default before they reject, ms. */
export const DEFAULT_WAIT_MS = 5000;

/** One thing a {@link RecordingSink} received. */
export type SinkEvent =
  { kind: 'message'; msg: ServerMessage } | { kind: 'frame'; frame: OutputFrame } | { kind: 'audio'; audio: OutputAudio } | { kind: 'close'; reason: string };

/** A ClientSink that records everything, in order, and lets a test await an event. */
export class RecordingSink implements ClientSink {
  readonly events: SinkEvent[] = [];
  private waiters: Array<{ pred: (e: SinkEvent) => boolean; resolve: (e: SinkEvent) => void; from: number }> = [];

  message(msg: ServerMessage): void {
    this.push({ kind: 'message', msg: structuredClone(msg) });
  }
  frame(frame: OutputFrame): void {
    this.push({ kind: 'frame', frame });
  }
  audio(audio: OutputAudio): void {
    this.push({ kind: 'audio', audio });
  }
  close(reason: string): void {
    this.push({ kind: 'close', reason });
  }

  get messages(): ServerMessage[] {
    return this.events.flatMap((e) => (e.kind === 'message' ? [e.msg] : []));
  }
  get frames(): OutputFrame[] {
    return this.events.flatMap((e) => (e.kind === 'frame' ? [e.frame] : []));
  }
  /** The audio chunks played to this sink, in order. */
  get audioChunks(): OutputAudio[] {
    return this.events.flatMap((e) => (e.kind === 'audio' ? [e.audio] : []));
  }
  ofType<T extends ServerMessage['type']>(type: T): Extract<ServerMessage, { type: T }>[] {
    return this.messages.filter((m): m is Extract<ServerMessage, { type: T }> => m.type === type);
  }

  /** Resolves with the first event at index >= `from` that matches (already recorded or future); rejects after `timeoutMs`. */
  waitFor(pred: (e: SinkEvent) => boolean, { from = 0, timeoutMs = DEFAULT_WAIT_MS } = {}): Promise<SinkEvent> {
    const hit = this.events.slice(from).find(pred);
    if (hit) return Promise.resolve(hit);
    return new Promise((resolve, reject) => {
      const w = { pred, resolve, from };
      this.waiters.push(w);
      const t = setTimeout(() => {
        this.waiters = this.waiters.filter((x) => x !== w);
        reject(new Error(`RecordingSink.waitFor timed out after ${timeoutMs} ms; recorded: ${JSON.stringify(this.summary())}`));
      }, timeoutMs);
      w.resolve = (e) => {
        clearTimeout(t);
        resolve(e);
      };
    });
  }

  waitForMessage(pred: (m: ServerMessage) => boolean, opts?: { from?: number; timeoutMs?: number }): Promise<ServerMessage> {
    return this.waitFor((e) => e.kind === 'message' && pred(e.msg), opts).then((e) => (e as { msg: ServerMessage }).msg);
  }

  waitForFrames(count: number, opts?: { timeoutMs?: number }): Promise<void> {
    let seen = 0;
    return this.waitFor((e) => e.kind === 'frame' && ++seen >= count, opts).then(() => undefined);
  }

  /** Resolves once `count` audio chunks have been recorded (counting from the first). */
  waitForAudio(count: number, opts?: { timeoutMs?: number }): Promise<void> {
    let seen = 0;
    return this.waitFor((e) => e.kind === 'audio' && ++seen >= count, opts).then(() => undefined);
  }

  waitForSession(state: string, opts?: { from?: number; timeoutMs?: number }): Promise<ServerMessage> {
    return this.waitForMessage((m) => (m.type === 'session' && m.session.state === state) || (m.type === 'welcome' && m.session.state === state), opts);
  }

  /** Compact, comparable view: message types with the interesting field, frames as `frame:<track>#<seq>`, audio as `audio:<track>#<seq>`. */
  summary(): string[] {
    return this.events.map((e) => {
      if (e.kind === 'close') return `close`;
      if (e.kind === 'frame') return `frame:${e.frame.track}#${e.frame.seq}`;
      if (e.kind === 'audio') return `audio:${e.audio.track}#${e.audio.seq}`;
      const m = e.msg;
      switch (m.type) {
        case 'session':
          return `session:${m.session.state}${m.session.error ? `!${m.session.error.code}` : ''}`;
        case 'welcome':
          return `welcome:${m.session.state}`;
        case 'reply':
          return `reply:${m.id}`;
        case 'error':
          return `error:${m.id ?? ''}:${m.code}`;
        case 'message':
          return `message:${m.name}`;
        case 'applied':
          return `applied:${m.id}:${m.outcome}${m.outcome === 'applied' ? `@${m.seq}` : ''}`;
        default:
          return m.type;
      }
    });
  }

  private push(e: SinkEvent): void {
    this.events.push(e);
    const idx = this.events.length - 1;
    for (const w of [...this.waiters]) {
      if (idx >= w.from && w.pred(e)) {
        this.waiters = this.waiters.filter((x) => x !== w);
        w.resolve(e);
      }
    }
  }
}

/** One recorded log line. */
export interface LogLine {
  level: 'debug' | 'info' | 'warn' | 'error';
  message: string;
  /** The line's fields with the bindings of every `child()` on the way. */
  fields: LogFields;
  /** Arguments after the message. */
  details: unknown[];
}

/** A Logger (of `@reactor/log`) that records lines, children's included, and never prints. */
export class RecordingLogger implements Logger {
  constructor(
    readonly lines: LogLine[] = [],
    private readonly bindings: LogFields = {},
  ) {}
  readonly debug: LogFn = (...args: unknown[]) => this.record('debug', args);
  readonly info: LogFn = (...args: unknown[]) => this.record('info', args);
  readonly warn: LogFn = (...args: unknown[]) => this.record('warn', args);
  readonly error: LogFn = (...args: unknown[]) => this.record('error', args);
  child(bindings: LogFields): Logger {
    return new RecordingLogger(this.lines, { ...this.bindings, ...bindings });
  }
  /** The messages logged at `level`. */
  at(level: string): string[] {
    return this.lines.filter((l) => l.level === level).map((l) => l.message);
  }
  private record(level: LogLine['level'], args: unknown[]): void {
    const [first, ...rest] = args;
    if (typeof first === 'string') this.lines.push({ level, message: first, fields: { ...this.bindings }, details: rest });
    else
      this.lines.push({
        level,
        message: typeof rest[0] === 'string' ? rest[0] : '',
        fields: { ...this.bindings, ...(first as LogFields) },
        details: rest.slice(1),
      });
  }
}

/** A manually resolved promise. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (v: T) => void; reject: (e: unknown) => void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** `n` solid-colour RGB frames of `w`x`h`, value `v`. */
export function rgbFrames(n: number, w: number, h: number, v = 0): Uint8Array {
  return new Uint8Array(n * w * h * 3).fill(v);
}

/** A model stand-in whose calls the test answers one by one: `generate()` returns `gate.call(input)`. */
export class Gate<I, R> {
  private readonly pending: Array<{ input: I; resolve: (r: R) => void; reject: (e: unknown) => void }> = [];
  private readonly waiters: Array<(c: { input: I; resolve: (r: R) => void; reject: (e: unknown) => void }) => void> = [];
  calls = 0;

  private auto: { r: R } | undefined;

  call(input: I): Promise<R> {
    this.calls++;
    if (this.auto) return Promise.resolve(this.auto.r);
    return new Promise<R>((resolve, reject) => {
      const c = { input, resolve, reject };
      const w = this.waiters.shift();
      if (w) w(c);
      else this.pending.push(c);
    });
  }

  /** The next call (already made or future). */
  next(timeoutMs = DEFAULT_WAIT_MS): Promise<{ input: I; resolve: (r: R) => void; reject: (e: unknown) => void }> {
    const c = this.pending.shift();
    if (c) return Promise.resolve(c);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => {
        const i = this.waiters.indexOf(w);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(new Error(`Gate.next: no generate() call within ${timeoutMs} ms (calls so far: ${this.calls})`));
      }, timeoutMs);
      const w = (x: { input: I; resolve: (r: R) => void; reject: (e: unknown) => void }): void => {
        clearTimeout(t);
        resolve(x);
      };
      this.waiters.push(w);
    });
  }

  /** Answers every waiting and every future call with `r` at once. */
  answerAll(r: R): void {
    this.auto = { r };
    for (const c of this.pending.splice(0)) c.resolve(r);
  }
}

/** A command message as a transport hands it to the host (`client.command(command('1', 'set_prompt', { prompt: 'sea' }))`). */
export function command(id: string, name: string, params?: unknown): { type: 'command'; id: string; name: string; params?: Record<string, unknown> } {
  return { type: 'command', id, name, ...(params !== undefined ? { params: params as Record<string, unknown> } : {}) };
}

/** Makes a host of `app` whose close is registered with the fixture (see {@link useHosts}). */
export type HostStarter = (app: new () => ReactorApp<any, any, any, any>, options?: AppHostOptions) => AppHost;

/**
 * A cleanup fixture: registers `afterEach(closeAll)` with the given hook and returns a function
 * that makes hosts; every host it made is closed (sessions ended, hooks run, `unload()` called)
 * after each test. Stats messages are off and logs go to a {@link RecordingLogger} unless
 * `defaults` or the call's options say otherwise.
 *
 * @param afterEach the test runner's `afterEach` (vitest, node:test, jest)
 */
export function useHosts(afterEach: (fn: () => Promise<void>) => void, defaults: AppHostOptions = {}): HostStarter {
  const hosts: AppHost[] = [];
  afterEach(async () => {
    await Promise.all(hosts.splice(0).map((h) => h.close()));
  });
  return (app, options = {}) => {
    const h = new AppHost(app, { statsIntervalMs: 0, logger: new RecordingLogger(), ...defaults, ...options });
    hosts.push(h);
    return h;
  };
}

/**
 * Resolves once `host.status.state` is `state` (at once when it already is); rejects after
 * `timeoutMs` naming the state it stayed in.
 */
export function waitForStatus(host: Pick<AppHost, 'status' | 'onStatus'>, state: SessionStatus['state'], timeoutMs = DEFAULT_WAIT_MS): Promise<SessionStatus> {
  if (host.status.state === state) return Promise.resolve(host.status);
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => {
      off();
      reject(new Error(`host status stayed ${host.status.state}, expected ${state} within ${timeoutMs} ms`));
    }, timeoutMs);
    const off = host.onStatus((s) => {
      if (s.state !== state) return;
      clearTimeout(t);
      off();
      resolve(s);
    });
  });
}

/**
 * Anything a test starts that must be shut down after it: a `DistributedRunner` of
 * `@reactor/distributed`, or any object with `shutdown()`. Structural, so this package does not
 * depend on the runner's.
 */
export interface Shutdownable {
  shutdown(): Promise<unknown>;
}

/** Registers a runner (or any {@link Shutdownable}) with the fixture and returns it (see {@link useRunners}). */
export type RunnerTracker = <T extends Shutdownable>(runner: T) => T;

/**
 * A cleanup fixture for model runners: registers `afterEach` with the given hook and returns a
 * function that takes a runner, remembers it and returns it unchanged; after each test every
 * runner it was given is shut down (all of them, at once), so no rank process or shared-memory
 * segment outlives the test, even when the test failed half-way. A shutdown that rejects fails
 * the cleanup (after the others have shut down), naming how many failed.
 *
 * @param afterEach the test runner's `afterEach` (vitest, node:test, jest)
 * @example
 * const track = useRunners(afterEach);
 * it('renders a chunk', async () => {
 *   const runner = track(new DistributedRunner(VideoWorker, { worldSize: 2, devices: 'cpu' }));
 *   await runner.start();
 *   expect((await runner.generate({ prompt: 'sea' })).frames.length).toBeGreaterThan(0);
 * });
 */
export function useRunners(afterEach: (fn: () => Promise<void>) => void): RunnerTracker {
  const runners: Shutdownable[] = [];
  afterEach(async () => {
    const results = await Promise.allSettled(runners.splice(0).map((r) => r.shutdown()));
    const failed = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
    if (failed.length === 1) throw failed[0];
    if (failed.length > 1) throw new AggregateError(failed, `useRunners: ${failed.length} runners failed to shut down`);
  });
  return (runner) => {
    runners.push(runner);
    return runner;
  };
}
