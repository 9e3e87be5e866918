// What the seed-video app's tests share: `reactor run` of a manifest in a child process (the CLI
// as a user types it, REACTOR_PYTHON from the environment or Debian's), and a bounded wait.
import { type ChildProcess, spawn } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const app = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const repo = resolve(app, '../..');
export const cli = join(repo, 'packages/cli/dist/main.js');
export const PY = process.env['REACTOR_PYTHON'] ?? '/usr/bin/python3';

export interface Served {
  child: ChildProcess;
  /** The viewer URL it prints (rejects when it exits before). */
  url: Promise<string>;
  /** What it wrote to stderr so far. */
  stderr: () => string;
}

/**
 * `reactor run --manifest <manifest> [args]` with `env` added (default: the app's reactor.yaml on
 * port 0); the child is SIGKILLed by `cleanups` if still running.
 */
export function startCli(cleanups: (() => unknown)[], options: { manifest?: string; args?: string[]; env?: Record<string, string> } = {}): Served {
  const child = spawn(process.execPath, [cli, 'run', '--manifest', options.manifest ?? join(app, 'reactor.yaml'), ...(options.args ?? ['--port', '0'])], {
    cwd: app,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, REACTOR_PYTHON: PY, ...options.env },
  });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const url = new Promise<string>((res, rej) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /Viewer: (\S+)/.exec(out);
      if (m) res(m[1]!);
    });
    child.once('exit', (code) => rej(new Error(`reactor run exited with ${code} before printing the viewer URL:\n${err}`)));
  });
  cleanups.push(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return { child, url, stderr: () => err };
}
