/**
 * A client's WebRTC link (docs/protocol.md "WebRTC"): an RTCPeerConnection that receives the
 * app's outbound video and audio tracks, signalled over the client's WebSocket. Browser-safe: it
 * uses the page's `RTCPeerConnection`; in Node pass one (werift's, for example) as
 * `options.RTCPeerConnection`.
 *
 * While the link is `connected` the server sends no media frame on the WebSocket: the tracks come
 * as {@link WebRtcLink.tracks} (`MediaStreamTrack`s in a browser). When it fails or closes, media
 * is back on the WebSocket (the `frame` / `audio` events) without anything to do. After a
 * reconnection of the WebSocket (a new server connection) it offers again by itself.
 */
import { TypedEmitter } from '../base/emitter.js';
import { ClientErrorCode, ReactorClientError } from '../base/errors.js';
import { transition } from '../base/protocol.js';
import type { RtcAnswerMessage, RtcCandidateMessage, RtcState, RtcStateMessage, RtcTrackMapping, TransitionTable } from '../base/protocol.js';
import type { RtcPublishLink, RtcPublishPeer } from '../media/rtc-publish.js';
import type {
  RtcLinkClient,
  RtcLinkStats,
  RtcPeerConnectionConstructor,
  RtcPeerConnectionLike,
  RtcTrack,
  WebRtcLinkEvents,
  WebRtcLinkOptions,
} from './rtc-link-types.js';

export type * from './rtc-link-types.js';

/**
 * What the link's connect window adds to the server's `welcome.webrtc.connectTimeoutMs`. The
 * link waits twice that long for the server's answer, then that long again from the answer: the
 * server's window starts when it makes its peer, before it answers, so its `rtc_state failed`
 * (with the reason) comes before the client gives up by itself, however long a busy server took
 * to answer.
 */
const SIGNALLING_MARGIN_MS = 1000;
/** The connect window against a server whose welcome has no `webrtc` (older servers). */
const DEFAULT_TIMEOUT_MS = 5000;

/** The shortest span the link's bitrate is measured over, ms. */
const BITRATE_WINDOW_MS = 500;

/** Thrown by {@link WebRtcLink.open} when the link did not connect. */
export class WebRtcFailedError extends ReactorClientError {
  constructor(message: string) {
    super(ClientErrorCode.WebRtcFailed, message);
  }
}

/**
 * For each state, the states a link may move to. A link offers again from any state after the
 * WebSocket reconnected (a new server connection), so each state reaches `connecting`; the server
 * reports `failed` or `closed` for its peer, and `close()` ends a link that did not fail. A move to
 * the state it is in is no change, not an edge. A server's `rtc_state` the table does not allow
 * fails the link, naming both states.
 */
export const RTC_LINK_TRANSITIONS: TransitionTable<RtcState> = {
  connecting: ['connected', 'failed', 'closed'],
  connected: ['connecting', 'failed', 'closed'],
  failed: ['connecting'],
  closed: ['connecting'],
};

export class WebRtcLink extends TypedEmitter<WebRtcLinkEvents> implements RtcPublishLink {
  readonly #client: RtcLinkClient;
  readonly #o: Required<Pick<WebRtcLinkOptions, 'RTCPeerConnection' | 'audio'>> & Omit<WebRtcLinkOptions, 'RTCPeerConnection' | 'audio'>;
  /** What STUN/TURN servers answered with an error while connecting (`icecandidateerror`), for the failure's reason. */
  #iceErrors: string[] = [];
  #pc: RtcPeerConnectionLike | undefined;
  #state: RtcState = 'connecting';
  #mapping: RtcTrackMapping[] = [];
  readonly tracks = new Map<string, RtcTrack>();
  #closed = false;
  #pendingTracks: { mid: string | null | undefined; track: { kind: string; id: string } }[] = [];
  #last: { at: number; bytes: number } | undefined;
  #bitrate: number | undefined;
  readonly #off: (() => void)[] = [];
  /** Renegotiations run one after the other (publications add and remove sendonly transceivers). */
  #renegotiating: Promise<void> = Promise.resolve();
  /** The renegotiation waiting for its answer. */
  #answerWaiter: { resolve(): void; reject(err: Error): void } | undefined;
  /** The first connect's: the server answered its offer (the window starts again). */
  #onFirstAnswer: (() => void) | undefined;

