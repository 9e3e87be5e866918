/**
 * `reactor dev`: serves the app like `reactor run`, and on every change under the app package's
 * `src/` (or to the manifest, the config or the weights) rebuilds it (`tsc -p tsconfig.build.json`)
 * and reloads the app on the same port. The app runs in one long-lived child process (`dev-host`)
 * that imports each build as a new generation: the application half is restarted, while the
 * ranks, with their weights loaded, are kept unless the model half changed (the worker modules,
 * the runner's options or `loadArgs`, the weights, the manifest's `model`/`runtime` keys).
 * A build that fails leaves the running server as it was.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, statSync, watch, type FSWatcher } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Logger } from '@reactor/log';
import { ReactorError, WEIGHTS_PATH_ENV } from '@reactor/runtime';
import { findManifest, loadManifest, ManifestError, MANIFEST_FILE } from './manifest.js';
import type { DevHostArgs, DevHostReply, DevHostRequest } from './dev-host.js';
import { CliErrorCode } from './errors.js';

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
  let tsc: string | undefined;
  if (existsSync(tsconfig)) {
    try {
      tsc = createRequire(join(root, 'package.json')).resolve('typescript/bin/tsc');
    } catch (err) {
      throw new ReactorError(
        CliErrorCode.CliUsage,
        `reactor dev builds with tsc, and typescript is not installed for ${root}; add it: pnpm add -D typescript`,
        { cause: err },
      );
    }
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

  const build = (): Promise<boolean> =>
    new Promise((done) => {
      if (!tsc) return done(true);
      const started = performance.now();
      const child = spawn(process.execPath, [tsc, '-p', tsconfig], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
      child.once('exit', (code) => {
        if (code === 0) logger.info(`built in ${((performance.now() - started) / 1000).toFixed(1)} s`);
        else logger.error(`the build failed; the server keeps running the last good build:\n${out.trim()}`);
        done(code === 0);
      });
    });

  // The app process: started once, and again only if it died.
  let host: ChildProcess | undefined;
  let replied: ((reply: DevHostReply | undefined) => void) | undefined;
  const startHost = (): Promise<DevHostReply | undefined> => {
    const child = spawn(process.execPath, [hostMain, JSON.stringify(hostArgs)], { cwd: process.cwd(), stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
    host = child;
    child.stdout!.on('data', (d: Buffer) => process.stdout.write(d));
    child.on('message', (msg: DevHostReply) => {
      if (host === child) replied?.(msg);
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

  // The model half outside src/: the weights. (The app process compares the manifest's model/runtime keys itself.)
  const modelFiles = new Set<string>();
  const watched: FSWatcher[] = [];
  const watchPath = (path: string | undefined, model: boolean): void => {
    if (path === undefined || !existsSync(path)) return;
    if (model) modelFiles.add(path);
    try {
      const dir = statSync(path).isDirectory();
      // A file is watched through its folder: editors replace files, which ends a watch on the file itself.
      const target = dir ? path : dirname(path);
      watched.push(
        watch(target, { recursive: dir }, (_event, name) => {
          if (dir || name === basename(path)) onChange(dir ? join(path, name ?? '') : path);
        }),
      );
    } catch (err) {
      logger.warn(`cannot watch ${path} (${(err as Error).message}); changes to it need a restart of reactor dev`);
    }
  };

  let stopping = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let cycle: Promise<void> = Promise.resolve();
  const changed = new Set<string>();
  const onChange = (name: string | null): void => {
    if (stopping) return;
    if (name) changed.add(name);
    clearTimeout(timer);
    // Editors write a file in several steps: wait for the burst to end.
    timer = setTimeout(() => {
      const files = [...changed];
      changed.clear();
      cycle = cycle.then(async () => {
        if (stopping) return;
        const names = files.map((f) => (f.startsWith('/') ? relative(process.cwd(), f) || f : f));
        const model = files.some((f) => [...modelFiles].some((p) => f === p || f.startsWith(`${p}/`)));
        logger.info(`changed: ${names.join(', ') || 'src/'}; rebuilding`);
        if (!(await build()) || stopping) return;
        const started = performance.now();
        const reply = await reload({
          t: 'reload',
          model,
          reason: model ? 'the model half changed (weights, Python worker): reloading the model' : 'reloading the app',
        });
        if (reply?.t === 'serving') logger.info(`reloaded in ${((performance.now() - started) / 1000).toFixed(1)} s`);
      });
    }, 150);
  };

  if (!(await build())) logger.warn('the first build failed: serving the last build, if any');
  try {
    watched.push(watch(src, { recursive: true }, (_event, name) => onChange(name)));
  } catch (err) {
    throw new ReactorError(CliErrorCode.CliUsage, `cannot watch ${src}: ${(err as Error).message}`, { cause: err });
  }
  watchPath(m.file, false);
  watchPath(o.config !== undefined ? resolve(o.config) : m.runtime.config, false);
  watchPath(process.env[WEIGHTS_PATH_ENV] ?? m.runtime.weightsPath, true);
  // A Python worker's folders (runtime.python.path): a change there is a change of the model half.
  for (const p of m.runtime.python?.path ?? []) watchPath(p, true);
  logger.info(`reactor dev: watching ${relative(process.cwd(), src) || src}; a change rebuilds and reloads the app (the model only when its half changed)`);
  cycle = startHost().then(() => undefined);
  await new Promise<void>((resolve) => {
    const quit = (signal: NodeJS.Signals): void => {
      if (stopping) return;
      stopping = true;
      logger.info(`${signal}: stopping the server`);
      clearTimeout(timer);
      for (const w of watched) w.close();
      // A reload in flight ends at once: the app process stops whatever it is doing.
      replied?.(undefined);
      void stop()
        .then(() => cycle)
        .then(resolve);
    };
    process.once('SIGINT', quit);
    process.once('SIGTERM', quit);
    process.once('SIGHUP', quit);
  });
}
