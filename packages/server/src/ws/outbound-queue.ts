/**
 * One client's WebSocket writer: its {@link ControlSender} (text, in order) and its WebSocket
 * {@link MediaPath}, one queue for both (a frame's `video_config` goes before the frame on the
 * one socket), with the server-wide send budget and the pump that writes to the socket.
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
 */
import type { WebSocket } from 'ws';
import type { VideoConfigMessage } from '@reactor/protocol';
import type { Logger } from '@reactor/log';
import type { OutputAudio, OutputFrame } from '@reactor/runtime';
import type { ConnectionLifecycle } from './connection-state.js';
import type { FrameEncoder } from '../video/frame-encoder.js';
import type { DropReason, ServerMetrics } from '../base/metrics.js';
import type { ControlSender, MediaCounts, MediaPath, OutboundEvents, OutboundStats } from '../base/outbound.js';
import type { BudgetHolder, SendBudget } from '../base/send-budget.js';
import type { ConnectionVideo } from '../video/video-sender.js';
import type { CodedFrame, TrackEncoder } from '../video/video-streams.js';
import { codedWireMessage } from './coded-wire.js';
import type { TrackPauses } from '../base/track-pauses.js';

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
  /** When it was queued and when its bytes were ready (performance.now(); 0: not yet), for the `queue` stage. */
  queuedAt?: number;
  readyAt?: number;
}

/** The queue's slice of the server's options (`ResolvedServerOptions` is one). */
export interface WsOutboundOptions {
  maxQueuedFrames: number;
  maxBufferedBytes: number;
  readPauseBytes: number;
}

/** What the queue needs from the server and its connection. */
export interface WsOutboundContext {
  ws: WebSocket;
  state: ConnectionLifecycle;
  encoder: FrameEncoder;
  metrics: ServerMetrics;
  options: WsOutboundOptions;
  logger: Logger;
  budget: SendBudget;
  video: ConnectionVideo;
  /** The connection's paused tracks (it pauses and resumes them; the queue reads them). */
  paused: TrackPauses;
  events: OutboundEvents;
  /** The client's id, for log lines. */
  id(): string;
}

/** One client's outbound queue over its WebSocket (see the module comment for the frame policy). */
export class WsOutbound implements ControlSender, MediaPath, BudgetHolder {
  readonly #c: WsOutboundContext;
  readonly #ws: WebSocket;
  readonly #queue: QueuedItem[] = [];
  /** How many of #queue's items are audio chunks. */
  #queuedAudio = 0;
  #inFlight = 0;
  #pumping = false;
  #sent = 0;
  #dropped = 0;
  #audioSent = 0;
  #audioDropped = 0;
  /** Bytes handed to the socket whose write has not completed (they count against the server's budget). */
  #unsent = 0;
  /** The part of #unsent that is answers (text). */
  #unsentText = 0;
  /** Coded frames of this connection still being encoded (queued or not). */
  #encoding = 0;

  constructor(c: WsOutboundContext) {
    this.#c = c;
    this.#ws = c.ws;
    c.budget.add(this);
  }