  private constructor(client: RtcLinkClient, options: WebRtcLinkOptions) {
    super();
    const PC = options.RTCPeerConnection ?? (globalThis as { RTCPeerConnection?: RtcPeerConnectionConstructor }).RTCPeerConnection;
    if (!PC) throw new WebRtcFailedError("no RTCPeerConnection here: pass options.RTCPeerConnection (in Node, werift's)");
    this.#client = client;
    this.#o = { ...options, RTCPeerConnection: PC, audio: options.audio ?? true };
    this.#off.push(client.on('rtc', (m) => void this.#onSignal(m)));
    // The server refused the offer (an error without id): no answer will come.
    this.#off.push(
      client.on('error', (e) => {
        const code = (e as { code?: string }).code;
        const refused = code === 'rtc_disabled' || code === 'rtc_bad_offer' || code === 'rtc_no_codec';
        if (refused && this.#answerWaiter) this.#answerWaiter.reject(new WebRtcFailedError(`the server refused the renegotiation: ${e.message}`));
        else if (this.#state === 'connecting' && refused) this.#setState('failed', e.message);
      }),
    );
    // A new server connection (the WebSocket reconnected): the server's peer went with the old one.
    this.#off.push(client.on('welcome', () => void this.#restart()));
  }

  /**
   * Opens a link on a connected client; resolves once it is `connected`.
   * @throws {WebRtcFailedError} `webrtc_failed` when it failed or did not connect within `timeoutMs` (the link is closed then; media stays on the WebSocket).
   */
  static async open(client: RtcLinkClient, options: WebRtcLinkOptions = {}): Promise<WebRtcLink> {
    const link = WebRtcLink.start(client, options);
    await link.ready;
    return link;
  }

  /** Starts a link; {@link ready} settles when it connected, or failed (then it is closed and {@link reason} says why). */
  static start(client: RtcLinkClient, options: WebRtcLinkOptions = {}): WebRtcLink {
    const link = new WebRtcLink(client, options);
    link.ready = link.#offer().then(() => link.#connected());
    link.ready.catch((err: unknown) => {
      link.reason = (err as Error).message;
      link.close();
    });
    return link;
  }

  /** Resolves once connected; rejects with {@link WebRtcFailedError} when it failed or timed out. */
  ready: Promise<void> = Promise.resolve();
  /** Why the link failed (undefined while it works). */
  reason: string | undefined;

  /** `connecting`, `connected`, `failed` or `closed`. */
  get state(): RtcState {
    return this.#state;
  }

  /** Where media comes now: `webrtc` while connected, else `websocket`. */
  get transport(): 'webrtc' | 'websocket' {
    return this.#state === 'connected' ? 'webrtc' : 'websocket';
  }

  /** The connect (and renegotiation) window: the caller's, else the server's plus a margin. */
  get #timeoutMs(): number {
    const setup = this.#client.webrtcSetup;
    return this.#o.timeoutMs ?? (setup ? setup.connectTimeoutMs + SIGNALLING_MARGIN_MS : DEFAULT_TIMEOUT_MS);
  }

