/**
 * Presentation times of a `<video>` element for a {@link LatencyTracker}: each frame the element
 * presents, as `requestVideoFrameCallback` reports it, counts as presented at the compositor's
 * `expectedDisplayTime`. For a page whose stream plays in a `<video>` (a WebRTC track, say)
 * rather than being drawn on a canvas, connected with `stats: { presentation: 'manual' }`.
 * DOM only (`@reactor/client/browser`).
 */
import type { LatencyTracker } from './latency-tracker.js';

/** Options of {@link trackVideoElement}. */
export interface VideoElementPresentationOptions {
  /** The outbound track the element shows (its wire name). */
  track: string;
  /**
   * The frame `seq` of a presented picture, from the callback's metadata (e.g. its
   * `rtpTimestamp` or `mediaTime` mapped back to the server's frame); undefined: not known, the
   * picture still counts for freezes and the first frame, but takes no command sample.
   */
  seqOf(metadata: VideoFrameCallbackMetadata): number | undefined;
}

/**
 * Tells `tracker` of every frame `video` presents; returns a function that stops.
 * @throws {TypeError} when the browser has no `requestVideoFrameCallback`.
 * @example
 * const stop = trackVideoElement(videoEl, client.latency!, { track: 'main_video', seqOf: (m) => seqByRtp.get(m.rtpTimestamp!) });
 */
export function trackVideoElement(video: HTMLVideoElement, tracker: LatencyTracker, options: VideoElementPresentationOptions): () => void {
  if (typeof video.requestVideoFrameCallback !== 'function') {
    throw new TypeError('this browser has no HTMLVideoElement.requestVideoFrameCallback; draw the frames yourself and call tracker.presented()');
  }
  let stopped = false;
  let handle = 0;
  /** A picture whose seq is unknown still moves the freeze clock: it is given the last known seq. */
  let lastSeq = -1;
  const onFrame = (_now: DOMHighResTimeStamp, meta: VideoFrameCallbackMetadata): void => {
    if (stopped) return;
    const seq = options.seqOf(meta);
    if (seq !== undefined) lastSeq = Math.max(lastSeq, seq);
    tracker.presented(options.track, seq ?? lastSeq, meta.expectedDisplayTime);
    handle = video.requestVideoFrameCallback(onFrame);
  };
  handle = video.requestVideoFrameCallback(onFrame);
  return () => {
    stopped = true;
    video.cancelVideoFrameCallback(handle);
  };
}
