/**
 * `@reactor/cli`: the `reactor` command (`run`, `schema`, `doctor`) and, for programs that
 * drive it, the manifest reader and the doctor's checks.
 */
export { findManifest, loadManifest, ManifestError, MANIFEST_FILE } from './manifest.js';
export type { Manifest } from './manifest.js';
export { runDoctor } from './doctor.js';
export type { AppRequirements, DoctorCheck } from './doctor.js';
