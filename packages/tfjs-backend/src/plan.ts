/**
 * Which tfjs backends a rank may try, in order: `webgpu` (Dawn via the `webgpu` package) when a
 * GPU adapter is found, else `wasm`, else `cpu` — or exactly what the configuration allows (the
 * app's option, overridden by the `REACTOR_BACKEND` environment variable). A backend the
 * configuration did not list is never used.
 *
 * The app names its option (`optionSource`) and supplies its own error for a bad value
 * (`configError`), so each app keeps its error class, code and message.
 */

/** A tfjs backend a model can run on. */
export type BackendName = 'webgpu' | 'wasm' | 'cpu';

/** Every backend, in the order `auto` tries them. */
export const BACKEND_NAMES: readonly BackendName[] = ['webgpu', 'wasm', 'cpu'];

/** Environment variable that overrides the app's backend option. */
export const BACKEND_ENV = 'REACTOR_BACKEND';

/** What the configuration allows, in order. */
export interface BackendPlan {
  /** Backends to try, in order; the first that initialises is used. */
  order: BackendName[];
  /** The preference as written (`auto`, `webgpu`, `webgpu,wasm`, ...). */
  requested: string;
  /** Where it came from: `REACTOR_BACKEND`, the app's option (its `optionSource`), or `default`. */
  source: string;
}

/** The backend preference as written, and where it came from. */
export interface BackendPreference {
  requested: string;
  /** `REACTOR_BACKEND`, the app's `optionSource`, or `default`. */
  source: string;
}

/** How an app reads its backend option (see {@link planBackends}). */
export interface PlanBackendsOptions {
  /** The device the runner gave this rank (`cpu`, `gpu:0`, ...); `auto` skips webgpu on `cpu`. */
  device?: string | undefined;
  /** The option's name in `source` and in messages, e.g. `options.backend` or `backend (app config)`. */
  optionSource: string;
  /** The app's error for a value that is not a backend preference (its class, code and message). */
  configError: (source: string, value: string) => Error;
}

function isBackendName(s: string): s is BackendName {
  return (BACKEND_NAMES as readonly string[]).includes(s);
}

/**
 * Reads the preference as written: `env.REACTOR_BACKEND` when set and non-empty, else `option`
 * (source `optionSource`), else `auto` (source `default`). Nothing is checked here.
 */
export function readBackendPreference(option: string | undefined, env: Readonly<Record<string, string | undefined>>, optionSource: string): BackendPreference {
  const fromEnv = env[BACKEND_ENV];
  if (fromEnv !== undefined && fromEnv.trim() !== '') return { requested: fromEnv, source: BACKEND_ENV };
  if (option !== undefined) return { requested: option, source: optionSource };
  return { requested: 'auto', source: 'default' };
}

/**
 * Reads the backend preference: `env.REACTOR_BACKEND` when set and non-empty, else `option`,
 * else `auto`. `auto` means webgpu, wasm, cpu — without webgpu when the runner made this a CPU
 * rank (`device === 'cpu'`).
 * @throws the app's `configError(source, value)` for an unknown name or a repeated one
 */
export function planBackends(option: string | undefined, env: Readonly<Record<string, string | undefined>>, opts: PlanBackendsOptions): BackendPlan {
  const { requested, source } = readBackendPreference(option, env, opts.optionSource);
  if (typeof requested !== 'string') throw opts.configError(source, String(requested));
  const value = requested.trim().toLowerCase();
  if (value === 'auto') {
    const order = opts.device === 'cpu' ? BACKEND_NAMES.filter((b) => b !== 'webgpu') : [...BACKEND_NAMES];
    return { order, requested: 'auto', source };
  }
  const parts = value.split(',').map((p) => p.trim());
  const order: BackendName[] = [];
  for (const p of parts) {
    if (!isBackendName(p) || order.includes(p)) throw opts.configError(source, requested);
    order.push(p);
  }
  return { order, requested: order.join(','), source };
}
