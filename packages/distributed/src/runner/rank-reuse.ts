/**
 * Keeping loaded ranks across app reloads inside one process: what `reactor dev` uses so that an
 * edit to the application half does not load the weights again. Off unless a host installs a
 * pool ({@link RankReusePool.install}; `reactor dev` owns a `RankPool`); a production process never parks anything.
 *
 * While it is on, `shutdown()` of a healthy, idle runner parks the runner (its ranks keep running,
 * with their weights loaded) instead of stopping it, and the next runner with the same
 * fingerprint gets its ranks back, already started: `pool.create(...)` returns the parked runner
 * itself, `new DistributedRunner(...)` a new runner over the parked ranks (a constructor never
 * returns another object). The fingerprint covers
 * everything that decides what the ranks loaded: the worker module and every module it imports by
 * a relative path (their bytes), the export, the options (but the logger) and `loadArgs`. Anything
 * else (an edit to the worker, other `loadArgs`, another rank count) misses, and the parked runner
 * with the same worker module is shut down before the new ranks start.
 * @internal
 */
import { createHash } from 'node:crypto';
import { type Dirent, readFileSync, readdirSync } from 'node:fs';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** What the pool needs of a runner. */
export interface ReusableRunner {
  /** The runner itself, handed back by {@link RankReusePool.take}. */
  readonly target: object;
  healthy(): boolean;
  pids(): number[];
  /** Stops the ranks for real (not parking them again). */
  release(): Promise<void>;
}

interface Parked {
  key: string;
  moduleKey: string;
  runner: ReusableRunner;
}

/** The slot of the installed pool (one per process, even with two copies of this package loaded). */
const POOL = Symbol.for('@reactor/distributed.rank-reuse');

/** The pool `new DistributedRunner(...)` parks into and takes from in this process, if a host installed one. @internal */
export function installedRankPool(): RankReusePool | undefined {
  return (globalThis as { [POOL]?: RankReusePool })[POOL];
}

/**
 * The parked runners of one host (`reactor dev` owns one, see `RankPool`). Nothing parks until
 * it is {@link install}ed; {@link close} stops every parked runner and uninstalls it.
 * @internal
 */
/** A live runner the pool can restart in place (`reactor dev`: a Python edit restarts only the ranks). */
export interface RestartableRunner {
  /** Starts new ranks of the changed worker code in place of the old ones: `unchanged`, `restarted`, or `failed` (the new ranks did not load). */
  restartIfChanged(): Promise<'unchanged' | 'restarted' | 'failed'>;
}

export class RankReusePool {
  private parked: Parked[] = [];
  /** The runners made while this pool is installed and not shut down or parked yet. */
  readonly live = new Set<RestartableRunner>();
  /** Runners being shut down because they were not reused: the next start waits for them (GPU memory). */
  private readonly releasing = new Set<Promise<void>>();
  private closed = false;

  /** Makes this the process's pool: from now on `shutdown()` of a healthy, idle runner parks it here. */
  install(): this {
    const g = globalThis as { [POOL]?: RankReusePool };
    if (g[POOL] && g[POOL] !== this) throw new Error('Another rank reuse pool is installed in this process: close() it first.');
    this.closed = false;
    g[POOL] = this;
    return this;
  }

  /** Whether `shutdown()` parks runners here (installed and not closed). */
  get enabled(): boolean {
    return !this.closed && installedRankPool() === this;
  }

  /** Stops parking (uninstalls the pool), and shuts down every parked runner. */
  async close(): Promise<void> {
    this.closed = true;
    const g = globalThis as { [POOL]?: RankReusePool };
    if (g[POOL] === this) delete g[POOL];
    await this.releaseParked();
  }

  /** Shuts down every parked runner (and waits for those already being released). */
  async releaseParked(): Promise<void> {
    const all = this.parked.splice(0);
    await Promise.all([...all.map((e) => this.release(e.runner)), ...this.releasing]);
  }

  /**
   * Restarts, in place, the ranks of every live runner whose worker code changed (a Python
   * worker's `.py` files): the app keeps its runner objects, and calls wait for the new ranks.
   * @returns how many runners were restarted, and the load errors of those whose new ranks failed
   */
  async restartChanged(): Promise<{ restarted: number; failed: number }> {
    const outcomes = await Promise.all([...this.live].map((r) => r.restartIfChanged().catch(() => 'failed' as const)));
    return { restarted: outcomes.filter((o) => o === 'restarted').length, failed: outcomes.filter((o) => o === 'failed').length };
  }

  /** The pids of the parked runners' ranks. */
  parkedPids(): number[] {
    return this.parked.flatMap((e) => e.runner.pids());
  }

  private release(runner: ReusableRunner): Promise<void> {
    const done = runner.release().catch(() => undefined);
    this.releasing.add(done);
    void done.finally(() => this.releasing.delete(done));
    return done;
  }

  /** Parks `runner` under `key`; a runner parked earlier under the same module is released. */
  park(key: string, moduleKey: string, runner: ReusableRunner): void {
    for (const e of this.parked.filter((x) => x.moduleKey === moduleKey || x.key === key)) {
      this.parked.splice(this.parked.indexOf(e), 1);
      void this.release(e.runner);
    }
    this.parked.push({ key, moduleKey, runner });
  }

