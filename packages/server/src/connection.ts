/**
 * One WebSocket client: the {@link ClientSink} the host talks to, the inbound message checks
 * (size is enforced by `ws`; JSON, shape, rate, binary here), and the per-client frame queue.
 *
 * Frame delivery: frames wait in a small queue (`maxQueuedFrames`); at most
 * {@link MAX_FRAMES_IN_FLIGHT} are handed to the socket whose write has not completed, and
 * none while the socket has more than `maxBufferedBytes` buffered. A client that reads slowly
 * or not at all therefore holds a bounded amount of memory; when its queue overflows the
 * oldest frame is dropped (newest wins) and counted. Nothing here ever makes the host wait.
 *
 * Audio chunks share the queue, in play order, but are bounded apart
 * ({@link AUDIO_QUEUE_FACTOR} x `maxQueuedFrames`): a slow client loses video frames first and
 * audio only when even that bound overflows, because a skipped picture is hardly seen while a
 * gap in the sound is heard, and a chunk is a small fraction of a frame's bytes.
 *
 * A client may pause an outbound track (`pause_track`): its frames or chunks are then not
 * queued for this connection at all (nor counted as dropped) until `resume_track`.
 *
 * Coded video (`select_video` with `h264` / `vp8`): each outbound video track of the connection
 * takes its frames from the shared {@link TrackEncoder} of its codec and tier. A `video_config`
 * goes out just before the first frame in a new codec, tier or size (it travels through the same
 * queue order); the first coded frame sent is a key frame. When a coded frame of the track is
 * lost (queue overflow, budget, encoder skip), every later delta frame is dropped
 * (`awaiting_key`) until the next key frame, which is asked for at once; a flush and
 * `request_key_frame` do the same.
 */
import { randomBytes } from 'node:crypto';
import type { WebSocket, RawData } from 'ws';
import type {
  CommandMessage,
  RequestKeyFrameMessage,
  SelectVideoMessage,
  VideoCodecName,
  VideoConfigMessage,
  VideoTierSchema,
  ErrorMessage,
  PauseTrackMessage,
  PublishMessage,
  ReplyMessage,
  ResumeTrackMessage,
  ServerMessage,
  StatsMessage,
  UnpublishMessage,
} from '@reactor/protocol';
import type { Logger } from '@reactor/log';
import type { AppHostApi, ClientHandle, ClientSink, OutputAudio, OutputFrame } from '@reactor/runtime';
import type { Grant } from './tokens.js';
import { parseClientMessage, validId } from './client-message.js';
import { ServerErrorCode } from './errors.js';
import type { FrameDecoder } from './frame-decoder.js';
import type { FrameEncoder } from './frame-encoder.js';
import { FrameIntake, type FrameIntakeInfo } from './frame-intake.js';
import type { DropReason, ServerMetrics } from './metrics.js';
import type { ResolvedServerOptions } from './options.js';
import type { BudgetHolder, SendBudget } from './send-budget.js';
import type { CodedFrame, TrackEncoder, VideoStreams, VideoSubscriber } from './video-streams.js';
import { recordingDisabled, type RecordingService } from './recording-service.js';

/** Frames (and audio chunks) written to a socket whose write callback has not fired yet. */
export const MAX_FRAMES_IN_FLIGHT = 2;
/**
 * Coded frames a client's queue may hold while their (shared) encoding is still running, beyond
 * `maxQueuedFrames`: an encoder's pipeline holds a frame or two for tens of ms, which is not
 * the client being slow.
 */
export const MAX_FRAMES_ENCODING = 8;
/** Audio chunks a client's queue holds, per frame it may hold (`maxQueuedFrames`), before the oldest chunk is dropped. */
export const AUDIO_QUEUE_FACTOR = 4;
/** Unsent bytes below which a client is never cut by the server-wide budget for a control message. */
const TEXT_EVICT_MIN_BYTES = 64 * 1024;
/** A client whose buffered bytes exceed `maxBufferedBytes` times this is disconnected. */
export const HARD_BUFFER_FACTOR = 16;
/** Messages `ws` had already read when the socket was paused, held until it resumes; more is a broken client. */
const MAX_HELD_MESSAGES = 65_536;
/** Time the close frame of a client cut for not reading gets before its socket is destroyed. */
const CUT_GRACE_MS = 1000;

/** A frame or an audio chunk waiting for this client's socket. */
interface QueuedItem {
  readonly seq: number;
  readonly track: string;
  readonly trackIndex: number;
  readonly audio: boolean;
  /** The wire message: JPEG/RGB/PCM bytes, or a coded frame (`null`: the encoder skipped it). */
  readonly data: Promise<Buffer | CodedFrame | null>;
  /** The encoder of a coded frame. */
  readonly encoder?: TrackEncoder;
  /** A JPEG frame of a track whose client selected its video: the `video_config` it belongs to. */
  readonly jpegConfig?: VideoConfigMessage;
  /** A coded frame still being encoded (it does not count against `maxQueuedFrames` yet). */
  encoding?: boolean;
}

/** One outbound video track of a connection that sent `select_video`. */
interface TrackVideo {
  /** The shared encoder it takes frames from; undefined: JPEG. */
  encoder: TrackEncoder | undefined;
  /** No delta frame is sent until the next key frame (joined, lost a frame, asked for one, flush). */
  awaitingKey: boolean;
  /** The last `video_config` sent for the track (JSON), to send one only when it changes. */
  lastConfig: string | undefined;
}

/** A connection's video selection, as `/metrics` and {@link ConnectionInfo} show it. */
export interface VideoSelectionInfo {
  codec: VideoCodecName;
  tier: string;
  /** Tracks whose delta frames are held back until a key frame. */
  awaitingKey: string[];
  /** `request_key_frame` messages received. */
  keyFrameRequests: number;
}

