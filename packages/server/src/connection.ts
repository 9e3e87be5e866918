/**
 * One WebSocket client: the {@link ClientSink} the host talks to, put together from its parts:
 * - the control channel: text, in order. {@link InboundChannel} (`inbound-channel.ts`: size and
 *   rate checks, parse, answer order, the `applied` wait, read pausing) reads it, and the
 *   {@link ControlSender} of the {@link WsOutbound} writes it;
 * - one media path at a time ({@link MediaPath}, `base/outbound.ts`): the WebSocket's
 *   ({@link WsOutbound}: queue policy, send budget, pump, with the {@link ConnectionVideo} of
 *   `video-sender.ts` for selection, `video_config` and key-frame gating) or the WebRTC
 *   session's ({@link RtcSession}), current while its peer is `connected`;
 * - the track state both paths read ({@link TrackPauses}) and, for the app's inbound tracks, the
 *   frame intake (`frame-intake.ts`);
 * - one {@link ConnectionLifecycle} (`connection-state.ts`), the connection's only state.
 *
 * This class routes the host's messages to the control channel and its frames and audio to the
 * current media path, switches the path when the WebRTC session says its peer connected or
 * went, and handles the messages that act on the media (`pause_track`, `select_video`,
 * `request_key_frame`).
 */
import { randomBytes } from 'node:crypto';
import type { WebSocket } from 'ws';
import type { AppliedMessage, DashboardClient, PauseTrackMessage, ResumeTrackMessage, ServerMessage, StatsMessage, WelcomeMessage } from '@reactor/protocol';
import type { Logger } from '@reactor/log';
import type { AppHostApi, ClientHandle, ClientSink, OutputAudio, OutputFrame } from '@reactor/runtime';
import { mayRecord, type Grant } from '@reactor/access';
import { CLIENT_STATS_INTERVAL_MS, ClientStatsIntake } from './ws/client-stats.js';
import { ConnectionLifecycle } from './ws/connection-state.js';
import { capError, truncateReason } from './base/error-answer.js';
import { ServerErrorCode } from './base/errors.js';
import type { FrameDecoder } from './intake/frame-decoder.js';
import type { FrameEncoder } from './video/frame-encoder.js';
import type { FrameIntakeInfo } from './intake/frame-intake.js';
import { InboundChannel } from './ws/inbound-channel.js';
import type { ServerMetrics } from './base/metrics.js';
import type { ResolvedServerOptions } from './options.js';
import type { MediaCounts, MediaPath, OutboundStats } from './base/outbound.js';
import { WsOutbound } from './ws/outbound-queue.js';
import { iceServersFor } from './webrtc/turn-credentials.js';
import { RtcSession, type RtcInfo, type RtcServerContext } from './webrtc/rtc-session.js';
import type { SendBudget } from './base/send-budget.js';
import { ConnectionVideo, type VideoSelectionInfo } from './video/video-sender.js';
import { TrackPauses } from './base/track-pauses.js';
import type { VideoStreams } from './video/video-streams.js';
import type { RecordingService } from './recording/recording-service.js';

/** A snapshot of one connection, for tests, metrics and operators. */
export interface ConnectionInfo extends Omit<OutboundStats, 'pausedTracks'> {
  id: string;
  /** Outbound tracks this client has paused (`pause_track`), by name. */
  pausedTracks: string[];
  /** Whether the server has stopped reading this client (more than `readPauseBytes` of its answers unsent). */
  readPaused: boolean;
  /** Times the server stopped reading this client. */
  readPauses: number;
  /** Binary frames this client sent to the app's inbound tracks (absent when the app declares none). */
  inbound?: FrameIntakeInfo;
  /** Its video selection (absent until it sends `select_video`). */
  video?: VideoSelectionInfo;
  /** Its WebRTC peer connection (absent until it sends `rtc_offer`, and once it is gone). */
  webrtc?: RtcInfo;
}

