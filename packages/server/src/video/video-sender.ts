/**
 * The video side of one connection: its `select_video` choice and one {@link TrackVideoSender}
 * per outbound video track (which encoder it takes frames from, the last `video_config` it sent,
 * and key-frame gating).
 *
 * Coded video (`select_video` with `h264` / `vp8`): each outbound video track of the connection
 * takes its frames from the shared {@link TrackEncoder} of its codec and tier. A `video_config`
 * goes out just before the first frame in a new codec, tier or size (it travels through the same
 * queue order); the first coded frame sent is a key frame. When a coded frame of the track is
 * lost (queue overflow, budget, encoder skip), every later delta frame is dropped
 * (`awaiting_key`) until the next key frame, which is asked for at once; a flush and
 * `request_key_frame` do the same.
 *
 * Nothing here queues or writes: the outbound side asks {@link ConnectionVideo.gate} whether a
 * coded frame may go out, and sends the `video_config` texts this module hands it.
 */
import type {
  ErrorMessage,
  ReplyMessage,
  RequestKeyFrameMessage,
  SelectVideoMessage,
  StatsMessage,
  TrackSchema,
  VideoCodecName,
  VideoConfigMessage,
  VideoTierSchema,
} from '@reactor/protocol';
import { ServerErrorCode } from '../base/errors.js';
import type { CodedFrame, KeyFrameReason, TrackEncoder, VideoStreams, VideoSubscriber } from './video-streams.js';

/** A connection's video selection, as `/metrics` and `ConnectionInfo` show it. */
export interface VideoSelectionInfo {
  codec: VideoCodecName;
  tier: string;
  /** Tracks whose delta frames are held back until a key frame. */
  awaitingKey: string[];
  /** `request_key_frame` messages received. */
  keyFrameRequests: number;
}

/** How the video side answers its messages (through the inbound channel, in arrival order) and sends its configs. */
export interface VideoReplies {
  answer(msg: ReplyMessage | ErrorMessage, after?: () => void): void;
  error(code: ServerErrorCode, message: string, id?: string, countAsResult?: boolean): void;
  /** Sends a control message now (a `video_config`, in queue order). */
  sendText(text: string): void;
  /** Drops, uncounted, the queued video frames of a track (they belong to its old encoding). */
  unqueueVideo(trackIndex: number): void;
  /** Whether the connection is closed (nothing more is set up). */
  closed(): boolean;
}

/** One outbound video track of a connection that sent `select_video`. */
export class TrackVideoSender {
  /** The shared encoder it takes frames from; undefined: JPEG. */
  encoder: TrackEncoder | undefined = undefined;
  /** No delta frame is sent until the next key frame (joined, lost a frame, asked for one, flush). */
  awaitingKey = false;
  /** The last `video_config` sent for the track (JSON), to send one only when it changes. */
  lastConfig: string | undefined = undefined;

  /** A coded frame of the track will not reach this client: nothing but a key frame may follow, and one is asked for. */
  lost(reason: Extract<KeyFrameReason, 'drop' | 'request'>): void {
    if (!this.encoder) return;
    // One request per loss episode: more drops while waiting would ask again for the same key frame.
    if (this.awaitingKey && reason === 'drop') return;
    this.awaitingKey = true;
    this.encoder.requestKeyFrame(reason);
  }
}

/** What the outbound queue does with a coded frame whose encoding finished. */
export type GateVerdict =
  /** Send it (its `video_config` went out first when it changed). */
  | 'send'
  /** The track moved to another encoder (or to JPEG) since: the frame belongs to the old stream. */
  | 'stale'
  /** The encoder skipped it (`null`): dropped as `encode_error`, a key frame is asked for. */
  | 'skipped'
  /** A delta frame while the track waits for a key frame: dropped as `awaiting_key`. */
  | 'awaiting_key';

/** Where a frame of a track is encoded for this connection. */
export type FrameRoute = { kind: 'coded'; encoder: TrackEncoder } | { kind: 'jpeg'; config: VideoConfigMessage } | { kind: 'plain' };

/** A frame of a track without a selection: JPEG (or RGB) as before, no `video_config` (one object for every such frame). */
const PLAIN: FrameRoute = { kind: 'plain' };

/** One connection's video: the selection and its per-track senders. */
export class ConnectionVideo implements VideoSubscriber {
  readonly #streams: VideoStreams;
  readonly #tracks: readonly TrackSchema[];
  readonly #out: VideoReplies;
  /** `select_video`'s choice; undefined: JPEG as before (no `video_config`). */
  #selection: { codec: VideoCodecName; tier: VideoTierSchema } | undefined;
  /** Outbound video tracks (`schema.tracks` index) once a selection was made. */
  readonly #video = new Map<number, TrackVideoSender>();
  #keyFrameRequests = 0;
  /** Video bytes written since the last stats message, and when that was. */
  #videoBytes = 0;
  #videoBytesSince = performance.now();