  get #closed(): boolean {
    return this.#c.state.closed;
  }

  stats(): OutboundStats {
    return {
      queuedFrames: this.#queue.length - this.#queuedAudio,
      queuedAudio: this.#queuedAudio,
      framesInFlight: this.#inFlight,
      bufferedBytes: this.#ws.bufferedAmount,
      framesSent: this.#sent,
      framesDropped: this.#dropped,
      audioSent: this.#audioSent,
      audioDropped: this.#audioDropped,
      pausedTracks: this.#c.paused.list(),
      unsentAnswerBytes: this.#unsentText,
    };
  }

  counts(): MediaCounts {
    return { framesSent: this.#sent, framesDropped: this.#dropped, audioSent: this.#audioSent };
  }

  get unsentAnswerBytes(): number {
    return this.#unsentText;
  }

  frame(frame: OutputFrame): void {
    if (this.#closed || this.#c.paused.has(frame.trackIndex)) return;
    const { seq, track, trackIndex } = frame;
    const route = this.#c.video.route(frame);
    if (route.kind === 'coded') {
      const data = route.encoder.encode(frame);
      // The track's encoder did not take it (counted there once as `encoder_busy`; its stream has no gap).
      if (data === null) return;
      const now = performance.now();
      const item: QueuedItem = {
        seq,
        track,
        trackIndex,
        audio: false,
        data,
        encoder: route.encoder,
        encoding: true,
        queuedAt: now,
        readyAt: 0,
      };
      this.#queue.push(item);
      this.#encoding++;
      const done = (): void => {
        item.readyAt = performance.now();
        item.encoding = false;
        this.#encoding--;
        if (this.#closed || !this.#queue.includes(item)) return;
        this.#checkOverflow();
      };
      item.data.then(done, done);
    } else {
      const data = this.#c.encoder.encode(frame);
      // The encoder did not take it (counted there once as `encoder_busy`): nothing to send.
      if (data === null) return;
      const item: QueuedItem = {
        seq,
        track,
        trackIndex,
        audio: false,
        data,
        ...(route.kind === 'jpeg' && { jpegConfig: route.config }),
        // A JPEG still being encoded is the encoder's backlog (bounded there: `encoder_busy`), not this client's.
        encoding: true,
        queuedAt: performance.now(),
        readyAt: 0,
      };
      this.#encoding++;
      // Registered before the pump's await on the same promise, so readyAt is set when the pump resumes.
      const done = (): void => {
        item.readyAt = performance.now();
        item.encoding = false;
        this.#encoding--;
        if (this.#closed || !this.#queue.includes(item)) return;
        this.#checkOverflow();
      };
      item.data.then(done, done);
      this.#queue.push(item);
    }
    this.#checkOverflow();
    void this.#pump();
  }

  /**
   * The slow-client bound: frames whose encoding is done beyond `maxQueuedFrames` (and any beyond
   * MAX_FRAMES_ENCODING more, or the JPEG encoder's own bound when larger) drop the oldest.
   */
  #checkOverflow(): void {
    const max = this.#c.options.maxQueuedFrames;
    for (;;) {
      const frames = this.#queue.length - this.#queuedAudio;
      // Encoded frames beyond `max` wait for a socket that is behind: a slow client. Frames whose
      // encodes finished together (a step's frames, encoded in parallel) for a socket that takes
      // them now are not.
      const behind = this.#inFlight >= MAX_FRAMES_IN_FLIGHT || this.#ws.bufferedAmount > this.#c.options.maxBufferedBytes;
      const ready = behind ? frames - this.#queuedEncoding() : 0;
      if (ready <= max && frames <= max + Math.max(MAX_FRAMES_ENCODING, this.#c.encoder.maxInFlight)) return;
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
    if (this.#closed || this.#c.paused.has(chunk.trackIndex)) return;
    const { seq, track, trackIndex } = chunk;
    this.#queue.push({ seq, track, trackIndex, audio: true, data: this.#c.encoder.encodeAudio(chunk) });
    this.#queuedAudio++;
    if (this.#queuedAudio > AUDIO_QUEUE_FACTOR * this.#c.options.maxQueuedFrames) this.#dropOldest(true);
    void this.#pump();
  }

  pauseTrack(trackIndex: number): void {
    // What is already queued for the track is not sent either: nothing of it follows the reply.
    for (let i = this.#queue.length - 1; i >= 0; i--) if (this.#queue[i]!.trackIndex === trackIndex) this.#unqueue(i);
  }

  resumeTrack(): void {
    // Nothing to do: the next frame of the track is queued as any other.
  }

  /** Drops, uncounted, the queued video frames of a track (its encoding changed). */
  unqueueVideo(trackIndex: number): void {
    for (let i = this.#queue.length - 1; i >= 0; i--) if (this.#queue[i]!.trackIndex === trackIndex && !this.#queue[i]!.audio) this.#unqueue(i);
  }

  flushBefore(nextSeq: number): void {
    let frames = 0;
    let audio = 0;
    for (let i = this.#queue.length - 1; i >= 0; i--) {
      const item = this.#queue[i]!;
      if (item.seq >= nextSeq) continue;
      this.#unqueue(i);
      if (item.audio) audio++;
      else frames++;
    }
    if (frames > 0) this.#c.metrics.framesDropped.inc({ reason: 'flush' }, frames);
    if (audio > 0) this.#c.metrics.audioChunksDropped.inc({ reason: 'flush' }, audio);
  }

  dropAll(): void {
    let frames = 0;
    let audio = 0;
    for (let i = this.#queue.length - 1; i >= 0; i--) {
      if (this.#unqueue(i).audio) audio++;
      else frames++;
    }
    if (frames > 0) this.#c.metrics.framesDropped.inc({ reason: 'flush' }, frames);
    if (audio > 0) this.#c.metrics.audioChunksDropped.inc({ reason: 'flush' }, audio);
  }

  close(): void {
    this.#c.budget.remove(this);
    this.#c.budget.release(this.#unsent);
    this.#unsent = 0;
    this.#drop('disconnected', this.#queue.length - this.#queuedAudio);
    this.#drop('disconnected', this.#queuedAudio, true);
    this.#queue.length = 0;
    this.#queuedAudio = 0;
  }

  /** Bytes handed to the socket whose write has not completed. */
  get unsentBytes(): number {
    return this.#unsent;
  }

  /** Cut by the server-wide budget (see {@link SendBudget}). */
  evict(reason: string): void {
    const state = this.#c.state;
    if (state.closed || state.evicted) return;
    state.to('evicted');
    const id = this.#c.id();
    this.#c.logger.warn({ client: id }, `client ${id}: ${reason}; disconnecting it`);
    this.#c.metrics.rejected.inc({ reason: 'server_budget' });
    // Its bytes are given back now: the destroyed socket reports its pending writes only later.
    this.#c.budget.release(this.#unsent);
    this.#unsent = 0;
    this.#ws.terminate();
  }

  /**
   * Hands `data` to the socket, counting it against the server's budget until written.
   * Returns false (nothing sent) when the budget refused it.
   */
  #write(data: string | Buffer, binary: boolean, mayRefuse: boolean, done: (err?: Error) => void): boolean {
    const { budget, options, state } = this.#c;
    const bytes = typeof data === 'string' ? Buffer.byteLength(data) : data.byteLength;
    // A frame may be dropped instead, so only a client far behind (over maxBufferedBytes) is cut
    // for one; a control message is owed (replies, errors, state), so for one the largest holder
    // beyond a few small messages is cut.
    const admitted = budget.admit(this, bytes, mayRefuse ? options.maxBufferedBytes : TEXT_EVICT_MIN_BYTES);
    // Control messages are small and owed: only frames are refused.
    if ((!admitted && mayRefuse) || state.evicted || this.#ws.readyState !== this.#ws.OPEN) return false;
    this.#unsent += bytes;
    if (!binary) this.#unsentText += bytes;
    budget.take(bytes);
    this.#ws.send(data, { binary }, (err) => {
      if (!state.closed && !state.evicted) {
        this.#unsent -= bytes;
        budget.release(bytes);
      }
      if (!binary) {
        this.#unsentText -= bytes;
        if (!err) this.#c.events.answerWritten();
      }
      done(err ?? undefined);
    });
    return true;
  }

  sendText(text: string): void {
    if (this.#ws.readyState !== this.#ws.OPEN) return;
    this.#write(text, false, false, (err) => {
      if (!err) void this.#pump();
    });
    if (this.#unsentText > this.#c.options.readPauseBytes) this.#c.events.answersBacklogged();
    this.#checkHardLimit();
  }

  #checkHardLimit(): void {
    const limit = this.#c.options.maxBufferedBytes * HARD_BUFFER_FACTOR;
    if (this.#ws.bufferedAmount > limit && !this.#closed) {
      this.#c.logger.warn(`client ${this.#c.id()}: ${this.#ws.bufferedAmount} bytes unread (limit ${limit}); disconnecting it`);
      this.#c.metrics.rejected.inc({ reason: 'unread_backlog' });
      this.#ws.terminate();
    }
  }

  #drop(reason: DropReason, n: number, audio = false): void {
    if (n === 0) return;
    if (audio) {
      this.#audioDropped += n;
      this.#c.metrics.audioChunksDropped.inc({ reason }, n);
      return;
    }
    this.#dropped += n;
    this.#c.metrics.framesDropped.inc({ reason }, n);
    this.#c.events.framesDropped(n);
  }

  /** Removes the queue's item at `index`, keeping the audio count. */
  #unqueue(index: number): QueuedItem {
    const [item] = this.#queue.splice(index, 1);
    if (item!.audio) this.#queuedAudio--;
    return item!;
  }

  /** The slow-client policy: drops the oldest queued frame (or, with `audio`, the oldest chunk); `encoder_busy` for a coded frame still being encoded. */
  #dropOldest(audio: boolean): void {
    const i = this.#queue.findIndex((q) => q.audio === audio);
    if (i < 0) return;
    const item = this.#unqueue(i);
    // A coded frame dropped while its track's (shared) encode still runs is that encoder's backlog,
    // not the socket's (JPEG's encoder bounds its own backlog: FrameEncoder).
    this.#drop(item.encoder !== undefined && item.encoding === true ? 'encoder_busy' : 'slow_client', 1, audio);
    if (item.encoder) this.#c.video.lost(item.trackIndex, 'drop');
  }

  async #pump(): Promise<void> {
    if (this.#pumping) return;
    this.#pumping = true;
    const video = this.#c.video;
    try {
      while (this.#queue.length > 0 && !this.#closed) {
        if (this.#inFlight >= MAX_FRAMES_IN_FLIGHT || this.#ws.bufferedAmount > this.#c.options.maxBufferedBytes) return;
        const item = this.#queue[0]!;
        let encoded: Buffer | CodedFrame | null;
        try {
          encoded = await item.data;
        } catch (err) {
          if (this.#queue[0] === item) this.#unqueue(0);
          // A failed encoder moved the track to JPEG (encoderFailed): its last frames are not news.
          if (!item.encoder?.closed) this.#c.logger.error(`frame ${item.seq} of track "${item.track}" could not be encoded: ${(err as Error).message}`);
          this.#drop('encode_error', 1, item.audio);
          if (item.encoder) video.lost(item.trackIndex, 'drop');
          continue;
        }
        // Dropped (overflow, flush or pause) while it was being encoded: look at the new head.
        if (this.#queue[0] !== item || this.#closed) continue;
        this.#unqueue(0);
        if (this.#ws.readyState !== this.#ws.OPEN) return;
        let data: Buffer;
        if (item.encoder) {
          const coded = encoded as CodedFrame | null;
          const verdict = video.gate(item.trackIndex, item.encoder, coded);
          if (verdict === 'stale') continue;
          if (verdict === 'skipped') {
            this.#drop('encode_error', 1);
            continue;
          }
          if (verdict === 'awaiting_key') {
            this.#drop('awaiting_key', 1);
            continue;
          }
          data = codedWireMessage(coded!);
        } else {
          if (item.jpegConfig) video.announce(item.trackIndex, item.jpegConfig);
          data = encoded as Buffer;
        }
        this.#inFlight++;
        const handedAt = performance.now();
        if (item.queuedAt !== undefined) this.#c.metrics.stage.queue.observe((handedAt - Math.max(item.queuedAt, item.readyAt ?? 0)) / 1000);
        const sent = this.#write(data, true, true, (err) => {
          this.#inFlight--;
          if (err) return;
          if (!item.audio) this.#c.metrics.stage.send.observe((performance.now() - handedAt) / 1000);
          if (item.audio) {
            this.#audioSent++;
            this.#c.metrics.audioChunksSent.inc();
          } else {
            this.#sent++;
            video.sent(data.byteLength);
            this.#c.metrics.framesSent.inc();
          }
          void this.#pump();
        });
        if (!sent) {
          this.#inFlight--;
          this.#drop('server_budget', 1, item.audio);
          if (item.encoder) video.lost(item.trackIndex, 'drop');
        }
      }
    } finally {
      this.#pumping = false;
    }
  }
}
