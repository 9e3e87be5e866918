/**
 * Python workers: a {@link DistributedWorker} written in Python (a subclass of
 * `reactor_worker.DistributedWorker`, or of `reactor_runtime.distributed.DistributedWorker` as in
 * the original runtime), named by module and class, run by the same `DistributedRunner` with the
 * same protocol, shared-memory layout and outcome policy as TypeScript ranks.
 *
 * @example
 * ```ts
 * const runner = new DistributedRunner(pythonWorker('video_worker:VideoWorker', { path: ['./worker'] }), {
 *   worldSize: 2,
 *   loadArgs: { weights_root: '/weights' }, // load(self, weights_root: Path)
 * });
 * ```
 */
import { accessSync, constants, existsSync, statSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DistributedErrorCode, PythonWorkerError } from '../errors.js';
import type { ErrorClass } from '../worker/error-codec.js';

/** The environment variable that names the interpreter of Python workers (default `python3`). */
export const PYTHON_ENV = 'REACTOR_PYTHON';
/** Extra import paths for Python workers, `:`-separated (set by `reactor run` from `runtime.python.path`). */
export const PYTHON_PATH_ENV = 'REACTOR_PYTHON_PATH';
/** The worker a `pythonWorker()` without a target runs (set by `reactor run` from `runtime.python.worker`). */
export const PYTHON_WORKER_ENV = 'REACTOR_PYTHON_WORKER';
/** The interpreter used when neither the option nor {@link PYTHON_ENV} names one. */
export const DEFAULT_PYTHON = 'python3';

/** The folder holding the `reactor_worker` and `reactor_runtime` packages (on every Python rank's import path). */
export const PYTHON_PACKAGE_DIR = fileURLToPath(new URL('../../python/', import.meta.url));

/** Options of {@link pythonWorker}. */
export interface PythonWorkerOptions {
  /**
   * The Python interpreter (a command on `PATH` or a path). Default: the `REACTOR_PYTHON`
   * environment variable (of `options.env`, then of this process), else `python3`.
   */
  interpreter?: string;
  /** Folders to add to the ranks' import path (`PYTHONPATH`), before `REACTOR_PYTHON_PATH`'s; relative ones from the current directory. */
  path?: readonly string[];
  /**
   * TypeScript classes to rebuild the worker's Python exceptions as, by Python class name, so
   * `instanceof` works (`{ RolloutExhausted }`). Without one, a Python exception arrives as an
   * `Error` whose `name` is the Python class name.
   */
  errors?: Readonly<Record<string, ErrorClass>>;
  /**
   * What a float16 or bfloat16 array or tensor in a result becomes (TypeScript has no half-float
   * typed array): `'float32'`, a `Float32Array` of the same values; `'uint8'`, frames in [0, 1] as
   * RGB bytes (`round(clamp(x, 0, 1) * 255)`, a `Uint8Array` for `new Frames(...)`). The rank
   * converts (in float32, off the event loop). Without it a half-float result is refused
   * (`python_value`), naming the conversion to write.
   */
  halfPrecision?: HalfPrecision;
}

/** See {@link PythonWorkerOptions.halfPrecision}. */
export type HalfPrecision = 'float32' | 'uint8';
/** The environment variable that tells a rank {@link PythonWorkerOptions.halfPrecision}. */
const HALF_PRECISION_ENV = 'REACTOR_HALF_PRECISION';

const SPEC = Symbol.for('reactor.pythonWorker');

/** A Python worker named by module and class: pass it to `new DistributedRunner(...)` in place of a TypeScript class. */
export interface PythonWorkerSpec<TInput = unknown, TResult = unknown, TArgs = Record<string, unknown>> {
  readonly [SPEC]: true;
  /** The Python module (`video_worker`, `pkg.worker`). */
  readonly module: string;
  /** The class in it. */
  readonly className: string;
  readonly options: PythonWorkerOptions;
  /** Type-level only: the input, result and load-argument types. */
  readonly __types?: [TInput, TResult, TArgs];
}

const TARGET = /^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):([A-Za-z_][A-Za-z0-9_]*)$/;

