/**
 * The media of one WebRTC viewer: its outbound video tracks as RTP from the shared encoders, its
 * audio tracks as Opus, and what its browser's RTCP says.
 *
 * Video reuses the WebSocket path's machinery as it is: a {@link ConnectionVideo} of its own
 * (subscribed to the same {@link VideoStreams} encoders, so a frame is encoded once per track and
 * tier whatever the transport of each viewer) gives the encoder of each frame and gates delta
 * frames until a key frame after a join, a loss or a PLI. An H.264 frame is packetized once for
 * every viewer of its encoder (`rtp-packetize.ts`, shared payload buffers); each viewer writes
 * them with RTP headers of its own (its sequence numbers, its extensions) to werift's sender,
 * which keeps the last 128 packets and answers NACKs from them.
 *
 * Feedback: a PLI asks the shared encoder for a key frame (rate-limited there as
 * `request_key_frame` is); NACKs and PLIs over {@link FEEDBACK_PER_SECOND} a second are ignored
 * and counted; REMB and receiver-report loss drive an {@link RtcTierController}, which moves this
 * viewer alone between the server's tiers.
 */
import type { Logger } from '@reactor/log';
import type { TrackSchema, VideoCodecName, VideoTierSchema } from '@reactor/protocol';
import type { OutputAudio, OutputFrame } from '@reactor/runtime';
import type { RtcpPacket, RTCRtpSender, RtpHeader, RtpPacket } from 'werift';
import type { ServerErrorCode } from '../base/errors.js';
import type { DropReason, ServerMetrics } from '../base/metrics.js';
import type { OpusPacket, OpusStreams } from './rtc-audio.js';
import type { RtcMetrics } from './rtc-metrics.js';
import { PlayoutDelayPolicy } from './rtc-playout-delay.js';
import { RtcTierController } from './rtc-tier.js';
import { packetizeVp8, sharedH264Payloads } from './rtp-packetize.js';
import { ConnectionVideo } from '../video/video-sender.js';
import type { CodedFrame, VideoStreams } from '../video/video-streams.js';
import type { TrackPauses } from '../base/track-pauses.js';

/** NACK or PLI messages a viewer may send per second and kind; more are ignored (counted in `reactor_webrtc_feedback_dropped_total`). */
export const FEEDBACK_PER_SECOND = 50;
/** Coded frames of one track waiting for their encoding; a newer one over this drops (as `slow_client`). */
const MAX_PENDING_FRAMES = 3;
/** A send werift could not make (the peer is closing): nothing to do, one function for every packet. */
const ignore = (): undefined => undefined;

/** The werift classes this module builds packets with (loaded lazily with werift). */
export interface RtpClasses {
  RtpHeader: typeof RtpHeader;
  RtpPacket: typeof RtpPacket;
}

interface VideoOut {
  kind: 'video';
  sender: RTCRtpSender;
  /** The negotiated id of the playout-delay extension (undefined: the browser did not offer it). */
  playoutDelayId: number | undefined;
  seq: number;
  pictureId: number;
  pending: number;
  chain: Promise<void>;
}
interface AudioOut {
  kind: 'audio';
  sender: RTCRtpSender;
  seq: number;
  unsubscribe: () => void;
}

export interface RtcMediaInit {
  streams: VideoStreams;
  /** The connection's paused tracks. */
  paused: TrackPauses;
  tracks: readonly TrackSchema[];
  codec: Exclude<VideoCodecName, 'jpeg'>;
  tiers: readonly VideoTierSchema[];
  opus: OpusStreams | undefined;
  rtp: RtpClasses;
  metrics: ServerMetrics;
  rtcMetrics: RtcMetrics;
  log: Logger;
  /** An error for the client (an encoder failure), on the WebSocket. */
  error(code: ServerErrorCode, message: string): void;
  /** RTCP arrived from the peer (the peer is alive). */
  heard(): void;
}

