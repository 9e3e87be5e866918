/**
 * Options of the HTTP + WebSocket server, with their defaults and eager validation
 * (a bad option throws before anything listens, naming the option and the value).
 */
import type { VideoCodecName, VideoTierSchema } from '@reactor/protocol';
import { consoleLogger, type Logger } from '@reactor/log';
import { LOOPBACK_HOSTS, isLoopbackHost, TokenVerifier, type TokenAuthOptions } from '@reactor/access';
import { DEFAULT_MAX_UPLOAD_BYTES, DEFAULT_UPLOAD_EXPIRY_MS, DEFAULT_UPLOAD_QUOTA_BYTES, DEFAULT_UPLOAD_WAIT_MS } from '@reactor/runtime';
import { webCodecsEncoderFactory, type VideoEncoderFactory } from './video/video-encoder.js';
import type { ResolvedVideoOptions } from './video/video-streams.js';
import { resolveWebRtcOptions, type ResolvedWebRtcOptions, type WebRtcOptions } from './webrtc/rtc-options.js';
import { resolveRecordingOptions, type RecordingOptions, type ResolvedRecordingOptions } from './recording/recording-options.js';

/** Default time a dropped client may come back and resume its identity, ms (30 s, as the original's recoverable disconnect). */
export const DEFAULT_RESUME_GRACE_MS = 30_000;

/** The codecs `video.codec` accepts. */
export const VIDEO_CODECS: readonly VideoCodecName[] = ['jpeg', 'h264', 'vp8'];

/**
 * The default quality ladder: `full` at 4 Mbit/s (1280x720 at 30 fps), `half` (half the width
 * and height) at 1.5 Mbit/s, `low` (half size) at 500 kbit/s. See docs/decisions.md, "video codec".
 */
export const DEFAULT_VIDEO_TIERS: readonly VideoTierSchema[] = Object.freeze([
  Object.freeze({ name: 'full', scale: 1, bitrate: 4_000_000 }),
  Object.freeze({ name: 'half', scale: 0.5, bitrate: 1_500_000 }),
  Object.freeze({ name: 'low', scale: 0.5, bitrate: 500_000 }),
]);

/** Frames between two scheduled key frames by default (2 s at 30 fps). */
export const DEFAULT_KEY_FRAME_INTERVAL = 60;

/** How outbound video is streamed (`ServerOptions.video`). */
export interface VideoOptions {
  /**
   * The codec offered to clients besides `jpeg` (default `jpeg`: JPEG only, as before). `h264`
   * and `vp8` encode on this machine's CPU with `@napi-rs/webcodecs` (loaded only then); a
   * client receives them only after it sends `select_video`.
   */
  codec?: VideoCodecName;
  /** The quality ladder, best first (default {@link DEFAULT_VIDEO_TIERS}); names unique, scale in (0, 1], bitrate in bits/s. */
  tiers?: VideoTierSchema[];
  /** Frames between two scheduled key frames (default 60); joins, losses and flushes force more. */
  keyFrameInterval?: number;
  /** Frame rate the encoders' rate control assumes (default 30). */
  framerate?: number;
  /**
   * Makes the encoders (default: `@napi-rs/webcodecs`' `VideoEncoder`). For a custom encoder, or
   * a test that makes one fail.
   */
  encoderFactory?: VideoEncoderFactory;
}

