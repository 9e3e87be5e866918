/**
 * The inbound side of one client connection: every message it sends is checked (size is
 * enforced by `ws` for the larger limit and here for the other; rate by one token bucket;
 * binary to the {@link FrameIntake} or refused; JSON and shape by `parseClientMessage`), handled,
 * and answered in arrival order. A client that does not read its answers is not read either
 * (read pausing: TCP back-pressure, then a 1008 close).
 *
 * The answers go out through the connection's {@link ControlSender}; this side knows nothing
 * else of the transport that carries them.
 */
import type { WebSocket, RawData } from 'ws';
import type {
  ClientStatsMessage,
  CommandMessage,
  ErrorMessage,
  PauseTrackMessage,
  PublishMessage,
  ReplyMessage,
  RequestKeyFrameMessage,
  ResumeTrackMessage,
  RtcClientMessage,
  SelectVideoMessage,
  TrackSchema,
  UnpublishMessage,
} from '@reactor/protocol';
import type { Logger } from '@reactor/log';
import type { ClientHandle } from '@reactor/runtime';
import { parseClientMessage, validId } from './client-message.js';
import type { ConnectionLifecycle } from './connection-state.js';
import { capError, truncateReason } from '../base/error-answer.js';
import { ServerErrorCode } from '../base/errors.js';
import type { FrameDecoder } from '../intake/frame-decoder.js';
import { FrameIntake, type FrameIntakeInfo } from '../intake/frame-intake.js';
import type { ServerMetrics } from '../base/metrics.js';
import type { ControlSender } from '../base/outbound.js';
import { recordingDisabled } from '../recording/recording-errors.js';
import { recordingRefusal } from '../recording/recording-grant.js';
import type { RecordingService } from '../recording/recording-service.js';
import type { Grant } from '@reactor/access';

/** Messages `ws` had already read when the socket was paused, held until it resumes; more is a broken client. */
const MAX_HELD_MESSAGES = 65_536;
/** Time the close frame of a client cut for not reading gets before its socket is destroyed. */
const CUT_GRACE_MS = 1000;

/** The messages the connection handles itself (they act on its outbound side and its video). */
export interface ConnectionControls {
  pauseTrack(msg: PauseTrackMessage | ResumeTrackMessage): void;
  selectVideo(msg: SelectVideoMessage): void;
  requestKeyFrame(msg: RequestKeyFrameMessage): void;
  /** A well-formed `client_stats` report (its bounds per connection are checked there). */
  clientStats(msg: ClientStatsMessage): void;
  /** A command of this connection got its `reply` (a `client_stats` sample of it may follow). */
  commandReplied(name: string): void;
  /** WebRTC signalling (`rtc_offer`, `rtc_candidate`, `rtc_close`). */
  rtc(msg: RtcClientMessage): void;
  /** A `publish` with `"transport":"webrtc"` was accepted: the transceiver `mid` carries `track`. */
  rtcPublish(track: string, mid: string): void;
}

/** The inbound channel's slice of the server's options (`ResolvedServerOptions` is one). */
export interface InboundChannelOptions {
  maxMessageBytes: number;
  commandRate: number;
  commandBurst: number;
  readPauseBytes: number;
  readPauseTimeoutMs: number;
  webrtc: { enabled: boolean };
}

/** What the inbound channel needs from the server and its connection. */
export interface InboundContext {
  ws: WebSocket;
  state: ConnectionLifecycle;
  options: InboundChannelOptions;
  metrics: ServerMetrics;
  logger: Logger;
  /** Largest inbound binary frame (0 when the app declares no inbound track). */
  maxFrameBytes: number;
  /** Clips and recordings; `undefined`: not configured (`clips_disabled`). */
  recording: RecordingService | undefined;
  /** The connection (it owns the clips and recordings it starts). */
  owner: object;
  /** What the client's credential grants (clips and recordings are checked against its `rec`). */
  grant: Grant;
  out: ControlSender;
  controls: ConnectionControls;
  /** A client did something (a command, a publication, a frame): the idle timeout starts over. */
  activity(): void;
  /** The client's id, for log lines. */
  id(): string;
}

