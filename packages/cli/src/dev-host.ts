/**
 * The app process of `reactor dev` (started by it, never by hand): serves the app like
 * `reactor run`, and on the supervisor's `reload` message imports the rebuilt app as a new
 * generation and serves it on the same port. Rank reuse is on: the old app's `shutdown()` parks
 * its runner and the new app's identical runner takes it back, ranks and weights loaded; a runner
 * whose worker modules, options or `loadArgs` changed starts new ranks instead.
 *
 * Order of a reload: import the new generation first (an import that fails leaves the old
 * version serving), note the live session's state, then, when the manifest and the tracks are
 * unchanged, swap the app host under the live connections (`HostSwitch.replace` of
 * `@reactor/server`): the clients are detached, the old app closes (its runner parks), the new
 * one loads, the state is carried into a session of it, and every client is connected to it on
 * its open socket (a new welcome with the carried state). Then every parked runner the new
 * version did not take is stopped. When the manifest or the tracks changed, the old server closes
 * and a new one listens on the same port: the clients reconnect on their own and join the
 * carried session within its grace period.
 *
 * The session state is carried when the state class is unchanged (the same fields with the same
 * types and constraints; defaults and descriptions may differ): the new version's session gets
 * the old one's values (through its own `set_<field>` commands, so they are validated again).
 * When the class changed, the new session starts from the new defaults, the log says so, and
 * every connected client gets a `state_reset` error message (no id) saying why. Upload fields
 * are not carried (their files belonged to the old session).
 */
import { register } from 'node:module';
import type { Logger } from '@reactor/log';
import { SHUTDOWN_SIGNALS, consoleLogger, levelFromEnv, onProcessSignal } from '@reactor/log';
import { RankPool } from '@reactor/distributed/internal';
import { HostSwitch, hostOptionsOf, sameTracks, serveSwitchable, ServerErrorCode, type ReactorServer, type ServeOptions } from '@reactor/server';
import { AppHost, type AppHostApi, type ClientSink } from '@reactor/runtime';
import { checkPaths, importApp, manifestFrom, serveApp, serveSettings, type CliOptions } from './commands.js';
import { GENERATION_PARAM } from './dev-loader.js';
import type { Manifest } from './manifest.js';

/** Supervisor to app process. */
export type DevHostRequest = { t: 'reload'; reason: string; model: boolean };
/** App process to supervisor: the outcome of the first start or of a reload. */
export type DevHostReply = { t: 'serving'; viewer: string; generation: number } | { t: 'kept'; reason: string } | { t: 'down'; reason: string };

/** The app package's folder, handed to the module hooks. */
export interface DevHostArgs {
  options: CliOptions;
  root: string;
}

/** What a reload carries from the old version's session into the new one. */
interface CarriedState {
  /** The old schema's `state` (JSON Schema). */
  schema: unknown;
  /** The state's values by wire name. */
  values: Record<string, unknown>;
}

/** A protocol message to a client (`@reactor/client`'s `ServerMessage`). */
type ServerMessage = Parameters<ClientSink['message']>[0];

const quietSink: ClientSink = { message: () => undefined, frame: () => undefined, close: () => undefined };

/** The state's shape without what may change freely (defaults, descriptions). */
function stateShape(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(stateShape);
  if (schema === null || typeof schema !== 'object') return schema;
  return Object.fromEntries(
    Object.entries(schema)
      .filter(([k]) => k !== 'default' && k !== 'description')
      .map(([k, v]) => [k, stateShape(v)]),
  );
}

/** The live session's state (a quiet client joins it for its welcome); undefined without a session. */
function noteState(host: AppHostApi): CarriedState | undefined {
  if (host.status.sessionId === undefined) return undefined;
  let values: Record<string, unknown> | undefined;
  const handle = host.connect({ ...quietSink, message: (m) => void (m.type === 'welcome' && (values ??= m.state)) });
  handle.disconnect();
  return values === undefined ? undefined : { schema: host.schema.state, values };
}

/**
 * Sets the carried values in a new session of the new version, when its state class is the same.
 * Returns the `state_reset` notice for the connected clients when it is not.
 */
async function carryState(host: AppHostApi, carried: CarriedState, logger: Logger, rejoin: string): Promise<ServerMessage | undefined> {
  if (JSON.stringify(stateShape(host.schema.state)) !== JSON.stringify(stateShape(carried.schema))) {
    logger.info('the state class changed: the session starts again from its defaults');
    return {
      type: 'error',
      code: ServerErrorCode.StateReset,
      message:
        'reactor dev reloaded the app and its state class changed (a field was added, removed or retyped, or a constraint changed), so the session started again from the new defaults; the new state is in the welcome',
    };
  }
  const props = ((carried.schema as { properties?: Record<string, Record<string, unknown>> }).properties ?? {}) as Record<string, Record<string, unknown>>;
  const fields = Object.keys(carried.values).filter((k) => props[k] !== undefined && props[k]['x-reactor-upload'] === undefined);
  const handle = host.connect(quietSink);
  try {
    for (const field of fields) {
      const answer = await handle.command({ type: 'command', id: `reactor-dev-${field}`, name: `set_${field}`, params: { [field]: carried.values[field] } });
      if (answer.type === 'error') logger.warn(`could not carry ${field} into the new version: ${answer.message}`);
    }
  } finally {
    handle.disconnect();
  }
  logger.info(`carried the session state into the new version (${fields.join(', ') || 'no fields'}); ${rejoin}`);
  return undefined;
}

/** The manifest keys whose change means the ranks load again. */
function modelKeys(m: Manifest): string {
  return JSON.stringify([m.model, m.runtime]);
}

