// CI for "your first app" (docs/first-app.md): `reactor init` into an empty temp folder for each
// template, then the walk-through's own commands: install, its tests, start it, connect, frames.
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect, type ClientFrame } from '@reactor/client';
import { afterAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { alive, descendants } from './fixtures/processes.js';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const scratch = mkdtempSync(join(tmpdir(), 'reactor-first-app-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** The command block of docs/first-app.md that follows its `first-app:commands` marker. */
function walkThrough(): string[] {
  const doc = readFileSync(join(repo, 'docs/first-app.md'), 'utf8');
  const m = /<!-- first-app:commands -->\s*```sh\n([\s\S]*?)```/.exec(doc);
  if (!m) throw new Error('docs/first-app.md lost its "first-app:commands" block');
  return m[1]!
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
}

// The nested pnpm runs in a project of its own: none of this workspace's pnpm/npm settings.
// The python template's ranks need a Python with NumPy and torch: REACTOR_PYTHON, as the
// template's README says (Debian's here and on CI; the python3 first on PATH may lack them).
const env = {
  ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(npm_|PNPM_|VITEST|NODE_OPTIONS$)/i.test(k) && k !== 'TEST' && k !== 'NODE_ENV')),
  REACTOR_PYTHON: process.env.REACTOR_PYTHON ?? '/usr/bin/python3',
};

function run(cmd: string, args: string[], cwd: string): Promise<{ code: number; out: string }> {
  return new Promise((done) => {
    execFile(cmd, args, { cwd, env, maxBuffer: 32 * 1024 * 1024 }, (err, stdout, stderr) => {
      done({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, out: `${stdout}${stderr}` });
    });
  });
}

async function until(cond: () => boolean, what: string, ms: number): Promise<void> {
  const end = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** `pnpm install --offline` (the store holds every package on CI), else online. */
async function install(cwd: string): Promise<void> {
  const offline = await run('pnpm', ['install', '--offline'], cwd);
  if (offline.code === 0) return;
  const online = await run('pnpm', ['install'], cwd);
  expect(online.code, online.out).toBe(0);
}

/** `pnpm start --port 0`: waits for the viewer URL, gets frames over the protocol, then SIGTERM. */
async function startAndWatch(cwd: string, width: number, trackName: string): Promise<void> {
  const child = spawn('pnpm', ['start', '--port', '0'], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  let tree: number[] = [];
  try {
    const url = await new Promise<string>((ok, fail) => {
      const check = (): void => {
        const m = /Viewer: (\S+)/.exec(out);
        if (m) ok(m[1]!);
      };
      child.stdout.on('data', check);
      void exited.then((code) => fail(new Error(`pnpm start exited (${code}) before serving:\n${out}`)));
    });
    tree = descendants(child.pid!);
    const client = await connect(url, { WebSocket, reconnect: false });
    try {
      const frame = await new Promise<ClientFrame>((r) => client.once('frame', r));
      expect(frame).toMatchObject({ trackName, width });
    } finally {
      client.close();
    }
  } finally {
    // pnpm hands the signal on: the app shuts down in order and no process is left.
    child.kill('SIGTERM');
    await exited;
    await until(() => tree.every((p) => !alive(p)), `every process of pnpm start to end:\n${out}`, 20_000);
  }
  expect(out).toContain('SIGTERM: closing clients and shutting the app down');
}

describe('your first app, from an empty folder (docs/first-app.md)', () => {
  it('the walk-through names install, test and start', () => {
    expect(walkThrough()).toEqual(['pnpm install', 'pnpm test', 'pnpm start']);
  });

  it.each([
    ['minimal', 64, 'main_video'],
    ['video', 128, 'main_video'],
    // Before any camera publishes, the camera app streams its "waiting for camera" card.
    ['camera', 320, 'processed'],
    // Its model half is Python (worker/app_worker.py, torch), on Python ranks.
    ['python', 64, 'main_video'],
  ] as const)(
    '%s: reactor init, install, its tests pass, it starts and streams',
    async (template, width, trackName) => {
      const dir = join(scratch, `my-${template}-app`);
      const init = await run('pnpm', ['reactor', 'init', dir, '--template', template], repo);
      expect(init.code, init.out).toBe(0);
      for (const line of walkThrough()) {
        if (line === 'pnpm install') await install(dir);
        else if (line === 'pnpm start') await startAndWatch(dir, width, trackName);
        else {
          const [cmd, ...args] = line.split(' ');
          const r = await run(cmd!, args, dir);
          expect(r.code, `${line}:\n${r.out}`).toBe(0);
        }
      }
    },
    420_000,
  );
});
