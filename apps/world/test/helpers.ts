// What the world app's tests share: `reactor run` of a manifest in a child process (the CLI as a
// user types it, on port 0, REACTOR_PYTHON from the environment or Debian's), and a bounded wait.
import { type ChildProcess, spawn } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const app = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(app, '../../packages/cli/dist/main.js');
export const PY = process.env['REACTOR_PYTHON'] ?? '/usr/bin/python3';

export interface Served {
  child: ChildProcess;
  /** The viewer URL it prints (rejects when it exits before). */
  url: Promise<string>;
  /** Everything it printed so far. */
  output: () => string;
  exited: Promise<number | null>;
}

/** `reactor run --manifest <manifest> --port 0 [args]`; the child is SIGKILLed by `cleanups` if still running. */
export function startCli(manifest: string, args: string[], cleanups: (() => unknown)[]): Served {
  const child = spawn(process.execPath, [cli, 'run', '--manifest', manifest, '--port', '0', ...args], {
    cwd: app,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, REACTOR_PYTHON: PY },
  });
  let out = '';
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const url = new Promise<string>((res, rej) => {
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /Viewer: (\S+)/.exec(out);
      if (m) res(m[1]!);
    });
    child.once('exit', (code) => rej(new Error(`reactor run exited with ${code} before printing the viewer URL:\n${out}`)));
  });
  cleanups.push(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return { child, url, output: () => out, exited };
}
