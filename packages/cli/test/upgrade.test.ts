// `reactor upgrade` through the built bin: a project `reactor init` wrote with an older framework
// (its vendor/ holds 0.0.9 tarballs) moves to this checkout's packages and installs them; the
// project's own files are untouched; folders it cannot upgrade are refused with nothing changed.
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const bin = resolve(dirname(fileURLToPath(import.meta.url)), '../dist/main.js');
const scratch = mkdtempSync(join(tmpdir(), 'reactor-upgrade-test-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

// The nested pnpm runs in a project of its own: none of this workspace's pnpm/npm settings.
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(npm_|PNPM_|VITEST|NODE_OPTIONS$)/i.test(k) && k !== 'TEST' && k !== 'NODE_ENV'));

function run(cmd: string, args: string[], cwd: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(cmd, args, { cwd, env, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      done({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

const reactor = (args: string[], cwd = scratch) => run(process.execPath, [bin, ...args], cwd);

/** A project as an older `reactor init` left it: every vendored tarball (and reference to it) at 0.0.9. */
async function olderProject(name: string): Promise<string> {
  const init = await reactor(['init', name]);
  expect(init.code, init.stderr).toBe(0);
  const dir = join(scratch, name);
  for (const f of readdirSync(join(dir, 'vendor'))) renameSync(join(dir, 'vendor', f), join(dir, 'vendor', f.replace('-0.1.0.tgz', '-0.0.9.tgz')));
  for (const f of ['package.json', 'pnpm-workspace.yaml'])
    writeFileSync(join(dir, f), readFileSync(join(dir, f), 'utf8').replaceAll('-0.1.0.tgz', '-0.0.9.tgz'));
  return dir;
}

describe('reactor upgrade', { timeout: 120_000 }, () => {
  it('repacks the framework into vendor/, points the project at it, keeps its files, and it installs', async () => {
    const dir = await olderProject('old-app');
    const app = `${readFileSync(join(dir, 'src/app.ts'), 'utf8')}// my change\n`;
    writeFileSync(join(dir, 'src/app.ts'), app);
    const r = await reactor(['upgrade'], dir);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('Upgraded old-app: @reactor/* 0.0.9 -> 0.1.0 (vendor/ repacked; your files are unchanged)');
    expect(r.stdout).toContain('pnpm install');
    expect(readdirSync(join(dir, 'vendor')).sort()).toEqual(
      ['access', 'agones', 'cli', 'client', 'distributed', 'log', 'protocol', 'router', 'runtime', 'server', 'viewer'].map((p) => `reactor-${p}-0.1.0.tgz`),
    );
    const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
      devDependencies: Record<string, string>;
    };
    expect(pkg.dependencies['@reactor/runtime']).toBe('file:vendor/reactor-runtime-0.1.0.tgz');
    expect(pkg.devDependencies['@reactor/client']).toBe('file:vendor/reactor-client-0.1.0.tgz');
    const ws = readFileSync(join(dir, 'pnpm-workspace.yaml'), 'utf8');
    expect(ws).not.toContain('0.0.9');
    expect(ws).toContain("'@reactor/router': file:vendor/reactor-router-0.1.0.tgz");
    // The comments reactor init wrote stay.
    expect(ws).toContain('# pnpm runs only the install scripts allowed here.');
    expect(readFileSync(join(dir, 'src/app.ts'), 'utf8')).toBe(app);
    expect(readdirSync(dir).filter((f) => f.includes('reactor-upgrade'))).toEqual([]);
    const install = await run('pnpm', ['install', '--offline'], dir);
    expect(install.code, `${install.stdout}${install.stderr}`).toBe(0);
    const installed = JSON.parse(readFileSync(join(dir, 'node_modules/@reactor/runtime/package.json'), 'utf8')) as { version: string };
    expect(installed.version).toBe('0.1.0');
  });

  it('refuses a folder without a package.json, and a workspace app, changing nothing', async () => {
    const empty = join(scratch, 'empty');
    mkdirSync(empty);
    const none = await reactor(['upgrade', 'empty']);
    expect(none.code).toBe(1);
    expect(none.stderr).toContain(
      `${empty} has no package.json: run reactor upgrade in a project reactor init wrote, or pass its folder [upgrade_not_a_project]`,
    );
    expect(readdirSync(empty)).toEqual([]);

    const ws = join(scratch, 'ws');
    mkdirSync(join(ws, 'apps'), { recursive: true });
    writeFileSync(join(ws, 'pnpm-workspace.yaml'), 'packages:\n  - apps/*\n');
    expect((await reactor(['init', 'apps/my-app'], ws)).code).toBe(0);
    const before = readFileSync(join(ws, 'apps/my-app/package.json'), 'utf8');
    const inWs = await reactor(['upgrade', 'apps/my-app'], ws);
    expect(inWs.code).toBe(1);
    expect(inWs.stderr).toMatch(/is an app of a workspace: it uses the workspace's own packages; update the workspace instead .*\[upgrade_not_a_project\]/);
    expect(readFileSync(join(ws, 'apps/my-app/package.json'), 'utf8')).toBe(before);
  });
});
