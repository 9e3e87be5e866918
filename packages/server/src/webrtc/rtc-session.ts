/**
 * A connection's WebRTC session: its signalling (`rtc_offer`, `rtc_candidate`, `rtc_close`,
 * handled in arrival order), its peer connection ({@link RtcPeer}), the media it sends
 * ({@link RtcMedia}) and the inbound tracks it receives ({@link RtcInbound}). It is a
 * {@link MediaPath}, the sibling of the WebSocket's: the connection hands it frames and audio
 * while its peer is `connected` (it says so through `live(true)`), and the WebSocket path the
 * rest of the time (`live(false)`: failed, closed). Its signalling answers go on the connection's
 * control channel. A failed or closed peer is dropped, and a later `rtc_offer` starts a new one.
 */
import type { Logger } from '@reactor/log';
import type { RtcClientMessage, RtcState, ServerMessage, TrackSchema, VideoCodecName } from '@reactor/protocol';
import type { ClientHandle, OutputAudio, OutputFrame } from '@reactor/runtime';
import { ServerErrorCode } from '../base/errors.js';
import type { ServerMetrics } from '../base/metrics.js';
import type { ControlSender, MediaCounts, MediaPath } from '../base/outbound.js';
import type { OpusStreams } from './rtc-audio.js';
import { RtcInbound, type RtcInboundContext } from './rtc-inbound.js';
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

export interface RtcSessionInit {
  /** The connection's control channel: signalling goes there, in order with the other answers. */
  control: ControlSender;
  /** The peer connected (`true`: media moves here) or went (`false`: media is back on the WebSocket). */
  live(on: boolean): void;
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
  /** The client's handle, for its inbound tracks' frames (undefined before it is registered with the host). */
  handle(): ClientHandle | undefined;
  /** An inbound track's error answer (not a command's result). */
  inboundError: RtcInboundContext['sendError'];
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

export class RtcSession implements MediaPath {
  readonly #o: RtcSessionInit;
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

  /** Its inbound tracks (`publish` with `"transport":"webrtc"`); absent when the app has none. */
  readonly #inbound: RtcInbound | undefined;

  constructor(init: RtcSessionInit) {
    this.#o = init;
    this.#inbound = init.tracks.some((t) => t.direction === 'in')
      ? new RtcInbound({ tracks: init.tracks, metrics: init.metrics, logger: init.log, handle: init.handle, sendError: init.inboundError })
      : undefined;
  }

  /** A `publish` with `"transport":"webrtc"` was accepted: the transceiver `mid` carries `track`. */
  claim(track: string, mid: string): void {
    this.#inbound?.claim(track, mid);
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
        send: (m: ServerMessage) => this.#o.control.sendText(JSON.stringify(m)),
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
        inboundTrackFor: (mid) => this.#inbound?.trackFor(mid),
        inboundAttached: (list) => {
          if (peer === this.#peer) this.#inbound?.attach(list);
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
      // From now on no media on the WebSocket (the connection drops what is queued there of it).
      this.#live = true;
      this.#o.live(true);
      this.#o.log.info({ client: this.#o.id() }, `client ${this.#o.id()}: media over WebRTC`);
      return;
    }
    if (state === 'failed' || state === 'closed') {
      m.outcomes.inc({ outcome: state });
      if (this.#counted) m.peers.dec();
      this.#counted = false;
      if (this.#live) this.#o.live(false);
      this.#live = false;
      this.#media?.close();
      this.#media = undefined;
      this.#inbound?.close();
      this.#peer = undefined;
      if (!this.#closed) this.#o.log.info({ client: this.#o.id() }, `client ${this.#o.id()}: WebRTC ${state}; media back on the WebSocket`);
    }
  }

  /** The WebRTC state (undefined: never offered, or gone). */
  info(): RtcInfo | undefined {
    const state = this.#peer?.state;
    if (!state) return undefined;
    const media = this.#media?.stats();
    const inbound = this.#inbound?.info();
    return { state, codec: this.#codec, ...(media ? { media } : {}), ...(inbound && Object.keys(inbound).length > 0 ? { inbound } : {}) };
  }

  // ---- MediaPath (while live: the connection hands it media only then) ----------------------

  /**
   * The RTP timestamp the video frame `seq` carried on this connection's WebRTC link, for its
   * `applied` message (undefined: no peer connection, or a frame from before it).
   */
  rtpTimestamp(seq: number): number | undefined {
    const pts = this.#peer ? this.#ptsBySeq.get(seq) : undefined;
    return pts === undefined ? undefined : rtpVideoTimestamp(pts);
  }

  /**
   * Every video frame of the connection while a peer exists, connecting too, whichever path
   * carries it: its pts by seq. An `applied` naming a frame sent on the WebSocket while the peer
   * connects then still pairs with the RTP frames after the switch. That frame may have been
   * dropped from the WebSocket queue at the switch, or the page may have drawn nothing of it.
   */
  notePts(frame: OutputFrame): void {
    if (!this.#peer) return;
    this.#ptsBySeq.set(frame.seq, frame.ptsMs);
    if (this.#ptsBySeq.size > PTS_KEPT) this.#ptsBySeq.delete(this.#ptsBySeq.keys().next().value!);
  }

  frame(frame: OutputFrame): void {
    this.#media?.frame(frame);
  }

  audio(chunk: OutputAudio): void {
    this.#media?.audio(chunk);
  }

  pauseTrack(trackIndex: number): void {
    this.#media?.pauseTrack(trackIndex);
  }

  resumeTrack(trackIndex: number): void {
    this.#media?.resumeTrack(trackIndex);
  }

  flushBefore(nextSeq: number): void {
    this.#media?.flushed(nextSeq);
  }

  dropAll(): void {
    this.#media?.newGeneration();
  }

  counts(): MediaCounts {
    const m = this.#media?.stats();
    return { framesSent: m?.framesSent ?? 0, framesDropped: m?.framesDropped ?? 0, audioSent: m?.audioSent ?? 0 };
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    // The client left: its peer connection and UDP sockets go with it.
    this.#peer?.close('the client left', true);
    if (this.#peer) this.#stateChanged(this.#peer, 'closed');
    this.#media?.close();
    this.#inbound?.dispose();
  }
}
