/**
 * The `reactor` command's error codes. The bin prints `reactor: <message> [<code>]` and exits 1;
 * `docs/errors.md` lists each code with its fix.
 */
/** Stable codes of the CLI's errors. */
export const CliErrorCode = {
  /** `reactor.yaml` is missing, unreadable, not YAML, or a key is wrong. */
  ManifestInvalid: 'manifest_invalid',
  /** `runtime.import` names a module that does not exist, fails to import, or lacks the export. */
  AppImportFailed: 'app_import_failed',
  /** The app's `load()` threw during `reactor run`. */
  AppLoadFailed: 'app_load_failed',
  /** `reactor run` cannot listen on the host/port. */
  PortUnavailable: 'port_unavailable',
  /** An unknown command or a bad flag value. */
  CliUsage: 'cli_usage',
  /** A non-loopback address without a token and without `--insecure`. */
  InsecureBind: 'insecure_bind',
  /** `reactor run`: the module `runtime.import` names is older than its package's sources. */
  StaleBuild: 'stale_build',
  /** `reactor init`: the target exists and is not an empty folder. */
  InitTargetExists: 'init_target_exists',
  /** `reactor init`: the project name is not a valid npm package name. */
  InitInvalidName: 'init_invalid_name',
  /** `reactor init --template`: no such template. */
  InitUnknownTemplate: 'init_unknown_template',
  /** `reactor init`: the target's folder may not be written to. */
  InitNotWritable: 'init_not_writable',
  /** `reactor init`: the framework packages are not built or could not be packed. */
  InitFailed: 'init_failed',
  /** `reactor upgrade`: the folder is not a project `reactor init` wrote outside a workspace (no package.json, no vendored framework). */
  UpgradeNotAProject: 'upgrade_not_a_project',
  /** `reactor types --url`: the server cannot be reached or does not answer `GET /schema`. */
  SchemaUnavailable: 'schema_unavailable',
  /** A token key (`REACTOR_AUTH_*`, `server.auth`) is missing or unusable: a short secret, a key file that is not there or not Ed25519. */
  AuthInvalid: 'auth_invalid',
  /** `reactor token`: no key to sign with (`REACTOR_AUTH_SECRET`, `REACTOR_AUTH_PRIVATE_KEY`, or `server.auth`). */
  TokenNoKey: 'token_no_key',
  /** `reactor replay`: the file is not a session log (unreadable, not JSON, another format or version). */
  ReplayLogInvalid: 'replay_log_invalid',
  /** `reactor replay`: the log is of another app or app version than the manifest's, or the session did something a replay cannot follow (a rewind, an uploaded file). */
  ReplayUnsupported: 'replay_unsupported',
} as const;
export type CliErrorCode = (typeof CliErrorCode)[keyof typeof CliErrorCode];
