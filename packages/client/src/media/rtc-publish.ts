/**
 * Publishing a camera or microphone over WebRTC: the `MediaStreamTrack` goes on a sendonly
 * transceiver of the client's peer connection, and the server reads its RTP (VP8 / H.264 / Opus)
 * instead of binary frames on the socket. The steps, in the order the server needs them
 * (docs/protocol.md, "publish"): add the transceiver, make the offer the local description (so
 * the transceiver has its `mid`), `publish` with `"transport":"webrtc"` and that `mid`, then
 * send the offer and apply the answer. Stopping reverses it: the sender stops, the transceiver
 * goes inactive (a renegotiation), and `unpublish`.
 *
 * The browser's encoder adapts to the link on its own (congestion control, resolution); the
 * capture rate is capped at the track's `fps` through the sender's `maxFramerate`. Typed
 * structurally, so it runs with the browser's `RTCPeerConnection` and with werift's in Node.
 */
import { ClientErrorCode, ReactorClientError } from '../base/errors.js';
import { isMediaTrack, type MediaStreamTrackLike, type PublishOptions, type PublishSource, type RtcSending } from './publication.js';
import type { TrackSchema } from '../base/protocol.js';

/** The part of an `RTCRtpSender` a publication uses. */
export interface RtcSenderLike {
  replaceTrack(track: null): Promise<void>;
  setParameters?(parameters: unknown): Promise<void>;
  getParameters?(): { encodings?: { maxFramerate?: number; maxBitrate?: number }[] } & Record<string, unknown>;
  getStats?(): Promise<Iterable<unknown> | { forEach(cb: (s: unknown) => void): void }>;
}

/** The part of an `RTCRtpTransceiver` a publication uses. */
export interface RtcTransceiverLike {
  readonly mid: string | null | undefined;
  direction: string;
  readonly sender: RtcSenderLike;
  setDirection?(direction: string): void;
}

/** The part of an `RTCPeerConnection` a publication uses. */
export interface RtcPublishPeer {
  addTransceiver(track: MediaStreamTrackLike, init: { direction: 'sendonly'; sendEncodings?: { maxFramerate?: number }[] }): RtcTransceiverLike;
}

/** What a WebRTC publication needs from the client's WebRTC transport. */
export interface RtcPublishLink {
  /** The peer connection while the client's media runs over WebRTC (`rtc_state` connected), else `undefined`. */
  peer(): RtcPublishPeer | undefined;
  /**
   * One renegotiation, after the ones before it: a new offer as the local description, then
   * `beforeOffer()` (the `publish` request, which needs the `mid`), then `rtc_offer` and the
   * answer applied. Rejects when `beforeOffer` or the server refuses.
   */
  renegotiate(beforeOffer?: () => Promise<void>): Promise<void>;
}

/** A track on its way over WebRTC: `stop()` (the transceiver goes inactive in a renegotiation; idempotent), `counters()` (frames and bytes from the sender's stats). */
export interface RtcPublished extends RtcSending {
  readonly transceiver: RtcTransceiverLike;
}

/**
 * Adds `track` to the peer connection and publishes `schema` over it: `publish(mid)` sends the
 * `publish` request (it rejects with the server's refusal, which undoes the transceiver).
 */
export async function publishOverRtc(
  link: RtcPublishLink,
  peer: RtcPublishPeer,
  track: MediaStreamTrackLike,
  schema: TrackSchema,
  publish: (mid: string) => Promise<void>,
): Promise<RtcPublished> {
  const init =
    schema.kind === 'video' && schema.fps
      ? { direction: 'sendonly' as const, sendEncodings: [{ maxFramerate: schema.fps }] }
      : { direction: 'sendonly' as const };
  const transceiver = peer.addTransceiver(track, init);
  let stopped = false;
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    await transceiver.sender.replaceTrack(null).catch(() => undefined);
    if (transceiver.setDirection) transceiver.setDirection('inactive');
    else transceiver.direction = 'inactive';
    await link.renegotiate().catch(() => undefined);
  };
  try {
    await link.renegotiate(async () => {
      const mid = transceiver.mid;
      if (!mid) throw new Error('the transceiver has no mid after setLocalDescription');
      await publish(mid);
    });
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    transceiver,
    stop,
    counters: async () => {
      let frames = 0;
      let bytes = 0;
      const stats = await transceiver.sender.getStats?.().catch(() => undefined);
      const each = (s: unknown): void => {
        const r = s as { type?: string; framesSent?: number; packetsSent?: number; bytesSent?: number };
        if (r.type !== 'outbound-rtp') return;
        frames += r.framesSent ?? r.packetsSent ?? 0;
        bytes += r.bytesSent ?? 0;
      };
      if (stats && typeof (stats as { forEach?: unknown }).forEach === 'function') (stats as { forEach(cb: (s: unknown) => void): void }).forEach(each);
      else if (stats) for (const s of stats as Iterable<unknown>) each(s);
      return { frames, bytes };
    },
  };
}

/** Where a publication over WebRTC goes: the transport, its peer connection, the browser track. */
export interface RtcPublishPath {
  link: RtcPublishLink;
  peer: RtcPublishPeer;
  track: MediaStreamTrackLike;
}

/**
 * The peer connection a publication of `source` goes over, or `undefined` for the WebSocket,
 * per `options.transport` (see {@link PublishOptions.transport}).
 * @throws {ReactorClientError} `rtc_not_connected` for `transport: 'webrtc'` without a peer connection or with a source that is not a track.
 */
export function publishPeer(
  track: string,
  source: PublishSource,
  transport: PublishOptions['transport'],
  link: RtcPublishLink | undefined,
): RtcPublishPath | undefined {
  if (transport === 'websocket') return undefined;
  const peer = isMediaTrack(source) ? link?.peer() : undefined;
  if (peer && link && isMediaTrack(source)) return { link, peer, track: source };
  if (transport === 'webrtc') {
    throw new ReactorClientError(
      ClientErrorCode.RtcNotConnected,
      isMediaTrack(source)
        ? `cannot publish "${track}" over WebRTC: the client's media is not on WebRTC (connect with { transport: 'webrtc' } or 'auto' and wait for it, or publish with transport 'websocket')`
        : `cannot publish "${track}" over WebRTC: only a MediaStreamTrack goes over WebRTC; an async iterable of frames goes over the WebSocket (transport 'websocket')`,
    );
  }
  return undefined;
}
