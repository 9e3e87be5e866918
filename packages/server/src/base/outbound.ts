/**
 * The outbound side of a client connection, as a transport-neutral interface: everything the
 * connection (its sink and its inbound channel) asks of the side that carries messages, frames
 * and audio to the client. The WebSocket implementation is {@link WsOutbound}
 * (`outbound-queue.ts`: one ordered queue, the send budget, the pump).
 *
 * A second transport (WebRTC, a later issue) implements this interface and nothing on the
 * inbound side changes: the inbound channel only calls {@link OutboundSender.sendText} for its
 * answers and reads {@link OutboundSender.unsentAnswerBytes} to decide when to pause reads; the
 * sink hands frames, audio, pauses and flushes here. Video selection and key-frame gating stay in
 * `ConnectionVideo` (`video-sender.ts`), which an implementation is given and asks
 * (`route()` for a new frame, `gate()` before a coded frame goes out), so a WebRTC sender reuses
 * the shared encoders and the `select_video` / `request_key_frame` answers as they are.
 *
 * Contract every implementation keeps (the wire and the tests rely on it):
 * - control messages go out in the order `sendText` was called, and a frame's `video_config`
 *   before the frame;
 * - nothing ever makes the host wait: a slow client loses frames (counted by reason in
 *   `reactor_frames_dropped_total`), never memory without bound;
 * - after `close()` nothing is sent and every queued item is counted as `disconnected`.
 */
import type { OutputAudio, OutputFrame } from '@reactor/runtime';

/** The outbound counters of one connection (part of `ConnectionInfo`). */
export interface OutboundStats {
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
  /** Outbound tracks this client has paused (`pause_track`), by `schema.tracks` index. */
  pausedTracks: number[];
  /** Answer bytes (text) handed to the transport whose write has not completed. */
  unsentAnswerBytes: number;
}

/** What the outbound side tells the connection. */
export interface OutboundEvents {
  /** More answer bytes than `readPauseBytes` are unsent: the inbound side stops reading. */
  answersBacklogged(): void;
  /** An answer was written: the inbound side may read again. */
  answerWritten(): void;
  /** `n` video frames were dropped for this client (the host counts them for `stats`). */
  framesDropped(n: number): void;
}

/** The outbound side of one connection (see the module comment). */
export interface OutboundSender {
  /** Sends one control message (JSON text) after every one sent before it; never refused (answers are owed). */
  sendText(text: string): void;
  /** A frame due now (not queued while its track is paused). */
  frame(frame: OutputFrame): void;
  /** An audio chunk due now (not queued while its track is paused). */
  audio(chunk: OutputAudio): void;
  /**
   * `pause_track` (the connection's `TrackPauses` (`track-pauses.ts`) already says so): what is queued of the
   * track is dropped uncounted; nothing of it is queued while paused.
   */
  pauseTrack(trackIndex: number): void;
  /** `resume_track` of a paused track (the connection's `TrackPauses` (`track-pauses.ts`) no longer has it). */
  resumeTrack(trackIndex: number): void;
  /** Drops, uncounted, the queued video frames of a track (its encoding changed). */
  unqueueVideo(trackIndex: number): void;
  /** A flush: drops what is queued of the cut playout (items before `nextSeq`), counted as `flush`. */
  flushBefore(nextSeq: number): void;
  /** A new app host: drops everything queued, counted as `flush`. */
  dropAll(): void;
  /** Answer bytes handed to the transport whose write has not completed. */
  readonly unsentAnswerBytes: number;
  stats(): OutboundStats;
  /** The connection closed: what is queued is dropped (`disconnected`) and the budget given back. */
  close(): void;
}