/** Transport options (everything `serve()` takes besides the app host's own options). */
export interface ServerOptions {
  /** Interface to bind (default `127.0.0.1`; use `0.0.0.0` to accept other machines). */
  host?: string;
  /** TCP port (default 8080; 0 picks a free one, see `ReactorServer.port`). */
  port?: number;
  /**
   * Access token. When set, the WebSocket and every route but `/health` require it:
   * `?token=...`, `Authorization: Bearer ...`, or the cookie the viewer page sets.
   */
  token?: string;
  /**
   * Signed session tokens (JWTs): the keys that check them (an HMAC `secret`, an Ed25519
   * `publicKey`, a platform's `jwksUrl`). A valid token grants what its claims say (role,
   * session, tracks, upload bytes, longest session); a refused one is answered with its own code
   * (`token_expired`, `token_wrong_key`, ...). The static `token` keeps working beside it, as a
   * controller with every right. See docs/security.md.
   */
  auth?: TokenAuthOptions;
  /**
   * How long a client whose connection dropped may come back with its resume secret and keep its
   * identity (role, publications, uploads), ms (default 30000; 0: no resume).
   */
  resumeGraceMs?: number;
  /**
   * End the session after this long without a command, publication or inbound frame from any
   * client, ms (default: never). Clients see the close with reason `idle_timeout`.
   */
  idleTimeoutMs?: number;
  /**
   * The longest a session may last, ms (default: no limit; a token's `mst` claim may shorten it
   * for its holder's session). Clients see the close with reason `session_time_limit`.
   */
  maxSessionMs?: number;
  /**
   * Origins (`scheme://host[:port]`) whose pages may connect. Default: only the server's own
   * origin (and clients that send no `Origin`, such as Node). `['*']` allows every origin.
   */
  allowedOrigins?: string[];
  /**
   * Host names (the `Host` header, without the port) this server answers to, against DNS
   * rebinding: a web page whose domain resolves to 127.0.0.1 would otherwise pass the
   * same-origin check. Default: when bound to a loopback address, only `localhost`, `127.0.0.1`
   * and `[::1]`; otherwise any. `['*']` allows any (behind a reverse proxy that keeps the public
   * `Host`, list that name instead).
   */
  allowedHosts?: string[];
  /**
   * Serve on a non-loopback address without a `token` (default `false`: refused at start, since
   * anyone who can reach the address could watch and control the stream). Only on a network
   * you trust.
   */
  insecure?: boolean;
  /** Frame payload encoding (default `jpeg`). `rgb` sends raw RGB24 (large: use on localhost only). */
  encoding?: 'jpeg' | 'rgb';
  /** JPEG quality, 1-100 (default 80). */
  jpegQuality?: number;
  /** Coded video (H.264 / VP8) for clients that select it; default: JPEG only. See {@link VideoOptions}. */
  video?: VideoOptions;
  /** The WebRTC transport for outbound media (on by default; see {@link WebRtcOptions}, docs/protocol.md "WebRTC"). */
  webrtc?: WebRtcOptions;
  /** Largest inbound text message, bytes (default 65536). A bigger one closes the socket with 1009. */
  maxMessageBytes?: number;
  /**
   * Largest inbound binary frame, bytes, for an app that declares inbound tracks (default: what
   * its largest track may need: RGB24 at `maxWidth` x `maxHeight`, or one second of PCM, plus
   * 64 KiB of header and metadata). A bigger one closes the socket with 1009.
   */
  maxFrameBytes?: number;
  /**
   * Inbound messages per second per connection, once its burst is spent (default 50). More are
   * answered `rate_limited`; the connection stays open.
   */
  commandRate?: number;
  /**
   * Messages a connection may send at once (default: `commandRate`); also the most commands of
   * one connection that may wait for their replies at once (see docs/protocol.md, "Limits").
   */
  commandBurst?: number;
  /** Ping interval, ms (default 15000). A client that misses a whole interval is dropped. */
  heartbeatMs?: number;
  /** Frames a client may have waiting to be sent before the oldest is dropped (default 2). */
  maxQueuedFrames?: number;
  /**
   * Bytes buffered for one client (kernel not accepting more) beyond which it gets no new
   * frames until it drains (default 1 MiB), and 16 times which it is disconnected (the socket is
   * cut without a close handshake: the client sees code 1006).
   */
  maxBufferedBytes?: number;
  /**
   * Unsent bytes the server may hold for all clients together (default 16 MiB), checked before
   * each send: when a send would pass it, the client holding the most unsent bytes is cut
   * (1006 on its side, counted as `server_budget`) and, if that is not enough, the frame is
   * dropped. Keeps memory bounded however many clients stop reading.
   */
  maxTotalBufferedBytes?: number;
  /**
   * Unsent answer bytes (replies, errors, state: text the server owes one client) beyond which
   * the server stops reading that client's socket (default 64 KiB): TCP back-pressure, its
   * further messages wait in its own kernel buffers, not in the server's memory. Reading
   * resumes once a quarter of this is left unsent.
   */
  readPauseBytes?: number;
  /**
   * How long a client may stay unread that way, ms (default 10000): one still stuck after this
   * long is closed with code 1008 (counted as `unread_answers`).
   */
  readPauseTimeoutMs?: number;
  /** Time a client has to send its request headers, ms (default 10000); a slower one gets 408. */
  headersTimeoutMs?: number;
  /** WebSocket path (default `/ws`). */
  path?: string;
  /**
   * Largest file one upload may carry, bytes (default 50 MiB): checked on the size announced in
   * `POST /uploads` and while the `PUT` body streams in (the first byte over stops it: 413).
   */
  maxUploadBytes?: number;
  /** Bytes one session's uploads may hold together, announced ones included (default 200 MiB; at least `maxUploadBytes`). */
  uploadQuotaBytes?: number;
  /** How long a command waits for an upload it refers to whose bytes are still arriving, ms (default 10000); then `unresolved_upload`. */
  uploadWaitMs?: number;
  /** How long an announced upload may stay unwritten before it is forgotten, ms (default 60000). */
  uploadExpiryMs?: number;
  /** Folder under which each session's uploads get a temporary folder (default: the system's, `os.tmpdir()`). */
  uploadDir?: string;
  /** Where diagnostics go (default: `consoleLogger()` of `@reactor/log`); the server logs with `child({ component: 'server' })`. */
  logger?: Logger;
  /**
   * Clips (the last N seconds on demand) and session recordings, as fragmented MP4 (reactor.yaml
   * `recording:`). Absent: neither (`clip` answers `clips_disabled`). See {@link RecordingOptions}.
   */
  recording?: RecordingOptions;
}

