/**
 * Stale builds: `runtime.import` names compiled JavaScript (`<package>/dist/...`); when a
 * source file of that package (`<package>/src/**`) is newer than the module, the app would run
 * code that no longer matches its sources (and its ranks too). Found by comparing mtimes.
 */
import { readdirSync, statSync } from 'node:fs';
import { join, sep } from 'node:path';

/** A compiled module older than a source file of its package. */
export interface StaleBuild {
  /** The compiled module `runtime.import` names. */
  module: string;
  /** The newest source file of its package, edited after the module was built. */
  source: string;
}

const SOURCE = /\.(?:ts|tsx|mts|cts)$/;

function newestSource(dir: string): { path: string; mtimeMs: number } | undefined {
  let newest: { path: string; mtimeMs: number } | undefined;
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return undefined;
  }
  for (const e of entries) {
    const path = join(dir, e.name);
    // An empty source holds no code the build lacks: `reactor types > src/app-types.ts` (pnpm
    // types) has the shell truncate its output file before reactor starts, which made every run
    // warn that dist/ is older than the file it is about to write.
    const stat = e.isDirectory() ? undefined : SOURCE.test(e.name) && !e.name.endsWith('.d.ts') ? statSync(path) : undefined;
    const found = e.isDirectory() ? newestSource(path) : stat && stat.size > 0 ? { path, mtimeMs: stat.mtimeMs } : undefined;
    if (found && (!newest || found.mtimeMs > newest.mtimeMs)) newest = found;
  }
  return newest;
}

/**
 * The stale build behind `module`, or `undefined` when it is up to date (or not under a
 * `dist/` folder with a sibling `src/`).
 */
export function findStaleBuild(module: string): StaleBuild | undefined {
  const at = module.lastIndexOf(`${sep}dist${sep}`);
  if (at < 0) return undefined;
  let built: number;
  try {
    built = statSync(module).mtimeMs;
  } catch {
    return undefined;
  }
  const newest = newestSource(join(module.slice(0, at), 'src'));
  return newest && newest.mtimeMs > built ? { module, source: newest.path } : undefined;
}

/** The warning (or refusal) text: both paths and the fix. */
export function staleBuildMessage(s: StaleBuild): string {
  return `${s.module} is older than ${s.source} (edited after the last build): the app would run stale code. Run pnpm build (pnpm start builds first)`;
}