/** One connection's inbound messages (see the module comment). */
export class InboundChannel {
  readonly #c: InboundContext;
  readonly #ws: WebSocket;
  readonly #state: ConnectionLifecycle;
  #handle: ClientHandle | undefined;
  /** Binary frames to the app's inbound tracks; absent when it declares none (binary is then `unexpected_binary`). */
  #frames: FrameIntake | undefined;
  /** Commands sent to the host whose reply has not come back yet. */
  #pending = 0;
  /** Answers owed, in arrival order (commands and the connection-level errors queued behind them). */
  #unanswered = 0;
  /** Settles once every answer owed so far has been sent. */
  #answered: Promise<void> = Promise.resolve();
  /** Commands whose answer is owed, by id: settles once it has been sent. */
  readonly #replySent = new Map<string, Promise<void>>();
  #readPauses = 0;
  #pauseTimer: ReturnType<typeof setTimeout> | undefined;
  /** Messages that arrived (already read by `ws`) while reads were paused, in arrival order. */
  readonly #held: [RawData, boolean][] = [];
  #draining = false;
  #tokens: number;
  #tokensAt = performance.now();

  constructor(c: InboundContext) {
    this.#c = c;
    this.#ws = c.ws;
    this.#state = c.state;
    this.#tokens = c.options.commandBurst;
    c.ws.on('message', (data, isBinary) => this.#receive(data, isBinary));
  }

  /** The client is registered with the host: its messages go there, its binary frames to a {@link FrameIntake} when the app has inbound tracks. */
  bind(handle: ClientHandle, tracks: readonly TrackSchema[], decoder: FrameDecoder): void {
    this.#handle = handle;
    if (tracks.some((t) => t.direction === 'in')) {
      const logger = this.#c.logger;
      this.#frames = new FrameIntake({
        tracks,
        handle,
        decoder,
        metrics: this.#c.metrics,
        logger: typeof logger.child === 'function' ? logger.child({ client: handle.id }) : logger,
        sendError: (code, message) => this.error(code, message, undefined, false),
      });
    }
  }

  /** Its inbound frame counters (undefined when the app declares no inbound track). */
  framesInfo(): FrameIntakeInfo | undefined {
    return this.#frames?.info();
  }

  /** Times the server stopped reading this client. */
  get readPauses(): number {
    return this.#readPauses;
  }

  /** The socket closed: nothing held is handled, no timer runs. */
  close(): void {
    clearTimeout(this.#pauseTimer);
    this.#held.length = 0;
    this.#frames?.close();
  }

  /** Every inbound message: handled now, or held (in order) while reads are paused or held ones wait. */
  #receive(data: RawData, isBinary: boolean): void {
    if (this.#state.deaf) return;
    if (!this.#state.readsPaused && this.#held.length === 0) return this.#onMessage(data, isBinary);
    this.#held.push([data, isBinary]);
    if (this.#held.length > MAX_HELD_MESSAGES) this.#cutUnread(`sent more than ${MAX_HELD_MESSAGES} messages while its reads were paused`);
  }

  /** Handles the held messages one per macrotask (as `ws` delivers them), until reads pause again. */
  #drainHeld(): void {
    if (this.#draining) return;
    this.#draining = true;
    const step = (): void => {
      const next = this.#state.readsPaused || this.#state.deaf ? undefined : this.#held.shift();
      if (!next) {
        this.#draining = false;
        return;
      }
      this.#onMessage(next[0], next[1]);
      setImmediate(step);
    };
    setImmediate(step);
  }

  #onMessage(data: RawData, isBinary: boolean): void {
    if (this.#state.closed || !this.#handle) return;
    const { options } = this.#c;
    // `ws` enforces the larger of the two limits; the other is enforced here, with the same close code.
    const size = rawSize(data);
    const limit = isBinary ? this.#c.maxFrameBytes || options.maxMessageBytes : options.maxMessageBytes;
    if (size > limit) {
      if (!this.#state.deaf) this.#state.to('cut');
      this.#ws.close(1009, truncateReason(`${isBinary ? 'frame' : 'message'} of ${size} bytes is over the limit of ${limit}`));
      return;
    }
    this.#c.activity();
    // Frames of inbound tracks have their own per-track rate limit (the track's maxFps), not the command bucket.
    if (isBinary && this.#frames) {
      this.#frames.receive(data, performance.now());
      return;
    }
    if (!this.#takeToken()) {
      const { commandRate, commandBurst } = options;
      this.error(
        ServerErrorCode.RateLimited,
        `more than ${commandRate} messages per second on this connection sent ahead of the answers to earlier ones (burst ${commandBurst}; commands still waiting for their reply count against it); wait for each reply before sending the next, or slow down (the connection stays open)`,
        peekId(data, isBinary),
      );
      return;
    }
    if (isBinary) {
      this.error(
        ServerErrorCode.UnexpectedBinary,
        'this app declares no inbound track, so binary messages only flow from the server to clients; send commands as JSON text messages',
      );
      return;
    }
    const parsed = parseClientMessage(rawToString(data));
    if (!parsed.ok) {
      // A refused report is no command result: counted with the reports instead.
      const stats = parsed.code === ServerErrorCode.InvalidClientStats;
      if (stats) this.#c.metrics.clientStatsReports.inc({ outcome: 'refused' });
      this.error(parsed.code, parsed.message, parsed.id, !stats);
      return;
    }
    const msg = parsed.message;
    const controls = this.#c.controls;
    switch (msg.type) {
      case 'command':
        return this.#command(this.#handle, msg);
      case 'publish':
      case 'unpublish':
        return this.#publishing(this.#handle, msg);
      case 'pause_track':
      case 'resume_track':
        return controls.pauseTrack(msg);
      case 'select_video':
        return controls.selectVideo(msg);
      case 'request_key_frame':
        return controls.requestKeyFrame(msg);
      case 'rtc_offer':
      case 'rtc_candidate':
      case 'rtc_close':
        return controls.rtc(msg);
      case 'clip':
      case 'recording':
        return this.#answerInOrder(
          () => recordingRefusal(msg, this.#c.grant, this.#handle) ?? this.#c.recording?.answer(msg, this.#c.owner) ?? recordingDisabled(msg),
        );
      case 'request_control':
        return this.#answerInOrder(() => this.#handle!.requestControl(msg.id));
      case 'release_control':
        return this.#answerInOrder(() => this.#handle!.releaseControl(msg.id));
      case 'client_stats':
        return controls.clientStats(msg);
    }
  }

  /** A well-formed command: run by the host, answered in arrival order. */
  #command(handle: ClientHandle, cmd: CommandMessage): void {
    // The command's name and params are the host's to check (unknown_command, invalid_params, no_session).
    this.#pending++;
    this.#answerInOrder(() =>
      handle.command(cmd).then((result) => {
        this.#pending--;
        if (result.type === 'reply') this.#c.controls.commandReplied(cmd.name);
        return result;
      }),
    );
    // The chain's tail is now this command's answer, sent.
    const sent = this.#answered;
    this.#replySent.set(cmd.id, sent);
    void sent.then(() => {
      if (this.#replySent.get(cmd.id) === sent) this.#replySent.delete(cmd.id);
    });
  }

  /** Runs `send` once the answer to command `id` has gone out (at once when none is owed): an `applied` message follows its reply. */
  afterReply(id: string, send: () => void): void {
    const sent = this.#replySent.get(id);
    if (sent === undefined) return send();
    void sent.then(() => {
      if (!this.#state.closed) send();
    });
  }

  /**
   * `publish` / `unpublish`: the host arbitrates (first publisher wins) and answers at once; the
   * answer still waits behind those of this connection's earlier messages.
   */
  #publishing(handle: ClientHandle, msg: PublishMessage | UnpublishMessage): void {
    if (msg.type === 'unpublish') return this.#answerInOrder(() => handle.unpublish(msg.id, msg.track));
    if (msg.transport === 'webrtc' && !this.#c.options.webrtc.enabled) {
      return this.error(
        ServerErrorCode.RtcDisabled,
        `track "${msg.track}" cannot come over WebRTC: this server does not take WebRTC (server.webrtc.enabled is false); publish without "transport":"webrtc"`,
        msg.id,
      );
    }
    this.#answerInOrder(() => {
      const answer = handle.publish(msg.id, msg.track);
      if (answer.type === 'reply' && msg.transport === 'webrtc') this.#c.controls.rtcPublish(msg.track, msg.mid!);
      return answer;
    });
  }

  /**
   * Runs `run` (a host call that returns the answer to one message; the host never writes it to
   * the sink) and sends the answer here, after the answers owed to earlier messages: every
   * answer of a connection goes out in arrival order.
   */
  #answerInOrder(run: () => Promise<ReplyMessage | ErrorMessage> | ReplyMessage | ErrorMessage): void {
    this.#unanswered++;
    const answer = Promise.resolve(run()).then((result) => {
      this.#c.metrics.commands.inc({ code: result.type === 'reply' ? 'ok' : result.code });
      return result;
    });
    this.#answered = this.#answered
      .then(() => answer)
      .then((result) => {
        this.#unanswered--;
        if (!this.#state.closed) this.#c.out.sendText(JSON.stringify(result.type === 'error' ? capError(result) : result));
      });
  }

  /**
   * One rate-limit model, a token bucket: a connection holds up to `commandBurst` tokens, each
   * inbound message takes one, and they come back at `commandRate` per second. A command that
   * waits for its reply keeps its place in the bucket, so at most `commandBurst` commands of a
   * connection ever wait at once, however long a step or handler takes.
   *
   * A message that arrives while the connection owes no answer costs nothing: its client waited
   * for every reply, so it cannot be flooding (it is paced by the server's own answers). Only
   * messages sent ahead of the answers to earlier ones draw on the bucket.
   */
  #takeToken(): boolean {
    const { commandRate, commandBurst } = this.#c.options;
    const now = performance.now();
    this.#tokens = Math.min(commandBurst - this.#pending, this.#tokens + ((now - this.#tokensAt) / 1000) * commandRate);
    this.#tokensAt = now;
    if (this.#unanswered === 0) return true;
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }

  /**
   * A connection-level error. Answers keep arrival order: while commands of this connection
   * wait for their replies, the error waits behind them.
   */
  error(code: ServerErrorCode, message: string, id?: string, countAsResult = true): void {
    const msg: ErrorMessage = { type: 'error', code, message };
    if (id !== undefined) msg.id = id;
    if (countAsResult) this.#c.metrics.commands.inc({ code });
    this.answer(msg);
  }

  /** Sends an answer the connection gives itself, behind the answers owed to earlier messages. */
  answer(msg: ReplyMessage | ErrorMessage, after?: () => void): void {
    const send = (): void => {
      this.#c.out.sendText(JSON.stringify(msg));
      after?.();
    };
    if (this.#unanswered === 0) return send();
    this.#unanswered++;
    this.#answered = this.#answered.then(() => {
      this.#unanswered--;
      if (!this.#state.closed) send();
    });
  }

  // ---- read pausing ----------------------------------------------------------------------

  /**
   * Stops reading a client that does not read its answers (TCP back-pressure: its messages wait
   * in its own kernel buffers), for at most `readPauseTimeoutMs`.
   */
  pauseReads(): void {
    if (this.#state.readsPaused || this.#state.deaf) return;
    this.#state.pauseReads();
    this.#readPauses++;
    this.#c.metrics.readPauses.inc();
    this.#ws.pause();
    this.#pauseTimer = setTimeout(() => this.#cutUnread(), this.#c.options.readPauseTimeoutMs);
    this.#pauseTimer.unref();
  }

  /** An answer was written: reads resume once the unsent answers are down to a quarter of `readPauseBytes`. */
  maybeResumeReads(): void {
    if (!this.#state.readsPaused || this.#c.out.unsentAnswerBytes > this.#c.options.readPauseBytes / 4) return;
    this.#state.resumeReads();
    clearTimeout(this.#pauseTimer);
    this.#ws.resume();
    this.#drainHeld();
  }

  /** Cuts a client that stayed paused past `readPauseTimeoutMs` (or overflowed the held messages) with close code 1008. */
  #cutUnread(why = `did not read its answers for ${this.#c.options.readPauseTimeoutMs} ms`): void {
    if (this.#state.deaf) return;
    this.#state.to('cut');
    this.#held.length = 0;
    const id = this.#c.id();
    this.#c.logger.warn({ client: id }, `client ${id}: ${why} (${this.#c.out.unsentAnswerBytes} answer bytes unsent); disconnecting it`);
    this.#c.metrics.rejected.inc({ reason: 'unread_answers' });
    // The close frame waits behind the unread answers: the client sees it only if it reads them in time.
    this.#ws.close(1008, truncateReason(`not reading its answers: ${why}`));
    setTimeout(() => this.#ws.terminate(), CUT_GRACE_MS).unref();
  }
}

function rawToString(data: RawData): string {
  if (Buffer.isBuffer(data)) return data.toString('utf8');
  if (Array.isArray(data)) return Buffer.concat(data).toString('utf8');
  return Buffer.from(data).toString('utf8');
}

function rawSize(data: RawData): number {
  return Buffer.isBuffer(data) ? data.byteLength : Array.isArray(data) ? data.reduce((n, b) => n + b.byteLength, 0) : data.byteLength;
}

/** Largest refused message whose id is still looked up (parsing a big one would cost what the limit saves). */
const PEEK_ID_MAX_BYTES = 4096;

/** Best-effort id of a message refused before parsing, so the client can still correlate. */
function peekId(data: RawData, isBinary: boolean): string | undefined {
  if (isBinary) return undefined;
  if (rawSize(data) > PEEK_ID_MAX_BYTES) return undefined;
  const text = rawToString(data);
  if (!/^\s*\{/.test(text)) return undefined;
  try {
    return validId((JSON.parse(text) as { id?: unknown }).id);
  } catch {
    return undefined;
  }
}
