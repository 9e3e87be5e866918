/**
 * WebRTC signalling over the WebSocket (issue 24). The client offers, the server answers; ICE
 * candidates trickle both ways as `rtc_candidate`; `rtc_state` tells the client where its media
 * goes. While the state is `connected` the server sends that client's outbound video and audio
 * only over WebRTC (no binary media frames on the WebSocket); on `failed` / `closed` it goes back
 * to the WebSocket. Commands, state, messages and stats always stay on the WebSocket.
 */

/** Longest SDP a client may offer, in characters (a browser's offer for a few tracks is 5-15 KB). */
export const MAX_RTC_SDP_LENGTH = 65_536;
/** Longest ICE candidate line, in characters. */
export const MAX_RTC_CANDIDATE_LENGTH = 1024;

/**
 * Client -> server: an SDP offer. Recvonly transceivers for the schema's outbound tracks,
 * sendonly ones for what the client publishes. A later `rtc_offer` on the same connection is a
 * renegotiation. Answered with `rtc_answer` (or an `error`: `rtc_disabled`, `rtc_bad_offer`,
 * `rtc_no_codec`).
 */
export interface RtcOfferMessage {
  type: 'rtc_offer';
  sdp: string;
}

/**
 * Both directions: one trickled ICE candidate (the `a=candidate` line without `a=`), or `''`
 * for the end of candidates.
 */
export interface RtcCandidateMessage {
  type: 'rtc_candidate';
  candidate: string;
  sdpMid?: string;
  sdpMLineIndex?: number;
}

/** Client -> server: close the peer connection; media goes back to the WebSocket. */
export interface RtcCloseMessage {
  type: 'rtc_close';
}

/** Which schema track an m-line of the answer carries. */
export interface RtcTrackMapping {
  mid: string;
  /** Schema track name. */
  track: string;
  /** `out`: the server sends it (an outbound track); `in`: the client publishes it. */
  direction: 'out' | 'in';
}

/** Server -> client: the answer to an `rtc_offer`, with the track of each m-line. */
export interface RtcAnswerMessage {
  type: 'rtc_answer';
  sdp: string;
  tracks: RtcTrackMapping[];
}

/** Where a connection's peer connection stands. */
export type RtcState = 'connecting' | 'connected' | 'failed' | 'closed';

/**
 * Server -> client: the peer connection's state. `failed` and `closed` carry a `reason`
 * (starting with an error code of docs/errors.md, e.g. `rtc_ice_timeout: ...`).
 */
export interface RtcStateMessage {
  type: 'rtc_state';
  state: RtcState;
  reason?: string;
}

/** A STUN or TURN server, as `RTCIceServer` (`welcome.webrtc.iceServers`). */
export interface RtcIceServer {
  urls: string | string[];
  username?: string;
  credential?: string;
}

/**
 * `welcome.webrtc`: how this client should set up its peer connection (present when the
 * server's WebRTC transport is on). Pass `iceServers` and `iceTransportPolicy` to
 * `new RTCPeerConnection()` before the `rtc_offer`; TURN credentials minted from the server's
 * `turn_secret` are this client's own and expire (the username is `<expiry-unix>:<clientId>`):
 * the next welcome brings fresh ones.
 */
export interface RtcWelcome {
  /** The servers to gather candidates with (empty: host candidates only). */
  iceServers: RtcIceServer[];
  /** `relay`: use TURN relay candidates only (the server does the same). */
  iceTransportPolicy: 'all' | 'relay';
  /**
   * How long the server gives ICE and DTLS after the offer before `rtc_state failed`
   * (`rtc_ice_timeout`), ms: a client waits at least this long before it gives up.
   */
  connectTimeoutMs: number;
}

/** The signalling messages a client sends. */
export type RtcClientMessage = RtcOfferMessage | RtcCandidateMessage | RtcCloseMessage;

/** Keys each signalling message may carry (besides `type`); `true`: required. */
export const RTC_ENVELOPES = {
  rtc_offer: { sdp: true },
  rtc_candidate: { candidate: true, sdpMid: false, sdpMLineIndex: false },
  rtc_close: {},
} as const;

/**
 * Checks the fields of a signalling message whose envelope (keys) is already checked.
 * @returns the typed message, or what is wrong with it (answered as `malformed_message`).
 */
export function parseRtcFields(
  kind: RtcClientMessage['type'],
  m: Record<string, unknown>,
): { ok: true; message: RtcClientMessage } | { ok: false; why: string } {
  if (kind === 'rtc_close') return { ok: true, message: { type: kind } };
  if (kind === 'rtc_offer') {
    const sdp = m['sdp'];
    if (typeof sdp !== 'string' || sdp === '') return { ok: false, why: 'an rtc_offer needs an "sdp": the offer SDP text of RTCPeerConnection.createOffer()' };
    if (sdp.length > MAX_RTC_SDP_LENGTH) return { ok: false, why: `an rtc_offer's sdp is ${sdp.length} characters, over the limit of ${MAX_RTC_SDP_LENGTH}` };
    return { ok: true, message: { type: kind, sdp } };
  }
  const candidate = m['candidate'];
  if (typeof candidate !== 'string')
    return { ok: false, why: 'an rtc_candidate needs a "candidate": an ICE candidate line without "a=", or "" for the end of candidates' };
  if (candidate.length > MAX_RTC_CANDIDATE_LENGTH)
    return { ok: false, why: `an rtc_candidate's candidate is ${candidate.length} characters, over the limit of ${MAX_RTC_CANDIDATE_LENGTH}` };
  const sdpMid = m['sdpMid'];
  const index = m['sdpMLineIndex'];
  if (sdpMid !== undefined && sdpMid !== null && typeof sdpMid !== 'string') return { ok: false, why: 'an rtc_candidate\'s "sdpMid" must be a string' };
  if (index !== undefined && index !== null && (typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index > 255)) {
    return { ok: false, why: 'an rtc_candidate\'s "sdpMLineIndex" must be an integer from 0 to 255' };
  }
  const message: RtcCandidateMessage = { type: kind, candidate };
  if (typeof sdpMid === 'string') message.sdpMid = sdpMid;
  if (typeof index === 'number') message.sdpMLineIndex = index;
  return { ok: true, message };
}