  constructor(streams: VideoStreams, tracks: readonly TrackSchema[], out: VideoReplies) {
    this.#streams = streams;
    this.#tracks = tracks;
    this.#out = out;
  }

  /** Its video selection (undefined until it sends `select_video`). */
  get selection(): VideoSelectionInfo | undefined {
    if (!this.#selection) return undefined;
    const tracks = this.#tracks;
    // A track moved to JPEG by an encoder failure reports jpeg.
    const first = [...this.#video.values()][0];
    return {
      codec: first && !first.encoder ? 'jpeg' : this.#selection.codec,
      tier: this.#selection.tier.name,
      awaitingKey: [...this.#video].filter(([, v]) => v.awaitingKey).map(([i]) => tracks[i]?.name ?? String(i)),
      keyFrameRequests: this.#keyFrameRequests,
    };
  }

  /** The `video` field of this connection's `stats` (undefined until it selected): its bitrate since the last one. */
  statsField(): StatsMessage['video'] {
    const video = this.selection;
    if (!video) return undefined;
    const now = performance.now();
    const bitrate = Math.round((this.#videoBytes * 8 * 1000) / Math.max(1, now - this.#videoBytesSince));
    this.#videoBytes = 0;
    this.#videoBytesSince = now;
    return { codec: video.codec, tier: video.tier, bitrate, keyFrameRequests: video.keyFrameRequests };
  }

  /** A video frame of `bytes` was written. */
  sent(bytes: number): void {
    this.#videoBytes += bytes;
  }

  /** How a new frame of the track is encoded for this connection. */
  route(frame: { track: string; trackIndex: number; width: number; height: number }): FrameRoute {
    const v = this.#video.get(frame.trackIndex);
    if (v?.encoder) return { kind: 'coded', encoder: v.encoder };
    if (v && this.#selection) {
      const config: VideoConfigMessage = {
        type: 'video_config',
        track: frame.track,
        codec: 'jpeg',
        width: frame.width,
        height: frame.height,
        tier: this.#selection.tier.name,
      };
      return { kind: 'jpeg', config };
    }
    return PLAIN;
  }

  /** `select_video`: checked against the offer, answered in order; the switch happens as the reply goes out. */
  select(msg: SelectVideoMessage): void {
    const video = this.#streams;
    const offer = video.offer();
    const shown = (x: unknown): string => JSON.stringify(x).slice(0, 40);
    if (!offer) {
      // JPEG only: every frame is a picture of its own, at full size.
      if (msg.codec === 'jpeg' && (msg.tier === undefined || msg.tier === 'full')) {
        this.#out.answer({ type: 'reply', id: msg.id, result: { codec: 'jpeg', tier: 'full' } });
      } else {
        const why = video.unavailable ? ` (${video.options.codec} is configured but its encoder did not load: ${video.unavailable})` : '';
        this.#out.error(
          ServerErrorCode.UnsupportedCodec,
          `this server streams jpeg (tier full) only${why}; asked for ${shown(msg.codec)}${msg.tier === undefined ? '' : ` tier ${shown(msg.tier)}`}`,
          msg.id,
        );
      }
      return;
    }
    if (!offer.codecs.includes(msg.codec)) {
      this.#out.error(ServerErrorCode.UnsupportedCodec, `this server streams ${offer.codecs.join(' or ')}; asked for ${shown(msg.codec)}`, msg.id);
      return;
    }
    const tier = msg.tier === undefined ? offer.tiers[0] : video.options.tiers.find((t) => t.name === msg.tier);
    if (!tier) {
      this.#out.error(ServerErrorCode.UnknownTier, `no tier ${shown(msg.tier)}; this server's tiers: ${offer.tiers.map((t) => t.name).join(', ')}`, msg.id);
      return;
    }
    const codec = msg.codec;
    this.#out.answer({ type: 'reply', id: msg.id, result: { codec, tier: tier.name } }, () => this.#apply(codec, tier));
  }

  /**
   * Moves every outbound video track to (codec, tier) with no `select_video` and no reply: the
   * WebRTC side's own selection (its codec from the SDP, its tier from the viewer's feedback).
   */
  use(codec: VideoCodecName, tier: VideoTierSchema): void {
    this.#apply(codec, tier);
  }

  /** The tier in use (undefined before a selection). */
  get tier(): VideoTierSchema | undefined {
    return this.#selection?.tier;
  }

  /** Moves every outbound video track of this connection to (codec, tier). */
  #apply(codec: VideoCodecName, tier: VideoTierSchema): void {
    if (this.#out.closed()) return;
    this.#selection = { codec, tier };
    this.#tracks.forEach((t, index) => {
      if (t.direction !== 'out' || t.kind !== 'video') return;
      let v = this.#video.get(index);
      if (!v) {
        v = new TrackVideoSender();
        this.#video.set(index, v);
      }
      const current = v.encoder;
      if (codec === 'jpeg' ? current === undefined : current?.codec === codec && current.tier.name === tier.name && !current.closed) return;
      current?.remove(this);
      // Frames queued in the old encoding are not sent: the new stream starts clean.
      this.#out.unqueueVideo(index);
      if (codec === 'jpeg') {
        v.encoder = undefined;
        v.awaitingKey = false;
        return;
      }
      v.encoder = this.#streams.subscribe(index, codec, tier, this);
      v.awaitingKey = true;
      v.encoder.requestKeyFrame('join');
    });
  }

  /** `request_key_frame`: the track's next delta frames are held back and a key frame is asked for (nothing for JPEG). */
  requestKeyFrame(msg: RequestKeyFrameMessage): void {
    const tracks = this.#tracks;
    const index = tracks.findIndex((t) => t.name === msg.track);
    const track = tracks[index];
    const shown = JSON.stringify(msg.track.slice(0, 64));
    const video = tracks.filter((t) => t.direction === 'out' && t.kind === 'video').map((t) => t.name);
    if (track === undefined) {
      this.#out.error(ServerErrorCode.UnknownTrack, `unknown track ${shown}; this app's outbound video tracks: ${video.join(', ') || '(none)'}`);
      return;
    }
    if (track.direction !== 'out' || track.kind !== 'video') {
      this.#out.error(
        ServerErrorCode.WrongTrackDirection,
        `track ${shown} is not an outbound video track; key frames exist on: ${video.join(', ') || '(none)'}`,
      );
      return;
    }
    this.#keyFrameRequests++;
    this.lost(index, 'request');
  }

  /** The track's encoder failed (and is closed): the track continues in JPEG for this client. */
  encoderFailed(encoder: TrackEncoder, err: Error): void {
    const v = this.#video.get(encoder.trackIndex);
    if (this.#out.closed() || !v || v.encoder !== encoder) return;
    v.encoder = undefined;
    v.awaitingKey = false;
    this.#out.error(
      ServerErrorCode.EncoderFailed,
      `the ${encoder.codec} encoder of track "${encoder.track}" (tier ${encoder.tier.name}) failed: ${err.message}; the track continues in JPEG (a video_config follows)`,
      undefined,
      false,
    );
  }

  /** A coded frame of the track will not reach this client: nothing but a key frame may follow, and one is asked for. */
  lost(trackIndex: number, reason: 'drop' | 'request'): void {
    this.#video.get(trackIndex)?.lost(reason);
  }

  /** The track was paused: frames skipped while paused, so the stream resumes at a key frame. */
  paused(trackIndex: number): void {
    const v = this.#video.get(trackIndex);
    if (v?.encoder) v.awaitingKey = true;
  }

  /** The track was resumed: a key frame is asked for. */
  resumed(trackIndex: number): void {
    this.#video.get(trackIndex)?.encoder?.requestKeyFrame('join');
  }

  /** A flush: frames after the cut may refer to frames dropped here, so every coded track waits for the key frame the flush forces. */
  flushed(nextSeq: number): void {
    for (const v of this.#video.values()) if (v.encoder) v.awaitingKey = true;
    this.#streams.flush(nextSeq);
  }

  /** A new app host: each coded track sends a new `video_config` and waits for a key frame, asked for at once. */
  newGeneration(): void {
    for (const v of this.#video.values()) {
      v.lastConfig = undefined;
      if (v.encoder) {
        v.awaitingKey = true;
        v.encoder.requestKeyFrame('join');
      }
    }
  }

  /**
   * Key-frame gating of a coded frame of `encoder` whose encoding finished (`null`: the encoder
   * skipped it). On `send`, the track stops waiting and its `video_config` went out when it changed.
   */
  gate(trackIndex: number, encoder: TrackEncoder, coded: CodedFrame | null): GateVerdict {
    const v = this.#video.get(trackIndex);
    // The track moved to another encoder (or to JPEG) since: the frame belongs to the old stream.
    if (v?.encoder !== encoder) return 'stale';
    if (coded === null) {
      this.lost(trackIndex, 'drop');
      return 'skipped';
    }
    if (v.awaitingKey && !coded.key) return 'awaiting_key';
    v.awaitingKey = false;
    this.announce(trackIndex, coded.config);
    return 'send';
  }

  /** Sends the track's `video_config` when it differs from the last one this client got. */
  announce(trackIndex: number, config: VideoConfigMessage): void {
    const v = this.#video.get(trackIndex);
    if (!v) return;
    const text = JSON.stringify(config);
    if (text === v.lastConfig) return;
    v.lastConfig = text;
    this.#out.sendText(text);
  }

  /** The connection closed: its encoders forget it. */
  close(): void {
    for (const v of this.#video.values()) v.encoder?.remove(this);
    this.#video.clear();
  }
}
