/**
 * Where a child process finds a worker class: the module URL it declares, mapped to compiled
 * JavaScript when it points at TypeScript sources.
 * @internal
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { WorkerClass } from './distributed-worker.js';

const TS_EXT = /\.(m|c)?tsx?$/;

/**
 * The compiled sibling of a TypeScript source file: `<pkg>/src/a/b.ts` -> `<pkg>/dist/a/b.js`
 * (`.mts` -> `.mjs`). Returns the URL unchanged when it is not TypeScript, null when it is
 * TypeScript without a `src/` folder to map.
 */
export function compiledSibling(url: string): string | null {
  if (!url.startsWith('file:')) return url;
  const path = fileURLToPath(url);
  if (!TS_EXT.test(path)) return url;
  const idx = path.lastIndexOf('/src/');
  if (idx < 0) return null;
  const ext = path.endsWith('.mts') ? '.mjs' : path.endsWith('.cts') ? '.cjs' : '.js';
  const compiled = `${path.slice(0, idx)}/dist/${path.slice(idx + 5).replace(TS_EXT, ext)}`;
  return pathToFileURL(compiled).href;
}

/** Where the ranks load a worker class from. */
export interface WorkerLocation {
  /** The module as the parent sees it (`WorkerClass.moduleUrl`). */
  sourceUrl: string;
  /** The module the ranks import (compiled JavaScript). */
  runnableUrl: string;
}

/**
 * Checks, without starting anything, that a child process can load `cls`.
 * @throws TypeError naming the fix when it cannot
 */
export function locateWorker(cls: WorkerClass): WorkerLocation {
  const name = cls.name || '<anonymous class>';
  if (!Object.prototype.hasOwnProperty.call(cls, 'moduleUrl') || typeof cls.moduleUrl !== 'string' || cls.moduleUrl === '') {
    throw new TypeError(
      `Worker class ${name} does not say where its module is, so a rank process cannot load it. ` +
        `Add \`static moduleUrl = import.meta.url;\` to the class and export the class from that module.`,
    );
  }
  const sourceUrl = cls.moduleUrl;
  if (!sourceUrl.startsWith('file:')) {
    throw new TypeError(`${name}.moduleUrl must be a file: URL (import.meta.url of the module that exports the class), got ${JSON.stringify(sourceUrl)}.`);
  }
  if (!existsSync(fileURLToPath(sourceUrl))) {
    throw new TypeError(`${name}.moduleUrl points at ${fileURLToPath(sourceUrl)}, which does not exist. Set \`static moduleUrl = import.meta.url;\`.`);
  }
  const runnableUrl = compiledSibling(sourceUrl);
  if (runnableUrl === null) {
    throw new TypeError(
      `${name} is defined in TypeScript (${fileURLToPath(sourceUrl)}) outside a src/ folder, and rank processes run plain Node, ` +
        `which cannot load TypeScript. Point ${name}.moduleUrl at compiled JavaScript.`,
    );
  }
  if (runnableUrl !== sourceUrl && !existsSync(fileURLToPath(runnableUrl))) {
    throw new TypeError(
      `${name} is defined in TypeScript (${fileURLToPath(sourceUrl)}); rank processes run its compiled sibling ` +
        `${fileURLToPath(runnableUrl)}, which does not exist. Build the package (pnpm build), or point ${name}.moduleUrl at compiled JavaScript.`,
    );
  }
  return { sourceUrl, runnableUrl };
}

/**
 * The export name under which `mod` exports `cls`: its class name, any other name, or `default`.
 * @throws TypeError when the module does not export it
 */
export function exportNameOf(cls: WorkerClass, mod: Record<string, unknown>, sourceUrl: string): string {
  if (cls.name && mod[cls.name] === cls) return cls.name;
  for (const [k, v] of Object.entries(mod)) if (v === cls) return k;
  throw new TypeError(
    `Worker class ${cls.name || '<anonymous class>'} is not exported by its module ${fileURLToPath(sourceUrl)}, so a rank process cannot load it. ` +
      `Export it (export class ${cls.name || 'MyWorker'} ...) or as the default export.`,
  );
}

/** Newest TypeScript file under `dir` (recursively, `node_modules` skipped), with its mtime. */
function newestSource(dir: string): { path: string; mtimeMs: number } | null {
  let best: { path: string; mtimeMs: number } | null = null;
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return null;
  }
  for (const e of entries) {
    const path = `${dir}/${e.name}`;
    let found: { path: string; mtimeMs: number } | null = null;
    if (e.isDirectory()) {
      if (e.name !== 'node_modules') found = newestSource(path);
    } else if (TS_EXT.test(e.name) && !e.name.endsWith('.d.ts')) {
      found = { path, mtimeMs: statSync(path).mtimeMs };
    }
    if (found && (!best || found.mtimeMs > best.mtimeMs)) best = found;
  }
  return best;
}

/**
 * When the ranks run a compiled sibling (`dist/**.js`) of a TypeScript worker module: the
 * compiled file and the newest source under the package's `src/` if that source changed after
 * it was built (the ranks would run old code); null otherwise.
 */
export function staleBuild(location: WorkerLocation): { compiled: string; newestSource: string } | null {
  if (location.runnableUrl === location.sourceUrl) return null;
  const source = fileURLToPath(location.sourceUrl);
  const compiled = fileURLToPath(location.runnableUrl);
  const idx = source.lastIndexOf('/src/');
  if (idx < 0) return null;
  let builtAt: number;
  try {
    builtAt = statSync(compiled).mtimeMs;
  } catch {
    return null;
  }
  const newest = newestSource(source.slice(0, idx + 4));
  return newest && newest.mtimeMs > builtAt ? { compiled, newestSource: newest.path } : null;
}