/**
 * Names a Python worker: `'module:Class'` (`'video_worker:VideoWorker'`). Without a target, the
 * `REACTOR_PYTHON_WORKER` environment variable's (what `runtime.python.worker` in `reactor.yaml` sets).
 * @throws TypeError when the target is not `module:Class`
 */
export function pythonWorker<TInput = unknown, TResult = unknown, TArgs = Record<string, unknown>>(
  target?: string,
  options: PythonWorkerOptions = {},
): PythonWorkerSpec<TInput, TResult, TArgs> {
  const named = target ?? process.env[PYTHON_WORKER_ENV];
  if (named === undefined || named === '') {
    throw new TypeError(
      `pythonWorker() needs a target like 'video_worker:VideoWorker' (module:Class), or ${PYTHON_WORKER_ENV} set (runtime.python.worker in reactor.yaml).`,
    );
  }
  const m = TARGET.exec(named);
  if (!m) {
    throw new TypeError(
      `pythonWorker(${JSON.stringify(named)}): a Python worker is named 'module:Class', e.g. 'video_worker:VideoWorker' ` +
        `(the module as Python imports it, without .py; the class defined in it).`,
    );
  }
  if (options.path !== undefined && (!Array.isArray(options.path) || options.path.some((p) => typeof p !== 'string'))) {
    throw new TypeError(`pythonWorker(...).path must be an array of folder paths, got ${JSON.stringify(options.path)}.`);
  }
  if (options.halfPrecision !== undefined && options.halfPrecision !== 'float32' && options.halfPrecision !== 'uint8') {
    throw new TypeError(
      `pythonWorker(...).halfPrecision must be 'float32' (half floats arrive as Float32Array) or 'uint8' (frames in [0, 1] arrive as RGB bytes), got ${JSON.stringify(options.halfPrecision)}.`,
    );
  }
  return { [SPEC]: true, module: m[1]!, className: m[2]!, options: { ...options } };
}

/** Whether `value` is what {@link pythonWorker} returns. */
export function isPythonWorkerSpec(value: unknown): value is PythonWorkerSpec {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[SPEC] === true;
}

/** A Python worker with its interpreter found and its import path built. */
export interface ResolvedPythonWorker {
  module: string;
  className: string;
  /** The interpreter as named. */
  interpreter: string;
  /** Where it was found (an absolute path). */
  interpreterPath: string;
  /** `PYTHONPATH` for the ranks. */
  pythonPath: string;
  errors: ReadonlyMap<string, ErrorClass>;
  /** {@link PythonWorkerOptions.halfPrecision}. */
  halfPrecision?: HalfPrecision;
}

/** The interpreter a Python worker would use in this environment, as named (option, `REACTOR_PYTHON`, `python3`). */
export function pythonInterpreter(option: string | undefined, env: NodeJS.ProcessEnv): string {
  return option ?? (env[PYTHON_ENV] || undefined) ?? DEFAULT_PYTHON;
}

/** Finds a command the way a shell would (`PATH`), or checks a path; null when there is no such executable. */
export function findExecutable(command: string, env: NodeJS.ProcessEnv): string | null {
  const candidates = command.includes('/')
    ? [resolve(command)]
    : (env.PATH ?? '')
        .split(delimiter)
        .filter(Boolean)
        .map((d) => join(d, command));
  for (const c of candidates) {
    try {
      if (!statSync(c).isFile()) continue;
      accessSync(c, constants.X_OK);
      return c;
    } catch {
      // not here
    }
  }
  return null;
}

/**
 * Resolves a spec in the ranks' environment.
 * @throws {@link PythonWorkerError} (`python_not_found`) when the interpreter does not exist
 * @throws TypeError when an import path does not exist
 */
