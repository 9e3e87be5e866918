/**
 * Every error the app model raises, with its stable `code`. `docs/errors.md` lists each code
 * with its fix; keep the two in step.
 */
import { CodedError, HttpErrorCode, IllegalTransitionError } from '@reactor/protocol';

/** Stable codes of the app model's errors. */
export const RuntimeErrorCode = {
  /** The app class, its state, params, output or message classes break a rule (registration). */
  InvalidApp: 'invalid_app',
  InvalidStateField: 'invalid_state_field',
  InvalidDefault: 'invalid_default',
  MutableDefault: 'mutable_default',
  UnvalidatedField: 'unvalidated_field',
  UndeclaredField: 'undeclared_field',
  InvalidCommandName: 'invalid_command_name',
  /** A command's `roles` option is not a non-empty list of snake_case role names. */
  InvalidRoles: 'invalid_roles',
  DuplicateCommand: 'duplicate_command',
  InvalidOutputClass: 'invalid_output_class',
  InvalidInputClass: 'invalid_input_class',
  InvalidTrack: 'invalid_track',
  InvalidMessageClass: 'invalid_message_class',
  InvalidAppOption: 'invalid_app_option',
  DecoratorMisuse: 'decorator_misuse',
  InvalidHostOption: 'invalid_host_option',
  FrameShape: 'frame_shape',
  UnknownTrack: 'unknown_track',
  InvalidOutput: 'invalid_output',
  MessageNotDeclared: 'message_not_declared',
  NoSession: 'no_session',
  WeightsPathNotSet: 'weights_path_not_set',
  LoadFailed: 'load_failed',
  AlreadyLoaded: 'already_loaded',
  HostClosed: 'host_closed',
  SessionFailed: 'session_failed',
  /** Thrown by `processInput()` to refuse a step; never reaches clients. */
  ApplicationError: 'application_error',
  /** An `InputBuffer` read found the buffer closed (its publisher unpublished or left) with fewer frames than asked for. */
  BufferClosed: 'buffer_closed',
  /** An `InputBuffer` read waited `timeoutMs` without getting its frames. */
  BufferTimeout: 'buffer_timeout',
  /** An `InputBuffer` read got a bad argument (`n` outside 1..capacity, an unknown `mode`, a negative `timeoutMs`), or a buffer a bad capacity. */
  InvalidRead: 'invalid_read',
  /** A lifecycle (host, session, client) was asked for a transition its state does not allow: a bug in the host. */
  IllegalTransition: 'illegal_transition',
  // Uploads (`UploadError`): the same codes the server answers over HTTP (`HttpErrorCode`).
  UploadNoSession: HttpErrorCode.UploadNoSession,
  UploadTooLarge: HttpErrorCode.UploadTooLarge,
  UploadQuotaExceeded: HttpErrorCode.UploadQuotaExceeded,
  UploadTypeNotAllowed: HttpErrorCode.UploadTypeNotAllowed,
  UploadLengthMismatch: HttpErrorCode.UploadLengthMismatch,
  UploadNotFound: HttpErrorCode.UploadNotFound,
  UploadAlreadyWritten: HttpErrorCode.UploadAlreadyWritten,
  UploadInvalidRequest: HttpErrorCode.UploadInvalidRequest,
  /** `UploadedFile.bytes()`/`image()` after the file's session ended (its file is deleted then). */
  UploadGone: 'upload_gone',
  /** `UploadedFile.image()` on a file that is not an image, or whose pixels cannot be decoded. */
  NotAnImage: 'not_an_image',
  /** `UploadedFile.image()` in a host that has no image decoder (the server provides one; an in-process host needs `uploads.configure({ decodeImage })`). */
  NoImageDecoder: 'no_image_decoder',
  /** `this.output.clip()` in a host that keeps no clip ring (no server, or no `recording:` clips configured). */
  ClipsDisabled: 'clips_disabled',
  /** `loadAppConfig()`: the app config file (`runtime.config`) is unreadable, not a mapping, or a key is wrong or unknown (apps may use their own code). */
  AppConfigInvalid: 'app_config_invalid',
  // Session snapshots (`SnapshotError`, docs/snapshots.md).
  /** The bytes are not a whole snapshot: wrong magic, checksum mismatch, a header that does not parse. */
  SnapshotCorrupt: 'snapshot_corrupt',
  /** The bytes end before the snapshot does. */
  SnapshotTruncated: 'snapshot_truncated',
  /** The snapshot is another app's. */
  SnapshotAppMismatch: 'snapshot_app_mismatch',
  /** The snapshot is this app's, but of another version or state shape (schema hash). */
  SnapshotVersionMismatch: 'snapshot_version_mismatch',
  /** The snapshot is over its byte limit (`snapshot.maxBytes`). */
  SnapshotTooBig: 'snapshot_too_big',
  /** What `snapshot()` returned is not typed arrays and plain data. */
  SnapshotValue: 'snapshot_value',
  /** The snapshot was taken at another world size than the runner restoring it has. */
  SnapshotWorldSize: 'snapshot_world_size',
} as const;
export type RuntimeErrorCode = (typeof RuntimeErrorCode)[keyof typeof RuntimeErrorCode];

