/**
 * The session router's error codes: what its routes answer (`{"error":{"code","message"}}`),
 * and what it throws at start. The codes a client can receive are the wire protocol's
 * (`HttpErrorCode` of `@reactor/protocol`); `docs/errors.md` lists each with its fix.
 */
import { CodedError, HttpErrorCode } from '@reactor/protocol';

/** Every error code `@reactor/router` produces. */
export const RouterErrorCode = {
  /** 429: no instance of the fleet is Ready (every one holds a session). */
  NoFreeInstance: HttpErrorCode.NoFreeInstance,
  /** 404: no Allocated instance carries the session's label. */
  UnknownSession: HttpErrorCode.UnknownSession,
  /** 404: `/s/{instance}/...` names no Allocated instance of the fleet. */
  UnknownInstance: HttpErrorCode.UnknownInstance,
  /** 503: allocations kept meeting 409 Conflict past `conflictRetries`. */
  AllocationConflict: HttpErrorCode.AllocationConflict,
  /** 502/503: the Kubernetes API failed or refused the router's request. */
  RegistryUnavailable: HttpErrorCode.RegistryUnavailable,
  /** 502: the instance's pod refused or dropped the proxied connection. */
  InstanceUnreachable: HttpErrorCode.InstanceUnreachable,
  BadRequest: HttpErrorCode.BadRequest,
  MethodNotAllowed: HttpErrorCode.MethodNotAllowed,
  NotFound: HttpErrorCode.NotFound,
  Unauthorized: HttpErrorCode.Unauthorized,
  OriginNotAllowed: HttpErrorCode.OriginNotAllowed,
  HostNotAllowed: HttpErrorCode.HostNotAllowed,
  NotReady: HttpErrorCode.NotReady,
  InternalError: HttpErrorCode.InternalError,
  QueueFull: HttpErrorCode.QueueFull,
  QueueTimeout: HttpErrorCode.QueueTimeout,
  BadWait: HttpErrorCode.BadWait,
  TokenExpired: HttpErrorCode.TokenExpired,
  TokenNotYetValid: HttpErrorCode.TokenNotYetValid,
  TokenWrongKey: HttpErrorCode.TokenWrongKey,
  TokenTampered: HttpErrorCode.TokenTampered,
  TokenAlgNotAllowed: HttpErrorCode.TokenAlgNotAllowed,
  TokenWrongSession: HttpErrorCode.TokenWrongSession,
  TokenMalformed: HttpErrorCode.TokenMalformed,
  TokenInvalidClaims: HttpErrorCode.TokenInvalidClaims,
  /** 502/503 from `POST /sessions/{id}/fork`: the snapshot could not be taken or handed over (the original session goes on). */
  ForkFailed: HttpErrorCode.ForkFailed,
  /** Close 4307 on a relayed socket: its session moved to another instance (docs/snapshots.md "Move"). */
  SessionMoved: HttpErrorCode.SessionMoved,
  /** From a fork, the instance's own answer: the app takes no snapshots (404), or the snapshot's checks (400, 409, 413). */
  SnapshotUnsupported: HttpErrorCode.SnapshotUnsupported,
  SnapshotCorrupt: HttpErrorCode.SnapshotCorrupt,
  SnapshotTruncated: HttpErrorCode.SnapshotTruncated,
  SnapshotAppMismatch: HttpErrorCode.SnapshotAppMismatch,
  SnapshotVersionMismatch: HttpErrorCode.SnapshotVersionMismatch,
  SnapshotTooBig: HttpErrorCode.SnapshotTooBig,
  /** At start: no usable Kubernetes configuration (no kubeconfig file, not in a cluster, or the file does not parse). */
  KubeConfigInvalid: 'kube_config_invalid',
} as const;
export type RouterErrorCode = (typeof RouterErrorCode)[keyof typeof RouterErrorCode];

/** The one error class of `@reactor/router`, with a stable {@link RouterErrorCode}. */
export class RouterError extends CodedError {
  declare readonly code: RouterErrorCode;

  constructor(code: RouterErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}
