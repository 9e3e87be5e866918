/**
 * What a host says to its clients unasked: app messages (`this.send()`), state, flushes,
 * session status, stats, and the played-out frames and audio chunks (to every sink, then to
 * the media listeners).
 */
import type { ServerMessage, SessionStatus } from '@reactor/protocol';
import type { AnyClass } from '../metadata/keys.js';
import { toSnakeCase } from '../metadata/naming.js';
import { MessageNotDeclaredError } from '../errors/errors.js';
import type { HostClient, HostSession } from './host-client.js';
import type { HostCore } from './host-core.js';
import type { MediaListener, OutputAudio, OutputFrame } from './transport.js';

/** A host's outbound side: messages to the session's clients, media to sinks and listeners. */
export class Broadcast {
  private readonly statusListeners = new Set<(status: SessionStatus) => void>();
  /** Taps on every played-out frame and audio chunk (the server's clip ring and recorder). */
  private readonly mediaListeners = new Set<MediaListener>();
  private lastStatusJson = '';

  constructor(
    private readonly core: HostCore,
    /** The host's status now (`AppHost.status`). */
    private readonly status: () => SessionStatus,
    /** Period of `stats` messages, ms (0: none). */
    private readonly statsIntervalMs: number,
  ) {}

  /** Calls `listener` on every status change; returns the unsubscribe function. */
  onStatus(listener: (status: SessionStatus) => void): () => void {
    this.statusListeners.add(listener);
    return () => this.statusListeners.delete(listener);
  }

  /** Calls `listener` with every frame and audio chunk as it is played out; returns the unsubscribe function. */
  onMedia(listener: MediaListener): () => void {
    this.mediaListeners.add(listener);
    return () => this.mediaListeners.delete(listener);
  }

  /** Builds the wire message for a declared message instance. */
  toAppMessage(message: object): ServerMessage {
    const { def } = this.core;
    const spec = message !== null && typeof message === 'object' ? def.messages.get(message.constructor as AnyClass) : undefined;
    if (!spec) {
      const what = message !== null && typeof message === 'object' ? message.constructor.name : typeof message;
      throw new MessageNotDeclaredError(`${what} is not a declared message type of ${def.appClass.name}; add it to @reactorApp({ messages: [...] })`);
    }
    const data: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(message)) data[toSnakeCase(k)] = v;
    return { type: 'message', name: spec.name, data };
  }

  /**
   * `this.send()`: to every client of the session whose `@connected` hooks have run. A client
   * still `joining` is not there yet for the app: its `@connected` hook greets it (the first
   * client of a session would otherwise get a `@sessionStarted` broadcast and its greeting).
   */
  broadcastMessage(message: object): void {
    const msg = this.toAppMessage(message);
    const s = this.core.session;
    if (!s || s.lifecycle.is('ended')) return;
    for (const c of s.members) if (c.lifecycle.is('joined')) this.core.safe(c.sink, () => c.sink.message(msg));
  }

  broadcastState(): void {
    const s = this.core.session;
    if (!s || s.lifecycle.is('ended')) return;
    const msg: ServerMessage = { type: 'state', state: this.core.def.state.snapshot(s.state) };
    for (const c of s.members) this.core.safe(c.sink, () => c.sink.message(msg));
  }

  flush(): void {
    const s = this.core.session;
    if (!s || s.lifecycle.is('ended')) return;
    const nextSeq = s.playout.flush();
    s.flushes++;
    const msg: ServerMessage = { type: 'flush', nextSeq };
    for (const c of s.members) this.core.safe(c.sink, () => c.sink.message(msg));
    // A flush from a command or hook wakes a refused loop; one from inside a step does not
    // count as a change (the step itself decides), or a step that flushes and refuses would spin.
    if (this.core.lock.holder !== 'step') this.core.notifyChange();
  }

  emitFrame(session: HostSession, frame: OutputFrame): void {
    this.core.counters.framesPlayed++;
    for (const c of session.members) {
      try {
        c.sink.frame(frame);
      } catch (err) {
        this.core.safe(c.sink, () => {
          throw err;
        });
      }
    }
    for (const l of this.mediaListeners) this.core.safe(l, () => l.frame(frame));
  }

  emitAudio(session: HostSession, chunk: OutputAudio): void {
    this.core.counters.audioChunksPlayed++;
    for (const c of session.members) {
      try {
        c.sink.audio?.(chunk);
      } catch (err) {
        this.core.safe(c.sink, () => {
          throw err;
        });
      }
    }
    for (const l of this.mediaListeners) this.core.safe(l, () => l.audio(chunk));
  }

  /** Sends the status to every client (but `except`, which gets it in its welcome) when it changed. */
  publishStatus(except?: HostClient): void {
    const status = this.status();
    const json = JSON.stringify(status);
    if (json === this.lastStatusJson) return;
    this.lastStatusJson = json;
    const msg: ServerMessage = { type: 'session', session: status };
    for (const c of this.core.clients.values()) if (c !== except && c.connected) this.core.safe(c.sink, () => c.sink.message(msg));
    for (const l of this.statusListeners) this.core.safe(l, () => l(status));
  }

  /**
   * Starts the session's `stats` messages (every `statsIntervalMs` while it streams). Each
   * client's copy carries its own `dropped` count, then what its sink adds for its connection
   * (`ClientSink.statsFields`: the server's video figures).
   */
  ensureStats(session: HostSession): void {
    if (session.statsTimer || this.statsIntervalMs === 0) return;
    let last = performance.now();
    session.statsTimer = setInterval(() => {
      if (!session.lifecycle.is('streaming')) return;
      const now = performance.now();
      const seconds = Math.max(1e-3, (now - last) / 1000);
      last = now;
      const fps = session.playout.takeWindow() / seconds;
      const stepMs = session.windowSteps > 0 ? session.windowModelMs / session.windowSteps : 0;
      session.windowSteps = 0;
      session.windowModelMs = 0;
      for (const c of session.members) {
        this.core.safe(c.sink, () => {
          const stats = { type: 'stats', steps: session.steps, stepMs: round(stepMs), fps: round(fps), dropped: c.dropped } as const;
          const own = c.sink.statsFields?.();
          c.sink.message(own ? { ...stats, ...own } : stats);
        });
      }
    }, this.statsIntervalMs);
    session.statsTimer.unref();
  }
}

function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}
