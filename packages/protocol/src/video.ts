/** The video codecs, key-frame pacing and quality ladder a server offers (`welcome.video`). */

/** A video encoding a server can stream: `jpeg` (every frame a picture), `h264` or `vp8`. */
export type VideoCodecName = 'jpeg' | 'h264' | 'vp8';

/** The shortest time between two key frames forced on one track (by joins and `request_key_frame`). */
export const KEY_FRAME_MIN_INTERVAL_MS = 500;

/** One rung of the quality ladder a server encodes (one encoder per track and tier, shared by every client on it). */
export interface VideoTierSchema {
  /** `full`, `half`, `low`, ...: unique in the ladder. */
  name: string;
  /** Output size as a fraction of the track's frames (1, 0.5); sides are rounded down to even numbers. */
  scale: number;
  /** Target bits per second of one track at this tier (codecs other than `jpeg`). */
  bitrate: number;
}

/** What the server offers, in `welcome.video`. Absent from older servers: JPEG only. */
export interface VideoOffer {
  /** Codecs a client may select, preferred first (the server's configured codec, then `jpeg`). */
  codecs: VideoCodecName[];
  /** The ladder, best first. */
  tiers: VideoTierSchema[];
  /** Frames between two scheduled key frames (joins and requests force more). */
  keyFrameInterval: number;
}

/** `select_video`'s reply result: what this connection receives from now on. */
export interface VideoSelection {
  codec: VideoCodecName;
  tier: string;
}
