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
 * carried session within its grace period; what was lost is told (`state_reset`) to each that
 * comes back (`HostSwitch.noticeReturning`).
 *
 * The session state is carried when the state class is unchanged (the same fields with the same
 * types and constraints; defaults and descriptions may differ): the new version's session gets
 * the old one's values (through its own `set_<field>` commands, so they are validated again).
 * When the class changed, the new session starts from the new defaults, the log says so, and
 * every connected client gets a `state_reset` error message (no id) saying why. Upload fields
 * are not carried (their files belonged to the old session). A Python-only edit restarts only the
 * ranks: the session and its state stay, and the clients get a `state_reset` saying that the
 * model's own state (its caches, its rollout) started again from `load()`.
 */
import { existsSync, readFileSync } from 'node:fs';
import { register } from 'node:module';
import { basename, join } from 'node:path';
import type { Logger } from '@reactor/log';
import { SHUTDOWN_SIGNALS, consoleLogger, levelFromEnv, onProcessSignal } from '@reactor/log';
import { execFile } from 'node:child_process';
import { pythonInterpreter } from '@reactor/distributed';
import { RankPool } from '@reactor/distributed/internal';
import { HostSwitch, hostOptionsOf, sameTracks, serveSwitchable, ServerErrorCode, type ReactorServer, type ServeOptions } from '@reactor/server';
import { AppHost, type AppHostApi, type ClientSink } from '@reactor/runtime';
import { checkPaths, importApp, manifestFrom, serveApp, serveSettings, type CliOptions } from './commands.js';
import { GENERATION_PARAM } from './dev-loader.js';
import { appTypesOf, typesNameIn } from './types-command.js';
import { pythonTypes } from './python-types.js';
import { declarationsOf } from './source-types.js';
import type { Manifest } from './manifest.js';

/** Supervisor to app process. */
export type DevHostRequest = {
  t: 'reload';
  reason: string;
  model: boolean;
  /** Only these Python files changed: the ranks restart in place, the app half stays. */
  python?: string[];
};
/** App process to supervisor: the outcome of the first start or of a reload. */
export type DevHostReply = { t: 'serving'; viewer: string; generation: number } | { t: 'kept'; reason: string } | { t: 'down'; reason: string };
/** App process to supervisor, after a `serving` reply: the client types of the version now served. */
export type DevHostTypes = { t: 'types' } & AppTypesFile;

/** The app's `src/app-types.ts` as `reactor types` would write it for the version now served. */
export interface AppTypesFile {
  file: string;
  text: string;
}

/** The app package's folder, handed to the module hooks. */
export interface DevHostArgs {
  options: CliOptions;
  root: string;
}

/** What a reload carries from the old version's session into the new one. */
interface CarriedState {
  /** The old session's id: the new version's session takes it (a reload is the same session to its clients). */
  sessionId: string;
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
  const sessionId = host.status.sessionId;
  if (sessionId === undefined) return undefined;
  let values: Record<string, unknown> | undefined;
  const handle = host.connect({ ...quietSink, message: (m) => void (m.type === 'welcome' && (values ??= m.state)) });
  handle.disconnect();
  return values === undefined ? undefined : { sessionId, schema: host.schema.state, values };
}

/** The `state_reset` message every client gets when a reload loses (some of) the session's state, or the model's own state. */
function stateReset(message: string): ServerMessage {
  return { type: 'error', code: ServerErrorCode.StateReset, message };
}

/**
 * Sets the carried values in a new session of the new version (with the old session's id), when
 * its state class is the same. Returns the `state_reset` notice for the connected clients when
 * it is not, or when upload fields could not be carried; the log says the same.
 */