/** Options with defaults applied. */
export type ResolvedServerOptions = Required<
  Omit<
    ServerOptions,
    'token' | 'allowedOrigins' | 'allowedHosts' | 'maxFrameBytes' | 'uploadDir' | 'video' | 'webrtc' | 'recording' | 'auth' | 'idleTimeoutMs' | 'maxSessionMs'
  >
> & {
  /** The token checker of `auth`; undefined without it. */
  verifier: TokenVerifier | undefined;
  idleTimeoutMs: number | undefined;
  maxSessionMs: number | undefined;
  video: ResolvedVideoOptions;
  webrtc: ResolvedWebRtcOptions;
  /** `undefined`: no clips, no recordings. */
  recording: ResolvedRecordingOptions | undefined;
  /** `undefined`: derived from the app's inbound tracks (see {@link ServerOptions.maxFrameBytes}). */
  maxFrameBytes: number | undefined;
  token: string | undefined;
  /** `undefined`: `os.tmpdir()`. */
  uploadDir: string | undefined;
  allowedOrigins: string[] | undefined;
  /** `undefined`: any host. */
  allowedHosts: string[] | undefined;
};

// Defined with the access rules (`@reactor/access`'s auth.ts), which the router shares without loading the server.
export { LOOPBACK_HOSTS, isLoopbackHost };

function int(name: string, v: unknown, min: number, max: number): void {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new RangeError(`options.${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(v)}`);
  }
}

function positive(name: string, v: unknown): void {
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) throw new RangeError(`options.${name} must be a positive number, got ${JSON.stringify(v)}`);
}

/**
 * Applies defaults and validates every option.
 * @throws {RangeError | TypeError} naming the option, e.g. `options.port must be an integer from 0 to 65535, got -1`.
 */
