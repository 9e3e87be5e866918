/** A clip: a slice of a track's ring muxed into an MP4 file and stored at an unguessable, expiring URL. */
import type { ClipResult } from '@reactor/protocol';
import { ServerErrorCode } from '../base/errors.js';
import { fail } from './recording-errors.js';
import { ClipDiskFullError, type ClipStore } from './clip-store.js';
import { isDiskFull } from './files.js';
import type { RingSlice } from './media-ring.js';
import { muxClip, type AudioStreamConfig } from './mp4.js';

/** Muxes `slice` (with the track's audio, when there is one) and stores the file. @throws ReactorError `disk_full`, `clip_failed` */
export async function makeClip(slice: RingSlice, audio: AudioStreamConfig | undefined, store: ClipStore): Promise<ClipResult> {
  let bytes: Uint8Array;
  try {
    bytes = await muxClip(slice, audio);
  } catch (err) {
    throw fail(ServerErrorCode.ClipFailed, `the clip could not be muxed: ${(err as Error).message}`);
  }
  let saved;
  try {
    saved = await store.save(bytes);
  } catch (err) {
    if (err instanceof ClipDiskFullError || isDiskFull(err)) {
      throw fail(
        ServerErrorCode.DiskFull,
        `the clip could not be stored: ${err instanceof ClipDiskFullError ? err.message : `the disk of ${store.dir} is full`}; free some space`,
      );
    }
    throw fail(ServerErrorCode.ClipFailed, `the clip could not be stored in ${store.dir}: ${(err as Error).message}`);
  }
  const v = slice.video;
  const durationS = (v[v.length - 1]!.ptsUs - v[0]!.ptsUs + slice.frameUs) / 1e6;
  const codecs = [v[0]!.config.codec, ...(audio && slice.audio.length > 0 ? [audio.codec] : [])];
  return {
    url: `/clips/${saved.id}.mp4`,
    expiresAt: new Date(saved.expiresAt).toISOString(),
    durationS: Math.round(durationS * 1000) / 1000,
    frames: v.length,
    bytes: bytes.byteLength,
    codecs,
  };
}