export function resolvePythonWorker(spec: PythonWorkerSpec, env: NodeJS.ProcessEnv): ResolvedPythonWorker {
  const interpreter = pythonInterpreter(spec.options.interpreter, env);
  const source = spec.options.interpreter !== undefined ? 'pythonWorker(..., { interpreter })' : env[PYTHON_ENV] ? PYTHON_ENV : 'the default';
  const interpreterPath = findExecutable(interpreter, env);
  if (!interpreterPath) {
    throw new PythonWorkerError(
      DistributedErrorCode.PythonNotFound,
      `The Python interpreter ${JSON.stringify(interpreter)} (${source}) was not found${interpreter.includes('/') ? '' : ' on PATH'}: ` +
        `the ranks of ${spec.module}:${spec.className} cannot start. Install Python 3 with NumPy (Debian: apt-get install python3-numpy), ` +
        `or set ${PYTHON_ENV}=/path/to/python3 (or pythonWorker(..., { interpreter })). \`reactor doctor\` checks this.`,
    );
  }
  const extra = [...(spec.options.path ?? []), ...(env[PYTHON_PATH_ENV] ?? '').split(delimiter).filter(Boolean)].map((p) => resolve(p));
  for (const p of extra) {
    if (!existsSync(p)) {
      throw new TypeError(`The Python import path ${p} (pythonWorker(..., { path }) or ${PYTHON_PATH_ENV}) does not exist: fix the folder name.`);
    }
  }
  const inherited = (env.PYTHONPATH ?? '').split(delimiter).filter(Boolean);
  const pythonPath = [PYTHON_PACKAGE_DIR.replace(/\/$/, ''), ...extra, ...inherited].join(delimiter);
  return {
    module: spec.module,
    className: spec.className,
    interpreter,
    interpreterPath,
    pythonPath,
    errors: new Map(Object.entries(spec.options.errors ?? {})),
    ...(spec.options.halfPrecision !== undefined && { halfPrecision: spec.options.halfPrecision }),
  };
}

/** The command line of a Python rank. */
export function pythonRankCommand(w: ResolvedPythonWorker, prefix: string, rank: number): { file: string; args: string[] } {
  return { file: w.interpreterPath, args: ['-m', 'reactor_worker._rank', `--reactor-runner=${prefix}`, `--rank=${rank}`] };
}

/** The environment additions of a Python rank. */
export function pythonRankEnv(w: ResolvedPythonWorker): Record<string, string> {
  return { PYTHONPATH: w.pythonPath, PYTHONUNBUFFERED: '1', ...(w.halfPrecision !== undefined && { [HALF_PRECISION_ENV]: w.halfPrecision }) };
}

/**
 * Where `value` holds something the json format cannot carry (and Python ranks cannot read):
 * a path like `input.meta.when` and what it is, or null when it is fine.
 */
export function unsendableToPython(value: unknown, path = 'input', depth = 0, seen = new Set<object>()): string | null {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return null;
    case 'number':
      return Number.isFinite(value) && !Object.is(value, -0) ? null : `${path} is ${Object.is(value, -0) ? '-0' : String(value)}`;
    case 'undefined':
      return `${path} is undefined (use null, or leave the key out)`;
    case 'object': {
      if (value === null) return null;
      if (ArrayBuffer.isView(value)) return null;
      if (seen.has(value) || depth > 64) return `${path} is part of a cycle or nested more than 64 levels`;
      seen.add(value);
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
          if (!(i in value)) return `${path}[${i}] is a hole in a sparse array`;
          const bad = unsendableToPython(value[i], `${path}[${i}]`, depth + 1, seen);
          if (bad) return bad;
        }
        seen.delete(value);
        return null;
      }
      const proto = Object.getPrototypeOf(value) as unknown;
      if (proto !== Object.prototype && proto !== null) {
        return `${path} is a ${(value as { constructor?: { name?: string } }).constructor?.name ?? 'class instance'} (send a plain object)`;
      }
      for (const [k, v] of Object.entries(value)) {
        const bad = unsendableToPython(v, `${path}.${k}`, depth + 1, seen);
        if (bad) return bad;
      }
      seen.delete(value);
      return null;
    }
    default:
      return `${path} is a ${typeof value}`;
  }
}

/** The error for a value a Python rank cannot read. */
export function unsendableError(what: string, where: string): PythonWorkerError {
  return new PythonWorkerError(
    DistributedErrorCode.PythonValue,
    `${what} cannot reach a Python rank: ${where}. Python ranks read plain objects, arrays, strings, finite numbers, ` +
      `booleans, null and typed arrays (which arrive as NumPy arrays); nothing was sent.`,
  );
}
