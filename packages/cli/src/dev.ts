/**
 * `reactor dev`: serves the app like `reactor run`, and on every change under the app package's
 * `src/` rebuilds it (`tsc -p tsconfig.build.json`) and restarts the server on the same port.
 * A build that fails leaves the running server as it was.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, watch, type FSWatcher } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Logger } from '@reactor/log';
import { ReactorError } from '@reactor/runtime';
import { findManifest, loadManifest, ManifestError, MANIFEST_FILE } from './manifest.js';
import { CliErrorCode } from './errors.js';

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
  // The server runs the `reactor` the app itself depends on, so that the app and the server share
  // one copy of @reactor/runtime (two copies would not recognise each other's classes).
  let main = fileURLToPath(new URL('./main.js', import.meta.url));
  try {
    const own = join(dirname(createRequire(join(root, 'package.json')).resolve('@reactor/cli')), 'main.js');
    if (existsSync(own)) main = own;
  } catch {
    // the app does not depend on @reactor/cli: this one serves it
  }
  let port = o.port === undefined ? undefined : String(o.port);

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

  let server: ChildProcess | undefined;
  const start = (): void => {
    const args = [main, 'run', '--manifest', m.file];
    if (o.config !== undefined) args.push('--config', o.config);
    if (o.host !== undefined) args.push('--host', o.host);
    if (o.token !== undefined) args.push('--token', o.token);
    if (port !== undefined) args.push('--port', port);
    const child = spawn(process.execPath, args, { cwd: process.cwd(), stdio: ['ignore', 'pipe', 'inherit'] });
    server = child;
    child.stdout!.on('data', (d: Buffer) => {
      const text = d.toString();
      // Restarts keep the port the first server got (with --port 0 as well), so the viewer stays put.
      const url = /Viewer: (\S+)/.exec(text);
      if (url && (port === undefined || port === '0')) port = new URL(url[1]!).port || port;
      process.stdout.write(text);
    });
    child.once('exit', (code, signal) => {
      if (server === child && !stopping) logger.warn(`the server exited (${signal ?? code}); fix the app and save a file to start it again`);
    });
  };
  const stop = async (): Promise<void> => {
    const child = server;
    server = undefined;
    if (!child) return;
    child.kill('SIGTERM');
    await waitExit(child);
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
        logger.info(`changed: ${files.join(', ') || 'src/'}; rebuilding`);
        if (!(await build()) || stopping) return;
        logger.info('restarting the server');
        await stop();
        if (!stopping) start();
      });
    }, 150);
  };

  if (!(await build())) logger.warn('the first build failed: serving the last build, if any');
  let watcher: FSWatcher;
  try {
    watcher = watch(src, { recursive: true }, (_event, name) => onChange(name));
  } catch (err) {
    throw new ReactorError(CliErrorCode.CliUsage, `cannot watch ${src}: ${(err as Error).message}`, { cause: err });
  }
  logger.info(`reactor dev: watching ${relative(process.cwd(), src) || src}; a change rebuilds and restarts the server`);
  start();
  await new Promise<void>((resolve) => {
    const quit = (signal: NodeJS.Signals): void => {
      if (stopping) return;
      stopping = true;
      logger.info(`${signal}: stopping the server`);
      clearTimeout(timer);
      watcher.close();
      void cycle.then(stop).then(resolve);
    };
    process.once('SIGINT', quit);
    process.once('SIGTERM', quit);
    process.once('SIGHUP', quit);
  });
}