async function carryState(host: AppHostApi, carried: CarriedState, logger: Logger, rejoin: string): Promise<ServerMessage | undefined> {
  // The session keeps its id across the reload, whatever is carried into it.
  const handle = host.connect(quietSink, { sessionId: carried.sessionId });
  try {
    if (JSON.stringify(stateShape(host.schema.state)) !== JSON.stringify(stateShape(carried.schema))) {
      logger.warn(`the state class changed: session ${carried.sessionId} starts again from its defaults (the clients are told: state_reset); ${rejoin}`);
      return stateReset(
        'reactor dev reloaded the app and its state class changed (a field was added, removed or retyped, or a constraint changed), so the session started again from the new defaults; the new state is in the welcome',
      );
    }
    const props = ((carried.schema as { properties?: Record<string, Record<string, unknown>> }).properties ?? {}) as Record<string, Record<string, unknown>>;
    const known = Object.keys(carried.values).filter((k) => props[k] !== undefined);
    const fields = known.filter((k) => props[k]!['x-reactor-upload'] === undefined);
    const uploads = known.filter((k) => props[k]!['x-reactor-upload'] !== undefined && carried.values[k] !== null && carried.values[k] !== undefined);
    const lost: string[] = [];
    for (const field of fields) {
      const answer = await handle.command({ type: 'command', id: `reactor-dev-${field}`, name: `set_${field}`, params: { [field]: carried.values[field] } });
      if (answer.type === 'error') {
        lost.push(field);
        logger.warn(`could not carry ${field} into the new version (it has the new default): ${answer.message}`);
      }
    }
    const kept = fields.filter((f) => !lost.includes(f));
    logger.info(`carried session ${carried.sessionId}'s state into the new version (${kept.join(', ') || 'no fields'}); ${rejoin}`);
    lost.push(...uploads);
    if (uploads.length > 0)
      logger.warn(`not carried: ${uploads.join(', ')} (an uploaded file belongs to the session that received it); the clients are told (state_reset)`);
    if (lost.length === 0) return undefined;
    return stateReset(
      `reactor dev reloaded the app and could not carry ${lost.join(', ')} into the new version (an uploaded file belongs to the old version's session; a value the new constraints refuse is dropped), so ${lost.length > 1 ? 'they have' : 'it has'} the default again; the rest of the state was kept`,
    );
  } finally {
    handle.disconnect();
  }
}

/** The manifest keys whose change means the ranks load again. */
function modelKeys(m: Manifest): string {
  return JSON.stringify([m.model, m.runtime]);
}

/**
 * The app's generated client types for the version now served, when the app keeps them in
 * `src/app-types.ts` (as `pnpm types` writes them); its exported name is kept.
 */
function appTypesFiles(root: string, m: Manifest, App: Awaited<ReturnType<typeof importApp>>, schema: unknown, logger: Logger): AppTypesFile[] {
  const out: AppTypesFile[] = [];
  const file = join(root, 'src', 'app-types.ts');
  // The Python worker's TypedDicts (`reactor types --python`), where a worker folder keeps them.
  const python = (m.runtime.python?.path ?? []).map((p) => join(p, 'app_types.py')).filter((f) => existsSync(f));
  try {
    if (existsSync(file)) out.push({ file, text: appTypesOf(m.runtime.module, App, schema, logger, typesNameIn(readFileSync(file, 'utf8'))) });
    if (python.length > 0) {
      const { text } = pythonTypes(schema as Parameters<typeof pythonTypes>[0], App.name, declarationsOf(m.runtime.module));
      for (const f of python) out.push({ file: f, text });
    }
  } catch (err) {
    logger.warn(`could not write the app's generated types again: ${(err as Error).message}; run pnpm types`);
  }
  return out;
}

/** The first syntax error of the Python files, parsed by the worker's interpreter (nothing is imported or run), as `file, line N: message` and the line. */
function pythonSyntaxError(m: Manifest, files: string[]): Promise<string | undefined> {
  const script = [
    'import sys',
    'for f in sys.argv[1:]:',
    '    try:',
    '        compile(open(f, "rb").read(), f, "exec")',
    '    except FileNotFoundError:',
    '        pass',
    '    except SyntaxError as e:',
    '        text = (e.text or "").strip()',
    '        print(f"{e.filename}, line {e.lineno}: {e.msg}")',
    '        print(f"    {text}")',
    '        sys.exit(1)',
  ].join('\n');
  // As the ranks get it: REACTOR_PYTHON first (reactor.yaml's interpreter sets it when unset).
  const python = pythonInterpreter(process.env['REACTOR_PYTHON'] ?? m.runtime.python?.interpreter, process.env);
  return new Promise((done) => {
    execFile(python, ['-c', script, ...files], (err, stdout) => done(err ? stdout.trim() || err.message : undefined));
  });
}

