/**
 * `@reactor/cli`: the `reactor` command (`run`, `schema`, `doctor`) and, for programs that
 * drive it, the manifest reader and the doctor's checks.
 */
export { findManifest, loadManifest, ManifestError, MANIFEST_FILE } from './manifest.js';
export type { Manifest } from './manifest.js';
export { manifestJsonSchema, manifestJsonSchemaText, MANIFEST_SCHEMA_FILE } from './manifest-schema.js';
export type { ManifestDocument } from './manifest-sections.js';
export { runDoctor, checkNode, checkShm, checkPort, MIN_NODE } from './doctor.js';
export type { DoctorCheck } from './doctor.js';
export { CliErrorCode } from './errors.js';
export { importApp, runCommand, schemaCommand, doctorCommand } from './commands.js';
export type { CliOptions, ReactorAppClass } from './commands.js';
export { initProject, packageNameProblem, classPrefix, INIT_TEMPLATES, FRAMEWORK_PACKAGES } from './init.js';
export type { InitOptions, InitResult, InitTemplate } from './init.js';
export { initCommand } from './init-command.js';
export { typesCommand, schemaToTypes, typesName } from './types-command.js';
export type { TypesOptions, TypesSchema } from './types-command.js';
export { devCommand } from './dev.js';
export { deployCommand, chartValues, IMAGE_ROOT, DEFAULT_POD_PORT } from './deploy-command.js';
export type { DeployOptions, ManifestChartValues } from './deploy-command.js';
export { routeCommand } from './route-command.js';
export { tokenCommand, authOptions, signingKey, durationS, AUTH_ENV } from './token-command.js';
export type { TokenOptions } from './token-command.js';
export type { RouteOptions } from './route-command.js';
export type { DevOptions } from './dev.js';
