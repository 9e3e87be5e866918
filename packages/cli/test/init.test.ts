// `reactor init` through the built bin: what it writes, and bad input refused with nothing written.
import { execFile } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { classPrefix, packageNameProblem } from '../src/init.js';

const bin = resolve(dirname(fileURLToPath(import.meta.url)), '../dist/main.js');
const scratch = mkdtempSync(join(tmpdir(), 'reactor-init-test-'));
chmodSync(scratch, 0o755);
afterAll(() => {
  chmodSync(scratch, 0o755);
  rmSync(scratch, { recursive: true, force: true });
});

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function reactor(args: string[], options: { cwd?: string; withoutOverride?: boolean } = {}): Promise<Run> {
  // As root, permission checks apply only without CAP_DAC_OVERRIDE: setpriv drops it (and
  // CAP_DAC_READ_SEARCH) for this one process, which still reads the root-owned checkout.
  const [cmd, argv] = options.withoutOverride
    ? ['setpriv', ['--inh-caps=-dac_override,-dac_read_search', '--bounding-set=-dac_override,-dac_read_search', '--', process.execPath, bin, ...args]]
    : [process.execPath, [bin, ...args]];
  return new Promise((done) => {
    execFile(cmd, argv, { cwd: options.cwd ?? scratch }, (err, stdout, stderr) => {
      done({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

/** Everything under `dir`, as relative paths. */
function tree(dir: string): string[] {
  return readdirSync(dir, { recursive: true }).map(String).sort();
}

// Packing the framework (ten packages, with pnpm) takes longer than the default on a loaded 2-core machine.
describe('reactor init', { timeout: 120_000 }, () => {
  it.each(['minimal', 'video', 'camera'])('writes a standalone %s project with the framework packed into vendor/', async (template) => {
    const r = await reactor(['init', `proj-${template}`, '--template', template, '--gpus', '2']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const dir = join(scratch, `proj-${template}`);
    expect(r.stdout).toContain(`Created proj-${template} (template ${template}) in ${dir}`);
    const files = tree(dir);
    for (const f of [
      'README.md',
      'config.yaml',
      'package.json',
      'pnpm-workspace.yaml',
      'reactor.yaml',
      'src/app.ts',
      'src/app-types.ts',
      'src/index.ts',
      'test/app-types.test.ts',
      'src/worker.ts',
      'test/protocol.test.ts',
      'test/runner.test.ts',
      'tsconfig.build.json',
      'tsconfig.json',
      'vitest.config.ts',
      '.gitignore',
    ]) {
      expect(files).toContain(f);
    }
    expect(files.filter((f) => f.startsWith('vendor/')).sort()).toEqual(
      ['access', 'agones', 'cli', 'client', 'distributed', 'log', 'protocol', 'router', 'runtime', 'server', 'viewer'].map(
        (p) => `vendor/reactor-${p}-0.1.0.tgz`,
      ),
    );
    const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name: string; dependencies: Record<string, string> };
    expect(pkg.name).toBe(`proj-${template}`);
    expect(pkg.dependencies['@reactor/runtime']).toBe('file:vendor/reactor-runtime-0.1.0.tgz');
    expect(readFileSync(join(dir, 'pnpm-workspace.yaml'), 'utf8')).toContain("'@reactor/log': file:vendor/reactor-log-0.1.0.tgz");
    const manifest = readFileSync(join(dir, 'reactor.yaml'), 'utf8');
    expect(manifest).toContain(`import: dist/index.js:Proj${template[0]!.toUpperCase()}${template.slice(1)}App`);
    expect(manifest).toContain('count: 2');
    const app = readFileSync(join(dir, 'src/app.ts'), 'utf8');
    expect(app).not.toMatch(/__[A-Z_]+__/);
    expect(app).toContain(`name: 'proj-${template}'`);
    // Nothing but the project in the parent: the staging folder was renamed into place.
    expect(readdirSync(scratch).filter((f) => f.includes('reactor-init'))).toEqual([]);
  });

  it('prints Next: steps that include pnpm test, and for the python template the Python check and REACTOR_PYTHON', async () => {
    const r = await reactor(['init', 'proj-next-python', '--template', 'python']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(
      'Next:\n  cd proj-next-python\n  pnpm install\n  pnpm exec reactor doctor   # NumPy and torch; if missing: export REACTOR_PYTHON=/usr/bin/python3 (a Python that has them)\n  pnpm test\n  pnpm start\n',
    );
    expect(readFileSync(join(scratch, 'proj-next-python', 'reactor.yaml'), 'utf8')).toContain('    path: [worker]');
    const minimal = await reactor(['init', 'proj-next-minimal']);
    expect(minimal.stdout).toContain('Next:\n  cd proj-next-minimal\n  pnpm install\n  pnpm test\n  pnpm start\n');
  });

  it('inside a workspace with apps/*, adds a workspace app (workspace:* and catalog: dependencies)', async () => {
    const ws = join(scratch, 'ws');
    mkdirSync(join(ws, 'apps'), { recursive: true });
    writeFileSync(join(ws, 'pnpm-workspace.yaml'), 'packages:\n  - packages/*\n  - apps/*\n');
    const r = await reactor(['init', 'apps/my-app', '--template', 'video'], { cwd: ws });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('a workspace app');
    const dir = join(ws, 'apps/my-app');
    const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
      devDependencies: Record<string, string>;
    };
    expect(pkg.dependencies).toMatchObject({ '@reactor/runtime': 'workspace:*', '@reactor/distributed': 'workspace:*', 'class-validator': 'catalog:' });
    expect(pkg.devDependencies).toMatchObject({ '@reactor/client': 'workspace:*', vitest: 'catalog:' });
    expect(existsSync(join(dir, 'vendor'))).toBe(false);
    expect(existsSync(join(dir, 'pnpm-workspace.yaml'))).toBe(false);
    expect(JSON.parse(readFileSync(join(dir, 'tsconfig.json'), 'utf8'))).toMatchObject({ extends: '../../tsconfig.base.json' });
    expect(readFileSync(join(dir, 'src/app.ts'), 'utf8')).toContain('export class MyApp extends ReactorApp');
  });

  it('refuses a folder that is not empty, and leaves it as it was', async () => {
    const dir = join(scratch, 'full');
    mkdirSync(dir);
    writeFileSync(join(dir, 'notes.txt'), 'mine');
    const before = readdirSync(scratch).sort();
    const r = await reactor(['init', 'full']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/full is not empty; pick a new or empty folder .*\[init_target_exists\]/);
    expect(tree(dir)).toEqual(['notes.txt']);
    expect(readdirSync(scratch).sort()).toEqual(before);
  });

  it('refuses an invalid package name (from the folder or --name) and writes nothing', async () => {
    const before = readdirSync(scratch).sort();
    const fromFolder = await reactor(['init', 'My App']);
    expect(fromFolder.code).toBe(1);
    expect(fromFolder.stderr).toMatch(
      /"My App" is not a valid npm package name: it has upper-case letters\. Name the folder differently or pass --name <name> .*\[init_invalid_name\]/,
    );
    const fromFlag = await reactor(['init', 'ok-folder', '--name', '_private']);
    expect(fromFlag.code).toBe(1);
    expect(fromFlag.stderr).toMatch(/"_private" is not a valid npm package name: it starts with "\." or "_"\. Pass another --name .*\[init_invalid_name\]/);
    expect(readdirSync(scratch).sort()).toEqual(before);
  });

  it('refuses an unknown template and names the known ones', async () => {
    const before = readdirSync(scratch).sort();
    const r = await reactor(['init', 'cam', '--template', 'webcam']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('unknown template "webcam"; pick one of: minimal, video, camera, python [init_unknown_template]');
    expect(readdirSync(scratch).sort()).toEqual(before);
  });

  it('refuses a --gpus that is not a count', async () => {
    const r = await reactor(['init', 'gpus', '--gpus', 'lots']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('--gpus must be an integer from 0 to 64, got "lots" [cli_usage]');
    expect(existsSync(join(scratch, 'gpus'))).toBe(false);
  });

  it('refuses a folder it may not write in, and leaves nothing behind', async () => {
    const ro = join(scratch, 'read-only');
    mkdirSync(ro);
    chmodSync(ro, 0o555);
    // root may write anywhere: run the bin without the capability that lets it.
    const r = await reactor(['init', join(ro, 'app')], { withoutOverride: process.getuid?.() === 0 });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`cannot write in ${ro} (EACCES): pick a folder you may write to, or fix its permissions [init_not_writable]`);
    expect(readdirSync(ro)).toEqual([]);
  });
});

describe('package names and class names', () => {
  it('follows the npm package-name rules', () => {
    expect(packageNameProblem('my-app')).toBeUndefined();
    expect(packageNameProblem('@me/my-app')).toBeUndefined();
    expect(packageNameProblem('')).toBe('is empty');
    expect(packageNameProblem('a'.repeat(215))).toBe('is longer than 214 characters');
    expect(packageNameProblem('.hidden')).toBe('starts with "." or "_"');
    expect(packageNameProblem('node_modules')).toBe('is a reserved name');
    expect(packageNameProblem('a b')).toMatch(/may only hold/);
  });

  it('derives the class prefix from the name', () => {
    expect(classPrefix('my-cool.app')).toBe('MyCool');
    expect(classPrefix('@me/video-thing')).toBe('VideoThing');
    expect(classPrefix('3d')).toBe('App3d');
    expect(classPrefix('my-app')).toBe('My');
  });
});
