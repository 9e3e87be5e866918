/**
 * The `reactor` subcommands. Progress goes to the logger (the bin writes it to stderr),
 * results to stdout.
 */
import { pathToFileURL } from 'node:url';
import { existsSync } from 'node:fs';
import { delimiter, resolve, sep } from 'node:path';
import { PYTHON_ENV, PYTHON_PATH_ENV, PYTHON_WORKER_ENV, detectGpuCount } from '@reactor/distributed';
import type { Logger } from '@reactor/log';
import { AppHost, ReactorError, WEIGHTS_PATH_ENV, type AppRequirements, type AppStatics, type ReactorApp } from '@reactor/runtime';
import { describeApp, errorFrames } from '@reactor/runtime/internal';
import { installShutdownHandlers, isLoopbackHost, serve, type ReactorServer, type ServerOptions, type TokenAuthOptions } from '@reactor/server';
import { authOptions } from './token-command.js';
import { agonesWebRtc } from './agones-webrtc.js';
import type { AgonesAgent } from '@reactor/agones';
import { manifestFrom, ManifestError, type Manifest } from './manifest.js';
import { runDoctor } from './doctor.js';
import { CliErrorCode } from './errors.js';
import { findStaleBuild, staleBuildMessage } from './stale-build.js';
import { flagList, hostProblem, listProblems, originProblem } from './exposure.js';
import { showLoadProgress } from './load-progress.js';
import { openGpuSlots } from './gpu-admission.js';

/** An app class as the CLI imports it: constructible, with the optional typed statics. */
export type ReactorAppClass = (new () => ReactorApp<any, any, any, any>) & AppStatics;

/** The flags of `reactor run|schema|doctor`, as the bin parses them. */
export interface CliOptions {
  manifest?: string;
  config?: string;
  host?: string;
  port?: string | number;
  token?: string;
  /** `--allowed-host`: repeated and/or comma-separated host names. */
  allowedHost?: unknown;
  /** `--allowed-origin`: repeated and/or comma-separated origins. */
  allowedOrigin?: unknown;
  /** `--insecure`: serve on a non-loopback address without a token. */
  insecure?: boolean;
  /** `--agones`: run as an Agones GameServer (also `agones.enabled` in reactor.yaml). */
  agones?: boolean;
}

export { manifestFrom };

/** A `--port` value, checked. @internal */
export function parsePort(v: string | number | undefined, fallback: number): number {
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65535)
    throw new ReactorError(CliErrorCode.CliUsage, `--port must be an integer from 0 to 65535, got ${JSON.stringify(v)}`);
  return n;
}

/**
 * Imports the app class named by `runtime.import`. A module older than its package's sources is
 * refused (`onStale: 'refuse'`, as `reactor run` does), warned about, or not looked for (`ignore`:
 * `reactor dev`'s reloads, whose build has just succeeded and wrote only the outputs that changed).
 * @throws ReactorError `app_import_failed`: the module is missing, fails to import, or lacks the export; `stale_build`.
 */
export async function importApp(
  m: Manifest,
  options: { logger?: Logger; onStale?: 'warn' | 'refuse' | 'ignore'; query?: string } = {},
): Promise<ReactorAppClass> {
  applyPythonSettings(m);
  if (!existsSync(m.runtime.module)) {
    throw new ReactorError(
      CliErrorCode.AppImportFailed,
      `runtime.import points at ${m.runtime.module}, which does not exist (resolved from ${m.root}, the folder of ${m.file}); fix the path in runtime.import${m.runtime.module.includes(`${sep}dist${sep}`) ? ', or build it first: pnpm build' : ''}`,
    );
  }
  const stale = options.onStale === 'ignore' ? undefined : findStaleBuild(m.runtime.module);
  if (stale) {
    if (options.onStale === 'refuse') throw new ReactorError(CliErrorCode.StaleBuild, staleBuildMessage(stale));
    options.logger?.warn(`WARNING: ${staleBuildMessage(stale)}`);
  }
  let mod: Record<string, unknown>;
  try {
    mod = (await import(`${pathToFileURL(m.runtime.module).href}${options.query ?? ''}`)) as Record<string, unknown>;
  } catch (err) {
    throw new ReactorError(CliErrorCode.AppImportFailed, `importing ${m.runtime.module} failed: ${(err as Error).message}`, { cause: err });
  }
  const cls = mod[m.runtime.exportName];
  if (typeof cls !== 'function') {
    const names = Object.keys(mod).filter((k) => typeof mod[k] === 'function');
    throw new ReactorError(
      CliErrorCode.AppImportFailed,
      `${m.runtime.module} has no export named "${m.runtime.exportName}" (it exports: ${names.join(', ') || 'nothing callable'}); fix runtime.import in ${m.file}`,
    );
  }
  return cls as ReactorAppClass;
}