export function resolveServerOptions(o: ServerOptions = {}): ResolvedServerOptions {
  const r: ResolvedServerOptions = {
    host: o.host ?? '127.0.0.1',
    port: o.port ?? 8080,
    token: o.token,
    verifier: o.auth === undefined ? undefined : new TokenVerifier(o.auth),
    resumeGraceMs: o.resumeGraceMs ?? DEFAULT_RESUME_GRACE_MS,
    idleTimeoutMs: o.idleTimeoutMs,
    maxSessionMs: o.maxSessionMs,
    allowedOrigins: o.allowedOrigins,
    allowedHosts: undefined,
    insecure: o.insecure ?? false,
    encoding: o.encoding ?? 'jpeg',
    jpegQuality: o.jpegQuality ?? 80,
    video: resolveVideoOptions(o.video),
    webrtc: resolveWebRtcOptions(o.webrtc),
    recording: o.recording === undefined ? undefined : resolveRecordingOptions(o.recording),
    maxMessageBytes: o.maxMessageBytes ?? 64 * 1024,
    maxFrameBytes: o.maxFrameBytes,
    commandRate: o.commandRate ?? 50,
    commandBurst: o.commandBurst ?? o.commandRate ?? 50,
    heartbeatMs: o.heartbeatMs ?? 15_000,
    maxQueuedFrames: o.maxQueuedFrames ?? 2,
    maxBufferedBytes: o.maxBufferedBytes ?? 1024 * 1024,
    maxTotalBufferedBytes: o.maxTotalBufferedBytes ?? 16 * 1024 * 1024,
    readPauseBytes: o.readPauseBytes ?? 64 * 1024,
    readPauseTimeoutMs: o.readPauseTimeoutMs ?? 10_000,
    headersTimeoutMs: o.headersTimeoutMs ?? 10_000,
    path: o.path ?? '/ws',
    maxUploadBytes: o.maxUploadBytes ?? DEFAULT_MAX_UPLOAD_BYTES,
    uploadQuotaBytes: o.uploadQuotaBytes ?? Math.max(DEFAULT_UPLOAD_QUOTA_BYTES, o.maxUploadBytes ?? 0),
    uploadWaitMs: o.uploadWaitMs ?? DEFAULT_UPLOAD_WAIT_MS,
    uploadExpiryMs: o.uploadExpiryMs ?? DEFAULT_UPLOAD_EXPIRY_MS,
    uploadDir: o.uploadDir,
    logger: o.logger ?? consoleLogger(),
  };
  if (typeof r.host !== 'string' || r.host === '') throw new TypeError(`options.host must be a non-empty string, got ${JSON.stringify(r.host)}`);
  int('port', r.port, 0, 65535);
  if (r.token !== undefined && (typeof r.token !== 'string' || r.token.length === 0)) {
    throw new TypeError('options.token must be a non-empty string when given; leave it out to disable access control');
  }
  if (typeof r.insecure !== 'boolean') throw new TypeError(`options.insecure must be a boolean, got ${JSON.stringify(r.insecure)}`);
  int('resumeGraceMs', r.resumeGraceMs, 0, 3_600_000);
  if (r.idleTimeoutMs !== undefined) int('idleTimeoutMs', r.idleTimeoutMs, 1, 86_400_000);
  if (r.maxSessionMs !== undefined) int('maxSessionMs', r.maxSessionMs, 1, 7 * 86_400_000);
  if (!isLoopbackHost(r.host) && r.token === undefined && r.verifier === undefined && !r.insecure) {
    throw new RangeError(
      `options.host is ${JSON.stringify(r.host)}, not a loopback address, and no options.token is set: anyone who can reach it could watch and control the stream. ` +
        'Set options.token, bind 127.0.0.1, or pass insecure: true on a network you trust.',
    );
  }
  if (r.allowedOrigins !== undefined && (!Array.isArray(r.allowedOrigins) || r.allowedOrigins.some((x) => typeof x !== 'string'))) {
    throw new TypeError('options.allowedOrigins must be an array of origins such as "https://example.com" (or ["*"])');
  }
  if (o.allowedHosts !== undefined && (!Array.isArray(o.allowedHosts) || o.allowedHosts.some((x) => typeof x !== 'string' || x === ''))) {
    throw new TypeError('options.allowedHosts must be an array of host names such as "reactor.example.com" (or ["*"])');
  }
  r.allowedHosts = o.allowedHosts?.includes('*') ? undefined : (o.allowedHosts ?? (isLoopbackHost(r.host) ? LOOPBACK_HOSTS : undefined));
  if (r.encoding !== 'jpeg' && r.encoding !== 'rgb') throw new RangeError(`options.encoding must be "jpeg" or "rgb", got ${JSON.stringify(r.encoding)}`);
  int('jpegQuality', r.jpegQuality, 1, 100);
  int('maxMessageBytes', r.maxMessageBytes, 64, 64 * 1024 * 1024);
  if (r.maxFrameBytes !== undefined) int('maxFrameBytes', r.maxFrameBytes, 64, 1024 * 1024 * 1024);
  positive('commandRate', r.commandRate);
  positive('commandBurst', r.commandBurst);
  int('heartbeatMs', r.heartbeatMs, 10, 3_600_000);
  int('maxQueuedFrames', r.maxQueuedFrames, 1, 1000);
  int('maxBufferedBytes', r.maxBufferedBytes, 1024, 1024 * 1024 * 1024);
  int('maxTotalBufferedBytes', r.maxTotalBufferedBytes, 1024, 64 * 1024 * 1024 * 1024);
  int('readPauseBytes', r.readPauseBytes, 1024, 64 * 1024 * 1024 * 1024);
  int('readPauseTimeoutMs', r.readPauseTimeoutMs, 10, 3_600_000);
  int('headersTimeoutMs', r.headersTimeoutMs, 100, 600_000);
  if (typeof r.path !== 'string' || !r.path.startsWith('/')) throw new TypeError(`options.path must start with "/", got ${JSON.stringify(r.path)}`);
  int('maxUploadBytes', r.maxUploadBytes, 1, Number.MAX_SAFE_INTEGER);
  int('uploadQuotaBytes', r.uploadQuotaBytes, 1, Number.MAX_SAFE_INTEGER);
  if (r.uploadQuotaBytes < r.maxUploadBytes) {
    throw new RangeError(
      `options.uploadQuotaBytes (${r.uploadQuotaBytes}) is below options.maxUploadBytes (${r.maxUploadBytes}): a file of the largest size could never be stored; raise the quota or lower the limit`,
    );
  }
  int('uploadWaitMs', r.uploadWaitMs, 1, 3_600_000);
  int('uploadExpiryMs', r.uploadExpiryMs, 1, 86_400_000);
  if (r.uploadDir !== undefined && (typeof r.uploadDir !== 'string' || r.uploadDir === '')) {
    throw new TypeError(`options.uploadDir must be a folder path, got ${JSON.stringify(r.uploadDir)}`);
  }
  return r;
}

