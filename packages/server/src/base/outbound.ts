/**
 * A client connection's outbound side, as two small interfaces (issue 36 point 3):
 * - the {@link ControlSender}: text (answers, events, `video_config`), in order, with the bytes it
 *   has not written yet (the inbound side pauses reads on them);
 * - a {@link MediaPath}: frames and audio. There are two, siblings of this one interface: the
 *   WebSocket's (`ws/outbound-queue.ts`, {@link WsOutbound}) and the WebRTC session's
 *   (`webrtc/rtc-session.ts`). The connection hands each frame to the one that is current, and
 *   switches between them when the peer connects or goes; pauses, flushes and a new generation
 *   reach both, so a switch keeps them.
 *
 * The WebSocket carries the control text and its own media on one socket, in one ordered queue
 * (a frame's `video_config` goes before the frame): {@link WsOutbound} is both the control
 * sender and the WebSocket media path. Video selection and key-frame gating stay in
 * `ConnectionVideo` (`video-sender.ts`), which the WebSocket path asks (`route()` for a new
 * frame, `gate()` before a coded frame goes out).
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

/** The connection's text, in order (see the module comment). */
export interface ControlSender {
  /** Sends one control message (JSON text) after every one sent before it; never refused (answers are owed). */
  sendText(text: string): void;
  /** Answer bytes handed to the transport whose write has not completed. */
  readonly unsentAnswerBytes: number;
}

/** What a media path sent and dropped (the connection adds both paths' up). */
export interface MediaCounts {
  framesSent: number;
  framesDropped: number;
  audioSent: number;
}

/** One way frames and audio reach the client (see the module comment). */
export interface MediaPath {
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
  /** A flush: drops what is queued of the cut playout (items before `nextSeq`), counted as `flush`. */
  flushBefore(nextSeq: number): void;
  /** A new app host: drops everything queued, counted as `flush`. */
  dropAll(): void;
  counts(): MediaCounts;
  /** The connection closed: what is queued is dropped (`disconnected`). */
  close(): void;
}
