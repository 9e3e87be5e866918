// `npm create reactor <dir>` from packed tarballs, offline: every framework package and
// create-reactor are packed (`pnpm pack`, as they would be published), installed into an empty
// project from those tarballs, and `npm create reactor my-app` is run there as a user types it.
// The project it writes installs (offline), builds and passes `reactor doctor`.
//
// Offline, as CI runs it: npm's own cache does not hold the framework's third-party dependencies
// (`npm install --offline` of the tarballs fails with ENOTCACHED), so the tarballs are installed
// with `pnpm add --offline` (pnpm's store is warm: it holds every dependency of this workspace),
// with pnpm overrides pointing every `@reactor/*` at its tarball, as a registry would resolve
// them. `npm create` itself then runs offline: it finds create-reactor installed.
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { FRAMEWORK_PACKAGES } from '@reactor/cli';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const packagesDir = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const scratch = mkdtempSync(join(tmpdir(), 'create-reactor-test-'));
const tarballs = join(scratch, 'tarballs');
const host = join(scratch, 'host');
/** The bin as installed (what `npx create-reactor` runs). */
const bin = join(host, 'node_modules/.bin/create-reactor');
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

// The nested npm/pnpm run in a project of their own: none of this workspace's settings.
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(npm_|PNPM_|VITEST|NODE_OPTIONS$)/i.test(k) && k !== 'TEST' && k !== 'NODE_ENV'));

function run(cmd: string, args: string[], cwd: string): Promise<{ code: number; out: string; stdout: string }> {
  return new Promise((done) => {
    execFile(cmd, args, { cwd, env, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      done({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, out: `${stdout}${stderr}`, stdout });
    });
  });
}

async function ok(cmd: string, args: string[], cwd: string): Promise<string> {
  const r = await run(cmd, args, cwd);
  expect(r.code, `${cmd} ${args.join(' ')} in ${cwd}:\n${r.out}`).toBe(0);
  return r.stdout;
}

const tarballName = (name: string) => `${name.replace('@', '').replace('/', '-')}-0.1.0.tgz`;

beforeAll(async () => {
  mkdirSync(tarballs);
  mkdirSync(host);
  const names = [...FRAMEWORK_PACKAGES.map((p) => `@reactor/${p}`), 'create-reactor'];
  const dirs = [...FRAMEWORK_PACKAGES, 'create-reactor'].map((p) => join(packagesDir, p));
  for (const dir of dirs) expect(existsSync(join(dir, 'dist')), `${dir} is built (pnpm build)`).toBe(true);
  await Promise.all(dirs.map((dir) => ok('pnpm', ['pack', '--pack-destination', tarballs], dir)));
  expect(readdirSync(tarballs).sort()).toEqual(names.map(tarballName).sort());
  writeFileSync(join(host, 'package.json'), JSON.stringify({ name: 'host', version: '0.0.0', private: true }));
  writeFileSync(
    join(host, 'pnpm-workspace.yaml'),
    [
      'overrides:',
      ...names.filter((n) => n.startsWith('@reactor/')).map((n) => `  '${n}': file:${join(tarballs, tarballName(n))}`),
      'allowBuilds:',
      '  shm-typed-array: true',
      '  sharp: true',
      '  esbuild: false',
      '  protobufjs: false',
      '',
    ].join('\n'),
  );
  await ok('pnpm', ['add', '--offline', join(tarballs, tarballName('create-reactor'))], host);
}, 300_000);

// ~30 s on an idle 2-core machine; the bound is for a loaded one (it took over 120 s at load 19).
describe('npm create reactor, from packed tarballs', { timeout: 300_000 }, () => {
  it('writes the project reactor init writes, and it installs, builds and passes reactor doctor', async () => {
    const out = await ok('npm', ['create', '--offline', 'reactor', 'my-app', '--', '--gpus', '0'], host);
    const dir = join(host, 'my-app');
    expect(out).toContain(`Created my-app (template minimal) in ${dir}`);
    expect(out).toContain('pnpm install');
    // The framework, vendored from the installed packages (the same eight reactor init packs in a checkout).
    expect(readdirSync(join(dir, 'vendor')).sort()).toEqual(FRAMEWORK_PACKAGES.map((p) => tarballName(`@reactor/${p}`)).sort());
    const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
    expect(pkg.dependencies['@reactor/runtime']).toBe('file:vendor/reactor-runtime-0.1.0.tgz');
    expect(readFileSync(join(dir, 'reactor.yaml'), 'utf8')).toContain('count: 0');
    await ok('pnpm', ['install', '--offline'], dir);
    await ok('pnpm', ['run', 'build'], dir);
    const doctor = await ok('pnpm', ['exec', 'reactor', 'doctor', '--port', '0'], dir);
    expect(doctor).toContain('all checks passed');
  });

  it('refuses a folder that is not empty, as reactor init does, and leaves it as it was', async () => {
    const dir = join(host, 'full');
    mkdirSync(dir);
    writeFileSync(join(dir, 'notes.txt'), 'mine');
    const r = await run(bin, ['full'], host);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/create-reactor: .*full is not empty; pick a new or empty folder .*\[init_target_exists\]/);
    expect(readdirSync(dir)).toEqual(['notes.txt']);
  });

  it('without a folder says how to name one', async () => {
    const r = await run(bin, [], host);
    expect(r.code).toBe(1);
    expect(r.out).toContain('create-reactor: create-reactor needs a folder: npm create reactor <dir> [cli_usage]');
  });
});
