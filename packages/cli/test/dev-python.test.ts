// Issue 37, point 4: `reactor dev` on the python template as `reactor init` writes it. Its
// reactor.yaml names the worker's folder (runtime.python.path), so a Python edit is seen and loads
// the ranks again; a TypeScript edit keeps the Python ranks and their loaded model.
import { execFile, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { alive, descendants } from '@reactor/distributed/internal';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { until } from '@reactor/test-kit';

const bin = resolve(dirname(fileURLToPath(import.meta.url)), '../dist/main.js');
const scratch = mkdtempSync(join(tmpdir(), 'reactor-dev-py-test-'));
chmodSync(scratch, 0o755);
const project = join(scratch, 'dev-py-app');
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

// The nested pnpm works on a project of its own; the ranks need a Python with NumPy and torch.
const env = {
  ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(npm_|PNPM_|VITEST|NODE_OPTIONS$)/i.test(k) && k !== 'TEST' && k !== 'NODE_ENV')),
  REACTOR_PYTHON: process.env.REACTOR_PYTHON ?? '/usr/bin/python3',
};

function run(cmd: string, args: string[], cwd: string): Promise<{ code: number; out: string }> {
  return new Promise((done) => {
    execFile(cmd, args, { cwd, env }, (err, stdout, stderr) =>
      done({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, out: `${stdout}${stderr}` }),
    );
  });
}

beforeAll(async () => {
  const init = await run(process.execPath, [bin, 'init', project, '--template', 'python'], scratch);
  expect(init.code, init.out).toBe(0);
  let install = await run('pnpm', ['install', '--offline'], project);
  if (install.code !== 0) install = await run('pnpm', ['install'], project);
  expect(install.code, install.out).toBe(0);
}, 180_000);

/** Saves as editors do: a temporary file renamed over the file. */
function atomicWrite(file: string, text: string): void {
  const tmp = join(dirname(file), `.${Date.now()}.tmp`);
  writeFileSync(tmp, text);
  renameSync(tmp, file);
}

/** Every `load()` of a rank appends its pid here (the worker is instrumented before reactor dev starts). */
const loads = join(scratch, 'loads.txt');
const loadCount = (): string[] => (existsSync(loads) ? readFileSync(loads, 'utf8').trim().split('\n').filter(Boolean) : []);

interface TestClient {
  once(event: 'frame', f: () => void): void;
  on(event: 'welcome', f: (m: { session: { sessionId?: string } }) => void): void;
  on(event: 'session', f: (s: { error?: { message: string } }) => void): void;
  on(event: 'error', f: (e: { code?: string; message: string }) => void): void;
  close(): void;
  /** The welcome's session status (the first welcome comes before connect() resolves). */
  readonly session: { sessionId?: string };
}

/** A client of the project's own @reactor/client and ws. */
async function connectTo(url: string): Promise<TestClient> {
  const req = createRequire(join(project, 'package.json'));
  const { connect } = (await import(pathToFileURL(req.resolve('@reactor/client')).href)) as {
    connect(url: string, o: object): Promise<TestClient>;
  };
  const { WebSocket } = (await import(pathToFileURL(req.resolve('ws')).href)) as { WebSocket: unknown };
  return connect(url, { WebSocket, reconnect: false });
}

/** The first frame a new client gets from `url`. */
async function firstFrame(url: string): Promise<void> {
  const client = await connectTo(url);
  try {
    await new Promise<void>((r) => client.once('frame', r));
  } finally {
    client.close();
  }
}

