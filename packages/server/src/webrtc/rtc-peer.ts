/**
 * One connection's WebRTC peer connection (werift): the server answers the client's `rtc_offer`,
 * trickles its ICE candidates as `rtc_candidate`, and reports `rtc_state`. Its media side is an
 * {@link RtcMedia}; its `RtcSession` (`rtc-session.ts`) is the connection's media path while `connected`.
 *
 * The offer's m-lines are matched to the schema's tracks by kind, in order: recvonly (or
 * sendrecv) video m-lines to the outbound video tracks, audio ones to the outbound audio tracks;
 * sendonly m-lines to the inbound tracks of their kind (mapped in the answer; what comes in on
 * them is not read yet). An m-line left over is answered inactive.
 *
 * Failure is bounded: ICE and DTLS must connect within `connectTimeoutMs` (`rtc_ice_timeout`);
 * once connected, a peer that sends no RTCP for {@link SILENCE_MS} (Chromium sends a receiver
 * report every second or so) or whose ICE fails is lost (`rtc_peer_lost`). Either closes the
 * peer connection (its UDP sockets) and media goes back to the WebSocket.
 */
import type { Logger } from '@reactor/log';
import {
  CodedError,
  transition,
  type RtcCandidateMessage,
  type RtcState,
  type RtcTrackMapping,
  type ServerMessage,
  type TrackSchema,
  type TransitionTable,
  type VideoCodecName,
} from '@reactor/protocol';
import type * as Werift from 'werift';
import { ServerErrorCode } from '../base/errors.js';
import { isTurn, type ResolvedWebRtcOptions } from './rtc-options.js';
import { iceServersFor } from './turn-credentials.js';

/** The playout-delay header extension: the sender asks the receiver for a jitter-buffer range (here 0..0: show frames as soon as they decode). */
export const PLAYOUT_DELAY_URI = 'http://www.webrtc.org/experiments/rtp-hdrext/playout-delay';

/** Without RTCP from a connected peer for this long, it is gone. */
export const SILENCE_MS = 8000;

type WeriftModule = typeof Werift;

let loading: Promise<WeriftModule> | undefined;
/** Loads werift once (a server that never sees an offer never loads it). */
export function loadWerift(): Promise<WeriftModule> {
  loading ??= import('werift').then((w) => {
    boundGenericNack(w);
    return w;
  });
  return loading;
}

/**
 * werift hands each packet of a compound RTCP datagram the rest of the datagram, not its own
 * `length` words, and its generic NACK reads FCI entries to the end of what it is given: a NACK
 * followed by a REMB or an SDES (as Chromium sends them) read those packets' bytes as lost
 * sequence numbers and bitmasks (issue 43: 81 NACKs "carrying" 2,000 numbers for one lost
 * packet, werift retransmitting the bogus ones, the tier stepped down for "504 % asked for
 * again"). Bound to its own length here, once, for every peer connection of the process.
 */
function boundGenericNack(w: WeriftModule): void {
  const nack = w.GenericNack as unknown as { deSerialize(data: Buffer, header: { length: number }): unknown; reactorBounded?: true };
  if (nack.reactorBounded) return;
  const read = nack.deSerialize.bind(nack);
  nack.deSerialize = (data, header) => read(data.subarray(0, header.length * 4), header);
  nack.reactorBounded = true;
}

/** What a peer needs from its connection. */
export interface RtcPeerContext {
  options: ResolvedWebRtcOptions;
  tracks: readonly TrackSchema[];
  codec: Exclude<VideoCodecName, 'jpeg'>;
  log: Logger;
  send(msg: ServerMessage): void;
  error(code: ServerErrorCode, message: string): void;
  /** The answer is out: senders to bind, per outbound track. */
  negotiated(senders: NegotiatedSender[]): void;
  /** The state changed (`connected`: media moves to WebRTC; `failed` / `closed`: back to the WebSocket). */
  state(state: RtcState, reason?: string): void;
  /** The inbound track a sendonly m-line carries, by the `mid` its `publish` named (else the next of its kind). */
  inboundTrackFor?(mid: string): TrackSchema | undefined;
  /** The answer is out: the transceivers that receive inbound tracks (`rtc-inbound.ts` reads their RTP). */
  inboundAttached?(list: { mid: string; schema: TrackSchema; transceiver: Werift.RTCRtpTransceiver }[]): void;
}