/**
 * `runtime.python` becomes the environment a Python worker reads (`REACTOR_PYTHON`,
 * `REACTOR_PYTHON_PATH`, `REACTOR_PYTHON_WORKER`), before the app is imported. A variable
 * already set wins over the manifest (`REACTOR_PYTHON=/usr/bin/python3 reactor run`); the
 * manifest's folders come before those already in `REACTOR_PYTHON_PATH`.
 */
export function applyPythonSettings(m: Manifest, env: NodeJS.ProcessEnv = process.env): void {
  const py = m.runtime.python;
  if (!py) return;
  if (py.interpreter !== undefined && !env[PYTHON_ENV]) env[PYTHON_ENV] = py.interpreter;
  if (py.worker !== undefined && !env[PYTHON_WORKER_ENV]) env[PYTHON_WORKER_ENV] = py.worker;
  if (py.path.length > 0) {
    const existing = (env[PYTHON_PATH_ENV] ?? '').split(delimiter).filter(Boolean);
    env[PYTHON_PATH_ENV] = [...py.path.filter((p) => !existing.includes(p)), ...existing].join(delimiter);
  }
}

/** A list flag, split and checked; `undefined` when the flag was not given. @internal */
export function listFlag(value: unknown, flag: string, check: (v: string) => string | undefined): string[] | undefined {
  const list = flagList(value);
  if (list === undefined) return undefined;
  const problems = listProblems(list, check, () => flag);
  if (list.length === 0) problems.push(`${flag}: needs a value`);
  if (problems.length > 0) throw new ReactorError(CliErrorCode.CliUsage, problems.join('; '));
  return list;
}

export function configPath(o: CliOptions, m: Manifest): string | undefined {
  return o.config !== undefined ? resolve(o.config) : m.runtime.config;
}

/**
 * Checks that the files the app will be handed exist, naming the key (or flag) and the folder
 * a relative path was resolved from.
 * @throws ManifestError (`manifest_invalid`) for `runtime.config` / `runtime.weights_path`; ReactorError `cli_usage` for `--config`.
 */
export function checkPaths(o: CliOptions, m: Manifest): void {
  const from = `resolved from ${m.root}, the folder of ${m.file}`;
  if (o.config !== undefined) {
    if (!existsSync(resolve(o.config)))
      throw new ReactorError(CliErrorCode.CliUsage, `--config: ${resolve(o.config)} does not exist (resolved from ${process.cwd()}, the current folder)`);
  } else if (m.runtime.config !== undefined && !existsSync(m.runtime.config)) {
    throw new ManifestError(`runtime.config: ${m.runtime.config} does not exist (${from}); fix the path or pass --config <file>`);
  }
  if (m.runtime.weightsPath !== undefined && !process.env[WEIGHTS_PATH_ENV] && !existsSync(m.runtime.weightsPath)) {
    throw new ManifestError(`runtime.weights_path: ${m.runtime.weightsPath} does not exist (${from}); fix the path or set ${WEIGHTS_PATH_ENV}`);
  }
}

/** The app's name and version: the manifest's `model:` when given, else the app's `@reactorApp` ones. */
function appName(m: Manifest, App: ReactorAppClass): string {
  const app = describeApp(App).schema.app;
  return `${m.model.name ?? app.name} ${m.model.version ?? app.version}`;
}

/** Where and how `reactor run` serves, from the flags and the manifest, checked. */
export interface ServeSettings {
  host: string;
  port: number;
  token: string | undefined;
  /** Signed token keys (`REACTOR_AUTH_*`, `server.auth`). */
  auth: TokenAuthOptions | undefined;
  allowedHosts: string[] | undefined;
  allowedOrigins: string[] | undefined;
  /** A non-loopback host without a token (allowed with --insecure only). */
  exposed: boolean;
}

