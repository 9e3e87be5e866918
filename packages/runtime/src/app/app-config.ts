/**
 * `loadAppConfig()`: the one reader of an app's config file (`runtime.config` in `reactor.yaml`,
 * handed to `load()` as `LoadContext.configPath`; YAML or JSON). The app declares its keys once,
 * as a class with class-validator decorators and defaults; every problem is named by its key, an
 * unknown key included, and all of them are reported at once.
 */
import { readFileSync } from 'node:fs';
import { plainToInstance } from 'class-transformer';
import { getMetadataStorage, validateSync } from 'class-validator';
import { parse as parseYaml } from 'yaml';
import { ReactorError, RuntimeErrorCode } from '../errors/errors.js';

/** Thrown by {@link loadAppConfig} when the app names no error of its own: an unreadable or invalid config file. */
export class AppConfigError extends ReactorError {
  constructor(message: string) {
    super(RuntimeErrorCode.AppConfigInvalid, message);
  }
}

/** Options of {@link loadAppConfig}. */
export interface AppConfigOptions {
  /** How messages name the file: `cannot read the <name> config <path>` (e.g. `video app`; default `app`). */
  name?: string;
  /** Builds the app's own error (its code) from a message; default {@link AppConfigError} (`app_config_invalid`). */
  error?: (message: string) => Error;
  /**
   * The keys the file may hold, in the order "unknown key (known: ...)" lists them. Default: the
   * keys the class declares (its validated properties and its defaults), in declaration order.
   */
  keys?: readonly string[];
}

/** The keys `ConfigClass` declares: validated properties and properties with a default, in declaration order. */
export function configKeys(ConfigClass: new () => object): string[] {
  const validated = getMetadataStorage()
    .getTargetValidationMetadatas(ConfigClass, '', true, false)
    .map((m) => m.propertyName);
  return [...new Set([...Object.keys(new ConfigClass()), ...validated])].sort((a, b) => order(validated, a) - order(validated, b));
}

function order(keys: string[], key: string): number {
  const i = keys.indexOf(key);
  return i < 0 ? Number.MAX_SAFE_INTEGER : i;
}

/**
 * Reads and validates an app config file into `ConfigClass` (its defaults for absent keys).
 * @param path the file (`LoadContext.configPath`); undefined gives the defaults
 * @throws the app's error (`options.error`, else {@link AppConfigError}) for an unreadable file,
 *   one that is not a mapping, or any bad or unknown key (every problem named by its key)
 */
export function loadAppConfig<T extends object>(ConfigClass: new () => T, path: string | undefined, options: AppConfigOptions = {}): T {
  if (path === undefined) return new ConfigClass();
  const fail = options.error ?? ((message: string) => new AppConfigError(message));
  let raw: unknown;
  try {
    raw = parseYaml(readFileSync(path, 'utf8')) ?? {};
  } catch (err) {
    throw fail(`cannot read the ${options.name ?? 'app'} config ${path}: ${(err as Error).message}`);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw fail(`${path} must be a mapping of config keys`);
  const known = options.keys ?? configKeys(ConfigClass);
  const cfg = plainToInstance(ConfigClass, raw);
  const problems = validateSync(cfg).flatMap((e) => Object.values(e.constraints ?? {}).map((m) => `${e.property}: ${m}`));
  problems.push(
    ...Object.keys(raw)
      .filter((k) => !known.includes(k))
      .map((k) => `${k}: unknown key (known: ${known.join(', ')})`),
  );
  if (problems.length) throw fail(`${path} is invalid:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
  return cfg;
}
