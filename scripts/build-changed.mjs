#!/usr/bin/env node
/**
 * Builds only the workspace packages that changed since their last build (`pnpm start` runs it),
 * in dependency order, with one line per package saying which and why:
 *
 *   built    @reactor/log in 2.3 s (src/index.ts changed)
 *   current  @reactor/client
 *
 * A package is rebuilt when it has no build (`dist/.build-stamp`, dated when its last successful
 * build started; without one, after a plain `pnpm build`, its oldest file in dist/), when one of its inputs (every file of the package but node_modules/, dist/, test/,
 * weights/ and dot-files) is newer than the stamp, or when a workspace package it depends on was
 * built after it. Modification times, like `reactor run`'s stale-build check, so the two agree.
 * A failed build prints its output and exits 1. `pnpm build` still builds everything.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';

// The workspace: this repository, or the folder given as the first argument (for its test).
const repo = resolve(process.argv[2] ?? join(import.meta.dirname, '..'));
const STAMP = join('dist', '.build-stamp');
const SKIP = new Set(['node_modules', 'dist', 'test', 'weights']);

/** The workspace's packages with a build script: folder, name, workspace dependencies. */
function packages() {
  const list = [];
  for (const group of ['packages', 'apps']) {
    const base = join(repo, group);
    if (!existsSync(base)) continue;
    for (const name of readdirSync(base).sort()) {
      const dir = join(base, name);
      const file = join(dir, 'package.json');
      if (!existsSync(file)) continue;
      const pkg = JSON.parse(readFileSync(file, 'utf8'));
      if (!pkg.scripts?.build) continue;
      const deps = Object.entries({ ...pkg.dependencies, ...pkg.devDependencies })
        .filter(([, v]) => String(v).startsWith('workspace:'))
        .map(([k]) => k);
      list.push({ dir, name: pkg.name, deps });
    }
  }
  return list;
}

/** Dependencies first (a package's workspace dependencies before it). */
function order(list) {
  const byName = new Map(list.map((p) => [p.name, p]));
  const out = [];
  const seen = new Set();
  const visit = (p) => {
    if (seen.has(p.name)) return;
    seen.add(p.name);
    for (const d of p.deps) if (byName.has(d)) visit(byName.get(d));
    out.push(p);
  };
  for (const p of list) visit(p);
  return out;
}

/** The newest input file of a package folder (path and mtime), or undefined. */
function newestInput(dir) {
  let newest;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.name.startsWith('.') || (e.isDirectory() && SKIP.has(e.name))) continue;
    const path = join(dir, e.name);
    const found = e.isDirectory() ? newestInput(path) : e.isFile() ? { path, mtimeMs: statSync(path).mtimeMs } : undefined;
    if (found && (!newest || found.mtimeMs > newest.mtimeMs)) newest = found;
  }
  return newest;
}

/** The oldest file under `dir` (tsc writes every output on each build), or undefined. */
function oldestFile(dir) {
  let oldest;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    const t = e.isDirectory() ? oldestFile(path) : e.isFile() ? statSync(path).mtimeMs : undefined;
    if (t !== undefined && (oldest === undefined || t < oldest)) oldest = t;
  }
  return oldest;
}

/** When the package was last built: its stamp, else (after a plain `pnpm build`) its oldest dist/ file. */
function stampTime(dir) {
  try {
    return statSync(join(dir, STAMP)).mtimeMs;
  } catch {
    return existsSync(join(dir, 'dist')) ? oldestFile(join(dir, 'dist')) : undefined;
  }
}

/** Why `p` must be built, or undefined when its build is current. */
function reason(p, builtAt) {
  const stamp = stampTime(p.dir);
  if (stamp === undefined) return 'no previous build';
  const input = newestInput(p.dir);
  if (input && input.mtimeMs > stamp) return `${relative(p.dir, input.path)} changed`;
  const dep = p.deps.find((d) => builtAt.has(d) && builtAt.get(d) > stamp);
  return dep ? `${dep} was built after it` : undefined;
}

function build(p) {
  return new Promise((done) => {
    const child = spawn('pnpm', ['run', '--silent', 'build'], { cwd: p.dir, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.once('error', (err) => done({ ok: false, out: `cannot run pnpm: ${err.message}` }));
    child.once('exit', (code) => done({ ok: code === 0, out }));
  });
}

const builtAt = new Map();
for (const p of order(packages())) {
  const why = reason(p, builtAt);
  if (why === undefined) {
    builtAt.set(p.name, stampTime(p.dir));
    process.stdout.write(`  current  ${p.name}\n`);
    continue;
  }
  const started = performance.now();
  const startedAt = new Date();
  const r = await build(p);
  if (!r.ok) {
    process.stdout.write(`  FAILED   ${p.name} (${why}):\n${r.out.trim()}\n`);
    process.exit(1);
  }
  mkdirSync(join(p.dir, 'dist'), { recursive: true });
  // Dated when the build started: a file saved while tsc ran is newer, and builds next time.
  writeFileSync(join(p.dir, STAMP), `${startedAt.toISOString()}\n`);
  utimesSync(join(p.dir, STAMP), startedAt, startedAt);
  builtAt.set(p.name, stampTime(p.dir));
  process.stdout.write(`  built    ${p.name} in ${((performance.now() - started) / 1000).toFixed(1)} s (${why})\n`);
}
