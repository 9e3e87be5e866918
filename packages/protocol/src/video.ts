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

/** The `level_idc` values of ISO/IEC 14496-10 Table A-1 that browsers parse in an `avc1` string. */
const H264_LEVELS = [10, 11, 12, 13, 20, 21, 22, 30, 31, 32, 40, 41, 42, 50, 51, 52, 60, 61, 62] as const;

/**
 * An `avc1.PPCCLL` codec string whose level a browser's WebCodecs accepts. The SPS of a small
 * low-bitrate High-profile stream says level 1b as `level_idc` 9 (x264 picks it at 80x48, 50
 * kbit/s), which Chromium's parser calls "Unknown or ambiguous codec name": a listed level whose
 * limits contain it is named instead (1b -> 1.1; another unlisted value -> the next listed one). A string that is
 * not `avc1.` plus six hex digits is returned as it is.
 *
 * @example
 * h264CodecString('avc1.640009') // 'avc1.64000b'
 */
export function h264CodecString(codec: string): string {
  const m = /^(avc[13]\.[0-9a-f]{4})([0-9a-f]{2})$/i.exec(codec);
  if (!m) return codec;
  const level = parseInt(m[2]!, 16);
  if ((H264_LEVELS as readonly number[]).includes(level)) return codec;
  // 1b sits between 1.0 and 1.1 (1.0's frame rate, twice its bitrate): name 1.1
  const named = level === 9 ? 11 : (H264_LEVELS.find((l) => l >= level) ?? H264_LEVELS.at(-1)!);
  return m[1]! + named.toString(16).padStart(2, '0');
}