/** Bound to the server: what a connection needs from it. */
export interface ConnectionContext {
  host: AppHostApi;
  encoder: FrameEncoder;
  /** Decodes inbound JPEG frames. */
  decoder: FrameDecoder;
  /** Largest inbound binary frame (0 when the app declares no inbound track). */
  maxFrameBytes: number;
  metrics: ServerMetrics;
  options: ResolvedServerOptions;
  /** The server's logger. */
  logger: Logger;
  /** The server-wide budget for unsent bytes. */
  budget: SendBudget;
  /** The shared video encoders. */
  video: VideoStreams;
  /** The WebRTC transport (undefined: off). */
  rtc?: RtcServerContext;
  /** Clips and recordings; `undefined`: not configured (`clips_disabled`). */
  recording: RecordingService | undefined;
  /** Sees every stats message (the server derives step metrics from them). */
  onStats(msg: StatsMessage): void;
  /** The instance name to put in `welcome.session` / `session` messages (`ReactorServer.instance`). */
  instance(): string | undefined;
  /** A client did something (a command, a publication, a frame): the idle timeout starts over. */
  activity(): void;
  /**
   * The socket is gone: the server disconnects the client from the host, or, when the connection
   * dropped without a close handshake, holds its identity for the resume grace.
   */
  gone(conn: ClientConnection, handle: ClientHandle, dropped: boolean): void;
}