/** Base class of the runtime's own errors: a stable `code`, a `name` and an optional `cause`. */
export class ReactorError extends CodedError {
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

/**
 * The app class (or one of its state, params, output or message classes) breaks a rule of the
 * app model. Thrown when the app is registered (`new AppHost(App)`, `describeApp(App)`), naming
 * the class and the member.
 */
export class AppDefinitionError extends ReactorError {
  /** The class at fault (`VideoState`). */
  readonly className: string;
  /** The field or method at fault, when there is one. */
  readonly member: string | undefined;
  constructor(code: RuntimeErrorCode, className: string, member: string | undefined, message: string) {
    super(code, `${member === undefined ? className : `${className}.${member}`}: ${message}`);
    this.className = className;
    this.member = member;
  }
}

/** A decorator was applied where it cannot work (wrong target, applied twice). Thrown at decoration. */
export class DecoratorMisuseError extends ReactorError {
  constructor(message: string) {
    super(RuntimeErrorCode.DecoratorMisuse, message);
  }
}

/** An option of {@link AppHost} (or of `@reactorApp`) has a wrong value. */
export class HostOptionError extends ReactorError {
  constructor(message: string) {
    super(RuntimeErrorCode.InvalidHostOption, message);
  }
}

/**
 * Thrown by `processInput()` to refuse a step: the model is not called, the reason is logged
 * once, and the loop tries again on the next change (a command, a client joining or leaving,
 * a flush) or after a short back-off.
 *
 * @example
 * if (this.state.paused) throw new ApplicationError('paused');
 */
export class ApplicationError extends ReactorError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(RuntimeErrorCode.ApplicationError, message, options);
  }
}

/**
 * Thrown by a command handler to answer the sender with this exact `code` and `message`.
 *
 * @example
 * throw new CommandError('not_ready', 'the model is still warming up; try again in a second');
 */
export class CommandError extends ReactorError {
  /** @param code the wire code the sender receives, unchanged (the app's own, e.g. `not_ready`). */
  constructor(code: string, message: string) {
    if (typeof code !== 'string' || code.length === 0) throw new TypeError('CommandError: code must be a non-empty string');
    super(code, message);
  }
}

/** A frame batch does not have the shape `(n, height, width, 3)` its track needs. */
export class FrameShapeError extends ReactorError {
  constructor(message: string) {
    super(RuntimeErrorCode.FrameShape, message);
  }
}

/** An `Output` names a track that its class does not declare. */
export class UnknownTrackError extends ReactorError {
  constructor(message: string) {
    super(RuntimeErrorCode.UnknownTrack, message);
  }
}

/** `processOutput()` returned something that is not an `Output` of the app's declared class. */
export class InvalidOutputError extends ReactorError {
  constructor(message: string) {
    super(RuntimeErrorCode.InvalidOutput, message);
  }
}

