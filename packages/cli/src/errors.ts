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
} as const;
export type CliErrorCode = (typeof CliErrorCode)[keyof typeof CliErrorCode];
