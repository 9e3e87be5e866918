/**
 * The media the client hands out and takes in: a received frame or audio chunk (the WebSocket
 * media path's events) and an upload's inputs. `client-types.ts` re-exports them.
 */
import type { DecodedFrame } from '../base/protocol.js';

/**
 * A received frame: the decoded header, the payload view, and when it arrived. `encoding` says
 * what `payload` holds: a JPEG file, raw RGB24, or, after `ReactorClient.selectVideo`, one
 * coded frame: `FrameEncoding.H264` (an Annex B access unit) or `FrameEncoding.Vp8`, with `key`
 * true on a key frame. Feed coded payloads in order to a decoder configured from the track's
 * last `video_config` event (in a browser, `EncodedVideoChunk({ type: key ? 'key' : 'delta',
 * timestamp, data: payload })`); the payload is a view into the received message, valid after
 * the event.
 */
export interface ClientFrame extends DecodedFrame {
  /** Name of the frame's track (`schema.tracks[track].name`). */
  trackName: string;
  /** `performance.now()` when the message arrived. */
  receivedAt: number;
}

/**
 * A chunk of an outbound audio track (a binary frame with PCM encoding): mono s16 samples at
 * `sampleRate`, on the same `ptsMs` clock as the video frames.
 */
export interface ClientAudio {
  /** Index of the track in `schema.tracks`. */
  track: number;
  trackName: string;
  seq: number;
  ptsMs: number;
  sampleRate: number;
  samples: Int16Array;
  /** `performance.now()` when the message arrived. */
  receivedAt: number;
}

/** Options of `ReactorClient.upload`. */
export interface UploadOptions {
  /** The file's name, for display (default: the `File`'s name, else `upload`). */
  name?: string;
  /** The type the client believes it is (`image/png`); the server checks the bytes. Default: the `Blob`'s type. */
  type?: string;
  /**
   * The command the file is for (its wire name) and, when it has several, its upload parameter:
   * the server then holds the file to that field's `maxBytes` and types before and while the
   * bytes stream (`upload_too_large`, `upload_type_not_allowed`) instead of at the command.
   */
  command?: string;
  field?: string;
  signal?: AbortSignal;
}

/** A `Blob`/`File` as `upload()` reads it (typed structurally: the Node entry needs no DOM types). */
export interface BlobLike {
  readonly size: number;
  readonly type: string;
  readonly name?: string;
  arrayBuffer(): Promise<ArrayBuffer>;
}