  /** `; this browser's ICE: <server>: 401 Unauthorized` when a STUN/TURN server refused or was unreachable. */
  #iceErrorNote(): string {
    return this.#iceErrors.length === 0 ? '' : `; this side's ICE: ${this.#iceErrors.join('; ')}`;
  }

  #connected(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (this.#state === 'connected') return resolve();
      const timeoutMs = this.#timeoutMs;
      let answered = false;
      const giveUp = (): void => {
        off();
        this.#onFirstAnswer = undefined;
        reject(
          new WebRtcFailedError(
            answered
              ? `webrtc_failed: WebRTC did not connect within ${timeoutMs} ms (UDP blocked or no usable candidate${this.#iceErrorNote()}); media stays on the WebSocket`
              : `webrtc_failed: the server did not answer the WebRTC offer within ${2 * timeoutMs} ms; media stays on the WebSocket`,
          ),
        );
      };
      // The answer may take a busy server longer than the window: its first offer loads the
      // WebRTC stack and gathers candidates before it answers, and its own window (whose end
      // is the reason to show) started only once it made its peer. Twice the window for it.
      let timer = setTimeout(giveUp, 2 * timeoutMs);
      // From the answer on, the server's own window is running: give it the whole of ours again.
      this.#onFirstAnswer = () => {
        this.#onFirstAnswer = undefined;
        answered = true;
        clearTimeout(timer);
        timer = setTimeout(giveUp, timeoutMs);
      };
      const off = this.on('state', (s) => {
        if (s.state === 'connected') {
          clearTimeout(timer);
          off();
          this.#onFirstAnswer = undefined;
          resolve();
        } else if (s.state === 'failed' || s.state === 'closed') {
          clearTimeout(timer);
          off();
          this.#onFirstAnswer = undefined;
          reject(new WebRtcFailedError(`WebRTC ${s.state}${s.reason ? `: ${s.reason}` : ''}${this.#iceErrorNote()}`));
        }
      });
    });
  }

  async #offer(): Promise<void> {
    this.#setState('connecting');
    // The caller's servers replace the server's, and then its policy is the caller's too.
    const setup = this.#client.webrtcSetup;
    const iceServers = this.#o.iceServers ?? setup?.iceServers;
    const policy = this.#o.iceTransportPolicy ?? (this.#o.iceServers ? undefined : setup?.iceTransportPolicy);
    const pc = new this.#o.RTCPeerConnection({
      ...(iceServers && iceServers.length > 0 ? { iceServers } : {}),
      ...(policy === 'relay' ? { iceTransportPolicy: policy } : {}),
    });
    this.#pc = pc;
    this.#iceErrors = [];
    pc.onicecandidateerror = (e) => {
      if (pc !== this.#pc || this.#iceErrors.length >= 3) return;
      const what = `${e.url ?? 'a STUN/TURN server'} answered ${e.errorCode ?? '?'}${e.errorText ? ` ${e.errorText}` : ''}`;
      if (!this.#iceErrors.includes(what)) this.#iceErrors.push(what);
    };
    this.#mapping = [];
    this.tracks.clear();
    const out = this.#client.schema.tracks.filter((t) => t.direction === 'out');
    for (const t of out) if (t.kind === 'video' || (t.kind === 'audio' && this.#o.audio)) pc.addTransceiver(t.kind, { direction: 'recvonly' });
    pc.onicecandidate = (e) => {
      if (pc !== this.#pc) return;
      const c = e.candidate;
      this.#send({
        type: 'rtc_candidate',
        candidate: c?.candidate ?? '',
        ...(c?.sdpMid != null ? { sdpMid: c.sdpMid } : {}),
        ...(c?.sdpMLineIndex != null ? { sdpMLineIndex: c.sdpMLineIndex } : {}),
      });
    };
    pc.ontrack = (e) => {
      if (pc !== this.#pc) return;
      this.#pendingTracks.push({ mid: e.transceiver?.mid, track: e.track });
      this.#mapTracks();
    };
    pc.onconnectionstatechange = () => {
      if (pc === this.#pc && pc.connectionState === 'failed') this.#setState('failed', "the browser's ICE failed");
    };
    const offer = await pc.createOffer();
    await pc.setLocalDescription(offer);
    this.#send({ type: 'rtc_offer', sdp: offer.sdp ?? '' });
  }

  #mapTracks(): void {
    for (const p of this.#pendingTracks.splice(0)) {
      const m = this.#mapping.find((x) => x.mid === p.mid && x.direction === 'out');
      if (!m) {
        this.#pendingTracks.push(p);
        continue;
      }
      const t: RtcTrack = { name: m.track, kind: p.track.kind === 'audio' ? 'audio' : 'video', track: p.track };
      this.tracks.set(m.track, t);
      this.emit('track', t);
    }
  }

  async #onSignal(m: RtcAnswerMessage | RtcCandidateMessage | RtcStateMessage): Promise<void> {
    const pc = this.#pc;
    if (!pc || this.#closed) return;
    try {
      if (m.type === 'rtc_answer') {
        this.#mapping = m.tracks;
        await pc.setRemoteDescription({ type: 'answer', sdp: m.sdp });
        this.#mapTracks();
        this.#onFirstAnswer?.();
        this.#answerWaiter?.resolve();
      } else if (m.type === 'rtc_candidate') {
        if (m.candidate !== '') await pc.addIceCandidate({ candidate: m.candidate, sdpMid: m.sdpMid ?? null, sdpMLineIndex: m.sdpMLineIndex ?? null });
      } else {
        this.#setState(m.state, m.reason);
      }
    } catch (err) {
      this.#answerWaiter?.reject(err as Error);
      this.#setState('failed', `signalling: ${(err as Error).message}`);
    }
  }

  /** The peer connection while connected (a publication adds its sendonly transceiver to it, `rtc-publish.ts`). */
  peer(): RtcPublishPeer | undefined {
    return this.#state === 'connected' ? (this.#pc as unknown as RtcPublishPeer | undefined) : undefined;
  }

  /**
   * One renegotiation, after the ones before it: a new offer as the local description,
   * `beforeOffer()` (a `publish` naming the new transceiver's mid), `rtc_offer`, and the answer
   * applied. Rejects with {@link WebRtcFailedError} when the link is not connected, the server
   * refuses the offer, or no answer comes within `timeoutMs`.
   */
  renegotiate(beforeOffer?: () => Promise<void>): Promise<void> {
    const run = this.#renegotiating.then(async () => {
      const pc = this.#pc;
      if (!pc || this.#state !== 'connected') throw new WebRtcFailedError(`cannot renegotiate: the WebRTC link is ${this.#state}`);
      const offer = await pc.createOffer();
      await pc.setLocalDescription(offer);
      await beforeOffer?.();
      let timer: ReturnType<typeof setTimeout> | undefined;
      const answered = new Promise<void>((resolve, reject) => {
        this.#answerWaiter = { resolve, reject };
        const timeoutMs = this.#timeoutMs;
        timer = setTimeout(() => reject(new WebRtcFailedError(`no rtc_answer to a renegotiation within ${timeoutMs} ms`)), timeoutMs);
      });
      this.#send({ type: 'rtc_offer', sdp: offer.sdp ?? '' });
      try {
        await answered;
      } finally {
        clearTimeout(timer);
        this.#answerWaiter = undefined;
      }
    });
    this.#renegotiating = run.catch(() => undefined);
    return run;
  }

  /** @throws IllegalTransitionError (`illegal_transition`) on an edge {@link RTC_LINK_TRANSITIONS} does not have */
  #setState(state: RtcState, reason?: string): void {
    if (this.#state === state) return;
    this.#state = transition('WebRtcLink', RTC_LINK_TRANSITIONS, this.#state, state);
    if (reason !== undefined && state === 'failed') this.reason = reason;
    // Either end of the peer connection is gone: later events of this one are stale.
    if (state === 'failed') this.#dropPeer(true);
    else if (state === 'closed') this.#dropPeer(false);
    if (this.#client.latency) this.#client.latency.transport = state === 'connected' ? 'webrtc' : 'websocket';
    this.emit('state', reason === undefined ? { state } : { state, reason });
  }

  async #restart(): Promise<void> {
    if (this.#closed) return;
    this.#dropPeer(false);
    try {
      await this.#offer();
    } catch (err) {
      this.#setState('failed', (err as Error).message);
    }
  }

  #dropPeer(tellServer: boolean): void {
    const pc = this.#pc;
    this.#pc = undefined;
    if (tellServer) this.#send({ type: 'rtc_close' });
    try {
      pc?.close();
    } catch {
      // Already closed.
    }
  }

  #send(msg: Parameters<RtcLinkClient['signal']>[0]): void {
    try {
      this.#client.signal(msg);
    } catch {
      // The socket is down: the next welcome offers again.
    }
  }

  /** Transport figures from the peer connection (rtt, bitrate, fps, freezes); zeros before it connected. */
  async stats(): Promise<RtcLinkStats> {
    const s: RtcLinkStats = {
      rttMs: undefined,
      bitrate: undefined,
      candidates: undefined,
      fps: undefined,
      framesDecoded: 0,
      framesDropped: 0,
      freezes: 0,
      freezeMs: 0,
      packetsLost: 0,
      nacks: 0,
      plis: 0,
    };
    const pc = this.#pc;
    if (!pc) return s;
    const report = await pc.getStats();
    let bytes = 0;
    const byId = new Map<unknown, Record<string, unknown>>();
    let selectedPair: unknown;
    report.forEach((r) => {
      byId.set(r['id'], r);
      if (r['type'] === 'transport' && r['selectedCandidatePairId'] !== undefined) selectedPair = r['selectedCandidatePairId'];
      if (r['type'] === 'candidate-pair' && selectedPair === undefined && r['nominated'] === true && r['state'] === 'succeeded') selectedPair ??= r['id'];
      const n = (k: string): number => (typeof r[k] === 'number' ? (r[k] as number) : 0);
      if (r['type'] === 'inbound-rtp' && r['kind'] === 'video') {
        bytes += n('bytesReceived');
        s.framesDecoded += n('framesDecoded');
        s.framesDropped += n('framesDropped');
        s.freezes += n('freezeCount');
        s.freezeMs += n('totalFreezesDuration') * 1000;
        s.packetsLost += n('packetsLost');
        s.nacks += n('nackCount');
        s.plis += n('pliCount');
        if (typeof r['framesPerSecond'] === 'number') s.fps = r['framesPerSecond'];
      }
      if (r['type'] === 'candidate-pair' && (r['nominated'] === true || r['selected'] === true) && typeof r['currentRoundTripTime'] === 'number') {
        s.rttMs = (r['currentRoundTripTime'] as number) * 1000;
      }
    });
    const pair = selectedPair === undefined ? undefined : byId.get(selectedPair);
    const type = (id: unknown): string => String(byId.get(id)?.['candidateType'] ?? 'unknown');
    if (pair) {
      const local = byId.get(pair['localCandidateId']);
      const protocol = String(local?.['candidateType'] === 'relay' ? (local['relayProtocol'] ?? local['protocol'] ?? 'udp') : (local?.['protocol'] ?? 'udp'));
      s.candidates = { local: type(pair['localCandidateId']), remote: type(pair['remoteCandidateId']), protocol };
    }
    // Over at least half a second: two callers a moment apart (a status line, the stats reporter) must not see each other's share as 0.
    const now = Date.now();
    const last = this.#last;
    if (last && now - last.at >= BITRATE_WINDOW_MS) {
      this.#bitrate = Math.round(((bytes - last.bytes) * 8 * 1000) / (now - last.at));
      this.#last = { at: now, bytes };
    } else if (!last) {
      this.#last = { at: now, bytes };
    }
    s.bitrate = this.#bitrate;
    return s;
  }

  /** Closes the link (`rtc_close`): media goes back to the WebSocket. */
  close(): void {
    if (this.#closed) return;
    const was = this.#pc !== undefined;
    this.#dropPeer(was && this.#state !== 'failed');
    this.#closed = true;
    if (this.#client.latency) this.#client.latency.transport = 'websocket';
    for (const off of this.#off.splice(0)) off();
    if (this.#state !== 'failed') this.#setState('closed');
  }
}