/**
 * The serving flags and manifest keys, checked before anything loads.
 * @throws ReactorError `insecure_bind`, `cli_usage`
 */
export function serveSettings(o: CliOptions, m: Manifest): ServeSettings {
  const token = o.token ?? process.env['REACTOR_TOKEN'] ?? m.server.token;
  if (token === '') {
    const from = o.token !== undefined ? "--token ''" : 'REACTOR_TOKEN is set but empty';
    throw new ReactorError(
      CliErrorCode.CliUsage,
      `${from}: an empty token protects nothing. Give a secret (--token <secret>, REACTOR_TOKEN=<secret> or server.token in ${m.file}, at least 16 characters), ` +
        `or leave it out${o.token !== undefined ? '' : ' (unset REACTOR_TOKEN)'} to serve on a loopback address only${o.host !== undefined && !isLoopbackHost(o.host) ? ` (${o.host} without a token needs --insecure)` : ''}`,
    );
  }
  const port = parsePort(o.port, m.server.port ?? 8080);
  const host = o.host ?? m.server.host ?? '127.0.0.1';
  const allowedHosts = listFlag(o.allowedHost, '--allowed-host', hostProblem) ?? m.server.allowedHosts;
  const allowedOrigins = listFlag(o.allowedOrigin, '--allowed-origin', originProblem) ?? m.server.allowedOrigins;
  const auth = authOptions(m);
  const exposed = !isLoopbackHost(host) && token === undefined && auth === undefined;
  if (exposed && o.insecure !== true) {
    throw new ReactorError(
      CliErrorCode.InsecureBind,
      `refusing to serve on ${host} without an access token: anyone who can reach this machine could watch and control the stream. ` +
        `Set a token (--token <secret>, REACTOR_TOKEN, or server.token in ${m.file}), bind a loopback address (--host 127.0.0.1), ` +
        'or pass --insecure if every machine on this network is trusted',
    );
  }
  if ((o.agones === true || m.agones.enabled) && port === AGONES_SIDECAR_HEALTH_PORT) {
    throw new ReactorError(
      CliErrorCode.CliUsage,
      `port ${port} is the Agones SDK sidecar's health port in every GameServer pod (the sidecar or this server would fail to listen, or the sidecar's liveness probe would reach this server): ` +
        `pass --port 8000 (the chart's app.port) or set another server.port in ${m.file}`,
    );
  }
  return { host, port, token, auth, allowedHosts, allowedOrigins, exposed };
}

/** The Agones SDK sidecar's health port in every GameServer pod (`--health-port`'s default; Agones' controller hard-codes it in the probes it adds). */
const AGONES_SIDECAR_HEALTH_PORT = 8080;

/**
 * Serves an imported app (first, so /health says "loading"), then waits for its `load()`.
 * `onServing` runs once the server listens (to install signal handlers before the load), with
 * the Agones agent when `--agones` or `agones.enabled` asks for one (started before the load, so
 * its health pings cover it).
 * @returns the server, loaded, the viewer URL (with the token) and the Agones agent, if any
 * @throws ReactorError `port_unavailable`; `app_load_failed` (the server is closed then)
 */