  /** The parked, still healthy runner with this fingerprint, taken out of the pool; undefined for none. */
  take(key: string): ReusableRunner | undefined {
    const i = this.parked.findIndex((e) => e.key === key);
    if (i < 0) return undefined;
    const [entry] = this.parked.splice(i, 1);
    if (entry!.runner.healthy()) return entry!.runner;
    void this.release(entry!.runner);
    return undefined;
  }

  /**
   * Before new ranks of `moduleKey` start: shuts down the parked runners of the same worker module
   * (their fingerprint missed, so they will not be used) and waits for every release in flight.
   */
  async releaseBeforeStart(moduleKey: string): Promise<void> {
    const stale = this.parked.filter((e) => e.moduleKey === moduleKey);
    this.parked = this.parked.filter((e) => e.moduleKey !== moduleKey);
    await Promise.all([...stale.map((e) => this.release(e.runner)), ...this.releasing]);
  }
}

/** The module's URL without a query or hash (a host may import modules again as `x.js?v=2`). */
export function moduleKeyOf(url: string): string {
  const u = new URL(url);
  u.search = '';
  u.hash = '';
  return u.href;
}

// Static imports, re-exports and literal dynamic imports of a relative path, as tsc writes them.
const RELATIVE_IMPORT = /(?:\bfrom\s*|\bimport\s*\(?\s*)['"](\.{1,2}\/[^'"]+)['"]/g;

/**
 * A hash of the module at `url` and of every module it imports by a relative path, transitively
 * (bare imports, the framework and node_modules, are not followed). A file that cannot be read
 * hashes as missing, so a later fix still changes the fingerprint.
 * @internal
 */
export function moduleTreeHash(url: string): string {
  const hash = createHash('sha256');
  const seen = new Set<string>();
  const todo = [fileURLToPath(moduleKeyOf(url))];
  while (todo.length > 0) {
    const file = todo.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      hash.update(`${file}\0missing\0`);
      continue;
    }
    hash.update(`${file}\0${text}\0`);
    for (const m of text.matchAll(RELATIVE_IMPORT)) todo.push(resolve(dirname(file), m[1]!.replace(/[?#].*$/, '')));
  }
  return hash.digest('hex');
}

/** A stable text for `loadArgs`: typed arrays and buffers by their bytes' hash. */
export function argsFingerprint(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (ArrayBuffer.isView(v))
      return `bytes:${createHash('sha256')
        .update(new Uint8Array(v.buffer, v.byteOffset, v.byteLength))
        .digest('hex')}`;
    if (v instanceof ArrayBuffer) return `bytes:${createHash('sha256').update(new Uint8Array(v)).digest('hex')}`;
    if (v instanceof Map) return { map: [...v.entries()] };
    if (v instanceof Set) return { set: [...v.values()] };
    if (typeof v === 'bigint') return `bigint:${v}`;
    return v;
  });
}

/** Folders a Python import path holds that are never the app's sources. */
const PY_SKIP_DIRS = new Set(['__pycache__', '.git', 'node_modules', '.venv', 'venv', 'site-packages', 'dist-packages', '.mypy_cache', '.pytest_cache']);
/** Bounds of {@link pythonTreeHash}'s walk: past them, the rest is not looked at (said in the hash, so it stays stable). */
const PY_MAX_FILES = 5_000;
const PY_MAX_DEPTH = 8;
/** The first lines of a module `reactor types --python` wrote name it. */
const GENERATED_TYPES_MARK = 'written by `reactor types --python`';

/**
 * A hash of every `.py` file under the folders of a Python import path (`PYTHONPATH`, with its
 * delimiter), by path and bytes: a Python worker's ranks are reused only while none of them
 * changed (Python has no import graph to follow before it runs). Caches, virtual environments
 * and `node_modules` are skipped; the walk stops at {@link PY_MAX_FILES} files.
 * @internal
 */
export function pythonTreeHash(pythonPath: string): string {
  const hash = createHash('sha256');
  let files = 0;
  const walk = (dir: string, depth: number): void => {
    let entries: Dirent[];
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      hash.update(`${dir}\0missing\0`);
      return;
    }
    for (const e of entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
      if (files >= PY_MAX_FILES) return;
      const full = join(dir, e.name);
      if (e.isDirectory()) {
        if (depth < PY_MAX_DEPTH && !PY_SKIP_DIRS.has(e.name) && !e.name.startsWith('.')) walk(full, depth + 1);
      } else if (e.name.endsWith('.py')) {
        files++;
        try {
          const bytes = readFileSync(full);
          // The worker's TypedDicts (`reactor types --python`, which `reactor dev` writes again
          // after a schema change) have no behaviour: their change does not change a rank's code.
          if (!bytes.subarray(0, 200).toString().includes(GENERATED_TYPES_MARK)) hash.update(`${full}\0`).update(bytes).update('\0');
        } catch {
          hash.update(`${full}\0missing\0`);
        }
      }
    }
  };
  for (const dir of pythonPath.split(delimiter).filter(Boolean)) walk(resolve(dir), 0);
  if (files >= PY_MAX_FILES) hash.update(`\0truncated at ${PY_MAX_FILES} files\0`);
  return hash.digest('hex');
}
