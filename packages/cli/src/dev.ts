/**
 * `reactor dev`: serves the app like `reactor run`, and on every change under the app package's
 * `src/` (or to the manifest, the config or the weights) rebuilds it and reloads the app on the
 * same port. The watcher (chokidar) watches folders, so a file an editor replaces (vim, JetBrains'
 * safe write, `sed -i`: a temporary file renamed over it) is seen on every save. The build is
 * incremental (dev-build.ts: the TypeScript compiler API, kept in this process, re-checks and
 * emits what changed). The app runs in one long-lived child process (`dev-host`)
 * that imports each build as a new generation: the application half is restarted, while the
 * ranks, with their weights loaded, are kept unless the model half changed (the worker modules,
 * the runner's options or `loadArgs`, the weights, the manifest's `model`/`runtime` keys).
 * A build that fails leaves the running server as it was.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { watch as chokidarWatch, type FSWatcher } from 'chokidar';
import { type Logger, SHUTDOWN_SIGNALS, onProcessSignal } from '@reactor/log';
import type * as TS from 'typescript';
import { ReactorError, WEIGHTS_PATH_ENV } from '@reactor/runtime';
import { findManifest, loadManifest, ManifestError, MANIFEST_FILE } from './manifest.js';
import type { DevHostArgs, DevHostReply, DevHostRequest, DevHostTypes } from './dev-host.js';
import { CliErrorCode } from './errors.js';
import { IncrementalBuild } from './dev-build.js';

/** How long the app process may take to close the app after SIGTERM before it is killed. */
const HOST_STOP_GRACE_MS = 30_000;

/** The flags of `reactor dev` (those of `reactor run` it passes on). */
export interface DevOptions {
  manifest?: string;
  config?: string;
  host?: string;
  port?: string | number;
  token?: string;
}

/** The package folder holding `module`: the nearest folder above it with a package.json. */
function packageRoot(module: string, fallback: string): string {
  for (let dir = dirname(module); ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    if (dirname(dir) === dir) return fallback;
  }
}

function waitExit(child: ChildProcess): Promise<void> {
  return child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise((r) => child.once('exit', () => r()));
}