/**
 * Applies the video defaults and validates them.
 * @throws {RangeError | TypeError} naming the option, e.g. `options.video.codec must be one of "jpeg", "h264", "vp8", got "h265"`.
 */
export function resolveVideoOptions(v: VideoOptions = {}): ResolvedVideoOptions {
  if (v === null || typeof v !== 'object' || Array.isArray(v))
    throw new TypeError(`options.video must be an object such as { codec: "h264" }, got ${JSON.stringify(v)}`);
  const codec = v.codec ?? 'jpeg';
  if (!VIDEO_CODECS.includes(codec)) {
    throw new RangeError(`options.video.codec must be one of ${VIDEO_CODECS.map((c) => JSON.stringify(c)).join(', ')}, got ${JSON.stringify(codec)}`);
  }
  const tiers = v.tiers ?? DEFAULT_VIDEO_TIERS.map((t) => ({ ...t }));
  if (!Array.isArray(tiers) || tiers.length === 0)
    throw new TypeError(`options.video.tiers must be a non-empty array of { name, scale, bitrate }, got ${JSON.stringify(tiers)}`);
  const names = new Set<string>();
  tiers.forEach((t, i) => {
    const at = `options.video.tiers[${i}]`;
    if (t === null || typeof t !== 'object') throw new TypeError(`${at} must be an object { name, scale, bitrate }, got ${JSON.stringify(t)}`);
    if (typeof t.name !== 'string' || !/^[A-Za-z0-9_-]{1,32}$/.test(t.name)) {
      throw new TypeError(`${at}.name must be 1-32 letters, digits, "_" or "-", got ${JSON.stringify(t.name)}`);
    }
    if (names.has(t.name)) throw new RangeError(`${at}.name ${JSON.stringify(t.name)} is used twice; tier names must be unique`);
    names.add(t.name);
    if (typeof t.scale !== 'number' || !(t.scale > 0 && t.scale <= 1))
      throw new RangeError(`${at}.scale must be a number in (0, 1], got ${JSON.stringify(t.scale)}`);
    int(`video.tiers[${i}].bitrate`, t.bitrate, 10_000, 200_000_000);
  });
  const keyFrameInterval = v.keyFrameInterval ?? DEFAULT_KEY_FRAME_INTERVAL;
  int('video.keyFrameInterval', keyFrameInterval, 1, 100_000);
  const framerate = v.framerate ?? 30;
  int('video.framerate', framerate, 1, 1000);
  const encoderFactory = v.encoderFactory ?? webCodecsEncoderFactory;
  if (typeof encoderFactory !== 'function') throw new TypeError('options.video.encoderFactory must be a function (config) => encoder');
  return { codec, tiers: tiers.map((t) => ({ name: t.name, scale: t.scale, bitrate: t.bitrate })), keyFrameInterval, framerate, encoderFactory };
}
