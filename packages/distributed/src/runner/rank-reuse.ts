/**
 * Keeping loaded ranks across app reloads inside one process: what `reactor dev` uses so that an
 * edit to the application half does not load the weights again. Off unless a host switches it on
 * ({@link enableRankReuse}); a production process never parks anything.
 *
 * While it is on, `shutdown()` of a healthy, idle runner parks the runner (its ranks keep running,
 * with their weights loaded) instead of stopping it, and the next `new DistributedRunner(...)`
 * with the same fingerprint gets the parked runner back, already started. The fingerprint covers
 * everything that decides what the ranks loaded: the worker module and every module it imports by
 * a relative path (their bytes), the export, the options (but the logger) and `loadArgs`. Anything
 * else (an edit to the worker, other `loadArgs`, another rank count) misses, and the parked runner
 * with the same worker module is shut down before the new ranks start.
 * @internal
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** What the pool needs of a runner. */
export interface ReusableRunner {
  /** The runner itself, handed back by {@link takeParkedRunner}. */
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

/** The process-wide pool (one per process, even with two copies of this package loaded). */
class RankReusePool {
  enabled = false;
  parked: Parked[] = [];
  /** Runners being shut down because they were not reused: the next start waits for them (GPU memory). */
  releasing = new Set<Promise<void>>();
}

const POOL = Symbol.for('@reactor/distributed.rank-reuse');

function pool(): RankReusePool {
  const g = globalThis as { [POOL]?: RankReusePool };
  return (g[POOL] ??= new RankReusePool());
}

/** Whether `shutdown()` parks healthy runners in this process. @internal */
export function rankReuseEnabled(): boolean {
  return pool().enabled;
}

/** Lets `shutdown()` park healthy, idle runners for the next runner with the same fingerprint. @internal */
export function enableRankReuse(): void {
  pool().enabled = true;
}

/** Stops parking, and shuts down every parked runner. @internal */
export async function disableRankReuse(): Promise<void> {
  pool().enabled = false;
  await releaseParkedRunners();
}

/** Shuts down every parked runner (and waits for those already being released). @internal */
export async function releaseParkedRunners(): Promise<void> {
  const p = pool();
  const all = p.parked.splice(0);
  await Promise.all([...all.map((e) => release(e.runner)), ...p.releasing]);
}

/** The pids of the parked runners' ranks. @internal */
export function parkedRankPids(): number[] {
  return pool().parked.flatMap((e) => e.runner.pids());
}

function release(runner: ReusableRunner): Promise<void> {
  const p = pool();
  const done = runner.release().catch(() => undefined);
  p.releasing.add(done);
  void done.finally(() => p.releasing.delete(done));
  return done;
}

/** Parks `runner` under `key`; a runner parked earlier under the same module is released. */
export function parkRunner(key: string, moduleKey: string, runner: ReusableRunner): void {
  const p = pool();
  for (const e of p.parked.filter((x) => x.moduleKey === moduleKey || x.key === key)) {
    p.parked.splice(p.parked.indexOf(e), 1);
    void release(e.runner);
  }
  p.parked.push({ key, moduleKey, runner });
}

/** The parked, still healthy runner with this fingerprint, taken out of the pool; undefined for none. */
export function takeParkedRunner(key: string): ReusableRunner | undefined {
  const p = pool();
  const i = p.parked.findIndex((e) => e.key === key);
  if (i < 0) return undefined;
  const [entry] = p.parked.splice(i, 1);
  if (entry!.runner.healthy()) return entry!.runner;
  void release(entry!.runner);
  return undefined;
}

/**
 * Before new ranks of `moduleKey` start: shuts down the parked runners of the same worker module
 * (their fingerprint missed, so they will not be used) and waits for every release in flight.
 */
export async function releaseBeforeStart(moduleKey: string): Promise<void> {
  const p = pool();
  const stale = p.parked.filter((e) => e.moduleKey === moduleKey);
  p.parked = p.parked.filter((e) => e.moduleKey !== moduleKey);
  await Promise.all([...stale.map((e) => release(e.runner)), ...p.releasing]);
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
