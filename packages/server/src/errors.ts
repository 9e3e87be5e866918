/**
 * The server's error codes: what its HTTP routes and upgrade refusals answer
 * (`{"error":{"code":...}}`), and the connection-level codes it sends on the WebSocket. Every
 * value is a code of the wire protocol's lists in `@reactor/client` (`HttpErrorCode`,
 * `WireErrorCode`), so a client can name every code it may receive; `docs/errors.md` lists
 * each with its fix.
 */
import { HttpErrorCode, WireErrorCode } from '@reactor/client';

/** Every error code `@reactor/server` itself produces. */
export const ServerErrorCode = {
  BadRequest: HttpErrorCode.BadRequest,
  HeadersTooLarge: HttpErrorCode.HeadersTooLarge,
  MethodNotAllowed: HttpErrorCode.MethodNotAllowed,
  NotFound: HttpErrorCode.NotFound,
  Unauthorized: HttpErrorCode.Unauthorized,
  OriginNotAllowed: HttpErrorCode.OriginNotAllowed,
  HostNotAllowed: HttpErrorCode.HostNotAllowed,
  ServerClosing: HttpErrorCode.ServerClosing,
  NotReady: HttpErrorCode.NotReady,
  ViewerNotBuilt: HttpErrorCode.ViewerNotBuilt,
  InternalError: HttpErrorCode.InternalError,
  UploadNoSession: HttpErrorCode.UploadNoSession,
  UploadTooLarge: HttpErrorCode.UploadTooLarge,
  UploadQuotaExceeded: HttpErrorCode.UploadQuotaExceeded,
  UploadTypeNotAllowed: HttpErrorCode.UploadTypeNotAllowed,
  UploadLengthMismatch: HttpErrorCode.UploadLengthMismatch,
  UploadNotFound: HttpErrorCode.UploadNotFound,
  UploadAlreadyWritten: HttpErrorCode.UploadAlreadyWritten,
  UploadInvalidRequest: HttpErrorCode.UploadInvalidRequest,
  MalformedMessage: WireErrorCode.MalformedMessage,
  UnknownMessageType: WireErrorCode.UnknownMessageType,
  RateLimited: WireErrorCode.RateLimited,
  UnexpectedBinary: WireErrorCode.UnexpectedBinary,
  UnknownTrack: WireErrorCode.UnknownTrack,
  WrongTrackDirection: WireErrorCode.WrongTrackDirection,
  NotPublisher: WireErrorCode.NotPublisher,
  WrongEncoding: WireErrorCode.WrongEncoding,
  FrameRateLimited: WireErrorCode.FrameRateLimited,
  FrameTooLarge: WireErrorCode.FrameTooLarge,
  FrameHeaderMismatch: WireErrorCode.FrameHeaderMismatch,
  UndecodableFrame: WireErrorCode.UndecodableFrame,
  UnsupportedCodec: WireErrorCode.UnsupportedCodec,
  UnknownTier: WireErrorCode.UnknownTier,
  EncoderFailed: WireErrorCode.EncoderFailed,
  StateReset: WireErrorCode.StateReset,
} as const;
export type ServerErrorCode = (typeof ServerErrorCode)[keyof typeof ServerErrorCode];