/** `send()` / `client.send()` got an object whose class is not in the app's `messages`. */
export class MessageNotDeclaredError extends ReactorError {
  constructor(message: string) {
    super(RuntimeErrorCode.MessageNotDeclared, message);
  }
}

/** `this.state` was read while no session exists (e.g. in `load()`). */
export class NoSessionError extends ReactorError {
  constructor(message: string) {
    super(RuntimeErrorCode.NoSession, message);
  }
}

/** `getWeightsPath()` found neither `REACTOR_WEIGHTS_PATH` nor a host `weightsPath`. */
export class WeightsPathNotSetError extends ReactorError {
  constructor() {
    super(
      RuntimeErrorCode.WeightsPathNotSet,
      'no weights path is configured: set runtime.weights_path in reactor.yaml (or AppHost option weightsPath), or the environment variable REACTOR_WEIGHTS_PATH',
    );
  }
}

/** `AppHost.load()` failed: the app's `load()` threw (see `cause`). */
export class AppLoadError extends ReactorError {
  constructor(code: RuntimeErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

/** The host was closed; it accepts no more work. */
export class HostClosedError extends ReactorError {
  constructor(message = 'the app host is closed') {
    super(RuntimeErrorCode.HostClosed, message);
  }
}

/**
 * A lifecycle of the host (host, session or client) was asked for a transition that its current
 * state does not allow. Never expected: it marks a bug in the host, and names the lifecycle and
 * both states. The one `IllegalTransitionError` of `@reactor/protocol`'s transition helper.
 */
export { IllegalTransitionError };

/**
 * An {@link InputBuffer} read found its buffer closed (the track's publisher unpublished or left)
 * with fewer frames than it asked for. Thrown from a step (`processInput()` or `generate()`), it
 * refuses the step instead of ending the session: the host retries after the refusal back-off,
 * and the reads succeed again once a client publishes the track.
 */
export class BufferClosedError extends ReactorError {
  /** The track (buffer) name. */
  readonly track: string;
  constructor(track: string, message: string) {
    super(RuntimeErrorCode.BufferClosed, message);
    this.track = track;
  }
}

/**
 * An {@link InputBuffer} read waited its `timeoutMs` without getting its `n` frames (no frame
 * was taken from the buffer). Thrown from a step, it refuses the step, like {@link BufferClosedError}.
 */
export class BufferTimeoutError extends ReactorError {
  readonly track: string;
  constructor(track: string, message: string) {
    super(RuntimeErrorCode.BufferTimeout, message);
    this.track = track;
  }
}

/** A bad argument to an {@link InputBuffer} (`n`, `mode`, `timeoutMs`, `capacity`); the message names it and the allowed range. */
export class InvalidReadError extends ReactorError {
  constructor(message: string) {
    super(RuntimeErrorCode.InvalidRead, message);
  }
}

/** The upload codes, the subset of {@link RuntimeErrorCode} an {@link UploadError} carries. */
export type UploadErrorCode =
  | typeof RuntimeErrorCode.UploadNoSession
  | typeof RuntimeErrorCode.UploadTooLarge
  | typeof RuntimeErrorCode.UploadQuotaExceeded
  | typeof RuntimeErrorCode.UploadTypeNotAllowed
  | typeof RuntimeErrorCode.UploadLengthMismatch
  | typeof RuntimeErrorCode.UploadNotFound
  | typeof RuntimeErrorCode.UploadAlreadyWritten
  | typeof RuntimeErrorCode.UploadInvalidRequest
  | typeof RuntimeErrorCode.UploadGone
  | typeof RuntimeErrorCode.NotAnImage
  | typeof RuntimeErrorCode.NoImageDecoder;

/**
 * An upload was refused (announce or bytes: too large, over quota, wrong type, wrong length,
 * unknown id, ...) or an uploaded file cannot be read (`upload_gone`, `not_an_image`). The
 * server answers the HTTP codes with the status `docs/errors.md` gives each.
 */
export class UploadError extends ReactorError {
  declare readonly code: UploadErrorCode;
  constructor(code: UploadErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}
