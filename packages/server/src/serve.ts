/** `serve(AppClass, options)`: build an {@link AppHost}, serve it, and load the app. */
import type { ReactorApp } from '@reactor/runtime';
import { AppHost, type AppHostOptions } from '@reactor/runtime';
import { resolveServerOptions, type ServerOptions } from './options.js';
import { ReactorServer } from './reactor-server.js';

/** Options of {@link serve}: the server's, the host's, and what `load()` is told (`LoadContext`). */
export interface ServeOptions extends ServerOptions, Omit<AppHostOptions, 'logger'> {
  /** The app's config file, handed to `load()` as `context.configPath` (the manifest's `runtime.config`). */
  configPath?: string;
  /** GPUs the manifest declares, handed to `load()` as `context.manifestGpuCount`. */
  manifestGpuCount?: number;
}

const LOAD_KEYS = ['configPath', 'manifestGpuCount'];

const HOST_KEYS = ['gracePeriodMs', 'weightsPath', 'refusalBackoffMs', 'statsIntervalMs', 'singleController', 'snapshots', 'admission'] as const;

/** `serve()`'s options split into the host's, the server's and `load()`'s. */
export function splitServeOptions(options: ServeOptions): {
  hostOptions: AppHostOptions;
  serverOptions: ServerOptions;
  load: { configPath?: string; manifestGpuCount?: number };
} {
  const hostOptions: AppHostOptions = {};
  const serverOptions: ServerOptions = {};
  for (const [k, v] of Object.entries(options)) {
    if (v === undefined || LOAD_KEYS.includes(k)) continue;
    if ((HOST_KEYS as readonly string[]).includes(k)) (hostOptions as Record<string, unknown>)[k] = v;
    else (serverOptions as Record<string, unknown>)[k] = v;
  }
  if (options.logger) hostOptions.logger = options.logger;
  resolveServerOptions(serverOptions); // a bad server option throws before the app is built
  return { hostOptions, serverOptions, load: { configPath: options.configPath, manifestGpuCount: options.manifestGpuCount } };
}

/**
 * Serves an app class: registers it (whole-class checks throw here), starts listening, then
 * loads the app in the background. `/health` says `loading` until `load()` finishes, then
 * `ready` (or `failed` with the reason); `server.loaded` settles at the same moment.
 *
 * @throws AppDefinitionError / HostOptionError from the host, RangeError/TypeError for a bad server option,
 *   and the listen error (e.g. `EADDRINUSE`).
 * @example
 * const server = await serve(VideoApp, { port: 8080, token: process.env.REACTOR_TOKEN });
 * installShutdownHandlers(server);
 * console.log(`open ${server.url}`);
 */
export async function serve(appClass: new () => ReactorApp<any, any, any, any>, options: ServeOptions = {}): Promise<ReactorServer> {
  const { hostOptions, serverOptions, load } = splitServeOptions(options);
  const host = new AppHost(appClass, hostOptions);
  return listenThenLoad(new ReactorServer(host, serverOptions), host, load);
}

/**
 * Binds `server`'s port (closing `host` when that fails), then loads the app in the background:
 * `server.loaded` settles when `load()` has. The failure is reported by /health, the session
 * status and the log; callers may await `loaded`.
 * @internal
 */
export async function listenThenLoad<S extends ReactorServer>(server: S, host: AppHost, load: Parameters<AppHost['load']>[0]): Promise<S> {
  try {
    await server.listen();
  } catch (err) {
    await host.close();
    throw err;
  }
  server.loaded = host.load(load);
  server.loaded.catch(() => undefined);
  return server;
}
