/**
 * The envelope check of a client's text message, in one place: JSON, a known `type`, and the
 * keys each type allows. What the fields mean (a command's name and params, whether a track
 * exists) is checked by whoever handles the message; this only says whether it is well formed.
 */
import { CLIENT_MESSAGE_TYPES, type ClientMessage, type SelectVideoMessage } from './client-messages.js';
import { parseClientStats } from './client-stats.js';
import { WireErrorCode } from './codes.js';
import { RTC_ENVELOPES, parseRtcFields } from './rtc.js';

/** Longest id a client may choose, in code points. */
export const MAX_COMMAND_ID_LENGTH = 64;

/** A well-formed client message, or the error answer a malformed one gets. */
export type ParsedClientMessage =
  | { readonly ok: true; readonly message: ClientMessage }
  | { readonly ok: false; readonly code: ClientMessageRefusal; readonly message: string; readonly id?: string };

/** The codes a malformed client message is answered with. */
export type ClientMessageRefusal = typeof WireErrorCode.MalformedMessage | typeof WireErrorCode.UnknownMessageType | typeof WireErrorCode.InvalidClientStats;

const EXAMPLE = 'send {"type":"command","id":"1","name":"...","params":{...}}';

/** Keys each message type may carry (besides `type`); `true`: required. */
const ENVELOPES: Readonly<Record<ClientMessage['type'], Readonly<Record<string, boolean>>>> = {
  command: { id: true, name: true, params: false },
  publish: { id: true, track: true, transport: false, mid: false },
  unpublish: { id: true, track: true },
  pause_track: { id: true, track: true },
  resume_track: { id: true, track: true },
  select_video: { id: true, codec: true, tier: false },
  request_key_frame: { track: true },
  clip: { id: true, seconds: false, track: false },
  recording: { id: true, action: true },
  request_control: { id: true },
  release_control: { id: true },
  // Checked by parseClientStats (client-stats.ts), which answers `invalid_client_stats`.
  client_stats: { transport: true, samples: true, firstFrameMs: false, freezes: true, freezeMs: true, dropped: true, fps: false },
  ...RTC_ENVELOPES,
};

/**
 * Checks one text message's envelope.
 *
 * @returns the message typed by its `type`, or the error to answer (`malformed_message`,
 *   `unknown_message_type`), with the message's id when one could be read.
 */