/** A snapshot of one connection, for tests, metrics and operators. */
export interface ConnectionInfo {
  id: string;
  /** Video frames waiting in this client's queue. */
  queuedFrames: number;
  /** Audio chunks waiting in this client's queue. */
  queuedAudio: number;
  framesInFlight: number;
  bufferedBytes: number;
  framesSent: number;
  framesDropped: number;
  audioSent: number;
  audioDropped: number;
  /** Outbound tracks this client has paused (`pause_track`), by name. */
  pausedTracks: string[];
  /** Answer bytes (text) handed to the socket whose write has not completed. */
  unsentAnswerBytes: number;
  /** Whether the server has stopped reading this client (more than `readPauseBytes` of its answers unsent). */
  readPaused: boolean;
  /** Times the server stopped reading this client. */
  readPauses: number;
  /** Binary frames this client sent to the app's inbound tracks (absent when the app declares none). */
  inbound?: FrameIntakeInfo;
  /** Its video selection (absent until it sends `select_video`). */
  video?: VideoSelectionInfo;
}

/** Bound to the server: what a connection needs from it. */
export interface ConnectionContext {
  host: AppHostApi;
  encoder: FrameEncoder;
  /** Decodes inbound JPEG frames. */
  decoder: FrameDecoder;
  /** Largest inbound binary frame (0 when the app declares no inbound track). */
  maxFrameBytes: number;
  metrics: ServerMetrics;
  options: ResolvedServerOptions;
  /** The server's logger. */
  logger: Logger;
  /** The server-wide budget for unsent bytes. */
  budget: SendBudget;
  /** The shared video encoders. */
  video: VideoStreams;
  /** Clips and recordings; `undefined`: not configured (`clips_disabled`). */
  recording: RecordingService | undefined;
  /** Sees every stats message (the server derives step metrics from them). */
  onStats(msg: StatsMessage): void;
  /** The instance name to put in `welcome.session` / `session` messages (`ReactorServer.instance`). */
  instance(): string | undefined;
  /** A client did something (a command, a publication, a frame): the idle timeout starts over. */
  activity(): void;
  /**
   * The socket is gone: the server disconnects the client from the host, or, when the connection
   * dropped without a close handshake, holds its identity for the resume grace.
   */
  gone(conn: ClientConnection, handle: ClientHandle, dropped: boolean): void;
}