async function devHost(args: DevHostArgs, logger: Logger, send: (reply: DevHostReply | DevHostTypes) => void): Promise<void> {
  const sendTypes = (types: AppTypesFile[]): void => {
    for (const t of types) send({ t: 'types', ...t });
  };
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
      // After the first start, a reload follows a build that succeeded (a failed one reloads
      // nothing); it writes only the outputs that changed, so mtimes would call it stale.
      App = await importApp(m, { logger, onStale: next === 1 ? 'warn' : 'ignore', query: `?${GENERATION_PARAM}=${next}` });
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
        await swapIn(swap, next, reloadModel, () => appTypesFiles(args.root, m, App, next.schema, logger));
        return;
      }
      await next.close();
      logger.info('the tracks changed: restarting the server (the clients reconnect)');
    } else if (current && lastKey !== undefined && key !== lastKey) {
      logger.info('the manifest or the serving flags changed: restarting the server (the clients reconnect)');
    }
    lastKey = key;
    let carried: CarriedState | undefined;
    /** The clients of the old server: the first as many that come back to the new one are told what was lost. */
    let leaving = 0;
    if (current) {
      const old = current;
      current = undefined;
      leaving = old.host.status.clients;
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
      if (carried) {
        const notice = await carryState(server.host, carried, logger, 'clients rejoin it as they reconnect');
        // Told as they come back (asking to resume an identity the new server does not hold).
        if (notice && server.host instanceof HostSwitch) server.host.noticeReturning(notice, leaving);
      }
      await ranks.releaseParked();
      process.stdout.write(`Viewer: ${viewer.href}\n`);
      send({ t: 'serving', viewer: viewer.href, generation });
      sendTypes(appTypesFiles(args.root, m, App, server.host.schema, logger));
    } catch (err) {
      await ranks.releaseParked();
      const reason = (err as Error).message;
      logger.error(`${reason}; fix it and save a file to try again`);
      send({ t: 'down', reason });
    }
  };

  /** The new generation's host takes the place of the old one under the live connections. */
  const swapIn = async (swap: HostSwitch, next: AppHost, reloadModel: boolean, types: () => AppTypesFile[]): Promise<void> => {
    const carried = noteState(swap.current);
    if (!carried) logger.info('no session state to carry (no session ran, or the previous version failed to load): the next session starts from the defaults');
    const { load: context } = hostOptionsOf(served!);
    const started = performance.now();
    const { loadError } = await swap.replace(next, {
      load: async (h) => {
        if (reloadModel) await ranks.releaseParked();
        await h.load(context);
      },
      prepare: (h) => (carried ? carryState(h, carried, logger, 'the connected clients kept their connection') : undefined),
      failed: (_h, err) => {
        const first = ((err as Error).message ?? String(err)).split('\n')[0]!;
        if (carried) logger.warn(`session ${carried.sessionId}'s state is lost: the new version failed to load (the clients are told: state_reset)`);
        return carried
          ? stateReset(
              `reactor dev reloaded the app and the new version failed to load (${first}), so session ${carried.sessionId} and its state are lost; the next save that loads starts a new session from the defaults`,
            )
          : undefined;
      },
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
    sendTypes(types());
  };

  /**
   * A Python edit: the changed files are parsed first (a syntax error leaves everything as it
   * was, like a TypeScript build that fails); then every live runner of the changed code starts
   * new ranks in place, while the app half, its session and the connections stay. When no
   * runner took the change, or new ranks failed to load, the whole app is reloaded (which says
   * what failed, and what was lost, as any reload does).
   */
  const restartRanks = async (files: string[]): Promise<void> => {
    const m = manifestFrom(o);
    const problem = await pythonSyntaxError(m, files);
    if (problem !== undefined) {
      const reason = `the Python worker does not parse: ${problem}`;
      logger.error(`the Python worker does not parse (the ranks keep running the last good version, nothing was lost; fix it and save again): ${problem}`);
      send({ t: 'kept', reason });
      return;
    }
    const started = performance.now();
    const before = current?.host.status.sessionId;
    const { restarted, failed } = await ranks.restartChanged();
    if (restarted === 0 || failed > 0) {
      if (failed > 0)
        logger.warn(
          `the restarted ranks failed to load${before ? `: session ${before} and its state are lost (its clients see the error in the session status)` : ''}; reloading the whole app to say why`,
        );
      await load(true);
      return;
    }
    const session = current?.host.status.sessionId;
    logger.info(
      `restarted the ranks of ${restarted} runner(s) in ${((performance.now() - started) / 1000).toFixed(2)} s; the app half kept running${session ? ` (session ${session} and its state kept; the model's own state starts again from load(); the clients are told: state_reset)` : ''}`,
    );
    // The session's state is kept, but what the ranks held (caches, the rollout so far) is not.
    if (session && current?.host instanceof HostSwitch)
      current.host.notify(
        stateReset(
          `reactor dev restarted the Python ranks after an edit of ${files.map((f) => basename(f)).join(', ')}: session ${session} and its state were kept (no new welcome), but the model's own state (what load() and the steps so far built: caches, the rollout) started again from load()`,
        ),
      );
    process.stdout.write(`Viewer: ${viewerHref}\n`);
    send({ t: 'serving', viewer: viewerHref, generation });
  };

  let cycle = load(false);
  process.on('message', (msg: DevHostRequest) => {
    if (msg?.t !== 'reload' || closing) return;
    cycle = cycle.then(() => {
      if (closing) return;
      logger.info(msg.reason);
      return msg.python && current ? restartRanks(msg.python) : load(msg.model);
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
const send = (reply: DevHostReply | DevHostTypes): void => {
  if (process.connected) process.send!(reply);
};
await devHost(args, logger, send);