export function parseClientMessage(text: string): ParsedClientMessage {
  // Not an object at all: answered without JSON.parse, whose exception costs more than the rest of the check.
  if (!/^\s*\{/.test(text)) return malformed(`message is not a JSON object; ${EXAMPLE}`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    return malformed(`message is not valid JSON (${(err as Error).message.slice(0, 200)}); ${EXAMPLE}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed) || typeof (parsed as { type?: unknown }).type !== 'string') {
    return malformed('message must be a JSON object with a string "type"');
  }
  const m = parsed as Record<string, unknown>;
  const type = m['type'] as string;
  if (!(CLIENT_MESSAGE_TYPES as readonly string[]).includes(type)) {
    return {
      ok: false,
      code: WireErrorCode.UnknownMessageType,
      message: `unknown message type ${JSON.stringify(type).slice(0, 80)}; clients send ${CLIENT_MESSAGE_TYPES.map((t) => `"${t}"`).join(', ')}`,
      ...withId(validId(m['id'])),
    };
  }
  const kind = type as ClientMessage['type'];
  if (kind === 'request_key_frame') {
    // Fire and forget: no id, no reply.
    if (typeof m['track'] !== 'string' || m['track'] === '')
      return malformed('a request_key_frame message needs a "track": the name of an outbound video track');
    const extra = Object.keys(m).filter((k) => k !== 'type' && k !== 'track');
    if (extra.length > 0)
      return malformed(
        `unknown key(s) ${extra
          .slice(0, 5)
          .map((k) => JSON.stringify(k.slice(0, 40)))
          .join(', ')} in request_key_frame; it has only type and track`,
      );
    return { ok: true, message: { type: kind, track: m['track'] } };
  }
  // Fire and forget, like request_key_frame; its own code, so a client can tell its report was refused.
  if (kind === 'client_stats') return parseClientStats(m);
  if (kind === 'rtc_offer' || kind === 'rtc_candidate' || kind === 'rtc_close') {
    // Signalling: no id, no reply (answered by rtc_answer / rtc_state, or an error).
    const allowed = ENVELOPES[kind];
    const extra = Object.keys(m).filter((k) => k !== 'type' && !Object.hasOwn(allowed, k));
    if (extra.length > 0) {
      const keys = ['type', ...Object.keys(allowed)];
      return malformed(
        `unknown key(s) ${extra
          .slice(0, 5)
          .map((k) => JSON.stringify(k.slice(0, 40)))
          .join(', ')} in ${kind}; it has only ${keys.join(', ')}`,
      );
    }
    const rtc = parseRtcFields(kind, m);
    return rtc.ok ? { ok: true, message: rtc.message } : malformed(rtc.why);
  }
  const id = validId(m['id']);
  if (id === undefined) {
    return malformed(`a ${kind} message needs an "id": a non-empty string of at most ${MAX_COMMAND_ID_LENGTH} characters, echoed in its answer`);
  }
  if (kind === 'command' && (typeof m['name'] !== 'string' || m['name'] === '')) {
    return malformed('a command needs a "name": the wire name of a command in the schema', id);
  }
  if (kind === 'select_video' && (typeof m['codec'] !== 'string' || (m['tier'] !== undefined && typeof m['tier'] !== 'string'))) {
    return malformed('a select_video message needs a "codec" (one of welcome.video.codecs) and optionally a "tier" (a name from welcome.video.tiers)', id);
  }
  if (kind === 'clip') {
    if (m['seconds'] !== undefined && (typeof m['seconds'] !== 'number' || !Number.isFinite(m['seconds']))) {
      return malformed('a clip message takes an optional "seconds": a number of seconds to keep', id);
    }
    if (m['track'] !== undefined && (typeof m['track'] !== 'string' || m['track'] === '')) {
      return malformed('a clip message takes an optional "track": the name of an outbound video track', id);
    }
  }
  if (kind === 'publish') {
    const why = publishTransportProblem(m['transport'], m['mid']);
    if (why) return malformed(why, id);
  }
  if (kind === 'recording' && m['action'] !== 'start' && m['action'] !== 'stop') {
    return malformed('a recording message needs an "action": "start" or "stop"', id);
  }
  if (
    kind !== 'command' &&
    kind !== 'select_video' &&
    kind !== 'clip' &&
    kind !== 'recording' &&
    kind !== 'request_control' &&
    kind !== 'release_control' &&
    (typeof m['track'] !== 'string' || m['track'] === '')
  ) {
    return malformed(`a ${kind} message needs a "track": the name of a track in schema.tracks`, id);
  }
  const allowed = ENVELOPES[kind];
  // Own keys only: `k in allowed` would let `constructor`, `toString`, `__proto__` ... through.
  const extra = Object.keys(m).filter((k) => k !== 'type' && !Object.hasOwn(allowed, k));
  if (extra.length > 0) {
    const shown = extra
      .slice(0, 5)
      .map((k) => JSON.stringify(k.slice(0, 40)))
      .join(', ');
    const keys = ['type', ...Object.keys(allowed)];
    return malformed(
      `unknown key(s) ${shown}${extra.length > 5 ? ` and ${extra.length - 5} more` : ''} in ${kind}; a ${kind} has only ${keys.slice(0, -1).join(', ')} and ${keys.at(-1)!}`,
      id,
    );
  }
  if (kind === 'command') {
    const message: ClientMessage = { type: 'command', id, name: m['name'] as string };
    if (m['params'] !== undefined) message.params = m['params'] as Record<string, unknown>;
    return { ok: true, message };
  }
  if (kind === 'select_video') {
    const message: ClientMessage = { type: kind, id, codec: m['codec'] as SelectVideoMessage['codec'] };
    if (m['tier'] !== undefined) message.tier = m['tier'] as string;
    return { ok: true, message };
  }
  if (kind === 'clip') {
    const message: ClientMessage = { type: kind, id };
    if (m['seconds'] !== undefined) message.seconds = m['seconds'] as number;
    if (m['track'] !== undefined) message.track = m['track'] as string;
    return { ok: true, message };
  }
  if (kind === 'recording') return { ok: true, message: { type: kind, id, action: m['action'] as 'start' | 'stop' } };
  if (kind === 'publish' && m['transport'] !== undefined) {
    const message: ClientMessage = { type: kind, id, track: m['track'] as string, transport: m['transport'] as 'websocket' | 'webrtc' };
    if (m['mid'] !== undefined) message.mid = m['mid'] as string;
    return { ok: true, message };
  }
  if (kind === 'request_control' || kind === 'release_control') return { ok: true, message: { type: kind, id } };
  return { ok: true, message: { type: kind, id, track: m['track'] as string } };
}

/** Longest `mid` of a `publish` (browsers use short numbers: "0", "1", ...). */
const MAX_MID_LENGTH = 32;

/** What is wrong with a `publish`'s `transport` and `mid`, or `undefined` when they are fine. */
function publishTransportProblem(transport: unknown, mid: unknown): string | undefined {
  if (transport !== undefined && transport !== 'websocket' && transport !== 'webrtc') {
    return 'a publish message takes an optional "transport": "websocket" (binary frames on this socket, the default) or "webrtc" (RTP on the peer connection)';
  }
  if (transport === 'webrtc' && (typeof mid !== 'string' || mid === '' || mid.length > MAX_MID_LENGTH)) {
    return `a publish with "transport":"webrtc" needs a "mid": the mid (a string of at most ${MAX_MID_LENGTH} characters) of the sendonly transceiver that carries the track, as RTCRtpTransceiver.mid gives it after setLocalDescription`;
  }
  if (transport !== 'webrtc' && mid !== undefined) {
    return 'a publish message takes a "mid" only with "transport":"webrtc"';
  }
  return undefined;
}

function malformed(message: string, id?: string): ParsedClientMessage {
  return { ok: false, code: WireErrorCode.MalformedMessage, message, ...withId(id) };
}

function withId(id: string | undefined): { id?: string } {
  return id === undefined ? {} : { id };
}

/** The message's id if it is a usable one: a non-empty string of at most {@link MAX_COMMAND_ID_LENGTH} code points. */
export function validId(id: unknown): string | undefined {
  if (typeof id !== 'string' || id.length === 0 || id.length > 2 * MAX_COMMAND_ID_LENGTH) return undefined;
  // Code points, as JSON Schema's maxLength counts them (an emoji is one, not two UTF-16 units).
  let n = 0;
  for (const _ of id) if (++n > MAX_COMMAND_ID_LENGTH) return undefined;
  return id;
}
