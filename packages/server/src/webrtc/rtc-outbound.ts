/**
 * The outbound side of a connection that may move its media to WebRTC: an
 * {@link OutboundSender} around the connection's {@link WsOutbound}. Control messages always go
 * on the WebSocket; frames and audio go over WebRTC exactly while the peer connection is
 * `connected` (none on the WebSocket then), and on the WebSocket before and after (failed,
 * closed). Pauses apply to both, so a move between transports keeps them.
 *
 * The signalling messages (`rtc_offer`, `rtc_candidate`, `rtc_close`) reach {@link signal}; a
 * failed or closed peer is dropped, and a later `rtc_offer` starts a new one.
 */
import type { Logger } from '@reactor/log';
import type { RtcClientMessage, RtcState, ServerMessage, TrackSchema, VideoCodecName } from '@reactor/protocol';
import type { OutputAudio, OutputFrame } from '@reactor/runtime';
import { ServerErrorCode } from '../base/errors.js';
import type { ServerMetrics } from '../base/metrics.js';
import type { OutboundSender, OutboundStats } from '../base/outbound.js';
import type { OpusStreams } from './rtc-audio.js';
import type { RtcInbound } from './rtc-inbound.js';
import type { RtcIntakeInfo } from './rtc-intake-report.js';
import { RtcMedia, rtpVideoTimestamp, type RtcMediaStats } from './rtc-media.js';
import type { RtcMetrics } from './rtc-metrics.js';
import type { ResolvedWebRtcOptions } from './rtc-options.js';
import { loadWerift, RtcPeer } from './rtc-peer.js';
import type { VideoStreams } from '../video/video-streams.js';
import type { TrackPauses } from '../base/track-pauses.js';

/** Video frames whose pts a connection with a peer keeps, for the RTP timestamp of its `applied` messages (~4 s at 30 fps). */
const PTS_KEPT = 128;

/** What the server gives every connection for WebRTC (one per server). */
export interface RtcServerContext {
  options: ResolvedWebRtcOptions;
  metrics: RtcMetrics;
  /** Opus encoders (undefined: WebRTC viewers get no audio; logged once). */
  opus: Promise<OpusStreams | undefined>;
}

export interface RtcOutboundInit {
  ws: OutboundSender;
  /** The connection's paused tracks (read by the WebRTC media as by the WebSocket queue). */
  paused: TrackPauses;
  rtc: RtcServerContext | undefined;
  streams: VideoStreams;
  tracks: readonly TrackSchema[];
  metrics: ServerMetrics;
  log: Logger;
  /** An error answer on the WebSocket (in order with the other answers). */
  error(code: ServerErrorCode, message: string): void;
  id(): string;
  /** The connection's inbound WebRTC tracks (`publish` with `"transport":"webrtc"`); absent when the app has none. */
  inbound?: RtcInbound;
}

/** A connection's WebRTC state, for `ConnectionInfo`. */
export interface RtcInfo {
  state: RtcState;
  /** The video codec its peer connection carries. */
  codec: Exclude<VideoCodecName, 'jpeg'>;
  media?: RtcMediaStats;
  /** Inbound tracks received over WebRTC (`publish` with `"transport":"webrtc"`): counters by track. */
  inbound?: Record<string, RtcIntakeInfo>;
}

export class RtcOutbound implements OutboundSender {
  readonly #o: RtcOutboundInit;
  readonly #ws: OutboundSender;
  #peer: RtcPeer | undefined;
  #media: RtcMedia | undefined;
  /** Media goes over WebRTC (the peer is connected). */
  #live = false;
  /** The current peer is counted in `reactor_webrtc_peers`. */
  #counted = false;
  #closed = false;
  /** An `rtc_offer` came on this connection (later candidates without a peer are stale, not early). */
  #offered = false;
  /** Signalling is handled one message at a time, in arrival order (an offer's werift work is async). */
  #signals: Promise<void> = Promise.resolve();
  /** While a peer exists: the pts of the last {@link PTS_KEPT} video frames, by seq (an `applied` names a seq; RTP carries the pts). */
  readonly #ptsBySeq = new Map<number, number>();