/** A connected WebSocket client (see the module comment for the frame policy). */
export class ClientConnection implements ClientSink, BudgetHolder, VideoSubscriber {
  /** Set by the heartbeat: false after a ping until the pong arrives. */
  alive = true;
  readonly #ws: WebSocket;
  readonly #ctx: ConnectionContext;
  #handle: ClientHandle | undefined;
  /** Binary frames to the app's inbound tracks; absent when it declares none (binary is then `unexpected_binary`). */
  #frames: FrameIntake | undefined;
  readonly #queue: QueuedItem[] = [];
  /** How many of #queue's items are audio chunks. */
  #queuedAudio = 0;
  /** Outbound tracks (`schema.tracks` indices) this client paused. */
  readonly #paused = new Set<number>();
  #inFlight = 0;
  #pumping = false;
  #closed = false;
  /** Commands sent to the host whose reply has not come back yet. */
  #pending = 0;
  /** Answers owed, in arrival order (commands and the connection-level errors queued behind them). */
  #unanswered = 0;
  /** Settles once every answer owed so far has been sent. */
  #answered: Promise<void> = Promise.resolve();
  /** Ids of this connection's commands whose answer is not sent yet (with their count: ids may repeat). */
  readonly #idsInFlight = new Map<string, number>();
  #sent = 0;
  #dropped = 0;
  #audioSent = 0;
  #audioDropped = 0;
  /** Bytes handed to the socket whose write has not completed (they count against the server's budget). */
  #unsent = 0;
  /** Cut by the server-wide budget (its bytes already given back). */
  #evicted = false;
  /** The part of #unsent that is answers (text). */
  #unsentText = 0;
  #readPaused = false;
  #readPauses = 0;
  #pauseTimer: ReturnType<typeof setTimeout> | undefined;
  /** Messages that arrived (already read by `ws`) while reads were paused, in arrival order. */
  readonly #held: [RawData, boolean][] = [];
  #draining = false;
  /** Cut for not reading its answers: nothing more is read or handled. */
  #cut = false;
  #tokens: number;
  #tokensAt = performance.now();
  /** `select_video`'s choice; undefined: JPEG as before (no `video_config`). */
  #selection: { codec: VideoCodecName; tier: VideoTierSchema } | undefined;
  /** Outbound video tracks (`schema.tracks` index) once a selection was made. */
  readonly #video = new Map<number, TrackVideo>();
  #keyFrameRequests = 0;
  /** Coded frames of this connection still being encoded (queued or not). */
  #encoding = 0;
  /** Video bytes written since the last stats message, and when that was. */
  #videoBytes = 0;
  #videoBytesSince = performance.now();
  readonly #onClosed: (c: ClientConnection) => void;
  /** What this client's credential grants (role, tracks, uploads, longest session). */
  readonly grant: Grant;
  /** The secret a new connection presents (`?resume=`) to take this client's identity back after a drop. */
  readonly resumeSecret = randomBytes(24).toString('base64url');
  /** The client asked to resume and this connection did not get the identity back: its welcome says `resumed: false`. */
  #resumeFailed = false;
  /** The server closed the socket itself (a limit, a refusal, shutdown): the client is not held for resume. */
  #closedByServer = false;
  #resolveClosed!: () => void;
  /** Resolves once the socket has closed and the host has been told. */
  readonly closed = new Promise<void>((resolve) => (this.#resolveClosed = resolve));

  constructor(ws: WebSocket, ctx: ConnectionContext, onClosed: (c: ClientConnection) => void, grant: Grant) {
    this.grant = grant;
    this.#ws = ws;
    this.#ctx = ctx;
    this.#tokens = ctx.options.commandBurst;
    this.#onClosed = onClosed;
    ctx.budget.add(this);
    ws.on('message', (data, isBinary) => this.#receive(data, isBinary));
    ws.on('pong', () => (this.alive = true));
    // `ws` reports protocol violations (too-big message -> 1009) here and then closes the socket.
    ws.on('error', (err) => ctx.logger.warn({ client: this.id }, `client ${this.id}: ${err.message}`));
    ws.on('close', (code: number) => this.#teardown(code));
  }

  /**
   * Registers with the host (which sends the welcome through this sink), with the role and tracks
   * of its grant. `resumeFailed`: the client asked to resume and could not (its welcome says so).
   */
  attach(info: { remoteAddress?: string; userAgent?: string; sessionId?: string }, resumeFailed = false): void {
    this.#resumeFailed = resumeFailed;
    const handle = this.#ctx.host.connect(this, { ...info, role: this.grant.role, publish: this.grant.publish });
    this.#bind(handle);
  }

  /** Takes over a dropped client's identity (it resumed): the host sends this sink a welcome with `resumed: true`. */
  adopt(handle: ClientHandle): void {
    this.#bind(handle);
    handle.rebind(this);
  }

  #bind(handle: ClientHandle): void {
    this.#handle = handle;
    const tracks = this.#ctx.host.schema.tracks;
    if (tracks.some((t) => t.direction === 'in')) {
      this.#frames = new FrameIntake({
        tracks,
        handle,
        decoder: this.#ctx.decoder,
        metrics: this.#ctx.metrics,
        logger: typeof this.#ctx.logger.child === 'function' ? this.#ctx.logger.child({ client: handle.id }) : this.#ctx.logger,
        sendError: (code, message) => this.#error(code, message, undefined, false),
      });
    }
    if (this.#closed) {
      this.#frames?.close();
      handle.disconnect();
    }
  }

  /** The host's id for this client (empty until attached). */
  get id(): string {
    return this.#handle?.id ?? '';
  }

  /** A snapshot of the queue and counters. */
  info(): ConnectionInfo {
    const info: ConnectionInfo = {
      id: this.id,
      queuedFrames: this.#queue.length - this.#queuedAudio,
      queuedAudio: this.#queuedAudio,
      framesInFlight: this.#inFlight,
      bufferedBytes: this.#ws.bufferedAmount,
      framesSent: this.#sent,
      framesDropped: this.#dropped,
      audioSent: this.#audioSent,
      audioDropped: this.#audioDropped,
      pausedTracks: [...this.#paused].map((i) => this.#ctx.host.schema.tracks[i]?.name ?? String(i)),
      unsentAnswerBytes: this.#unsentText,
      readPaused: this.#readPaused,
      readPauses: this.#readPauses,
    };
    if (this.#frames) info.inbound = this.#frames.info();
    const video = this.videoSelection;
    if (video) info.video = video;
    return info;
  }

  /** Its video selection (undefined until it sends `select_video`). */
  get videoSelection(): VideoSelectionInfo | undefined {
    if (!this.#selection) return undefined;
    const tracks = this.#ctx.host.schema.tracks;
    // A track moved to JPEG by an encoder failure reports jpeg.
    const first = [...this.#video.values()][0];
    return {
      codec: first && !first.encoder ? 'jpeg' : this.#selection.codec,
      tier: this.#selection.tier.name,
      awaitingKey: [...this.#video].filter(([, v]) => v.awaitingKey).map(([i]) => tracks[i]?.name ?? String(i)),
      keyFrameRequests: this.#keyFrameRequests,
    };
  }

  /** Sends a heartbeat ping. */
  ping(): void {
    if (this.#ws.readyState === this.#ws.OPEN) this.#ws.ping();
  }

  /** Cuts the socket without a close handshake (dead or hopeless clients). */
  terminate(): void {
    this.#ws.terminate();
  }

  // ---- ClientSink ------------------------------------------------------------------------

  message(msg: ServerMessage): void {
    if (this.#closed) return;
    // A command's answer: sent in arrival order by #onMessage's chain, from the value command() returns.
    if ((msg.type === 'reply' || msg.type === 'error') && msg.id !== undefined && this.#idsInFlight.has(msg.id)) return;
    if (msg.type === 'stats') {
      this.#ctx.onStats(msg);
      const video = this.videoSelection;
      if (video) {
        const now = performance.now();
        const bitrate = Math.round((this.#videoBytes * 8 * 1000) / Math.max(1, now - this.#videoBytesSince));
        this.#videoBytes = 0;
        this.#videoBytesSince = now;
        msg = { ...msg, video: { codec: video.codec, tier: video.tier, bitrate, keyFrameRequests: video.keyFrameRequests } };
      }
    }
    if (msg.type === 'welcome') {
      const offer = this.#ctx.video.offer();
      if (offer) msg = { ...msg, video: offer };
      const graceMs = this.#ctx.options.resumeGraceMs;
      if (graceMs > 0) msg = { ...msg, resume: { secret: this.resumeSecret, graceMs } };
      if (this.#resumeFailed && msg.resumed === undefined) msg = { ...msg, resumed: false };
    }
    if (msg.type === 'flush') {
      // Frames after the cut may refer to frames dropped here: every coded track waits for the key frame the flush forces.
      for (const v of this.#video.values()) if (v.encoder) v.awaitingKey = true;
      this.#ctx.video.flush(msg.nextSeq);
      // Frames and audio still waiting here belong to the cut playout: drop them before the client learns of the cut.
      let frames = 0;
      let audio = 0;
      for (let i = this.#queue.length - 1; i >= 0; i--) {
        const item = this.#queue[i]!;
        if (item.seq >= msg.nextSeq) continue;
        this.#unqueue(i);
        if (item.audio) audio++;
        else frames++;
      }
      if (frames > 0) this.#ctx.metrics.framesDropped.inc({ reason: 'flush' }, frames);
      if (audio > 0) this.#ctx.metrics.audioChunksDropped.inc({ reason: 'flush' }, audio);
    }
    this.#sendText(JSON.stringify(msg.type === 'error' ? capError(msg) : withInstance(msg, this.#ctx.instance())));
  }

  frame(frame: OutputFrame): void {
    this.#ctx.metrics.frameEmitted(frame);
    if (this.#closed || this.#paused.has(frame.trackIndex)) return;
    const { seq, track, trackIndex } = frame;
    const v = this.#video.get(trackIndex);
    if (v?.encoder) {
      const item: QueuedItem = { seq, track, trackIndex, audio: false, data: v.encoder.encode(frame), encoder: v.encoder, encoding: true };
      this.#queue.push(item);
      this.#encoding++;
      const done = (): void => {
        item.encoding = false;
        this.#encoding--;
        if (this.#closed || !this.#queue.includes(item)) return;
        this.#checkOverflow();
      };
      item.data.then(done, done);
    } else if (v && this.#selection) {
      const jpegConfig: VideoConfigMessage = {
        type: 'video_config',
        track,
        codec: 'jpeg',
        width: frame.width,
        height: frame.height,
        tier: this.#selection.tier.name,
      };
      this.#queue.push({ seq, track, trackIndex, audio: false, data: this.#ctx.encoder.encode(frame), jpegConfig });
    } else {
      this.#queue.push({ seq, track, trackIndex, audio: false, data: this.#ctx.encoder.encode(frame) });
    }
    this.#checkOverflow();
    void this.#pump();
  }

  /** The slow-client bound: frames whose encoding is done beyond `maxQueuedFrames` (and any beyond MAX_FRAMES_ENCODING more) drop the oldest. */
  #checkOverflow(): void {
    const max = this.#ctx.options.maxQueuedFrames;
    for (;;) {
      const frames = this.#queue.length - this.#queuedAudio;
      if (frames - this.#queuedEncoding() <= max && frames <= max + MAX_FRAMES_ENCODING) return;
      this.#dropOldest(false);
    }
  }

  /** Queued frames still being encoded. */
  #queuedEncoding(): number {
    if (this.#encoding === 0) return 0;
    let n = 0;
    for (const q of this.#queue) if (q.encoding) n++;
    return n;
  }

  audio(chunk: OutputAudio): void {
    if (this.#closed || this.#paused.has(chunk.trackIndex)) return;
    const { seq, track, trackIndex } = chunk;
    this.#queue.push({ seq, track, trackIndex, audio: true, data: this.#ctx.encoder.encodeAudio(chunk) });
    this.#queuedAudio++;
    if (this.#queuedAudio > AUDIO_QUEUE_FACTOR * this.#ctx.options.maxQueuedFrames) this.#dropOldest(true);
    void this.#pump();
  }

  close(reason: string, code = 1001): void {
    if (this.#closed) return;
    this.#closedByServer = true;
    this.#ws.close(code, truncateReason(reason));
  }

  /**
   * The connection moves to a new app host (`HostSwitch.replace`, `reactor dev`): what is queued
   * belongs to the old one and is dropped (counted as `flush`), and each coded video track sends
   * a new `video_config` and waits for a key frame, which is asked for at once.
   */
  newGeneration(): void {
    if (this.#closed) return;
    let frames = 0;
    let audio = 0;
    for (let i = this.#queue.length - 1; i >= 0; i--) {
      if (this.#unqueue(i).audio) audio++;
      else frames++;
    }
    if (frames > 0) this.#ctx.metrics.framesDropped.inc({ reason: 'flush' }, frames);
    if (audio > 0) this.#ctx.metrics.audioChunksDropped.inc({ reason: 'flush' }, audio);
    for (const v of this.#video.values()) {
      v.lastConfig = undefined;
      if (v.encoder) {
        v.awaitingKey = true;
        v.encoder.requestKeyFrame('join');
      }
    }
  }

  // ---- outbound --------------------------------------------------------------------------

  /** Bytes handed to the socket whose write has not completed. */
  get unsentBytes(): number {
    return this.#unsent;
  }

  /** Cut by the server-wide budget (see {@link SendBudget}). */
  evict(reason: string): void {
    if (this.#closed || this.#evicted) return;
    this.#evicted = true;
    this.#ctx.logger.warn({ client: this.id }, `client ${this.id}: ${reason}; disconnecting it`);
    this.#ctx.metrics.rejected.inc({ reason: 'server_budget' });
    // Its bytes are given back now: the destroyed socket reports its pending writes only later.
    this.#ctx.budget.release(this.#unsent);
    this.#unsent = 0;
    this.#ws.terminate();
  }

  /**
   * Hands `data` to the socket, counting it against the server's budget until written.
   * Returns false (nothing sent) when the budget refused it.
   */
  #write(data: string | Buffer, binary: boolean, mayRefuse: boolean, done: (err?: Error) => void): boolean {
    const bytes = typeof data === 'string' ? Buffer.byteLength(data) : data.byteLength;
    // A frame may be dropped instead, so only a client far behind (over maxBufferedBytes) is cut
    // for one; a control message is owed (replies, errors, state), so for one the largest holder
    // beyond a few small messages is cut.
    const admitted = this.#ctx.budget.admit(this, bytes, mayRefuse ? this.#ctx.options.maxBufferedBytes : TEXT_EVICT_MIN_BYTES);
    // Control messages are small and owed: only frames are refused.
    if ((!admitted && mayRefuse) || this.#evicted || this.#ws.readyState !== this.#ws.OPEN) return false;
    this.#unsent += bytes;
    if (!binary) this.#unsentText += bytes;
    this.#ctx.budget.take(bytes);
    this.#ws.send(data, { binary }, (err) => {
      if (!this.#closed && !this.#evicted) {
        this.#unsent -= bytes;
        this.#ctx.budget.release(bytes);
      }
      if (!binary) {
        this.#unsentText -= bytes;
        if (!err) this.#maybeResumeReads();
      }
      done(err ?? undefined);
    });
    return true;
  }

  #sendText(text: string): void {
    if (this.#ws.readyState !== this.#ws.OPEN) return;
    this.#write(text, false, false, (err) => {
      if (!err) void this.#pump();
    });
    if (this.#unsentText > this.#ctx.options.readPauseBytes) this.#pauseReads();
    this.#checkHardLimit();
  }

  /**
   * Stops reading a client that does not read its answers (TCP back-pressure: its messages wait
   * in its own kernel buffers), for at most `readPauseTimeoutMs`.
   */
  #pauseReads(): void {
    if (this.#readPaused || this.#closed || this.#cut) return;
    this.#readPaused = true;
    this.#readPauses++;
    this.#ctx.metrics.readPauses.inc();
    this.#ws.pause();
    this.#pauseTimer = setTimeout(() => this.#cutUnread(), this.#ctx.options.readPauseTimeoutMs);
    this.#pauseTimer.unref();
  }

  #maybeResumeReads(): void {
    if (!this.#readPaused || this.#closed || this.#cut || this.#unsentText > this.#ctx.options.readPauseBytes / 4) return;
    this.#readPaused = false;
    clearTimeout(this.#pauseTimer);
    this.#ws.resume();
    this.#drainHeld();
  }

  /** Cuts a client that stayed paused past `readPauseTimeoutMs` (or overflowed the held messages) with close code 1008. */
  #cutUnread(why = `did not read its answers for ${this.#ctx.options.readPauseTimeoutMs} ms`): void {
    if (this.#closed || this.#cut) return;
    this.#cut = true;
    this.#held.length = 0;
    this.#ctx.logger.warn({ client: this.id }, `client ${this.id}: ${why} (${this.#unsentText} answer bytes unsent); disconnecting it`);
    this.#ctx.metrics.rejected.inc({ reason: 'unread_answers' });
    // The close frame waits behind the unread answers: the client sees it only if it reads them in time.
    this.#ws.close(1008, truncateReason(`not reading its answers: ${why}`));
    setTimeout(() => this.#ws.terminate(), CUT_GRACE_MS).unref();
  }

  #checkHardLimit(): void {
    const limit = this.#ctx.options.maxBufferedBytes * HARD_BUFFER_FACTOR;
    if (this.#ws.bufferedAmount > limit && !this.#closed) {
      this.#ctx.logger.warn(`client ${this.id}: ${this.#ws.bufferedAmount} bytes unread (limit ${limit}); disconnecting it`);
      this.#ctx.metrics.rejected.inc({ reason: 'unread_backlog' });
      this.#ws.terminate();
    }
  }

  #drop(reason: DropReason, n: number, audio = false): void {
    if (n === 0) return;
    if (audio) {
      this.#audioDropped += n;
      this.#ctx.metrics.audioChunksDropped.inc({ reason }, n);
      return;
    }
    this.#dropped += n;
    this.#ctx.metrics.framesDropped.inc({ reason }, n);
    this.#handle?.reportDropped(n);
  }

  /** Removes the queue's item at `index`, keeping the audio count. */
  #unqueue(index: number): QueuedItem {
    const [item] = this.#queue.splice(index, 1);
    if (item!.audio) this.#queuedAudio--;
    return item!;
  }

  /** The slow-client policy: drops the oldest queued frame (or, with `audio`, the oldest chunk). */
  #dropOldest(audio: boolean): void {
    const i = this.#queue.findIndex((q) => q.audio === audio);
    if (i < 0) return;
    const item = this.#unqueue(i);
    this.#drop('slow_client', 1, audio);
    if (item.encoder) this.#lostCodedFrame(item.trackIndex, 'drop');
  }

  /** A coded frame of the track will not reach this client: nothing but a key frame may follow, and one is asked for. */
  #lostCodedFrame(trackIndex: number, reason: 'drop' | 'request'): void {
    const v = this.#video.get(trackIndex);
    if (!v?.encoder) return;
    // One request per loss episode: more drops while waiting would ask again for the same key frame.
    if (v.awaitingKey && reason === 'drop') return;
    v.awaitingKey = true;
    v.encoder.requestKeyFrame(reason);
  }

  /** Sends the track's `video_config` when it differs from the last one this client got. */
  #announce(trackIndex: number, config: VideoConfigMessage): void {
    const v = this.#video.get(trackIndex);
    if (!v) return;
    const text = JSON.stringify(config);
    if (text === v.lastConfig) return;
    v.lastConfig = text;
    this.#sendText(text);
  }

  async #pump(): Promise<void> {
    if (this.#pumping) return;
    this.#pumping = true;
    try {
      while (this.#queue.length > 0 && !this.#closed) {
        if (this.#inFlight >= MAX_FRAMES_IN_FLIGHT || this.#ws.bufferedAmount > this.#ctx.options.maxBufferedBytes) return;
        const item = this.#queue[0]!;
        let encoded: Buffer | CodedFrame | null;
        try {
          encoded = await item.data;
        } catch (err) {
          if (this.#queue[0] === item) this.#unqueue(0);
          // A failed encoder moved the track to JPEG (encoderFailed): its last frames are not news.
          if (!item.encoder?.closed) this.#ctx.logger.error(`frame ${item.seq} of track "${item.track}" could not be encoded: ${(err as Error).message}`);
          this.#drop('encode_error', 1, item.audio);
          if (item.encoder) this.#lostCodedFrame(item.trackIndex, 'drop');
          continue;
        }
        // Dropped (overflow, flush or pause) while it was being encoded: look at the new head.
        if (this.#queue[0] !== item || this.#closed) continue;
        this.#unqueue(0);
        if (this.#ws.readyState !== this.#ws.OPEN) return;
        let data: Buffer;
        if (item.encoder) {
          const v = this.#video.get(item.trackIndex);
          // The track moved to another encoder (or to JPEG) since: the frame belongs to the old stream.
          if (v?.encoder !== item.encoder) continue;
          if (encoded === null) {
            this.#drop('encode_error', 1);
            this.#lostCodedFrame(item.trackIndex, 'drop');
            continue;
          }
          const coded = encoded as CodedFrame;
          if (v.awaitingKey && !coded.key) {
            this.#drop('awaiting_key', 1);
            continue;
          }
          v.awaitingKey = false;
          this.#announce(item.trackIndex, coded.config);
          data = coded.bytes;
        } else {
          if (item.jpegConfig) this.#announce(item.trackIndex, item.jpegConfig);
          data = encoded as Buffer;
        }
        this.#inFlight++;
        const sent = this.#write(data, true, true, (err) => {
          this.#inFlight--;
          if (err) return;
          if (item.audio) {
            this.#audioSent++;
            this.#ctx.metrics.audioChunksSent.inc();
          } else {
            this.#sent++;
            this.#videoBytes += data.byteLength;
            this.#ctx.metrics.framesSent.inc();
          }
          void this.#pump();
        });
        if (!sent) {
          this.#inFlight--;
          this.#drop('server_budget', 1, item.audio);
          if (item.encoder) this.#lostCodedFrame(item.trackIndex, 'drop');
        }
      }
    } finally {
      this.#pumping = false;
    }
  }

  // ---- inbound ---------------------------------------------------------------------------

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
    const { commandRate, commandBurst } = this.#ctx.options;
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
  #error(code: ServerErrorCode, message: string, id?: string, countAsResult = true): void {
    const msg: ErrorMessage = { type: 'error', code, message };
    if (id !== undefined) msg.id = id;
    if (countAsResult) this.#ctx.metrics.commands.inc({ code });
    this.#answer(msg);
  }

  /** Sends an answer the connection gives itself, behind the answers owed to earlier messages. */
  #answer(msg: ReplyMessage | ErrorMessage, after?: () => void): void {
    const send = (): void => {
      this.#sendText(JSON.stringify(msg));
      after?.();
    };
    if (this.#unanswered === 0) return send();
    this.#unanswered++;
    this.#answered = this.#answered.then(() => {
      this.#unanswered--;
      if (!this.#closed) send();
    });
  }

  /** Every inbound message: handled now, or held (in order) while reads are paused or held ones wait. */
  #receive(data: RawData, isBinary: boolean): void {
    if (this.#closed || this.#cut) return;
    if (!this.#readPaused && this.#held.length === 0) return this.#onMessage(data, isBinary);
    this.#held.push([data, isBinary]);
    if (this.#held.length > MAX_HELD_MESSAGES) this.#cutUnread(`sent more than ${MAX_HELD_MESSAGES} messages while its reads were paused`);
  }

  /** Handles the held messages one per macrotask (as `ws` delivers them), until reads pause again. */
  #drainHeld(): void {
    if (this.#draining) return;
    this.#draining = true;
    const step = (): void => {
      const next = this.#readPaused || this.#closed || this.#cut ? undefined : this.#held.shift();
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
    if (this.#closed || !this.#handle) return;
    // `ws` enforces the larger of the two limits; the other is enforced here, with the same close code.
    const size = rawSize(data);
    const limit = isBinary ? this.#ctx.maxFrameBytes || this.#ctx.options.maxMessageBytes : this.#ctx.options.maxMessageBytes;
    if (size > limit) {
      this.#cut = true;
      this.#ws.close(1009, truncateReason(`${isBinary ? 'frame' : 'message'} of ${size} bytes is over the limit of ${limit}`));
      return;
    }
    this.#ctx.activity();
    // Frames of inbound tracks have their own per-track rate limit (the track's maxFps), not the command bucket.
    if (isBinary && this.#frames) {
      this.#frames.receive(data, performance.now());
      return;
    }
    if (!this.#takeToken()) {
      const { commandRate, commandBurst } = this.#ctx.options;
      this.#error(
        ServerErrorCode.RateLimited,
        `more than ${commandRate} messages per second on this connection sent ahead of the answers to earlier ones (burst ${commandBurst}; commands still waiting for their reply count against it); wait for each reply before sending the next, or slow down (the connection stays open)`,
        peekId(data, isBinary),
      );
      return;
    }
    if (isBinary) {
      this.#error(
        ServerErrorCode.UnexpectedBinary,
        'this app declares no inbound track, so binary messages only flow from the server to clients; send commands as JSON text messages',
      );
      return;
    }
    const parsed = parseClientMessage(rawToString(data));
    if (!parsed.ok) {
      this.#error(parsed.code, parsed.message, parsed.id);
      return;
    }
    const msg = parsed.message;
    switch (msg.type) {
      case 'command':
        return this.#command(this.#handle, msg);
      case 'publish':
      case 'unpublish':
        return this.#publishing(this.#handle, msg);
      case 'pause_track':
      case 'resume_track':
        return this.#pauseTrack(msg);
      case 'select_video':
        return this.#selectVideo(msg);
      case 'request_key_frame':
        return this.#requestKeyFrame(msg);
      case 'clip':
      case 'recording':
        return this.#answerInOrder(msg.id, () => this.#ctx.recording?.answer(msg, this) ?? recordingDisabled(msg));
      case 'request_control':
        return this.#answerInOrder(msg.id, () => this.#handle!.requestControl(msg.id));
      case 'release_control':
        return this.#answerInOrder(msg.id, () => this.#handle!.releaseControl(msg.id));
    }
  }

  /** `select_video`: checked against the offer, answered in order; the switch happens as the reply goes out. */
  #selectVideo(msg: SelectVideoMessage): void {
    const video = this.#ctx.video;
    const offer = video.offer();
    const shown = (x: unknown): string => JSON.stringify(x).slice(0, 40);
    if (!offer) {
      // JPEG only: every frame is a picture of its own, at full size.
      if (msg.codec === 'jpeg' && (msg.tier === undefined || msg.tier === 'full')) {
        this.#answer({ type: 'reply', id: msg.id, result: { codec: 'jpeg', tier: 'full' } });
      } else {
        const why = video.unavailable ? ` (${video.options.codec} is configured but its encoder did not load: ${video.unavailable})` : '';
        this.#error(
          ServerErrorCode.UnsupportedCodec,
          `this server streams jpeg (tier full) only${why}; asked for ${shown(msg.codec)}${msg.tier === undefined ? '' : ` tier ${shown(msg.tier)}`}`,
          msg.id,
        );
      }
      return;
    }
    if (!offer.codecs.includes(msg.codec)) {
      this.#error(ServerErrorCode.UnsupportedCodec, `this server streams ${offer.codecs.join(' or ')}; asked for ${shown(msg.codec)}`, msg.id);
      return;
    }
    const tier = msg.tier === undefined ? offer.tiers[0] : video.options.tiers.find((t) => t.name === msg.tier);
    if (!tier) {
      this.#error(ServerErrorCode.UnknownTier, `no tier ${shown(msg.tier)}; this server's tiers: ${offer.tiers.map((t) => t.name).join(', ')}`, msg.id);
      return;
    }
    const codec = msg.codec;
    this.#answer({ type: 'reply', id: msg.id, result: { codec, tier: tier.name } }, () => this.#applyVideo(codec, tier));
  }

  /** Moves every outbound video track of this connection to (codec, tier). */
  #applyVideo(codec: VideoCodecName, tier: VideoTierSchema): void {
    if (this.#closed) return;
    this.#selection = { codec, tier };
    const tracks = this.#ctx.host.schema.tracks;
    tracks.forEach((t, index) => {
      if (t.direction !== 'out' || t.kind !== 'video') return;
      let v = this.#video.get(index);
      if (!v) {
        v = { encoder: undefined, awaitingKey: false, lastConfig: undefined };
        this.#video.set(index, v);
      }
      const current = v.encoder;
      if (codec === 'jpeg' ? current === undefined : current?.codec === codec && current.tier.name === tier.name && !current.closed) return;
      current?.remove(this);
      // Frames queued in the old encoding are not sent: the new stream starts clean.
      for (let i = this.#queue.length - 1; i >= 0; i--) if (this.#queue[i]!.trackIndex === index && !this.#queue[i]!.audio) this.#unqueue(i);
      if (codec === 'jpeg') {
        v.encoder = undefined;
        v.awaitingKey = false;
        return;
      }
      v.encoder = this.#ctx.video.subscribe(index, codec, tier, this);
      v.awaitingKey = true;
      v.encoder.requestKeyFrame('join');
    });
  }

  /** `request_key_frame`: the track's next delta frames are held back and a key frame is asked for (nothing for JPEG). */
  #requestKeyFrame(msg: RequestKeyFrameMessage): void {
    const tracks = this.#ctx.host.schema.tracks;
    const index = tracks.findIndex((t) => t.name === msg.track);
    const track = tracks[index];
    const shown = JSON.stringify(msg.track.slice(0, 64));
    const video = tracks.filter((t) => t.direction === 'out' && t.kind === 'video').map((t) => t.name);
    if (track === undefined) {
      this.#error(ServerErrorCode.UnknownTrack, `unknown track ${shown}; this app's outbound video tracks: ${video.join(', ') || '(none)'}`);
      return;
    }
    if (track.direction !== 'out' || track.kind !== 'video') {
      this.#error(ServerErrorCode.WrongTrackDirection, `track ${shown} is not an outbound video track; key frames exist on: ${video.join(', ') || '(none)'}`);
      return;
    }
    this.#keyFrameRequests++;
    this.#lostCodedFrame(index, 'request');
  }

  /** The track's encoder failed (and is closed): the track continues in JPEG for this client. */
  encoderFailed(encoder: TrackEncoder, err: Error): void {
    const v = this.#video.get(encoder.trackIndex);
    if (this.#closed || !v || v.encoder !== encoder) return;
    v.encoder = undefined;
    v.awaitingKey = false;
    this.#error(
      ServerErrorCode.EncoderFailed,
      `the ${encoder.codec} encoder of track "${encoder.track}" (tier ${encoder.tier.name}) failed: ${err.message}; the track continues in JPEG (a video_config follows)`,
      undefined,
      false,
    );
  }

  /**
   * `pause_track` / `resume_track`: stops or restarts sending one outbound track to this
   * connection (idempotent). The model and the other clients are not affected; a resumed track
   * starts with its next frame.
   */
  #pauseTrack(msg: PauseTrackMessage | ResumeTrackMessage): void {
    const tracks = this.#ctx.host.schema.tracks;
    const index = tracks.findIndex((t) => t.name === msg.track);
    const track = tracks[index];
    const outbound = tracks.filter((t) => t.direction === 'out').map((t) => t.name);
    const shown = JSON.stringify(msg.track.slice(0, 64));
    if (track === undefined) {
      this.#error(ServerErrorCode.UnknownTrack, `unknown track ${shown}; this app's outbound tracks: ${outbound.join(', ') || '(none)'}`, msg.id);
      return;
    }
    if (track.direction !== 'out') {
      this.#error(
        ServerErrorCode.WrongTrackDirection,
        `track ${shown} is an inbound track (clients publish it); only outbound tracks can be paused: ${outbound.join(', ') || '(none)'}`,
        msg.id,
      );
      return;
    }
    if (msg.type === 'pause_track') {
      this.#paused.add(index);
      // Frames skipped while paused: the stream resumes at a key frame.
      const v = this.#video.get(index);
      if (v?.encoder) v.awaitingKey = true;
      // What is already queued for the track is not sent either: nothing of it follows the reply.
      for (let i = this.#queue.length - 1; i >= 0; i--) if (this.#queue[i]!.trackIndex === index) this.#unqueue(i);
    } else {
      if (this.#paused.delete(index)) this.#video.get(index)?.encoder?.requestKeyFrame('join');
    }
    this.#answer({ type: 'reply', id: msg.id });
  }

  /** A well-formed command: run by the host, answered in arrival order. */
  #command(handle: ClientHandle, cmd: CommandMessage): void {
    // The command's name and params are the host's to check (unknown_command, invalid_params, no_session).
    this.#pending++;
    this.#answerInOrder(cmd.id, () =>
      handle.command(cmd).then((result) => {
        this.#pending--;
        return result;
      }),
    );
  }

  /**
   * `publish` / `unpublish`: the host arbitrates (first publisher wins) and answers at once; the
   * answer still waits behind those of this connection's earlier messages.
   */
  #publishing(handle: ClientHandle, msg: PublishMessage | UnpublishMessage): void {
    this.#answerInOrder(msg.id, () => (msg.type === 'publish' ? handle.publish(msg.id, msg.track) : handle.unpublish(msg.id, msg.track)));
  }

  /**
   * Runs `run` (a host call that answers message `id` through this sink **and** returns the
   * answer), holding the sink's copy back so the answer is sent here, after the answers owed to
   * earlier messages: every answer of a connection goes out in arrival order.
   */
  #answerInOrder(id: string, run: () => Promise<ReplyMessage | ErrorMessage> | ReplyMessage | ErrorMessage): void {
    this.#unanswered++;
    this.#idsInFlight.set(id, (this.#idsInFlight.get(id) ?? 0) + 1);
    const answer = Promise.resolve(run()).then((result) => {
      this.#ctx.metrics.commands.inc({ code: result.type === 'reply' ? 'ok' : result.code });
      return result;
    });
    this.#answered = this.#answered
      .then(() => answer)
      .then((result) => {
        this.#unanswered--;
        const n = this.#idsInFlight.get(id) ?? 1;
        if (n > 1) this.#idsInFlight.set(id, n - 1);
        else this.#idsInFlight.delete(id);
        if (!this.#closed) this.#sendText(JSON.stringify(result.type === 'error' ? capError(result) : result));
      });
  }

  #teardown(code?: number): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#ctx.budget.remove(this);
    this.#ctx.budget.release(this.#unsent);
    this.#unsent = 0;
    clearTimeout(this.#pauseTimer);
    this.#held.length = 0;
    this.#frames?.close();
    this.#drop('disconnected', this.#queue.length - this.#queuedAudio);
    this.#drop('disconnected', this.#queuedAudio, true);
    this.#queue.length = 0;
    this.#queuedAudio = 0;
    for (const v of this.#video.values()) v.encoder?.remove(this);
    this.#video.clear();
    // 1006: the socket went without a close frame (a dropped network, a killed proxy, a missed heartbeat).
    if (this.#handle) this.#ctx.gone(this, this.#handle, code === 1006 && !this.#closedByServer && !this.#cut && !this.#evicted);
    this.#onClosed(this);
    this.#resolveClosed();
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

/** Most `details` an error answer carries; the rest are counted in its message. */
export const MAX_ERROR_DETAILS = 10;
/** Longest `message` of an error answer, in UTF-16 units. */
export const MAX_ERROR_MESSAGE = 1000;
const MAX_DETAIL_TEXT = 200;

function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 3)}...`;
}

/**
 * An error answer bounded in size whatever the client sent: a few details, then a count, and
 * short texts (a 60 KB message must not earn an 800 KB answer).
 */
export function capError(msg: ErrorMessage): ErrorMessage {
  const details = msg.details;
  const extra = details && details.length > MAX_ERROR_DETAILS ? details.length - MAX_ERROR_DETAILS : 0;
  const out: ErrorMessage = { ...msg, message: clip(msg.message, MAX_ERROR_MESSAGE - (extra ? 40 : 0)) + (extra ? ` (${extra} more details not shown)` : '') };
  if (details) {
    out.details = details
      .slice(0, MAX_ERROR_DETAILS)
      .map((d) => ({ field: clip(d.field, MAX_DETAIL_TEXT), constraint: clip(d.constraint, MAX_DETAIL_TEXT), message: clip(d.message, MAX_DETAIL_TEXT) }));
  }
  return out;
}

/** Close reasons are limited to 123 bytes by the WebSocket protocol. */
export function truncateReason(reason: string): string {
  const b = Buffer.from(reason);
  return b.byteLength <= 123
    ? reason
    : b
        .subarray(0, 120)
        .toString('utf8')
        .replace(/\uFFFD$/, '') + '...';
}

/** `msg` with the instance name in its session status (welcome and session messages); the host's object is shared by every sink, so copied, never changed. */
function withInstance(msg: ServerMessage, instance: string | undefined): ServerMessage {
  if (instance === undefined || (msg.type !== 'welcome' && msg.type !== 'session')) return msg;
  return { ...msg, session: { ...msg.session, instance } };
}
