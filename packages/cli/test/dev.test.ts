// `reactor dev` on a project `reactor init` wrote: an edit to a source file is rebuilt and served
// within seconds on the same port; a build that fails leaves the running server alone.
import { execFile, spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const bin = resolve(dirname(fileURLToPath(import.meta.url)), '../dist/main.js');
const scratch = mkdtempSync(join(tmpdir(), 'reactor-dev-test-'));
chmodSync(scratch, 0o755);
const project = join(scratch, 'dev-app');
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

// The nested pnpm works on a project of its own: none of this workspace's settings.
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(npm_|PNPM_|VITEST|NODE_OPTIONS$)/i.test(k) && k !== 'TEST' && k !== 'NODE_ENV'));

function run(cmd: string, args: string[], cwd: string): Promise<{ code: number; out: string }> {
  return new Promise((done) => {
    execFile(cmd, args, { cwd, env }, (err, stdout, stderr) =>
      done({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, out: `${stdout}${stderr}` }),
    );
  });
}

async function until(cond: () => boolean, what: string, ms: number): Promise<void> {
  const end = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(d)]);
    } catch {
      // gone while we looked
    }
  }
  const out: number[] = [];
  for (let todo = [pid]; todo.length > 0;) {
    todo = todo.flatMap((p) => children.get(p) ?? []);
    out.push(...todo);
  }
  return out;
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z ');
  } catch {
    return false;
  }
};

async function defaultPrompt(url: string): Promise<unknown> {
  const schema = (await (await fetch(new URL('schema', url))).json()) as { state: { properties: { prompt: { default: unknown } } } };
  return schema.state.properties.prompt.default;
}

beforeAll(async () => {
  const init = await run(process.execPath, [bin, 'init', project], scratch);
  expect(init.code, init.out).toBe(0);
  let install = await run('pnpm', ['install', '--offline'], project);
  if (install.code !== 0) install = await run('pnpm', ['install'], project);
  expect(install.code, install.out).toBe(0);
}, 120_000);

describe('reactor dev', () => {
  it('rebuilds and restarts on a source edit, keeps serving through a failed build, and stops cleanly', async () => {
    const child = spawn(process.execPath, [bin, 'dev', '--port', '0'], { cwd: project, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    const viewers = (): string[] => [...out.matchAll(/Viewer: (\S+)/g)].map((m) => m[1]!);
    try {
      await until(() => viewers().length === 1, `the first server:\n${err}`, 120_000);
      const url = viewers()[0]!;
      expect(await defaultPrompt(url)).toBe('A sunset over the sea.');

      const app = join(project, 'src/app.ts');
      const original = readFileSync(app, 'utf8');
      const edited = performance.now();
      writeFileSync(app, original.replace("default: 'A sunset over the sea.'", "default: 'A harbour at dawn.'"));
      await until(() => viewers().length === 2, `the restarted server:\n${err}`, 60_000);
      const seconds = (performance.now() - edited) / 1000;
      expect(viewers()[1]).toBe(url);
      expect(await defaultPrompt(url)).toBe('A harbour at dawn.');
      expect(err).toContain('changed: app.ts; rebuilding');
      // Measured for the report; generous for a loaded 2-core box.
      expect(seconds).toBeLessThan(30);

      writeFileSync(app, `${original}\nconst broken: number = 'not a number';\n`);
      await until(() => err.includes('the build failed; the server keeps running the last good build'), `the failed build:\n${err}`, 60_000);
      expect(err).toMatch(/src\/app\.ts\(\d+,\d+\): error TS2322/);
      expect(await defaultPrompt(url)).toBe('A harbour at dawn.');
      expect(viewers()).toHaveLength(2);
    } finally {
      const tree = descendants(child.pid!);
      child.kill('SIGTERM');
      await exited;
      await until(() => tree.every((p) => !alive(p)), 'every process of reactor dev to end', 20_000);
    }
    expect(err).toContain('SIGTERM: stopping the server');
  }, 300_000);
});
