/**
 * Errors raised by `@reactor/client`. Every error has a stable `code` (listed in
 * `docs/errors.md`); `CommandFailedError` carries the server's own code unchanged.
 */
import { CodedError, type FieldError } from './protocol.js';

/** Codes of the errors the client raises itself (a failed command carries the server's code instead). */
export const ClientErrorCode = {
  /** No reply within `timeoutMs`; the command may still run. */
  CommandTimeout: 'command_timeout',
  /** The socket could not open or the upgrade was refused (bad token, origin, server down). */
  ConnectionFailed: 'connection_failed',
  /** The socket dropped while a command waited for its reply. */
  ConnectionLost: 'connection_lost',
  /** `send()` while connecting, reconnecting or closed. */
  NotConnected: 'not_connected',
  /** `close()` was called while a command waited. */
  ClientClosed: 'client_closed',
  /** The server speaks another protocol version. */
  ProtocolMismatch: 'protocol_mismatch',
  /** A published track's source threw (a Node iterable's error, a camera that cannot be read); the publication ends. */
  SourceFailed: 'source_failed',
  /** An upload could not reach the server (network error) or its answer could not be read. */
  UploadFailed: 'upload_failed',
  /** `publish(..., { transport: 'webrtc' })` while the client's media is not on WebRTC (or the source is not a `MediaStreamTrack`). */
  RtcNotConnected: 'rtc_not_connected',
  /** `connect(url, { transport: 'webrtc' })`: the WebRTC link did not connect (the message says why: timeout, `rtc_*` refusal). */
  WebRtcFailed: 'webrtc_failed',
} as const;
export type ClientErrorCode = (typeof ClientErrorCode)[keyof typeof ClientErrorCode];

/** Base class of every error this package throws. */
export class ReactorClientError extends CodedError {}

/**
 * The server answered a command with an error. `code` is the server's code unchanged
 * (`invalid_params`, `unknown_command`, `rate_limited`, an app's own `CommandError` code, ...).
 */
export class CommandFailedError extends ReactorClientError {
  /** Wire name of the command that failed. */
  readonly command: string;
  /** Per-field validation failures, for `invalid_params`. */
  readonly details: FieldError[] | undefined;

  constructor(command: string, code: string, message: string, details?: FieldError[]) {
    super(code, `command "${command}" failed (${code}): ${message}`);
    this.command = command;
    this.details = details;
  }
}

/** No reply arrived within `timeoutMs` (code `command_timeout`). The command may still run. */
export class CommandTimeoutError extends ReactorClientError {
  constructor(command: string, timeoutMs: number) {
    super(
      ClientErrorCode.CommandTimeout,
      `command "${command}" got no reply within ${timeoutMs} ms; the server may still run it. Raise timeoutMs or check the server's step time`,
    );
  }
}

/**
 * The connection could not be opened, was refused (bad token, origin), or was lost while
 * a command waited for its reply. Codes: `connection_failed`, `connection_lost`,
 * `not_connected`, `client_closed`.
 */
export class ConnectionError extends ReactorClientError {}

/** The server speaks another protocol version (code `protocol_mismatch`). */
export class ProtocolMismatchError extends ReactorClientError {
  constructor(server: number, client: number) {
    super(
      ClientErrorCode.ProtocolMismatch,
      `server speaks protocol version ${server}, this client speaks ${client}; upgrade @reactor/client to match the server`,
    );
  }
}

/**
 * A session router (`reactor route`) refused `connect(routerUrl, { session })`. `code` is the
 * router's: `no_free_instance` (429: every instance holds a session; `retryAfterMs` says when to
 * ask again), `unknown_session` (404: no instance holds that session), `unauthorized`,
 * `allocation_conflict`, `registry_unavailable`, ...
 */
export class SessionRouteError extends ReactorClientError {
  /** The router's HTTP status. */
  readonly status: number;
  /** The router's `Retry-After`, ms, when it sent one (429, 503). */
  readonly retryAfterMs: number | undefined;

  constructor(code: string, message: string, status: number, retryAfterMs?: number) {
    super(code, message);
    this.status = status;
    this.retryAfterMs = retryAfterMs;
  }
}
