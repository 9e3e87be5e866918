/**
 * The WebSocket media path's receiving side: a binary message as the client hands it out, a PCM
 * chunk of an outbound audio track as a {@link ClientAudio}, any other frame as a
 * {@link ClientFrame} named after its track. The other media path is the WebRTC link
 * (`rtc/rtc-link.ts`), whose tracks play in the page's media elements; `ReactorClient.transport`
 * says which one is current.
 */
import type { ClientAudio, ClientFrame } from './media-types.js';
import { FrameEncoding, decodeFrame, type AppSchema, type DecodedFrame } from '../base/protocol.js';

/** The event a decoded frame becomes: `audio` or `frame`. */
export type InboundFrame = { type: 'audio'; value: ClientAudio } | { type: 'frame'; value: ClientFrame };

/** `frame`, decoded from a binary message of app `app`, as the event it becomes. */
function inboundFrame(frame: DecodedFrame, app: AppSchema): InboundFrame {
  const trackName = app.tracks[frame.track]?.name ?? String(frame.track);
  if (frame.encoding === FrameEncoding.PcmS16le) {
    const p = frame.payload;
    // Int16Array needs an even byte offset; the metadata length may make it odd.
    const samples = p.byteOffset % 2 === 0 ? new Int16Array(p.buffer, p.byteOffset, p.byteLength >> 1) : new Int16Array(p.slice(0, p.byteLength & ~1).buffer);
    return {
      type: 'audio',
      value: {
        track: frame.track,
        trackName,
        seq: frame.seq,
        ptsMs: frame.ptsMs,
        sampleRate: app.tracks[frame.track]?.sampleRate ?? 48_000,
        samples,
        receivedAt: performance.now(),
      },
    };
  }
  const f = frame as ClientFrame;
  f.trackName = trackName;
  f.receivedAt = performance.now();
  return { type: 'frame', value: f };
}

/**
 * A binary WebSocket message of app `app`, decoded, as the event it becomes.
 * @throws the frame codec's error for a message that is not a frame
 */
export function wsMediaEvent(data: ArrayBuffer, app: AppSchema): InboundFrame {
  return inboundFrame(decodeFrame(new Uint8Array(data)), app);
}
