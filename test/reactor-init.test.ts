// CI for "your first app" (docs/first-app.md): `reactor init` into an empty temp folder for each
// template, then the walk-through's own commands: install, its tests, start it, connect, frames.
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect, type ClientFrame } from '@reactor/client';
import { afterAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { alive, descendants } from './fixtures/processes.js';
import { until } from '@reactor/test-kit';

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

/** `pnpm install --offline` (the store holds every package on CI), else online. */
async function install(cwd: string): Promise<void> {
  const offline = await run('pnpm', ['install', '--offline'], cwd);
  if (offline.code === 0) return;
  const online = await run('pnpm', ['install'], cwd);
  expect(online.code, online.out).toBe(0);
}

/** `pnpm start --port 0`: waits for the viewer URL, gets frames over the protocol, then SIGTERM. */
async function startAndWatch(cwd: string, width: number, trackName: string, fps: number): Promise<void> {
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
    // Playout at the app's declared rate (without one it would follow the model: hundreds a second).
    const schema = (await (await fetch(new URL('/schema', url))).json()) as { tracks: Array<{ name: string; fps?: number }> };
    expect(schema.tracks.find((t) => t.name === trackName)?.fps).toBe(fps);
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

/**
 * A `load()` that throws on rank 1 only: `pnpm start` exits 1, and what it prints names the rank
 * and shows the rank's stack (down to the line of dist/worker.js).
 */
async function loadFailureOnRank1(dir: string): Promise<void> {
  const worker = join(dir, 'src/worker.ts');
  const source = readFileSync(worker, 'utf8');
  const marker = '  load(args: WorkerArgs): void {\n';
  expect(source).toContain(marker);
  writeFileSync(worker, source.replace(marker, `${marker}    if (this.rank === 1) throw new RangeError('the weights of rank 1 are missing');\n`));
  const r = await run('pnpm', ['start', '--port', '0'], dir);
  expect(r.code, r.out).not.toBe(0);
  expect(r.out).toMatch(/rank 1 \(pid \d+\): load\(\) threw RangeError: the weights of rank 1 are missing\n/);
  expect(r.out).toMatch(/\n\s+at \S+\.load \(file:\/\/\S+\/dist\/worker\.js:\d+:\d+\)/);
  // Where it was raised ends the first line (issue 37: the rank's file and line wherever its error surfaces).
  expect(r.out).toMatch(
    /\(in rank 1's load\(\); its stack is in the log above\): .*the weights of rank 1 are missing \(rank 1, file:\/\/\S+\/dist\/worker\.js line \d+, in \S+\.load\) \[app_load_failed\]/,
  );
}

/**
 * The typed-client snippet of docs/first-app.md ("4. A typed client") compiled against the
 * project's own generated types (`MyAppTypes` is `~/my-app`'s name: the project's is read from
 * src/app-types.ts): its one deliberate error, and nothing else, is reported. An app that sends
 * no message (the minimal template) compiles it without its `onMessage` line, as the doc says.
 */
async function typedClientCompiles(dir: string, sendsMessages: boolean, hasPrompt = true): Promise<void> {
  const doc = readFileSync(join(repo, 'docs/first-app.md'), 'utf8');
  const section = doc.slice(doc.indexOf('## 4. A typed client'));
  const code = /```ts\n([\s\S]*?)```/.exec(section)?.[1];
  expect(code, 'docs/first-app.md lost its typed-client snippet').toBeDefined();
  const name = /export type (\w+) =/.exec(readFileSync(join(dir, 'src/app-types.ts'), 'utf8'))?.[1];
  expect(code).toContain('MyAppTypes');
  expect(code).toContain('client.onMessage(');
  const lines = code!.split('\n').filter((l) => sendsMessages || !l.startsWith('client.onMessage('));
  writeFileSync(join(dir, 'client-snippet.ts'), lines.join('\n').replaceAll('MyAppTypes', name!));
  const tsc = await run(
    'npx',
    ['tsc', '--noEmit', '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--skipLibCheck', 'client-snippet.ts'],
    dir,
  );
  const errors = tsc.out.split('\n').filter((l) => /error TS\d+/.test(l));
  if (!hasPrompt) {
    // An app without a prompt (the camera template): each set_prompt line is refused as a command
    // the app does not have, and nothing else is (the connect, the import, the types' name).
    const promptLines = lines.flatMap((l, i) => (l.includes("'set_prompt'") ? [i + 1] : []));
    expect(promptLines).toHaveLength(2);
    expect(errors, tsc.out).toEqual(
      promptLines.map((n) =>
        expect.stringMatching(new RegExp(`^client-snippet\\.ts\\(${n},\\d+\\): error TS2345: Argument of type '"set_prompt"' is not assignable`)),
      ),
    );
    return;
  }
  const wrongLine = lines.findIndex((l) => l.includes('// compile error')) + 1;
  expect(errors, tsc.out).toEqual([
    expect.stringMatching(new RegExp(`^client-snippet\\.ts\\(${wrongLine},\\d+\\): error TS2322: Type 'number' is not assignable to type 'string'\\.`)),
  ]);
}

/**
 * The python template's `pnpm types` writes what `reactor init` wrote (src/app-types.ts and the
 * worker's TypedDicts, worker/app_types.py, from the app's own types); the worker imports them,
 * and their keys are the TypeScript interfaces' (`FrameInput`, `FrameResult`).
 */
async function pythonTypesUpToDate(dir: string): Promise<void> {
  const file = join(dir, 'worker/app_types.py');
  const shipped = readFileSync(file, 'utf8');
  const tsTypes = readFileSync(join(dir, 'src/app-types.ts'), 'utf8');
  const types = await run('pnpm', ['types'], dir);
  expect(types.code, types.out).toBe(0);
  expect(readFileSync(file, 'utf8')).toBe(shipped);
  expect(readFileSync(join(dir, 'src/app-types.ts'), 'utf8')).toBe(tsTypes);
  const keys = await run(
    env.REACTOR_PYTHON,
    ['-c', 'import app_types as t; print(sorted(t.Input.__required_keys__), sorted(t.Result.__required_keys__), sorted(t.State.__required_keys__))'],
    join(dir, 'worker'),
  );
  expect(keys.out.trim()).toBe("['prompt'] ['frames', 'height', 'n', 'width'] ['prompt']");
  expect(readFileSync(join(dir, 'worker/app_worker.py'), 'utf8')).toContain('def generate(self, input: Input) -> Result:');
  // The project's README says where they come from, and what pnpm dev does with each half.
  const readme = readFileSync(join(dir, 'README.md'), 'utf8');
  expect(readme).toContain('| `worker/app_types.py` | the keys the app sends the worker and expects back');
  expect(readme).toContain('an edit in `worker/` restarts only the ranks');
}

describe('your first app, from an empty folder (docs/first-app.md)', () => {
  it('the walk-through names install, test and start', () => {
    expect(walkThrough()).toEqual(['pnpm install', 'pnpm test', 'pnpm start']);
  });

  it.each([
    ['minimal', 64, 'main_video', 24],
    ['video', 128, 'main_video', 24],
    // Before any camera publishes, the camera app streams its "waiting for camera" card.
    ['camera', 320, 'processed', 30],
    // Its model half is Python (worker/app_worker.py, torch), on Python ranks.
    ['python', 64, 'main_video', 24],
  ] as const)(
    '%s: reactor init, install, its tests pass, it starts and streams',
    async (template, width, trackName, fps) => {
      const dir = join(scratch, `my-${template}-app`);
      const init = await run('pnpm', ['reactor', 'init', dir, '--template', template], repo);
      expect(init.code, init.out).toBe(0);
      for (const line of walkThrough()) {
        if (line === 'pnpm install') await install(dir);
        else if (line === 'pnpm start') await startAndWatch(dir, width, trackName, fps);
        else {
          const [cmd, ...args] = line.split(' ');
          const r = await run(cmd!, args, dir);
          expect(r.code, `${line}:\n${r.out}`).toBe(0);
        }
      }
      // The project's README is its template's own.
      const readme = readFileSync(join(dir, 'README.md'), 'utf8');
      if (template === 'camera') {
        expect(readme).toContain('takes your camera in and streams it');
        expect(readme).toContain('`webcam`');
      } else expect(readme).not.toContain('webcam');
      // The typed-client snippet: the video and python templates send runner_info, the minimal
      // and camera ones no message; the camera template has no prompt (docs/first-app.md says so),
      // so there its set_prompt lines are the errors.
      await typedClientCompiles(dir, template === 'video' || template === 'python', template !== 'camera');
      if (template === 'video') await loadFailureOnRank1(dir);
      if (template === 'python') await pythonTypesUpToDate(dir);
    },
    420_000,
  );
});