  constructor(init: RtcOutboundInit) {
    this.#o = init;
    this.#ws = init.ws;
  }

  /** The codec WebRTC viewers get: the server's coded codec, VP8 when it streams JPEG only. */
  get #codec(): Exclude<VideoCodecName, 'jpeg'> {
    const c = this.#o.streams.options.codec;
    return c === 'jpeg' ? 'vp8' : c;
  }

  /** `rtc_offer` / `rtc_candidate` / `rtc_close`, handled in arrival order. */
  signal(msg: RtcClientMessage): void {
    this.#signals = this.#signals.then(() => this.#signal(msg)).catch((err: unknown) => this.#o.log.warn(`WebRTC signalling: ${(err as Error).message}`));
  }

  async #signal(msg: RtcClientMessage): Promise<void> {
    if (this.#closed) return;
    const rtc = this.#o.rtc;
    if (!rtc || !rtc.options.enabled) {
      if (msg.type === 'rtc_offer')
        this.#o.error(ServerErrorCode.RtcDisabled, 'this server does not take WebRTC (server.webrtc.enabled is false); media stays on the WebSocket');
      return;
    }
    if (msg.type === 'rtc_close') {
      this.#peer?.close('rtc_close');
      return;
    }
    if (msg.type === 'rtc_candidate') {
      if (!this.#peer) {
        // Candidates still trickling in after a peer connection failed or closed are stale, not a mistake: dropped.
        if (!this.#offered) this.#o.error(ServerErrorCode.RtcBadCandidate, 'rtc_candidate before rtc_offer; send rtc_offer first');
        return;
      }
      // Not awaited: werift may take long on a candidate (an mDNS name to resolve), and rtc_close must not wait behind it.
      void this.#peer.candidate(msg);
      return;
    }
    this.#offered = true;
    await this.#offer(rtc, msg.sdp);
  }

  async #offer(rtc: RtcServerContext, sdp: string): Promise<void> {
    let werift;
    let opus;
    try {
      [werift, opus] = await Promise.all([loadWerift(), rtc.opus]);
    } catch (err) {
      this.#o.error(
        ServerErrorCode.RtcDisabled,
        `the WebRTC library (werift) did not load here: ${(err as Error).message?.slice(0, 200)}; media stays on the WebSocket`,
      );
      return;
    }
    if (this.#closed) return;
    if (!this.#peer?.open) {
      this.#media?.close();
      this.#media = undefined;
      const { RtpHeader, RtpPacket } = werift;
      const peer: RtcPeer = new RtcPeer(werift, {
        options: rtc.options,
        tracks: this.#o.tracks,
        codec: this.#codec,
        log: this.#o.log,
        send: (m: ServerMessage) => this.#ws.sendText(JSON.stringify(m)),
        error: (code, message) => this.#o.error(code, message),
        negotiated: (senders) => {
          if (peer !== this.#peer) return;
          this.#media ??= new RtcMedia({
            streams: this.#o.streams,
            paused: this.#o.paused,
            tracks: this.#o.tracks,
            codec: this.#codec,
            tiers: this.#o.streams.options.tiers,
            opus,
            rtp: { RtpHeader, RtpPacket },
            metrics: this.#o.metrics,
            rtcMetrics: rtc.metrics,
            log: this.#o.log,
            error: (code, message) => this.#o.error(code, message),
            heard: () => peer.heard(),
          });
          const bound = new Set(this.#media.boundTracks);
          for (const s of senders) if (!bound.has(s.trackIndex)) this.#media.bind(s.trackIndex, s.kind, s.sender, s.playoutDelayId);
          // Tracks paused before the media existed wait for a key frame when they resume.
          for (const i of this.#o.paused) this.#media.pauseTrack(i);
        },
        state: (state) => this.#stateChanged(peer, state),
        inboundTrackFor: (mid) => this.#o.inbound?.trackFor(mid),
        inboundAttached: (list) => {
          if (peer === this.#peer) this.#o.inbound?.attach(list);
        },
      });
      this.#peer = peer;
      this.#counted = false;
    }
    await this.#peer.offer(sdp);
    // Counted once it has a peer connection (an offer refused before one was made leaves none).
    if (this.#peer?.open && !this.#counted) {
      this.#counted = true;
      rtc.metrics.peers.inc();
    }
  }

  #stateChanged(peer: RtcPeer, state: RtcState): void {
    if (peer !== this.#peer) return;
    const m = this.#o.rtc!.metrics;
    if (state === 'connected') {
      m.outcomes.inc({ outcome: 'connected' });
      // From now on no media on the WebSocket: what is queued there of it is dropped.
      this.#live = true;
      this.#ws.dropAll();
      this.#o.log.info({ client: this.#o.id() }, `client ${this.#o.id()}: media over WebRTC`);
      return;
    }
    if (state === 'failed' || state === 'closed') {
      m.outcomes.inc({ outcome: state });
      if (this.#counted) m.peers.dec();
      this.#counted = false;
      this.#live = false;
      this.#media?.close();
      this.#media = undefined;
      this.#o.inbound?.close();
      this.#peer = undefined;
      if (!this.#closed) this.#o.log.info({ client: this.#o.id() }, `client ${this.#o.id()}: WebRTC ${state}; media back on the WebSocket`);
    }
  }

  /** The WebRTC state (undefined: never offered, or gone). */
  info(): RtcInfo | undefined {
    const state = this.#peer?.state;
    if (!state) return undefined;
    const media = this.#media?.stats();
    const inbound = this.#o.inbound?.info();
    return { state, codec: this.#codec, ...(media ? { media } : {}), ...(inbound && Object.keys(inbound).length > 0 ? { inbound } : {}) };
  }

  // ---- OutboundSender ----------------------------------------------------------------------

  sendText(text: string): void {
    this.#ws.sendText(text);
  }

  /**
   * The RTP timestamp the video frame `seq` carries on this connection's WebRTC link, for its
   * `applied` message (undefined: no peer connection, or a frame it did not see).
   */
  rtpTimestamp(seq: number): number | undefined {
    const pts = this.#peer ? this.#ptsBySeq.get(seq) : undefined;
    return pts === undefined ? undefined : rtpVideoTimestamp(pts);
  }

  frame(frame: OutputFrame): void {
    if (this.#peer) {
      this.#ptsBySeq.set(frame.seq, frame.ptsMs);
      if (this.#ptsBySeq.size > PTS_KEPT) this.#ptsBySeq.delete(this.#ptsBySeq.keys().next().value!);
    }
    if (this.#live && this.#media) this.#media.frame(frame);
    else this.#ws.frame(frame);
  }

  audio(chunk: OutputAudio): void {
    if (this.#live && this.#media) this.#media.audio(chunk);
    else this.#ws.audio(chunk);
  }

  pauseTrack(trackIndex: number): void {
    this.#media?.pauseTrack(trackIndex);
    this.#ws.pauseTrack(trackIndex);
  }

  resumeTrack(trackIndex: number): void {
    this.#media?.resumeTrack(trackIndex);
    this.#ws.resumeTrack(trackIndex);
  }

  unqueueVideo(trackIndex: number): void {
    this.#ws.unqueueVideo(trackIndex);
  }

  flushBefore(nextSeq: number): void {
    this.#media?.flushed(nextSeq);
    this.#ws.flushBefore(nextSeq);
  }

  dropAll(): void {
    this.#media?.newGeneration();
    this.#ws.dropAll();
  }

  get unsentAnswerBytes(): number {
    return this.#ws.unsentAnswerBytes;
  }

  stats(): OutboundStats {
    const s = this.#ws.stats();
    const m = this.#media?.stats();
    if (!m) return s;
    return { ...s, framesSent: s.framesSent + m.framesSent, framesDropped: s.framesDropped + m.framesDropped, audioSent: s.audioSent + m.audioSent };
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    // The client left: its peer connection and UDP sockets go with it.
    this.#peer?.close('the client left', true);
    if (this.#peer) this.#stateChanged(this.#peer, 'closed');
    this.#media?.close();
    this.#o.inbound?.dispose();
    this.#ws.close();
  }
}
