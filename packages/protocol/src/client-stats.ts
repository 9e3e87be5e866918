/**
 * The shape check of a `client_stats` report: its keys, its types and each value's range. What
 * depends on the connection (command names of the schema, more samples than commands, the rate)
 * is checked by the server that receives it.
 */
import { MAX_CLIENT_STATS_MS, MAX_CLIENT_STATS_SAMPLES, MAX_FIRST_FRAME_MS, type ClientStatsMessage, type ClientStatsSample } from './client-messages.js';
import { WireErrorCode } from './codes.js';

/** A well-formed report, or why it is refused (`invalid_client_stats`). */
export type ParsedClientStats =
  | { readonly ok: true; readonly message: ClientStatsMessage }
  | { readonly ok: false; readonly code: typeof WireErrorCode.InvalidClientStats; readonly message: string };

/** Longest command name a sample may carry (a wire name of the schema is shorter). */
const MAX_NAME_LENGTH = 64;
/** Highest `fps` a report may carry. */
const MAX_FPS = 1000;
/** Most freezes one report may count (one every 200 ms for a minute is 300). */
const MAX_FREEZES = 10_000;
/** Most dropped frames one report may count. */
const MAX_DROPPED = 1_000_000;
const KEYS = new Set(['type', 'transport', 'samples', 'firstFrameMs', 'freezes', 'freezeMs', 'dropped', 'fps']);

/**
 * Checks a parsed JSON object whose `type` is `client_stats`.
 *
 * @returns the report typed, or `invalid_client_stats` with what is wrong.
 */
export function parseClientStats(m: Record<string, unknown>): ParsedClientStats {
  const extra = Object.keys(m).filter((k) => !KEYS.has(k));
  if (extra.length > 0) {
    return refuse(
      `unknown key(s) ${extra
        .slice(0, 5)
        .map((k) => JSON.stringify(k.slice(0, 40)))
        .join(', ')}; a client_stats has only ${[...KEYS].join(', ')}`,
    );
  }
  const transport = m['transport'];
  if (transport !== 'websocket' && transport !== 'webrtc') return refuse('"transport" must be "websocket" or "webrtc"');
  const samples = m['samples'];
  if (!Array.isArray(samples)) return refuse('"samples" must be an array of {command, ms}');
  if (samples.length > MAX_CLIENT_STATS_SAMPLES) {
    return refuse(`${samples.length} samples in one report; at most ${MAX_CLIENT_STATS_SAMPLES} (send the rest in the next one)`);
  }
  const checked: ClientStatsSample[] = [];
  for (const [i, s] of samples.entries()) {
    const sample = checkSample(s);
    if (typeof sample === 'string') return refuse(`samples[${i}]: ${sample}`);
    checked.push(sample);
  }
  const message: ClientStatsMessage = { type: 'client_stats', transport, samples: checked, freezes: 0, freezeMs: 0, dropped: 0 };
  const counts: [key: 'freezes' | 'dropped', max: number][] = [
    ['freezes', MAX_FREEZES],
    ['dropped', MAX_DROPPED],
  ];
  for (const [key, max] of counts) {
    const v = m[key];
    if (!Number.isInteger(v) || (v as number) < 0 || (v as number) > max) return refuse(`"${key}" must be a whole number from 0 to ${max}`);
    message[key] = v as number;
  }
  const freezeMs = m['freezeMs'];
  if (!inRange(freezeMs, MAX_FIRST_FRAME_MS)) return refuse(`"freezeMs" must be a number of ms from 0 to ${MAX_FIRST_FRAME_MS}`);
  message.freezeMs = freezeMs;
  if (message.freezes === 0 && freezeMs > 0) return refuse('"freezeMs" is over 0 with no freeze counted');
  if (m['firstFrameMs'] !== undefined) {
    if (!inRange(m['firstFrameMs'], MAX_FIRST_FRAME_MS)) return refuse(`"firstFrameMs" must be a number of ms from 0 to ${MAX_FIRST_FRAME_MS}`);
    message.firstFrameMs = m['firstFrameMs'];
  }
  if (m['fps'] !== undefined) {
    if (!inRange(m['fps'], MAX_FPS)) return refuse(`"fps" must be a number from 0 to ${MAX_FPS}`);
    message.fps = m['fps'];
  }
  return { ok: true, message };
}

function checkSample(s: unknown): ClientStatsSample | string {
  if (typeof s !== 'object' || s === null || Array.isArray(s)) return 'each sample must be an object {command, ms}';
  const o = s as Record<string, unknown>;
  if (Object.keys(o).some((k) => k !== 'command' && k !== 'ms')) return 'a sample has only "command" and "ms"';
  const command = o['command'];
  if (typeof command !== 'string' || command === '' || command.length > MAX_NAME_LENGTH) {
    return `"command" must be a command's wire name (1 to ${MAX_NAME_LENGTH} characters)`;
  }
  if (!inRange(o['ms'], MAX_CLIENT_STATS_MS)) return `"ms" must be a number of ms from 0 to ${MAX_CLIENT_STATS_MS}`;
  return { command, ms: o['ms'] };
}

function inRange(v: unknown, max: number): v is number {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0 && v <= max;
}

function refuse(why: string): ParsedClientStats {
  return { ok: false, code: WireErrorCode.InvalidClientStats, message: `client_stats refused, nothing of it counted: ${why}` };
}