/** A connected WebSocket client (see the module comment for its parts). */
export class ClientConnection implements ClientSink {
  /** Set by the heartbeat: false after a ping until the pong arrives. */
  alive = true;
  readonly #socket: WebSocket;
  readonly #ctx: ConnectionContext;
  readonly #state = new ConnectionLifecycle();
  #handle: ClientHandle | undefined;
  readonly #video: ConnectionVideo;
  /** The outbound tracks this client paused: one state, read by whichever media path is current. */
  readonly #paused = new TrackPauses();
  /** The WebSocket writer: the control channel's sender (text, in order), and the WebSocket media path. */
  readonly #ws: WsOutbound;
  readonly #rtc: RtcSession;
  /** The current media path: the WebSocket's, or the WebRTC session's while its peer is connected. */
  #media: MediaPath;
  readonly #in: InboundChannel;
  /** Its `client_stats` reports, checked and counted. */
  readonly #clientStats: ClientStatsIntake;
  readonly #onClosed: (c: ClientConnection) => void;
  /** What this client's credential grants (role, tracks, uploads, longest session). */
  readonly grant: Grant;
  /** The secret a new connection presents (`?resume=`) to take this client's identity back after a drop. */
  readonly resumeSecret = randomBytes(24).toString('base64url');
  /** The client asked to resume and this connection did not get the identity back: its welcome says `resumed: false`. */
  #resumeFailed = false;
  #resolveClosed!: () => void;
  /** Resolves once the socket has closed and the host has been told. */
  readonly closed = new Promise<void>((resolve) => (this.#resolveClosed = resolve));

  constructor(ws: WebSocket, ctx: ConnectionContext, onClosed: (c: ClientConnection) => void, grant: Grant) {
    this.grant = grant;
    this.#socket = ws;
    this.#ctx = ctx;
    this.#onClosed = onClosed;
    const state = this.#state;
    const id = (): string => this.id;
    this.#video = new ConnectionVideo(ctx.video, ctx.host.schema.tracks, {
      answer: (msg, after) => this.#in.answer(msg, after),
      error: (code, message, id, countAsResult) => this.#in.error(code, message, id, countAsResult),
      sendText: (text) => this.#ws.sendText(text),
      unqueueVideo: (trackIndex) => this.#ws.unqueueVideo(trackIndex),
      closed: () => state.closed,
    });
    this.#ws = new WsOutbound({
      ws,
      state,
      paused: this.#paused,
      encoder: ctx.encoder,
      metrics: ctx.metrics,
      options: ctx.options,
      logger: ctx.logger,
      budget: ctx.budget,
      video: this.#video,
      id,
      events: {
        answersBacklogged: () => this.#in.pauseReads(),
        answerWritten: () => this.#in.maybeResumeReads(),
        framesDropped: (n) => this.#handle?.reportDropped(n),
      },
    });
    const tracks = ctx.host.schema.tracks;
    this.#media = this.#ws;
    this.#rtc = new RtcSession({
      control: this.#ws,
      live: (on) => this.#switchMedia(on),
      paused: this.#paused,
      rtc: ctx.rtc,
      streams: ctx.video,
      tracks,
      metrics: ctx.metrics,
      log: ctx.logger,
      error: (code, message) => this.#in.error(code, message),
      id,
      handle: () => this.#handle,
      inboundError: (code, message) => this.#in.error(code, message, undefined, false),
    });
    this.#in = new InboundChannel({
      ws,
      state,
      options: ctx.options,
      metrics: ctx.metrics,
      logger: ctx.logger,
      maxFrameBytes: ctx.maxFrameBytes,
      recording: ctx.recording,
      owner: this,
      grant,
      out: this.#ws,
      activity: () => ctx.activity(),
      id,
      controls: {
        pauseTrack: (msg) => this.#pauseTrack(msg),
        selectVideo: (msg) => this.#video.select(msg),
        requestKeyFrame: (msg) => this.#video.requestKeyFrame(msg),
        clientStats: (msg) => this.#clientStats.receive(msg),
        commandReplied: (name) => this.#clientStats.replied(name),
        rtc: (msg) => this.#rtc.signal(msg),
        rtcPublish: (track, mid) => this.#rtc.claim(track, mid),
      },
    });
    this.#clientStats = new ClientStatsIntake({
      metrics: ctx.metrics,
      commandNames: () => ctx.host.schema.commands.map((c) => c.name),
      framesSent: () => this.#counts().framesSent,
      refuse: (message) => this.#in.error(ServerErrorCode.InvalidClientStats, message, undefined, false),
    });
    ws.on('pong', () => (this.alive = true));
    // `ws` closes with 1009 and no reason when a message is over its maxPayload (the larger of the
    // two limits): the close says why, as the connection's own 1009s do.
    const close = ws.close.bind(ws);
    const biggest = Math.max(ctx.options.maxMessageBytes, ctx.maxFrameBytes);
    ws.close = (code?: number, reason?: string | Buffer): void =>
      close(code, reason === undefined && code === 1009 ? `message over the limit of ${biggest} bytes` : reason);
    // `ws` reports protocol violations (too-big message -> 1009) here and then closes the socket.
    ws.on('error', (err) => ctx.logger.warn({ client: this.id }, `client ${this.id}: ${err.message}`));
    ws.on('close', (code: number) => this.#teardown(code));
  }

  /**
   * Registers with the host (which sends the welcome through this sink), with the role and tracks
   * of its grant. `resumeFailed`: the client asked to resume and could not (its welcome says so).
   */
  attach(info: { remoteAddress?: string; userAgent?: string; sessionId?: string }, resumeFailed = false): void {
    this.#resumeFailed = resumeFailed;
    const handle = this.#ctx.host.connect(this, { ...info, role: this.grant.role, publish: this.grant.publish, ...(resumeFailed && { returning: true }) });
    this.#bind(handle);
  }

  /** Takes over a dropped client's identity (it resumed): the host sends this sink a welcome with `resumed: true`. */
  adopt(handle: ClientHandle): void {
    this.#bind(handle);
    handle.rebind(this);
  }

  #bind(handle: ClientHandle): void {
    this.#handle = handle;
    this.#in.bind(handle, this.#ctx.host.schema.tracks, this.#ctx.decoder);
    if (this.#state.closed) {
      this.#in.close();
      handle.disconnect();
    }
  }

  /** The host's id for this client (empty until attached). */
  get id(): string {
    return this.#handle?.id ?? '';
  }

  /**
   * The WebRTC session's peer connected (`on`): media moves to it, and what is queued of it on the
   * WebSocket is dropped (counted as `flush`). It went: media is back on the WebSocket.
   */
  #switchMedia(on: boolean): void {
    if (on) this.#ws.dropAll();
    this.#media = on ? this.#rtc : this.#ws;
  }

  /** What both media paths sent and dropped. */
  #counts(): MediaCounts {
    const w = this.#ws.counts();
    const r = this.#rtc.counts();
    return { framesSent: w.framesSent + r.framesSent, framesDropped: w.framesDropped + r.framesDropped, audioSent: w.audioSent + r.audioSent };
  }

  /** The WebSocket queue's figures, with both media paths' counters. */
  #outStats(): OutboundStats {
    return { ...this.#ws.stats(), ...this.#counts() };
  }

  /** A snapshot of the queue and counters. */
  info(): ConnectionInfo {
    const out = this.#outStats();
    const tracks = this.#ctx.host.schema.tracks;
    const info: ConnectionInfo = {
      id: this.id,
      queuedFrames: out.queuedFrames,
      queuedAudio: out.queuedAudio,
      framesInFlight: out.framesInFlight,
      bufferedBytes: out.bufferedBytes,
      framesSent: out.framesSent,
      framesDropped: out.framesDropped,
      audioSent: out.audioSent,
      audioDropped: out.audioDropped,
      pausedTracks: out.pausedTracks.map((i) => tracks[i]?.name ?? String(i)),
      unsentAnswerBytes: out.unsentAnswerBytes,
      readPaused: this.#state.readsPaused,
      readPauses: this.#in.readPauses,
    };
    const inbound = this.#in.framesInfo();
    if (inbound) info.inbound = inbound;
    const video = this.videoSelection;
    if (video) info.video = video;
    const webrtc = this.#rtc.info();
    if (webrtc) info.webrtc = webrtc;
    return info;
  }

  /** Its video selection (undefined until it sends `select_video`). */
  get videoSelection(): VideoSelectionInfo | undefined {
    return this.#video.selection;
  }

  /** Sends a heartbeat ping. */
  ping(): void {
    if (this.#socket.readyState === this.#socket.OPEN) this.#socket.ping();
  }

  /** Cuts the socket without a close handshake (dead or hopeless clients). */
  terminate(): void {
    this.#socket.terminate();
  }

  // ---- ClientSink ------------------------------------------------------------------------

  message(msg: ServerMessage): void {
    if (this.#state.closed) return;
    if (msg.type === 'applied') return this.#applied(msg);
    if (msg.type === 'stats') this.#ctx.onStats(msg);
    if (msg.type === 'flush') {
      this.#video.flushed(msg.nextSeq);
      // Frames and audio still waiting here belong to the cut playout: drop them before the client learns of the cut.
      this.#ws.flushBefore(msg.nextSeq);
      this.#rtc.flushBefore(msg.nextSeq);
    }
    this.#ws.sendText(JSON.stringify(msg.type === 'error' ? capError(msg) : withInstance(msg, this.#ctx.instance())));
  }

  /**
   * An `applied` message goes out after its command's reply (held until that is sent). A frame
   * of a track this connection paused was not sent to it: it hears `paused` instead. With a
   * WebRTC peer it names the frame's RTP timestamp too (`rtpTimestamp`).
   */
  #applied(msg: AppliedMessage): void {
    let out = msg;
    if (msg.outcome === 'applied') {
      const index = this.#ctx.host.schema.tracks.findIndex((t) => t.name === msg.track);
      if (this.#paused.has(index)) out = { type: 'applied', id: msg.id, outcome: 'paused' };
      else {
        // A WebRTC frame carries its RTP timestamp, not the seq: the client pairs the two with this.
        const rtp = this.#rtc.rtpTimestamp(msg.seq);
        if (rtp !== undefined) out = { ...msg, rtpTimestamp: rtp };
      }
    }
    this.#in.afterReply(msg.id, () => this.#ws.sendText(JSON.stringify(out)));
  }

  /** The welcome's per-connection fields: the video offer, the resume secret, `resumed: false` when a resume failed, the `client_stats` it takes, the WebRTC setup (TURN credentials minted for `clientId`). */
  welcomeFields(resumed: boolean, clientId: string): Pick<WelcomeMessage, 'video' | 'resume' | 'resumed' | 'clientStats' | 'webrtc' | 'recording'> {
    const fields: Pick<WelcomeMessage, 'video' | 'resume' | 'resumed' | 'clientStats' | 'webrtc' | 'recording'> = {};
    const offer = this.#ctx.video.offer();
    if (offer) fields.video = offer;
    const graceMs = this.#ctx.options.resumeGraceMs;
    if (graceMs > 0) fields.resume = { secret: this.resumeSecret, graceMs };
    if (this.#resumeFailed && !resumed) fields.resumed = false;
    fields.clientStats = { intervalMs: CLIENT_STATS_INTERVAL_MS };
    const rtc = this.#ctx.rtc?.options;
    if (rtc) {
      fields.webrtc = {
        // This client's own TURN credentials when they are minted (a fresh expiry with every welcome).
        iceServers: iceServersFor(rtc.clientIceServers, rtc.turn, clientId),
        iceTransportPolicy: rtc.iceTransportPolicy,
        connectTimeoutMs: rtc.connectTimeoutMs,
      };
    }
    // What the token's `rec` claim lets this client do, so a page can leave out what it would be refused.
    if (this.#ctx.recording) fields.recording = { clip: mayRecord(this.grant, 'clip'), record: mayRecord(this.grant, 'record') };
    return fields;
  }

  /** The stats' per-connection fields: this connection's video (codec, tier, bitrate since the last stats, key frames asked for), its WebRTC link's codec and tier. */
  statsFields(): Pick<StatsMessage, 'video' | 'webrtc'> | undefined {
    const video = this.#video.statsField();
    const rtc = this.#rtc.info();
    const tier = rtc?.state === 'connected' ? rtc.media?.tier : undefined;
    if (!video && tier === undefined) return undefined;
    return { ...(video && { video }), ...(tier !== undefined && { webrtc: { codec: rtc!.codec, tier } }) };
  }

  frame(frame: OutputFrame): void {
    this.#ctx.metrics.frameEmitted(frame);
    this.#rtc.notePts(frame);
    this.#media.frame(frame);
  }

  audio(chunk: OutputAudio): void {
    this.#media.audio(chunk);
  }

  close(reason: string, code = 1001): void {
    if (this.#state.closed) return;
    this.#state.closeByServer();
    this.#socket.close(code, truncateReason(reason));
  }

  /**
   * The connection moves to a new app host (`HostSwitch.replace`, `reactor dev`): what is queued
   * belongs to the old one and is dropped (counted as `flush`), and each coded video track sends
   * a new `video_config` and waits for a key frame, which is asked for at once.
   */
  newGeneration(): void {
    if (this.#state.closed) return;
    this.#ws.dropAll();
    this.#rtc.dropAll();
    this.#video.newGeneration();
  }

  /**
   * `pause_track` / `resume_track`: stops or restarts sending one outbound track to this
   * connection (idempotent). The model and the other clients are not affected; a resumed track
   * starts with its next frame.
   */
  #pauseTrack(msg: PauseTrackMessage | ResumeTrackMessage): void {
    const tracks = this.#ctx.host.schema.tracks;
    const index = tracks.findIndex((t) => t.name === msg.track);
    const track = tracks[index];
    const outbound = tracks.filter((t) => t.direction === 'out').map((t) => t.name);
    const shown = JSON.stringify(msg.track.slice(0, 64));
    if (track === undefined) {
      this.#in.error(ServerErrorCode.UnknownTrack, `unknown track ${shown}; this app's outbound tracks: ${outbound.join(', ') || '(none)'}`, msg.id);
      return;
    }
    if (track.direction !== 'out') {
      this.#in.error(
        ServerErrorCode.WrongTrackDirection,
        `track ${shown} is an inbound track (clients publish it); only outbound tracks can be paused: ${outbound.join(', ') || '(none)'}`,
        msg.id,
      );
      return;
    }
    if (msg.type === 'pause_track') {
      // Frames skipped while paused: the stream resumes at a key frame.
      this.#video.paused(index);
      this.#paused.pause(index);
      this.#ws.pauseTrack(index);
      this.#rtc.pauseTrack(index);
    } else if (this.#paused.resume(index)) {
      this.#video.resumed(index);
      this.#ws.resumeTrack();
      this.#rtc.resumeTrack(index);
    }
    this.#in.answer({ type: 'reply', id: msg.id });
  }

  #teardown(code?: number): void {
    if (this.#state.closed) return;
    // 1006: the socket went without a close frame (a dropped network, a killed proxy, a missed heartbeat).
    const dropped = code === 1006 && this.#state.resumable;
    this.#state.to('closed');
    this.#rtc.close();
    this.#ws.close();
    this.#in.close();
    this.#video.close();
    if (this.#handle) this.#ctx.gone(this, this.#handle, dropped);
    this.#onClosed(this);
    this.#resolveClosed();
  }
}

/** `msg` with the instance name in its session status (welcome and session messages); the host's object is shared by every sink, so copied, never changed. */
function withInstance(msg: ServerMessage, instance: string | undefined): ServerMessage {
  if (instance === undefined || (msg.type !== 'welcome' && msg.type !== 'session')) return msg;
  return { ...msg, session: { ...msg.session, instance } };
}

/** A connection's row in the dashboard's client list. */
export function dashboardClient(c: ClientConnection): Omit<DashboardClient, 'connectedS'> {
  const info = c.info();
  // A connected WebRTC peer carries its media (its own codec and tier, from its own feedback); otherwise the WebSocket does.
  const rtc = info.webrtc?.state === 'connected' ? info.webrtc.media : undefined;
  return {
    id: info.id,
    role: c.grant.role,
    transport: rtc ? 'webrtc' : 'websocket',
    codec: rtc ? info.webrtc!.codec : (info.video?.codec ?? 'jpeg'),
    tier: rtc ? (rtc.tier ?? '-') : (info.video?.tier ?? '-'),
    framesSent: info.framesSent,
    framesDropped: info.framesDropped,
    bufferedBytes: info.bufferedBytes,
  };
}
