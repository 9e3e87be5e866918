/**
 * `pnpm start` builds only what changed (scripts/build-changed.mjs), one line per package saying
 * which: run on a small workspace of two packages (b depends on a) whose builds write dist/.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const repo = resolve(import.meta.dirname, '..');
const script = join(repo, 'scripts/build-changed.mjs');
const dir = mkdtempSync(join(tmpdir(), 'reactor-build-changed-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function pkg(name: string, deps: Record<string, string>): string {
  const at = join(dir, 'packages', name);
  mkdirSync(join(at, 'src'), { recursive: true });
  writeFileSync(join(at, 'src/index.ts'), `export const name = '${name}';\n`);
  // The build counts its runs in builds.log, so the test sees which builds ran.
  const build = `node -e "require('fs').mkdirSync('dist',{recursive:true});require('fs').writeFileSync('dist/index.js','');require('fs').appendFileSync('../../builds.log','${name}\\\\n')"`;
  writeFileSync(join(at, 'package.json'), JSON.stringify({ name, version: '0.0.0', scripts: { build }, dependencies: deps }));
  return at;
}

function run(): { lines: string[]; builds: string[] } {
  writeFileSync(join(dir, 'builds.log'), '');
  const r = spawnSync(process.execPath, [script, dir], { encoding: 'utf8', timeout: 60_000 });
  expect(r.status, r.stdout + r.stderr).toBe(0);
  return { lines: r.stdout.trimEnd().split('\n'), builds: readFileSync(join(dir, 'builds.log'), 'utf8').split('\n').filter(Boolean) };
}

describe('scripts/build-changed.mjs (pnpm start)', () => {
  it('builds what changed and what depends on it, in order, one line per package; nothing when nothing changed', () => {
    const b = pkg('b', { a: 'workspace:*' });
    const a = pkg('a', {});
    let r = run();
    expect(r.builds).toEqual(['a', 'b']);
    expect(r.lines[0]).toMatch(/^ {2}built {4}a in [\d.]+ s \(no previous build\)$/);
    expect(r.lines[1]).toMatch(/^ {2}built {4}b in [\d.]+ s \(no previous build\)$/);

    r = run();
    expect(r.builds).toEqual([]);
    expect(r.lines).toEqual(['  current  a', '  current  b']);

    // An edit to b: b alone. An edit to a: a, then b (built after it).
    const later = new Date();
    utimesSync(join(b, 'src/index.ts'), later, later);
    r = run();
    expect(r.builds).toEqual(['b']);
    expect(r.lines).toEqual(['  current  a', expect.stringMatching(/^ {2}built {4}b in [\d.]+ s \(src\/index\.ts changed\)$/)]);
    const later2 = new Date();
    utimesSync(join(a, 'src/index.ts'), later2, later2);
    r = run();
    expect(r.builds).toEqual(['a', 'b']);
    expect(r.lines[1]).toMatch(/\(a was built after it\)$/);
  }, 60_000);

  it('is what the root pnpm start runs before serving', () => {
    const scripts = (JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
    expect(scripts['start']).toBe('node scripts/build-changed.mjs && node packages/cli/dist/main.js run');
  });
});
