/**
 * The one base of every error class in Reactor: a stable, machine-readable `code` (each listed
 * in `docs/errors.md`), a message that says what failed and how to fix it, and an optional
 * `cause`. Each package keeps its own base (`ReactorError`, `DistributedError`,
 * `ReactorClientError`, ...) with its own code list; all of them extend this one, so
 * `err instanceof CodedError` holds for any error the framework raises.
 */
export class CodedError extends Error {
  /** Stable, machine-readable code (see `docs/errors.md`). */
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}