/** Counters of one viewer's WebRTC media. */
export interface RtcMediaStats {
  framesSent: number;
  framesDropped: number;
  audioSent: number;
  packetsSent: number;
  bytesSent: number;
  nacks: number;
  plis: number;
  feedbackDropped: number;
  tier: string | undefined;
  estimate: number | undefined;
  /** The playout delay this viewer is asked for now (max of the range, ms; 0: render at once). */
  playoutDelayMs: number;
  /** Times this viewer's playout delay was raised off 0 (its NACKs showed a lossy path). */
  playoutDelayRaises: number;
}

export class RtcMedia {
  readonly #o: RtcMediaInit;
  readonly #video: ConnectionVideo;
  readonly #out = new Map<number, VideoOut | AudioOut>();
  readonly #tier: RtcTierController;
  readonly #tick: NodeJS.Timeout;
  #closed = false;
  readonly #stats: RtcMediaStats = {
    framesSent: 0,
    framesDropped: 0,
    audioSent: 0,
    packetsSent: 0,
    bytesSent: 0,
    nacks: 0,
    plis: 0,
    feedbackDropped: 0,
    tier: undefined,
    estimate: undefined,
    playoutDelayMs: 0,
    playoutDelayRaises: 0,
  };
  /** This viewer's playout delay, from its own NACKs. */
  readonly #playout = new PlayoutDelayPolicy();
  #raisesSeen = 0;
  /** Feedback counted in the current second, by kind. */
  #budget = { second: 0, nack: 0, pli: 0 };

  constructor(init: RtcMediaInit) {
    this.#o = init;
    this.#video = new ConnectionVideo(init.streams, init.tracks, {
      answer: () => undefined,
      error: (code, message) => init.error(code, message),
      // The RTP stream says what it carries: no video_config over WebRTC.
      sendText: () => undefined,
      unqueueVideo: () => undefined,
      closed: () => this.#closed,
    });
    // Conservative first, as GCC starts low: the lowest tier, stepped up as the browser's estimate shows headroom.
    this.#tier = new RtcTierController(init.tiers);
    const first = this.#tier.tier;
    this.#video.use(init.codec, first);
    this.#stats.tier = first.name;
    this.#tick = setInterval(() => this.#judge(), 250);
    this.#tick.unref();
  }

  /** Binds a sender to an outbound track (its m-line was negotiated). */
  bind(trackIndex: number, kind: 'video' | 'audio', sender: RTCRtpSender, playoutDelayId?: number): void {
    const seq = Math.floor(Math.random() * 0x10000);
    if (kind === 'video') {
      this.#out.set(trackIndex, { kind, sender, playoutDelayId, seq, pictureId: Math.floor(Math.random() * 0x8000), pending: 0, chain: Promise.resolve() });
    } else {
      const out: AudioOut = { kind, sender, seq, unsubscribe: () => undefined };
      const name = this.#o.tracks[trackIndex]?.name ?? String(trackIndex);
      if (this.#o.opus) out.unsubscribe = this.#o.opus.subscribe(trackIndex, name, (p) => this.#sendAudio(out, trackIndex, p));
      this.#out.set(trackIndex, out);
    }
    // Wraps werift's RTCP handling: floods are cut before werift retransmits, PLIs reach the encoder, REMB and loss the tier.
    const handle = sender.handleRtcpPacket.bind(sender);
    sender.handleRtcpPacket = (packet: RtcpPacket): void => {
      if (this.#closed) return;
      this.#o.heard();
      if (this.#feedback(trackIndex, packet)) handle(packet);
    };
  }

  /** Which tracks have a sender. */
  get boundTracks(): number[] {
    return [...this.#out.keys()];
  }

  frame(frame: OutputFrame): void {
    const out = this.#out.get(frame.trackIndex);
    if (this.#closed || out?.kind !== 'video' || this.#o.paused.has(frame.trackIndex)) return;
    const route = this.#video.route(frame);
    if (route.kind !== 'coded') return;
    if (out.pending >= MAX_PENDING_FRAMES) {
      this.#drop('slow_client');
      this.#video.lost(frame.trackIndex, 'drop');
      return;
    }
    const coded = route.encoder.encode(frame);
    // The track's encoder did not take it (counted there once as `encoder_busy`; its stream has no gap).
    if (coded === null) return;
    out.pending++;
    out.chain = out.chain.then(async () => {
      let chunk: CodedFrame | null;
      try {
        chunk = await coded;
      } catch {
        // The encoder failed: its subscribers (this one too) are told by VideoStreams.
        chunk = null;
      } finally {
        out.pending--;
      }
      if (this.#closed) return;
      const verdict = this.#video.gate(frame.trackIndex, route.encoder, chunk);
      if (verdict !== 'send' || !chunk) {
        if (verdict === 'awaiting_key') this.#drop('awaiting_key');
        else if (verdict === 'skipped') this.#drop('encode_error');
        return;
      }
      this.#sendVideo(out, frame, chunk);
    });
  }

  #sendVideo(out: VideoOut, frame: OutputFrame, chunk: CodedFrame): void {
    const au = chunk.data;
    out.pictureId = (out.pictureId + 1) & 0x7fff;
    // H.264: packetized once for every viewer of the encoder (shared, read-only buffers); VP8's descriptor carries this viewer's PictureID.
    const payloads = this.#o.codec === 'h264' ? sharedH264Payloads(chunk) : packetizeVp8(au, out.pictureId);
    const timestamp = rtpVideoTimestamp(frame.ptsMs);
    const { RtpHeader, RtpPacket } = this.#o.rtp;
    let bytes = 0;
    // werift keeps the round trip it measures from receiver reports (seconds) on the sender, unexported.
    const rtt = (out.sender as unknown as { rtt?: number }).rtt;
    this.#playout.rtt(rtt === undefined ? undefined : rtt * 1000);
    const playoutDelay = this.#playout.payload();
    if (this.#playout.raises !== this.#raisesSeen) {
      this.#raisesSeen = this.#playout.raises;
      this.#o.rtcMetrics.playoutDelayRaises.inc();
      this.#o.log.info(`webrtc viewer: playout delay up to ${this.#playout.delay.maxMs} ms (NACKs: a lossy path)`);
    }
    payloads.forEach((payload, i) => {
      out.seq = (out.seq + 1) & 0xffff;
      // This viewer's own header object: werift writes its SSRC into it and keeps it, with the shared payload, to answer NACKs.
      const header = new RtpHeader({ payloadType: 96, sequenceNumber: out.seq, timestamp, marker: i === payloads.length - 1 });
      // The playout delay on the first packet of every frame: 0..0 (render as soon as decoded) on a clean path, one repair's worth on a lossy one (rtc-playout-delay.ts).
      if (out.playoutDelayId !== undefined && i === 0) header.extensions = [{ id: out.playoutDelayId, payload: playoutDelay }];
      void out.sender.sendRtp(new RtpPacket(header, payload)).catch(ignore);
      bytes += payload.byteLength;
    });
    this.#stats.packetsSent += payloads.length;
    this.#stats.bytesSent += bytes;
    this.#tier.sent(bytes + 12 * payloads.length, payloads.length);
    this.#stats.framesSent++;
    this.#o.metrics.framesSent.inc();
    this.#video.sent(au.byteLength);
  }

  audio(chunk: OutputAudio): void {
    const out = this.#out.get(chunk.trackIndex);
    if (this.#closed || out?.kind !== 'audio' || this.#o.paused.has(chunk.trackIndex)) return;
    this.#o.opus?.feed(chunk);
  }

  #sendAudio(out: AudioOut, trackIndex: number, p: OpusPacket): void {
    if (this.#closed || this.#o.paused.has(trackIndex)) return;
    const { RtpHeader, RtpPacket } = this.#o.rtp;
    out.seq = (out.seq + 1) & 0xffff;
    const header = new RtpHeader({ payloadType: 111, sequenceNumber: out.seq, timestamp: p.timestamp48k >>> 0, marker: false });
    void out.sender.sendRtp(new RtpPacket(header, Buffer.from(p.data.buffer, p.data.byteOffset, p.data.byteLength))).catch(ignore);
    this.#stats.packetsSent++;
    this.#stats.bytesSent += p.data.byteLength;
    this.#stats.audioSent++;
  }

  /** A track was paused (the connection's {@link TrackPauses} has it): it resumes at a key frame. */
  pauseTrack(trackIndex: number): void {
    this.#video.paused(trackIndex);
  }

  /** A paused track was resumed. */
  resumeTrack(trackIndex: number): void {
    this.#video.resumed(trackIndex);
  }

  /** A flush: every coded track waits for the key frame it forces. */
  flushed(nextSeq: number): void {
    this.#video.flushed(nextSeq);
  }

  /** A new app host: key frames on every track. */
  newGeneration(): void {
    this.#video.newGeneration();
  }

  stats(): RtcMediaStats {
    const playoutDelayMs = this.#playout.delay.maxMs;
    return { ...this.#stats, tier: this.#video.tier?.name, estimate: this.#tier.estimate, playoutDelayMs, playoutDelayRaises: this.#playout.raises };
  }

  /** Whether the feedback may go on to werift (false: a flood, ignored and counted). */
  #feedback(trackIndex: number, packet: RtcpPacket): boolean {
    const m = this.#o.rtcMetrics;
    const fb = (packet as { feedback?: { count?: number; bitrate?: bigint | number; lost?: number[] } }).feedback;
    const type = packet.type;
    // RR / SR: receiver reports with the loss fraction of our stream.
    if (type === 201 || type === 200) {
      const ssrc = this.#out.get(trackIndex)?.sender.ssrc;
      for (const r of (packet as { reports?: { ssrc: number; packetsLost: number; highestSequence: number }[] }).reports ?? []) {
        if (r.ssrc === ssrc) this.#tier.report(r);
      }
      return true;
    }
    const second = Math.floor(performance.now() / 1000);
    if (second !== this.#budget.second) this.#budget = { second, nack: 0, pli: 0 };
    // Transport-layer feedback (205), count 1: generic NACK.
    if (type === 205 && fb?.count === 1) {
      m.feedback.inc({ kind: 'nack' });
      if (++this.#budget.nack > FEEDBACK_PER_SECOND) {
        m.feedbackDropped.inc({ kind: 'nack' });
        this.#stats.feedbackDropped++;
        return false;
      }
      this.#stats.nacks++;
      this.#playout.nack();
      m.retransmits.inc(fb.lost?.length ?? 0);
      this.#tier.nacked(fb.lost ?? []);
      return true;
    }
    // Payload-specific feedback (206): count 1 PLI, 15 REMB.
    if (type === 206 && fb?.count === 1) {
      m.feedback.inc({ kind: 'pli' });
      if (++this.#budget.pli > FEEDBACK_PER_SECOND) {
        m.feedbackDropped.inc({ kind: 'pli' });
        this.#stats.feedbackDropped++;
        return false;
      }
      this.#stats.plis++;
      this.#video.lost(trackIndex, 'request');
      return true;
    }
    if (type === 206 && fb?.count === 15 && fb.bitrate !== undefined) {
      m.feedback.inc({ kind: 'remb' });
      this.#tier.remb(Number(fb.bitrate));
      return true;
    }
    return true;
  }

  #judge(): void {
    const d = this.#tier.tick();
    if (!d || this.#closed) return;
    this.#o.rtcMetrics.tierSwitches.inc({ direction: d.direction });
    this.#o.log.info(`webrtc viewer: tier ${d.direction} to ${d.tier.name} (${d.reason})`);
    this.#video.use(this.#o.codec, d.tier);
  }

  #drop(reason: DropReason): void {
    this.#stats.framesDropped++;
    this.#o.metrics.framesDropped.inc({ reason });
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#tick);
    this.#video.close();
    for (const out of this.#out.values()) if (out.kind === 'audio') out.unsubscribe();
    this.#out.clear();
  }
}

/** The RTP timestamp (90 kHz, 32 bits, wrapping) a video frame of presentation time `ptsMs` carries on every WebRTC viewer's link. */
export function rtpVideoTimestamp(ptsMs: number): number {
  return Math.round(ptsMs * 90) >>> 0;
}