describe('reactor dev on the python template', () => {
  it('a TypeScript edit keeps the Python rank (session id kept, state loss said, generated types written); a Python edit restarts only the ranks; a syntax error keeps the last good version; a load error is said', async () => {
    expect(readFileSync(join(project, 'reactor.yaml'), 'utf8')).toContain('    path: [worker]');
    const worker = join(project, 'worker/app_worker.py');
    const source = readFileSync(worker, 'utf8');
    const marker = '    def load(self, width: int, height: int, frames_per_chunk: int) -> None:\n';
    expect(source).toContain(marker);
    writeFileSync(worker, source.replace(marker, `${marker}        import os\n        open(os.environ["DEV_TEST_LOADS"], "a").write(f"{os.getpid()}\\n")\n`));
    const child = spawn(process.execPath, [bin, 'dev', '--port', '0'], {
      cwd: project,
      env: { ...env, DEV_TEST_LOADS: loads },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    const viewers = (): string[] => [...out.matchAll(/Viewer: (\S+)/g)].map((m) => m[1]!);
    const editToFrame = async (edit: () => void, count: number): Promise<number> => {
      const edited = performance.now();
      edit();
      await until(
        () => viewers().length === count,
        () => `server #${count}:\n${err}`,
        180_000,
      );
      await firstFrame(viewers()[count - 1]!);
      return (performance.now() - edited) / 1000;
    };
    const figures: Record<string, number> = {};
    try {
      await until(() => viewers().length === 1, `the first server:\n${err}`, 120_000);
      const url = viewers()[0]!;
      await firstFrame(url);
      // A client that stays connected across the reloads: the welcome each reload sends it, and what it is told.
      const watcher = await connectTo(url);
      const sessions: (string | undefined)[] = [watcher.session.sessionId];
      const told: string[] = [];
      const errors: string[] = [];
      watcher.on('welcome', (m) => sessions.push(m.session.sessionId));
      watcher.on('session', (st) => void (st.error && errors.push(st.error.message)));
      watcher.on('error', (e) => told.push(e.message));
      const session = sessions[0]!;
      expect(session).toMatch(/\S/);
      expect(loadCount()).toHaveLength(1);
      const rank = Number(loadCount()[0]);
      expect(alive(rank)).toBe(true);

      // The application half: the app restarts, the Python rank and its loaded model stay.
      // The edit adds a state field: the state cannot be carried, which the client is told
      // (state_reset) in the same session; src/app-types.ts is written again with the field.
      const app = join(project, 'src/app.ts');
      const types = join(project, 'src/app-types.ts');
      const original = readFileSync(app, 'utf8');
      expect(original).toContain("default: 'A sunset over the sea.'");
      expect(readFileSync(types, 'utf8')).not.toContain('steps');
      const field = '  prompt!: string;\n';
      expect(original).toContain(field);
      figures['ts_edit_to_first_frame_s'] = await editToFrame(
        () =>
          atomicWrite(
            app,
            original
              .replace("default: 'A sunset over the sea.'", "default: 'A harbour at dawn.'")
              .replace("import { IsString, MaxLength } from 'class-validator';", "import { IsInt, IsString, MaxLength } from 'class-validator';")
              .replace(field, `${field}\n  @InputField({ default: 4, description: 'Denoising steps.' })\n  @IsInt()\n  steps!: number;\n`),
          ),
        2,
      );
      expect(err).toContain(`reusing the 1 loaded rank (pid ${rank}): the model half did not change`);
      expect(loadCount()).toEqual([String(rank)]);
      expect(alive(rank)).toBe(true);
      await until(() => told.length === 1 && sessions.length === 2, `the watcher told of the reset:\n${err}`, 30_000);
      expect(told[0]).toMatch(/state_reset.*state class changed/);
      expect(err).toContain(`the state class changed: session ${session} starts again from its defaults`);
      expect(sessions[1]).toBe(session);
      await until(() => readFileSync(types, 'utf8').includes('steps: number;'), `src/app-types.ts written again:\n${err}`, 30_000);
      expect(readFileSync(types, 'utf8')).toContain('/** Denoising steps. */\n      steps: number;\n    };');
      expect(err).toContain('wrote src/app-types.ts');
      // And the worker's TypedDicts (worker/app_types.py, which the worker imports), without a reload.
      const pyTypes = join(project, 'worker/app_types.py');
      await until(() => readFileSync(pyTypes, 'utf8').includes('    steps: int\n'), `worker/app_types.py written again:\n${err}`, 30_000);
      expect(err).toContain('wrote worker/app_types.py');

      // The model half: a .py edit under runtime.python.path loads a new rank; the old one ends.
      const edited = readFileSync(worker, 'utf8');
      expect(edited).toContain('4 * t[:, None, None]');
      figures['py_edit_to_first_frame_s'] = await editToFrame(() => atomicWrite(worker, edited.replace('4 * t[:, None, None]', '5 * t[:, None, None]')), 3);
      expect(err).toMatch(/changed: \S*worker\/app_worker\.py; rebuilding/);
      expect(loadCount()).toHaveLength(2);
      const next = Number(loadCount()[1]);
      expect(next).not.toBe(rank);
      await until(() => !alive(rank), 'the old rank to end', 20_000);
      // Its bytecode cache (worker/__pycache__) is not an edit: no fourth server; nor is the
      // app-types.ts reactor dev wrote. Only the ranks restarted: the app half, its session and
      // the watcher's connection went on (no new welcome); the watcher is told that the model's
      // own state started over (state_reset), as the log says.
      expect(viewers()).toHaveLength(3);
      expect(err).toMatch(
        new RegExp(`restarted the ranks of 1 runner\\(s\\) in [\\d.]+ s; the app half kept running \\(session ${session} and its state kept`),
      );
      expect(err).toContain(`restarting the 1 rank (was pid ${rank}) in place; the app keeps running`);
      await until(
        () => told.length === 2,
        () => `the watcher told of the ranks' restart:\n${err}`,
        30_000,
      );
      expect(told[1]).toMatch(
        new RegExp(`state_reset.*restarted the Python ranks after an edit of app_worker\\.py: session ${session} and its state were kept.*model's own state`),
      );
      expect(sessions).toHaveLength(2);
      expect(err).not.toContain(`carried session ${session}'s state`);

      // A syntax error in the worker: said with the file, the line and its source; nothing else
      // changes (the rank keeps running the last good version, as after a failed TypeScript build).
      const good = readFileSync(worker, 'utf8');
      atomicWrite(worker, good.replace('    def reset(self) -> None:', '    def reset(self -> None:'));
      await until(() => err.includes('the Python worker does not parse'), `the syntax error:\n${err}`, 60_000);
      expect(err).toMatch(
        /the Python worker does not parse \(the ranks keep running the last good version, nothing was lost; fix it and save again\): \S+worker\/app_worker\.py, line \d+: .*\n\s+def reset\(self -> None:\n/,
      );
      expect(alive(next)).toBe(true);
      expect(loadCount()).toHaveLength(2);
      expect(child.exitCode).toBe(null);

      // A worker that parses but raises in load(): the app is reloaded to say so, named with the
      // file and line; the session is lost with it, and the client and the log say so.
      atomicWrite(worker, good.replace(marker, `${marker}        raise ValueError("no weights here")\n`));
      await until(() => /DevPyApp\.load\(\) failed: /.test(err), `the load failure:\n${err}`, 180_000);
      expect(err).toMatch(/DevPyApp\.load\(\) failed: ValueError: no weights here \(rank 0, \S*app_worker\.py line \d+, in load\)\n/);
      expect(err).not.toMatch(/_rank\.py line \d+, in /);
      expect(child.exitCode).toBe(null);
      expect(err).toContain(`the restarted ranks failed to load: session ${session} and its state are lost`);
      // The client is told too: by the session status (the session ended with the load error), and
      // by a state_reset when the session was still running when the app was swapped.
      await until(
        () => errors.some((e) => e.includes('no weights here')),
        () => `the watcher told of the failure:\n${err}`,
        30_000,
      );
      for (const t of told.slice(2)) expect(t).toMatch(/state_reset.*failed to load \(.*no weights here/);
      // Fixed: the next save serves again.
      atomicWrite(worker, good);
      await until(() => viewers().length === 4, `server #4:\n${err}`, 180_000);
      await firstFrame(viewers()[3]!);
      expect(err).toContain('no session state to carry (no session ran, or the previous version failed to load)');
      // What reactor dev wrote was never taken for an edit.
      expect(err).not.toMatch(/changed: [^\n]*app[-_]types\.(ts|py)/);
      // Nor is a reload's build, which writes only what changed, called stale.
      expect(err).not.toContain('is older than');
      watcher.close();
    } finally {
      const tree = descendants(child.pid!);
      child.kill('SIGTERM');
      await exited;
      await until(() => tree.every((p) => !alive(p)), 'every process of reactor dev to end', 20_000);
    }
    // Measured for docs/benchmarks.md (no bound: on a loaded 2-core box tsc alone takes 8-30 s).
    console.log(JSON.stringify({ bench: 'reactor_dev.python_reload', ...figures }));
  }, 900_000);
});