/** `reactor dev`: runs until SIGINT/SIGTERM, then stops the server and exits. */
export async function devCommand(o: DevOptions, logger: Logger): Promise<void> {
  const file = o.manifest ?? findManifest();
  if (!file)
    throw new ManifestError(`no ${MANIFEST_FILE} in ${process.cwd()} or its parents; run reactor dev from your app's folder or pass --manifest <file>`);
  const m = loadManifest(file);
  const root = packageRoot(m.runtime.module, m.root);
  const src = join(root, 'src');
  if (!existsSync(src))
    throw new ReactorError(
      CliErrorCode.CliUsage,
      `reactor dev watches the app package's src/ folder, and ${src} does not exist (the package of ${m.runtime.module})`,
    );
  const tsconfig = join(root, 'tsconfig.build.json');
  let compiler: IncrementalBuild | undefined;
  if (existsSync(tsconfig)) {
    let ts;
    try {
      ts = createRequire(join(root, 'package.json'))('typescript') as typeof TS;
    } catch (err) {
      throw new ReactorError(
        CliErrorCode.CliUsage,
        `reactor dev builds with TypeScript, and typescript is not installed for ${root}; add it: pnpm add -D typescript`,
        { cause: err },
      );
    }
    compiler = new IncrementalBuild(ts, tsconfig);
  }
  // The app process runs the `reactor` the app itself depends on, so that the app and the server
  // share one copy of @reactor/runtime (two copies would not recognise each other's classes).
  let hostMain = fileURLToPath(new URL('./dev-host.js', import.meta.url));
  try {
    const own = join(dirname(createRequire(join(root, 'package.json')).resolve('@reactor/cli')), 'dev-host.js');
    if (existsSync(own)) hostMain = own;
  } catch {
    // the app does not depend on @reactor/cli: this one serves it
  }
  const hostArgs: DevHostArgs = {
    root,
    options: {
      manifest: m.file,
      ...(o.config !== undefined && { config: resolve(o.config) }),
      ...(o.host !== undefined && { host: o.host }),
      ...(o.port !== undefined && { port: String(o.port) }),
      ...(o.token !== undefined && { token: o.token }),
    },
  };

  const build = async (changed: readonly string[] = []): Promise<boolean> => {
    if (!compiler) return true;
    const started = performance.now();
    const result = compiler.build(changed);
    if (result.ok) logger.info(`built in ${((performance.now() - started) / 1000).toFixed(2)} s (${result.emitted} file(s) written)`);
    else logger.error(`the build failed; the server keeps running the last good build:\n${result.errors.trim()}`);
    return result.ok;
  };

  /**
   * The app's `src/app-types.ts`, written again when the served version's schema gives other
   * types (a command, a state field or a message changed). The watcher does not take the write
   * for an edit: its change is skipped while the file holds what was written.
   */
  const written = new Map<string, string>();
  const writeTypes = ({ file, text }: DevHostTypes): void => {
    let before: string | undefined;
    try {
      before = readFileSync(file, 'utf8');
    } catch {
      return;
    }
    if (before === text) return;
    written.set(resolve(file), text);
    try {
      writeFileSync(file, text);
      logger.info(`wrote ${relative(process.cwd(), file) || file}: the app's ${file.endsWith('.py') ? 'worker' : 'client'} types changed`);
    } catch (err) {
      written.delete(resolve(file));
      logger.warn(`could not write ${file}: ${(err as Error).message}; run pnpm types`);
    }
  };
  const selfWritten = (file: string): boolean => {
    const text = written.get(resolve(file));
    if (text === undefined) return false;
    try {
      return readFileSync(file, 'utf8') === text;
    } catch {
      return false;
    }
  };

  // The app process: started once, and again only if it died.
  let host: ChildProcess | undefined;
  let replied: ((reply: DevHostReply | undefined) => void) | undefined;
  const startHost = (): Promise<DevHostReply | undefined> => {
    const child = spawn(process.execPath, [hostMain, JSON.stringify(hostArgs)], { cwd: process.cwd(), stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
    host = child;
    child.stdout!.on('data', (d: Buffer) => process.stdout.write(d));
    child.on('message', (msg: DevHostReply | DevHostTypes) => {
      if (host !== child) return;
      if (msg.t === 'types') writeTypes(msg);
      else replied?.(msg);
    });
    child.once('exit', (code, signal) => {
      if (host !== child) return;
      host = undefined;
      replied?.(undefined);
      if (!stopping) logger.warn(`the app process exited (${signal ?? code}); fix the app and save a file to start it again`);
    });
    return nextReply();
  };
  const nextReply = (): Promise<DevHostReply | undefined> =>
    new Promise((r) => {
      replied = (reply) => {
        replied = undefined;
        r(reply);
      };
    });
  const reload = (request: DevHostRequest): Promise<DevHostReply | undefined> => {
    if (!host) return startHost();
    const reply = nextReply();
    host.send(request);
    return reply;
  };
  const stop = async (): Promise<void> => {
    const child = host;
    if (!child) return;
    child.kill('SIGTERM');
    // A load that never ends must not keep reactor dev alive; its ranks exit with their parent.
    const force = setTimeout(() => child.kill('SIGKILL'), HOST_STOP_GRACE_MS);
    await waitExit(child);
    clearTimeout(force);
  };

  /**
   * An editor's scratch file (a hidden temp file written then renamed over the source on an atomic
   * save, a backup `~`, a vim swap file): not a change of the app, and not named as one.
   */
  const editorScratch = (p: string): boolean => {
    const name = basename(p);
    return (name.startsWith('.') && name !== '.') || name.endsWith('~') || /\.(swp|swx|tmp)$/.test(name);
  };

  // The model half outside src/: the weights. (The app process compares the manifest's model/runtime keys itself.)
  const modelFiles = new Set<string>();
  const pythonDirs = (m.runtime.python?.path ?? []).map((p) => resolve(p));
  const watched: FSWatcher[] = [];
  /** Watches a file or folder (chokidar watches its folders: a file replaced by a rename is still seen). */
  const watchPath = (path: string | undefined, model: boolean): Promise<void> => {
    if (path === undefined || !existsSync(path)) return Promise.resolve();
    if (model) modelFiles.add(path);
    // Python writes its bytecode cache next to the sources when a rank imports them: not an edit.
    const ignored = (p: string): boolean => p.includes('/node_modules/') || /\/__pycache__(\/|$)/.test(p) || /\.py[co]$/.test(p) || editorScratch(p);
    const w = chokidarWatch(path, { ignoreInitial: true, ignored });
    watched.push(w);
    w.on('all', (_event, file) => onChange(file));
    w.on('error', (err) => logger.warn(`watching ${path}: ${(err as Error).message}; changes to it may need a restart of reactor dev`));
    return new Promise((ready) => w.once('ready', () => ready()));
  };

  let stopping = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let cycle: Promise<void> = Promise.resolve();
  const changed = new Set<string>();
  const onChange = (name: string | null): void => {
    if (stopping || (name !== null && selfWritten(name))) return;
    if (name) changed.add(name);
    clearTimeout(timer);
    // Editors write a file in several steps: wait for the burst to end.
    timer = setTimeout(() => {
      const changedAt = performance.now();
      const files = [...changed];
      changed.clear();
      cycle = cycle.then(async () => {
        if (stopping) return;
        const names = files.map((f) => (f.startsWith('/') ? relative(process.cwd(), f) || f : f));
        const model = files.some((f) => [...modelFiles].some((p) => f === p || f.startsWith(`${p}/`)));
        // Only the Python worker's code: its ranks restart in place, the app half runs on.
        const python = files.length > 0 && files.every((f) => f.endsWith('.py') && pythonDirs.some((p) => f.startsWith(`${p}/`)));
        logger.info(`changed: ${names.join(', ') || 'src/'}; rebuilding`);
        if (!(await build(files)) || stopping) return;
        const started = performance.now();
        const reply = await reload(
          python
            ? { t: 'reload', model, python: files, reason: 'the Python worker changed: restarting its ranks (the app half keeps running)' }
            : { t: 'reload', model, reason: model ? 'the model half changed (weights, Python worker): reloading the model' : 'reloading the app' },
        );
        if (reply?.t === 'serving') {
          const now = performance.now();
          logger.info(`reloaded in ${((now - started) / 1000).toFixed(2)} s (${((now - changedAt) / 1000).toFixed(2)} s after the change was seen)`);
        }
      });
    }, 150);
  };

  if (!(await build())) logger.warn('the first build failed: serving the last build, if any');
  await Promise.all([
    watchPath(src, false),
    watchPath(m.file, false),
    watchPath(o.config !== undefined ? resolve(o.config) : m.runtime.config, false),
    watchPath(process.env[WEIGHTS_PATH_ENV] ?? m.runtime.weightsPath, true),
    // A Python worker's folders (runtime.python.path): a change there is a change of the model half.
    ...(m.runtime.python?.path ?? []).map((p) => watchPath(p, true)),
  ]);
  logger.info(`reactor dev: watching ${relative(process.cwd(), src) || src}; a change rebuilds and reloads the app (the model only when its half changed)`);
  cycle = startHost().then(() => undefined);
  await new Promise<void>((resolve) => {
    const quit = (signal: NodeJS.Signals): void => {
      if (stopping) return;
      stopping = true;
      logger.info(`${signal}: stopping the server`);
      clearTimeout(timer);
      for (const w of watched) void w.close();
      // A reload in flight ends at once: the app process stops whatever it is doing.
      replied?.(undefined);
      void stop()
        .then(() => cycle)
        .then(resolve);
    };
    onProcessSignal(SHUTDOWN_SIGNALS, quit, { once: true });
  });
}