async function devHost(args: DevHostArgs, logger: Logger, send: (reply: DevHostReply) => void): Promise<void> {
  register('./dev-loader.js', import.meta.url, { data: { root: args.root } });
  // The pool this process owns: the app's runners park in it at shutdown() and take their ranks back from it.
  const ranks = new RankPool().install();
  const o = { ...args.options };
  let current: ReactorServer | undefined;
  let generation = 0;
  let lastModel: string | undefined;
  /** The manifest and serving settings the current server was started with (a change restarts it). */
  let lastKey: string | undefined;
  /** The options `serve` was called with for the current server (the next host is built alike). */
  let served: ServeOptions | undefined;
  let viewerHref = '';
  let closing = false;

  const load = async (model: boolean): Promise<void> => {
    let m: Manifest;
    let App: Awaited<ReturnType<typeof importApp>>;
    let settings: ReturnType<typeof serveSettings>;
    // Every attempt is a new generation: a module that failed to evaluate stays failed under its URL.
    const next = ++generation;
    try {
      m = manifestFrom(o);
      settings = serveSettings(o, m);
      checkPaths(o, m);
      App = await importApp(m, { logger, onStale: 'warn', query: `?${GENERATION_PARAM}=${next}` });
    } catch (err) {
      const reason = (err as Error).message;
      logger.error(`${reason}${current ? '; the previous version keeps serving' : '; fix it and save a file to try again'}`);
      send({ t: current ? 'kept' : 'down', reason });
      return;
    }
    const reloadModel = model || (lastModel !== undefined && lastModel !== modelKeys(m));
    lastModel = modelKeys(m);
    // The port is the one the first server got (`o.port` is set to it): not a change.
    const key = JSON.stringify({ m, settings: { ...settings, port: undefined } });
    if (current && current.host instanceof HostSwitch && served && key === lastKey) {
      const swap = current.host;
      let next: AppHost;
      try {
        next = new AppHost(App, hostOptionsOf(served).hostOptions);
      } catch (err) {
        const reason = (err as Error).message;
        logger.error(`${reason}; the previous version keeps serving`);
        send({ t: 'kept', reason });
        return;
      }
      if (sameTracks(next.schema, swap.schema)) {
        await swapIn(swap, next, reloadModel);
        return;
      }
      await next.close();
      logger.info('the tracks changed: restarting the server (the clients reconnect)');
    } else if (current && lastKey !== undefined && key !== lastKey) {
      logger.info('the manifest or the serving flags changed: restarting the server (the clients reconnect)');
    }
    lastKey = key;
    let carried: CarriedState | undefined;
    if (current) {
      const old = current;
      current = undefined;
      carried = noteState(old.host instanceof HostSwitch ? old.host.current : old.host);
      await old.close();
    }
    if (reloadModel) await ranks.releaseParked();
    if (closing) return;
    try {
      const { server, viewer } = await serveApp(o, m, App, settings, logger, undefined, (A, options) => {
        served = options;
        return serveSwitchable(A, options);
      });
      current = server;
      // Keep the port the first server got (with --port 0 as well), so the viewer stays put.
      o.port = new URL(server.url).port;
      viewerHref = viewer.href;
      if (carried) await carryState(server.host, carried, logger, 'clients rejoin it as they reconnect');
      await ranks.releaseParked();
      process.stdout.write(`Viewer: ${viewer.href}\n`);
      send({ t: 'serving', viewer: viewer.href, generation });
    } catch (err) {
      await ranks.releaseParked();
      const reason = (err as Error).message;
      logger.error(`${reason}; fix it and save a file to try again`);
      send({ t: 'down', reason });
    }
  };

  /** The new generation's host takes the place of the old one under the live connections. */
  const swapIn = async (swap: HostSwitch, next: AppHost, reloadModel: boolean): Promise<void> => {
    const carried = noteState(swap.current);
    const { load: context } = hostOptionsOf(served!);
    const started = performance.now();
    const { loadError } = await swap.replace(next, {
      load: async (h) => {
        if (reloadModel) await ranks.releaseParked();
        await h.load(context);
      },
      prepare: (h) => (carried ? carryState(h, carried, logger, 'the connected clients kept their connection') : undefined),
    });
    await ranks.releaseParked();
    if (loadError !== undefined) {
      const reason = (loadError as Error).message;
      logger.error(`${reason}; the server stays up with the failed version; fix it and save a file to try again`);
      send({ t: 'down', reason });
      return;
    }
    logger.info(`swapped the app under ${swap.status.clients} connected client(s) in ${((performance.now() - started) / 1000).toFixed(2)} s`);
    process.stdout.write(`Viewer: ${viewerHref}\n`);
    send({ t: 'serving', viewer: viewerHref, generation });
  };

  let cycle = load(false);
  process.on('message', (msg: DevHostRequest) => {
    if (msg?.t !== 'reload' || closing) return;
    cycle = cycle.then(() => {
      if (closing) return;
      logger.info(msg.reason);
      return load(msg.model);
    });
  });
  const quit = (): void => {
    if (closing) return;
    closing = true;
    void cycle
      .then(async () => {
        await ranks.close();
        await current?.close();
      })
      .finally(() => process.exit(0));
  };
  onProcessSignal(SHUTDOWN_SIGNALS, quit);
  // The supervisor is gone (killed): nothing may outlive it.
  process.on('disconnect', quit);
  await cycle;
}

const args = JSON.parse(process.argv[2] ?? '{}') as DevHostArgs;
const toStderr = (...a: unknown[]) => console.error(...a);
const logger = consoleLogger({ name: 'reactor', level: levelFromEnv(), sink: { debug: toStderr, info: toStderr, warn: toStderr, error: toStderr } });
const send = (reply: DevHostReply): void => {
  if (process.connected) process.send!(reply);
};
await devHost(args, logger, send);