/** An outbound track's sender, with the id of the playout-delay extension when the offer has it. */
export interface NegotiatedSender {
  trackIndex: number;
  kind: 'video' | 'audio';
  sender: Werift.RTCRtpSender;
  playoutDelayId: number | undefined;
}

/** A refusal of an offer: its code and message. */
export class OfferRefused extends CodedError {
  declare readonly code: ServerErrorCode;

  constructor(code: ServerErrorCode, message: string) {
    super(code, message);
  }
}

interface MLine {
  kind: string;
  direction: 'sendrecv' | 'sendonly' | 'recvonly' | 'inactive';
  mid: string | undefined;
  codecs: string[];
}

/** A light check of an offer SDP before werift sees it: its m-lines with direction, mid and codecs. */
export function readOffer(sdp: string): MLine[] {
  if (!/^v=0\r?\n/.test(sdp))
    throw new OfferRefused(ServerErrorCode.RtcBadOffer, 'the offer is not SDP (it must start with "v=0"); send RTCPeerConnection.createOffer().sdp');
  const sections = sdp.split(/\r?\nm=/).slice(1);
  if (sections.length === 0)
    throw new OfferRefused(ServerErrorCode.RtcBadOffer, 'the offer has no media section (m=); add recvonly transceivers for the tracks to receive');
  if (sections.length > 32) throw new OfferRefused(ServerErrorCode.RtcBadOffer, `the offer has ${sections.length} media sections; at most 32`);
  if (!/\r?\na=fingerprint:/.test(sdp))
    throw new OfferRefused(ServerErrorCode.RtcBadOffer, 'the offer has no DTLS fingerprint (a=fingerprint); WebRTC media needs DTLS-SRTP');
  if (!/\r?\na=ice-ufrag:/.test(sdp) || !/\r?\na=ice-pwd:/.test(sdp))
    throw new OfferRefused(ServerErrorCode.RtcBadOffer, 'the offer has no ICE credentials (a=ice-ufrag / a=ice-pwd)');
  return sections.map((s) => {
    const lines = s.split(/\r?\n/);
    const kind = lines[0]!.split(' ')[0]!;
    const dir = lines.find((l) => /^a=(sendrecv|sendonly|recvonly|inactive)$/.test(l))?.slice(2) as MLine['direction'] | undefined;
    const mid = lines.find((l) => l.startsWith('a=mid:'))?.slice(6);
    const fmtp = new Map<string, string>();
    for (const l of lines) {
      const m = /^a=fmtp:(\d+) (.*)$/.exec(l);
      if (m) fmtp.set(m[1]!, m[2]!);
    }
    const maps = lines.map((l) => /^a=rtpmap:(\d+) ([^/]+)\//.exec(l)).filter((m): m is RegExpExecArray => m !== null);
    // A payload type of the m= line without its a=rtpmap (dynamic ones, 96 and up, have no meaning without it): the SDP was cut short.
    const mapped = new Set(maps.map((m) => m[1]!));
    const unmapped = (lines[0]!.split(' ').slice(3) ?? []).filter((pt) => /^\d+$/.test(pt) && Number(pt) >= 96 && !mapped.has(pt));
    if ((kind === 'video' || kind === 'audio') && unmapped.length > 0) {
      throw new OfferRefused(
        ServerErrorCode.RtcBadOffer,
        `the offer's ${kind} section lists payload types ${unmapped.slice(0, 8).join(', ')} with no a=rtpmap line: the SDP looks cut short; send all of RTCPeerConnection.createOffer().sdp`,
      );
    }
    const codecs = maps.map((m) => `${m[2]!.toLowerCase()}${fmtp.has(m[1]!) ? ` ${fmtp.get(m[1]!)}` : ''}`);
    return { kind, direction: dir ?? 'sendrecv', mid, codecs };
  });
}

/** Whether an m-line's codecs include what the server sends on it. */
function hasCodec(line: MLine, codec: Exclude<VideoCodecName, 'jpeg'>): boolean {
  if (line.kind === 'audio') return line.codecs.some((c) => c.startsWith('opus'));
  if (codec === 'vp8') return line.codecs.some((c) => c.startsWith('vp8'));
  return line.codecs.some((c) => c.startsWith('h264') && /packetization-mode=1/.test(c));
}

/** Whether a list of ICE servers names a STUN server (`stun:`/`stuns:`). */
function hasStun(servers: ResolvedWebRtcOptions['iceServers']): boolean {
  return servers.some((s) => (Array.isArray(s.urls) ? s.urls : [s.urls]).some((u) => /^stuns?:/i.test(u)));
}

/**
 * werift's ICE agent falls back to Google's public STUN server when it is given none (in
 * `Connection`'s constructor, `stunServer ?? ['stun.l.google.com', 19302]`), and the peer
 * connection has no option to say "none". On a host without egress that lookup held each answer
 * up to werift's 5 s gathering timeout (issue 43). So, as docs/webrtc.md promises (no STUN
 * unless configured), the agents of this peer connection's transports are told there is none
 * before they gather (at `setLocalDescription`). `stunServer` is a public field of werift's
 * `Connection`; the test of this (test/manifest-webrtc.test.ts) watches the server's DNS.
 */
function withoutDefaultStun(pc: Werift.RTCPeerConnection): void {
  for (const t of pc.iceTransports) (t.connection as { stunServer?: unknown }).stunServer = undefined;
}

/** A candidate line as `RTCPeerConnection.onicecandidate` gives it: `candidate:<foundation> <component> <udp|tcp> <priority> <address> <port> typ <type> ...`. */
const CANDIDATE = /^candidate:\S+ \d+ (udp|tcp) \d+ \S+ \d{1,5} typ (host|srflx|prflx|relay)( .*)?$/i;

/** A peer's lifecycle: `new` until its first answer went out (or it failed first), then the `rtc_state`s it reports. */
export type RtcPeerState = 'new' | RtcState;

/**
 * For each state, the states a peer may move to (an empty list: a final state). A renegotiation
 * of a `connected` peer stays `connected`; `failed` and `closed` are final (a later `rtc_offer`
 * makes a new peer). A move to the state it is in is no change, not an edge.
 */
export const RTC_PEER_TRANSITIONS: TransitionTable<RtcPeerState> = {
  new: ['connecting', 'failed', 'closed'],
  connecting: ['connected', 'failed', 'closed'],
  connected: ['failed', 'closed'],
  failed: [],
  closed: [],
};

export class RtcPeer {
  readonly #c: RtcPeerContext;
  readonly #w: WeriftModule;
  #pc: Werift.RTCPeerConnection | undefined;
  #state: RtcPeerState = 'new';
  #timer: NodeJS.Timeout | undefined;
  #watch: NodeJS.Timeout | undefined;
  #lastHeard = 0;
  /** Serialises offers (a renegotiation waits for the one before). */
  #busy: Promise<void> = Promise.resolve();
  #closed = false;
  /** The candidates this side gathered so far (trickled), to tell whether TURN gave a relay. */
  #gathered = '';
  /** Whether the missing relay was logged (once a peer). */
  #relaySaid = false;
  /** Local candidates found before the answer went out (the client cannot add them before it has the answer). */
  #early: ServerMessage[] | undefined = [];

  constructor(werift: WeriftModule, ctx: RtcPeerContext) {
    this.#w = werift;
    this.#c = ctx;
  }

  /** What it last reported in `rtc_state` (undefined: nothing yet). */
  get state(): RtcState | undefined {
    return this.#state === 'new' ? undefined : this.#state;
  }

  /** Whether the peer connection is open (not closed or failed). */
  get open(): boolean {
    return this.#pc !== undefined && !this.#closed;
  }

  /** RTCP came from the peer: it is alive. */
  heard(): void {
    this.#lastHeard = performance.now();
  }

  /** `rtc_offer`: answered with `rtc_answer`, or refused with an error (the peer's state is unchanged). */
  offer(sdp: string): Promise<void> {
    this.#busy = this.#busy
      .then(() => this.#offer(sdp))
      .catch((err: unknown) => {
        if (err instanceof OfferRefused) this.#c.error(err.code, err.message);
        else
          this.#c.error(
            ServerErrorCode.RtcBadOffer,
            `the offer could not be applied: ${(err as Error).message?.slice(0, 300)}; send a fresh RTCPeerConnection.createOffer()`,
          );
      });
    return this.#busy;
  }

  async #offer(sdp: string): Promise<void> {
    if (this.#closed) return;
    const lines = readOffer(sdp);
    const { tracks, codec } = this.#c;
    const usable = lines.filter((l) => (l.kind === 'video' || l.kind === 'audio') && (l.direction === 'recvonly' || l.direction === 'sendrecv'));
    const outVideo = tracks.some((t) => t.direction === 'out' && t.kind === 'video');
    const videoLines = usable.filter((l) => l.kind === 'video');
    if (outVideo && videoLines.length > 0 && !videoLines.some((l) => hasCodec(l, codec))) {
      const want = codec === 'h264' ? 'H.264 with packetization-mode=1' : 'VP8';
      throw new OfferRefused(
        ServerErrorCode.RtcNoCodec,
        `the offer's video sections have no ${want}, which this server sends (offered: ${[...new Set(videoLines.flatMap((l) => l.codecs.map((c) => c.split(' ')[0])))].join(', ').slice(0, 200)}); enable it in the browser, or set server.video.codec to the other one`,
      );
    }
    const audioLines = usable.filter((l) => l.kind === 'audio');
    if (audioLines.length > 0 && !audioLines.some((l) => hasCodec(l, codec))) {
      throw new OfferRefused(ServerErrorCode.RtcNoCodec, "the offer's audio sections have no Opus, which this server sends; offer opus/48000/2");
    }
    const pc = this.#pc ?? this.#create();
    try {
      await pc.setRemoteDescription({ type: 'offer', sdp });
    } catch (err) {
      throw new OfferRefused(ServerErrorCode.RtcBadOffer, `the offer SDP could not be read: ${(err as Error).message?.slice(0, 300)}`);
    }
    if (!hasStun(this.#c.options.iceServers)) withoutDefaultStun(pc);
    // Match m-lines to tracks by kind, in order.
    const outs = {
      video: tracks.map((t, i) => ({ t, i })).filter((x) => x.t.direction === 'out' && x.t.kind === 'video'),
      audio: tracks.map((t, i) => ({ t, i })).filter((x) => x.t.direction === 'out' && x.t.kind === 'audio'),
    };
    const ins = {
      video: tracks.filter((t) => t.direction === 'in' && t.kind === 'video'),
      audio: tracks.filter((t) => t.direction === 'in' && t.kind === 'audio'),
    };
    const mapping: RtcTrackMapping[] = [];
    const senders: NegotiatedSender[] = [];
    const next = { video: 0, audio: 0 };
    const nextIn = { video: 0, audio: 0 };
    const inbound: { mid: string; schema: TrackSchema; transceiver: Werift.RTCRtpTransceiver }[] = [];
    // Inbound tracks a publish named by mid are not handed out by kind order.
    const claimed = new Set(lines.flatMap((l) => (l.direction === 'sendonly' && l.mid !== undefined ? [this.#c.inboundTrackFor?.(l.mid)?.name ?? ''] : [])));
    for (const k of ['video', 'audio'] as const) ins[k] = ins[k].filter((t) => !claimed.has(t.name));
    for (const t of pc.getTransceivers()) {
      const kind = t.kind as 'video' | 'audio';
      const line = lines.find((l) => l.mid === t.mid);
      if ((kind !== 'video' && kind !== 'audio') || !line) {
        t.setDirection('inactive');
        continue;
      }
      if (line.direction === 'recvonly' || line.direction === 'sendrecv') {
        const out = outs[kind][next[kind]++];
        if (!out) {
          t.setDirection('inactive');
          continue;
        }
        t.setDirection('sendonly');
        mapping.push({ mid: t.mid ?? '', track: out.t.name, direction: 'out' });
        senders.push({ trackIndex: out.i, kind, sender: t.sender, playoutDelayId: t.headerExtensions.find((e) => e.uri === PLAYOUT_DELAY_URI)?.id });
      } else if (line.direction === 'sendonly') {
        const named = t.mid ? this.#c.inboundTrackFor?.(t.mid) : undefined;
        const inTrack = named && named.kind === kind ? named : ins[kind][nextIn[kind]++];
        if (!inTrack) {
          t.setDirection('inactive');
          continue;
        }
        t.setDirection('recvonly');
        mapping.push({ mid: t.mid ?? '', track: inTrack.name, direction: 'in' });
        inbound.push({ mid: t.mid ?? '', schema: inTrack, transceiver: t });
      } else {
        t.setDirection('inactive');
      }
    }
    const answer = await pc.createAnswer();
    await pc.setLocalDescription(answer);
    if (this.#closed) return;
    this.#checkRelay(pc.localDescription?.sdp ?? '');
    this.#c.negotiated(senders);
    this.#c.inboundAttached?.(inbound);
    this.#c.send({ type: 'rtc_answer', sdp: pc.localDescription?.sdp ?? answer.sdp, tracks: mapping });
    for (const m of this.#early ?? []) this.#c.send(m);
    this.#early = undefined;
    if (this.#state !== 'connected') this.#setState('connecting');
  }

  #create(): Werift.RTCPeerConnection {
    const w = this.#w;
    const o = this.#c.options;
    const fb = [w.useNACK(), w.usePLI(), w.useREMB()];
    const video =
      this.#c.codec === 'h264'
        ? new w.RTCRtpCodecParameters({
            mimeType: 'video/H264',
            clockRate: 90000,
            rtcpFeedback: fb,
            parameters: 'level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f',
          })
        : new w.RTCRtpCodecParameters({ mimeType: 'video/VP8', clockRate: 90000, rtcpFeedback: fb });
    const audio = new w.RTCRtpCodecParameters({ mimeType: 'audio/opus', clockRate: 48000, channels: 2, parameters: 'minptime=10;useinbandfec=1' });
    const pc = new w.RTCPeerConnection({
      codecs: { video: [video], audio: [audio] },
      // REMB needs abs-send-time; transport-cc is left out on purpose (Chromium then sends REMB).
      headerExtensions: {
        video: [w.useSdesMid(), w.useAbsSendTime(), new w.RTCRtpHeaderExtensionParameters({ uri: PLAYOUT_DELAY_URI })],
        audio: [w.useSdesMid()],
      },
      // Minted here, per peer connection, when the TURN servers take `turnSecret` credentials.
      iceServers: iceServersFor(o.iceServers, o.turn, 'reactor'),
      iceTransportPolicy: o.iceTransportPolicy,
      ...(o.portRange ? { icePortRange: o.portRange } : {}),
      ...(o.advertiseAddress ? { iceAdditionalHostAddresses: [o.advertiseAddress] } : {}),
      iceUseIpv6: false,
    });
    this.#pc = pc;
    pc.onIceCandidate.subscribe((c) => {
      if (this.#closed || !c) return;
      const j = c.toJSON();
      this.#gathered += `${j.candidate ?? ''}\n`;
      const msg: ServerMessage = {
        type: 'rtc_candidate',
        candidate: j.candidate ?? '',
        ...(j.sdpMid != null ? { sdpMid: j.sdpMid } : {}),
        ...(j.sdpMLineIndex != null ? { sdpMLineIndex: j.sdpMLineIndex } : {}),
      };
      if (this.#early) this.#early.push(msg);
      else this.#c.send(msg);
    });
    pc.connectionStateChange.subscribe((s) => {
      if (this.#closed) return;
      if (s === 'connected') this.#connected();
      else if (s === 'failed' || s === 'closed')
        this.fail(this.#state === 'connected' ? ServerErrorCode.RtcPeerLost : ServerErrorCode.RtcIceTimeout, `ICE ${s}`);
    });
    this.#timer = setTimeout(() => {
      if (this.#state !== 'connected') {
        this.fail(
          ServerErrorCode.RtcIceTimeout,
          `ICE and DTLS did not connect within ${o.connectTimeoutMs} ms (UDP blocked, no usable candidate pair, or a TURN server that refused); media stays on the WebSocket`,
        );
      }
    }, o.connectTimeoutMs);
    this.#timer.unref();
    return pc;
  }

  #connected(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#lastHeard = performance.now();
    this.#watch ??= setInterval(() => {
      if (performance.now() - this.#lastHeard > SILENCE_MS) {
        this.fail(ServerErrorCode.RtcPeerLost, `no RTCP from the peer for ${SILENCE_MS} ms (it vanished without closing); media went back to the WebSocket`);
      }
    }, 1000);
    this.#watch.unref();
    this.#setState('connected');
  }

  /**
   * With TURN configured, gathering that brought no relay candidate means the server's own
   * allocation was refused (credentials, quota) or its TURN server is unreachable: werift says
   * nothing of it, and a relay-only viewer would then time out with no word on the server.
   */
  #checkRelay(gathered: string): void {
    const turn = this.#c.options.iceServers.filter(isTurn);
    if (turn.length === 0 || this.#relaySaid || / typ relay/.test(gathered)) return;
    this.#relaySaid = true;
    const urls = turn.flatMap((t) => (Array.isArray(t.urls) ? t.urls : [t.urls])).join(', ');
    this.#c.log.warn(
      `webrtc: no TURN relay candidate from ${urls}: the server's allocation was refused or its TURN server did not answer; check server.webrtc.ice_servers (username, credential or turn_secret) and that the TURN server is reachable from here`,
    );
  }

  /** `rtc_candidate` from the client. */
  async candidate(msg: RtcCandidateMessage): Promise<void> {
    await this.#busy;
    const pc = this.#pc;
    // Candidates still trickling in after the peer connection failed or closed are stale, not a mistake: dropped.
    if (this.#closed) return;
    if (!pc) {
      this.#c.error(ServerErrorCode.RtcBadCandidate, 'rtc_candidate before an rtc_offer was accepted; send rtc_offer first');
      return;
    }
    // End of candidates: nothing to do (werift checks the pairs it has).
    if (msg.candidate === '') return;
    if (!CANDIDATE.test(msg.candidate)) {
      this.#c.error(
        ServerErrorCode.RtcBadCandidate,
        `unusable ICE candidate ${JSON.stringify(msg.candidate.slice(0, 120))}; send RTCIceCandidate.candidate as it is ("candidate:... typ host ...")`,
      );
      return;
    }
    try {
      await pc.addIceCandidate({ candidate: msg.candidate, sdpMid: msg.sdpMid, sdpMLineIndex: msg.sdpMLineIndex });
    } catch (err) {
      this.#c.error(ServerErrorCode.RtcBadCandidate, `ICE candidate not applied: ${(err as Error).message?.slice(0, 200)}`);
    }
  }

  /** Fails the peer (`rtc_state failed` with the code in its reason) and closes it. */
  fail(code: ServerErrorCode, why: string): void {
    if (this.#closed) return;
    // Gathering may still be waiting on the TURN server when the connect timeout fires.
    if (code === ServerErrorCode.RtcIceTimeout) this.#checkRelay(`${this.#gathered}${this.#pc?.localDescription?.sdp ?? ''}`);
    this.#end('failed', `${code}: ${why}`);
  }

  /** Closes the peer connection: `rtc_close` (sends `rtc_state closed`), or the client left (`silent`). */
  close(reason: string, silent = false): void {
    if (this.#closed) return;
    this.#end('closed', reason, silent);
  }

  #end(state: 'failed' | 'closed', reason: string, silent = false): void {
    this.#closed = true;
    if (this.#timer) clearTimeout(this.#timer);
    if (this.#watch) clearInterval(this.#watch);
    const pc = this.#pc;
    this.#pc = undefined;
    pc?.close().catch((err: unknown) => this.#c.log.warn(`closing a WebRTC peer connection: ${(err as Error).message}`));
    if (!silent) this.#setState(state, reason);
    else this.#to(state);
  }

  /** @throws IllegalTransitionError (`illegal_transition`) on an edge {@link RTC_PEER_TRANSITIONS} does not have */
  #to(state: RtcState): boolean {
    if (this.#state === state) return false;
    this.#state = transition('RtcPeer', RTC_PEER_TRANSITIONS, this.#state, state);
    return true;
  }

  #setState(state: RtcState, reason?: string): void {
    if (!this.#to(state)) return;
    this.#c.send({ type: 'rtc_state', state, ...(reason === undefined ? {} : { reason }) });
    this.#c.state(state, reason);
  }
}