export async function serveApp(
  o: CliOptions,
  m: Manifest,
  App: ReactorAppClass,
  s: ServeSettings,
  logger: Logger,
  onServing?: (server: ReactorServer, agones: AgonesAgent | undefined) => void,
  serveWith: typeof serve = serve,
): Promise<{ server: ReactorServer; viewer: URL; agones: AgonesAgent | undefined }> {
  const name = appName(m, App);
  logger.info(`${name} (${m.file})`);
  if (s.exposed) logger.warn(`--insecure: serving on ${s.host} without a token; anyone who can reach it can watch and control the stream`);
  const cfg = configPath(o, m);
  logger.info(`loading the app${cfg ? ` with config ${cfg}` : ''}${m.runtime.weightsPath ? `, weights ${m.runtime.weightsPath}` : ''}`);
  const started = performance.now();
  // `server.auth` as written (key file paths) becomes `s.auth` (PEM read, REACTOR_AUTH_* applied).
  const { auth: _writtenAuth, ...serverKeys } = m.server;
  // Under Agones the GameServer's `webrtc` port and node address become server.webrtc's (agones-webrtc.ts).
  const writtenWebRtc = (serverKeys as { webrtc?: ServerOptions['webrtc'] }).webrtc;
  const webrtc = o.agones === true || m.agones.enabled ? await agonesWebRtc(writtenWebRtc, logger) : writtenWebRtc;
  // `gpu:`: the GPU's session slot is waited for from now on, while the app loads.
  const slots = openGpuSlots(m, logger);
  let server: ReactorServer;
  try {
    server = await serveWith(App, {
      // Every `server:` key of the manifest (one table, manifest.ts SERVER_OPTION_KEYS), then what the flags decided.
      ...serverKeys,
      ...(webrtc !== undefined && { webrtc }),
      host: s.host,
      port: s.port,
      logger,
      token: s.token,
      allowedHosts: s.allowedHosts,
      allowedOrigins: s.allowedOrigins,
      ...(s.auth !== undefined && { auth: s.auth }),
      ...(o.insecure === true && { insecure: true }),
      ...(m.recording !== undefined && { recording: m.recording }),
      ...(m.runtime.weightsPath !== undefined && { weightsPath: m.runtime.weightsPath }),
      ...(m.runtime.sessionGraceMs !== undefined && { gracePeriodMs: m.runtime.sessionGraceMs }),
      ...(m.snapshots !== undefined && { snapshots: m.snapshots }),
      ...(cfg !== undefined && { configPath: cfg }),
      manifestGpuCount: m.model.gpu.count,
      ...(slots !== undefined && { admission: slots }),
    });
  } catch (err) {
    slots?.close();
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE' || code === 'EACCES') {
      throw new ReactorError(
        CliErrorCode.PortUnavailable,
        `cannot listen on ${s.host}:${s.port} (${code}): ${code === 'EADDRINUSE' ? 'something else listens there' : 'not allowed for this user'}; pass --port <other> (0 picks a free one) or set server.port in ${m.file}`,
        { cause: err },
      );
    }
    throw err;
  }
  const agones = o.agones === true || m.agones.enabled ? await startAgonesFor(server, m, logger) : undefined;
  onServing?.(server, agones);
  // The viewer works while the app loads (it shows the load's progress): say where it is now.
  logger.info(`listening on ${server.url} while the app loads`);
  const hideProgress = showLoadProgress(server.host, process.stderr, logger);
  try {
    await server.loaded;
  } catch (err) {
    hideProgress();
    // No Shutdown(): the process exits 1 and Agones replaces the GameServer whose container failed.
    agones?.stop();
    await server.close();
    slots?.close();
    const rank = rankOf(err);
    // An error the rank raised about the app (a module-name typo) has no frame of the app's: nothing above to point at.
    const stack = errorFrames(err).length > 0 ? '; its stack is in the log above' : '';
    const where = typeof rank === 'number' ? ` (in rank ${rank}'s load()${stack})` : '';
    throw new ReactorError(CliErrorCode.AppLoadFailed, `loading ${name} failed${where}: ${(err as Error).message}`, { cause: err });
  }
  hideProgress();
  logger.info(`ready in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  const viewer = new URL(server.url);
  if (s.token !== undefined) viewer.searchParams.set('token', s.token);
  return { server, viewer, agones };
}

/** The rank an error (or its cause: AppHost wraps what load() threw) came from, if a rank's. */
function rankOf(err: unknown): number | undefined {
  for (let e = err, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    const rank = (e as { rank?: unknown }).rank;
    if (typeof rank === 'number') return rank;
  }
  return undefined;
}

/**
 * What the signal handlers close: the server, and with Agones the drain first: the instance
 * leaves the pool at once (no new session is sent to it), a running session goes on up to the
 * drain deadline (pings go on, so Agones does not kill the pod mid-drain), then the server
 * closes and `Shutdown()`.
 */
function closingFor(server: ReactorServer, agones: AgonesAgent | undefined): Parameters<typeof installShutdownHandlers>[0] {
  if (!agones) return server;
  return {
    options: server.options,
    close: async () => {
      // At the drain's deadline the viewers still there get its own close (4003 drain_deadline), not a bare 1001.
      await server.close(await agones.drainSessions());
      await agones.shutdown();
    },
  };
}

/**
 * Starts the Agones integration (imported here, so a plain `reactor run` never loads it or gRPC)
 * with the manifest's `agones:` settings.
 */
async function startAgonesFor(server: ReactorServer, m: Manifest, logger: Logger): Promise<AgonesAgent> {
  const { startAgones } = await import('@reactor/agones');
  const { onSessionEnd, healthIntervalMs, allocationTimeoutMs } = m.agones;
  // The chart sets it from agones.drainSeconds (below the pod's terminationGracePeriodSeconds).
  const drainEnv = process.env['REACTOR_DRAIN_TIMEOUT_MS'];
  const drainTimeoutMs = drainEnv !== undefined && drainEnv !== '' ? Number(drainEnv) : undefined;
  if (drainTimeoutMs !== undefined && (!Number.isInteger(drainTimeoutMs) || drainTimeoutMs < 0)) {
    throw new ReactorError(
      CliErrorCode.CliUsage,
      `REACTOR_DRAIN_TIMEOUT_MS must be a whole number of milliseconds (0 or more), got ${JSON.stringify(drainEnv)}`,
    );
  }
  const agent = startAgones(server, {
    logger,
    ...(drainTimeoutMs !== undefined && { drainTimeoutMs }),
    ...(onSessionEnd !== undefined && { onSessionEnd }),
    ...(healthIntervalMs !== undefined && { healthIntervalMs }),
    ...(allocationTimeoutMs !== undefined && { allocationTimeoutMs }),
  });
  logger.info(
    `agones: following the GameServer through the SDK sidecar at localhost:${process.env['AGONES_SDK_GRPC_PORT'] ?? '9357'} (on session end: ${agent.options.onSessionEnd}, pings every ${agent.options.healthIntervalMs} ms, allocation timeout ${agent.options.allocationTimeoutMs} ms)`,
  );
  return agent;
}

/** `reactor run`: serve first (so /health says "loading"), then load, then print the viewer URL. */
export async function runCommand(o: CliOptions, logger: Logger): Promise<void> {
  const m = manifestFrom(o);
  const settings = serveSettings(o, m);
  checkPaths(o, m);
  const App = await importApp(m, { logger, onStale: 'refuse' });
  const { viewer } = await serveApp(o, m, App, settings, logger, (server, agones) =>
    installShutdownHandlers(closingFor(server, agones), { onSignal: (s) => logger.info(`${s}: closing clients and shutting the app down`) }),
  );
  process.stdout.write(`Viewer: ${viewer.href}\n`);
  const dashboard = new URL('/dashboard', viewer);
  dashboard.search = viewer.search;
  process.stdout.write(`Dashboard: ${dashboard.href}\n`);
}

/** `reactor schema`: the app's schema as JSON, without loading the model. */
export async function schemaCommand(o: CliOptions, logger: Logger): Promise<void> {
  const m = manifestFrom(o);
  const App = await importApp(m, { logger });
  const host = new AppHost(App, { logger });
  process.stdout.write(`${JSON.stringify(host.schema, null, 2)}\n`);
  await host.close();
}

/**
 * `reactor doctor`: every check, then exit 1 if any failed. The GPU count is the runner's
 * (`detectGpuCount()`), handed to the app's `requirements()` as `gpuCount`.
 */
export async function doctorCommand(o: CliOptions, logger: Logger): Promise<void> {
  const m = manifestFrom(o);
  checkPaths(o, m);
  const App = await importApp(m, { logger });
  const gpuCount = detectGpuCount();
  const req: AppRequirements = (await App.requirements?.({ configPath: configPath(o, m), manifestGpuCount: m.model.gpu.count, gpuCount })) ?? {};
  const checks = await runDoctor(m, req, o.host ?? m.server.host ?? '127.0.0.1', parsePort(o.port, m.server.port ?? 8080), gpuCount);
  const mark = { ok: 'ok  ', warn: 'warn', fail: 'FAIL' } as const;
  for (const c of checks) {
    process.stdout.write(`${mark[c.status]}  ${c.name}: ${c.detail}\n`);
    if (c.fix) process.stdout.write(`      fix: ${c.fix}\n`);
  }
  const failed = checks.filter((c) => c.status === 'fail').length;
  if (failed > 0) {
    process.stdout.write(`${failed} check(s) failed\n`);
    process.exitCode = 1;
  } else process.stdout.write('all checks passed\n');
}
