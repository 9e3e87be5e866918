/**
 * @internal `@reactor/runtime/internal`: helpers for this package's tests and for sibling
 * packages (`@reactor/server`, `@reactor/cli`). Not part of the public API: names and shapes
 * change without notice. App code imports from `@reactor/runtime`.
 */
export { describeApp } from './app/registry.js';
export type { AppDefinition, MessageSpec } from './app/registry.js';
export type { CommandSpec } from './app/command-specs.js';
export type { TrackSpec } from './app/track-specs.js';
export { FieldSet } from './state/field-set.js';
export type { FieldSpec, Validated, UploadSpec } from './state/field-set.js';
export { uploadRefSchema, UPLOAD_REF_CONSTRAINT } from './state/field-set.js';
export { UploadStore, UnresolvedUpload } from './upload/upload-store.js';
export { resolveUploadOptions } from './upload/upload-options.js';
export type { ResolvedUploadOptions } from './upload/upload-options.js';
export { mimeMatches, SNIFF_BYTES } from './upload/sniff.js';
export { codePointLength, truncateCodePoints, MAX_ECHO_LENGTH } from './state/field-errors.js';
export { MAX_ERROR_DETAILS, MORE_DETAILS_CONSTRAINT, invalidParams } from './session/answers.js';
export { toSnakeCase } from './metadata/naming.js';
export type { AnyClass, HookKind } from './metadata/keys.js';
export { Lifecycle, HOST_TRANSITIONS, SESSION_TRANSITIONS, CLIENT_TRANSITIONS } from './session/lifecycle.js';
export type { HostState, SessionState, ClientState } from './session/lifecycle.js';
export { StepLock } from './session/step-lock.js';
export { errorFrames } from './session/error-report.js';
