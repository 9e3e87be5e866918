import { AsyncLocalStorage } from 'node:async_hooks';
import type { Logger } from '@reactor/log';
import { WeightsPathNotSetError } from '../errors/errors.js';

/** Environment variable that overrides the manifest's `runtime.weights_path`. */
export const WEIGHTS_PATH_ENV = 'REACTOR_WEIGHTS_PATH';

/** What app code running under a host can reach without a reference to it. */
export interface HostContext {
  readonly weightsPath: string | undefined;
  /** The app's logger (a child of the host's). */
  readonly logger: Logger;
}

/** The host whose app code is running (construction, load, hooks, commands, steps) in this async context. */
export const hostContext = new AsyncLocalStorage<HostContext>();

/** Resolves the weights path: `REACTOR_WEIGHTS_PATH`, else the given configured path. */
export function resolveWeightsPath(configured: string | undefined): string {
  const env = process.env[WEIGHTS_PATH_ENV];
  if (env !== undefined && env !== '') return env;
  if (configured !== undefined && configured !== '') return configured;
  throw new WeightsPathNotSetError();
}

/**
 * Where the model's weights are: the environment variable `REACTOR_WEIGHTS_PATH` when set,
 * otherwise the `weightsPath` the host was given (the CLI passes the manifest's
 * `runtime.weights_path`, resolved against the manifest's folder). Callable anywhere inside
 * app code run by a host (`load()`, hooks, commands, steps); `this.getWeightsPath()` is the same.
 *
 * @throws WeightsPathNotSetError (`weights_path_not_set`) when neither is set.
 */
export function getWeightsPath(): string {
  return resolveWeightsPath(hostContext.getStore()?.weightsPath);
}
