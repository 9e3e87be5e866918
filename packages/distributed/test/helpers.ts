import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect } from 'vitest';
import { type LogFields, type Logger, silentLogger } from '@reactor/log';
import { DistributedRunner } from '../src/index.js';

/**
 * A logger that records every line as `<level> [rank N] <message>` (the rank from a
 * `child({ rank })` binding) and lets a test wait for one (no sleeps).
 */
export function captureLogger(): Logger & { lines: string[]; waitFor(re: RegExp, timeoutMs?: number): Promise<string> } {
  const lines: string[] = [];
  const waiters: { re: RegExp; resolve(l: string): void }[] = [];
  const push = (l: string) => {
    lines.push(l);
    for (const w of [...waiters]) {
      if (w.re.test(l)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(l);
      }
    }
  };
  const make = (bindings: LogFields): Logger => {
    const prefix = bindings.rank !== undefined ? `[rank ${String(bindings.rank)}] ` : '';
    const at =
      (level: string) =>
      (first: string | LogFields, second?: unknown): void =>
        push(`${level} ${prefix}${typeof first === 'string' ? first : String(second ?? '')}`);
    return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'), child: (more) => make({ ...bindings, ...more }) };
  };
  return {
    ...make({}),
    lines,
    waitFor(re: RegExp, timeoutMs = 10_000) {
      const hit = lines.find((l) => re.test(l));
      if (hit) return Promise.resolve(hit);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no log line matched ${re} within ${timeoutMs} ms; lines:\n${lines.join('\n')}`)), timeoutMs);
        waiters.push({
          re,
          resolve: (l) => {
            clearTimeout(timer);
            resolve(l);
          },
        });
      });
    },
  };
}

/** Pids of live processes whose command line carries `--reactor-runner=<prefix>` (zombies excluded). */
export function rankProcesses(prefix: string): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const cmd = readFileSync(`/proc/${d}/cmdline`, 'utf8');
      if (!cmd.includes(`--reactor-runner=${prefix}`)) continue;
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
      if (state !== 'Z') out.push(Number(d));
    } catch {
      // exited while we looked
    }
  }
  return out;
}

/** Shared-memory segments in /dev/shm under `prefix`. */
export function segments(prefix: string): string[] {
  return readdirSync('/dev/shm').filter((f) => f.startsWith(prefix));
}

/** Asserts that a runner left no process and no shared-memory segment behind. */
export function expectNothingLeft(runner: DistributedRunner<any, any, any>): void {
  expect(rankProcesses(runner.segmentPrefix)).toEqual([]);
  expect(segments(runner.segmentPrefix)).toEqual([]);
}

/** Polls a condition (for facts only the OS knows, like "this pid is gone"), failing after `ms`. */
export async function eventually(cond: () => boolean, ms: number, what: string): Promise<number> {
  const t0 = performance.now();
  while (!cond()) {
    if (performance.now() - t0 > ms) throw new Error(`${what} did not happen within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
  return performance.now() - t0;
}

/** True while `pid` runs: a zombie (exited, not yet reaped by whoever adopted it) counts as gone. */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    // /proc/<pid>/stat: "pid (comm) S ..."; the state follows the last ')'.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/** Shuts down every runner a test created, even when the test failed. */
export function trackRunners(): <R extends DistributedRunner<any, any, any>>(r: R) => R {
  const live: DistributedRunner<any, any, any>[] = [];
  afterEach(async () => {
    await Promise.allSettled(live.splice(0).map((r) => r.shutdown()));
  });
  return (r) => {
    live.push(r);
    return r;
  };
}

/**
 * `track` as {@link trackRunners}, and `echo(worldSize, options)`: a started runner of the echo
 * fixture with a capturing logger, shut down after each test.
 */
export function useEchoRunners() {
  const track = trackRunners();
  async function echo(worldSize: number, extra: Record<string, unknown> = {}) {
    const mod = await fixture('echo');
    const log = captureLogger();
    const runner: DistributedRunner<any, any, any> = track(new DistributedRunner(mod.EchoWorker, { worldSize, logger: log, ...extra }));
    await runner.start();
    return { runner, log, mod };
  }
  return { track, echo };
}

/** Silent logger for tests that do not look at output. */
export const quiet: Logger = silentLogger;

/** Imports a plain-JS fixture module from test/fixtures (typed loosely: fixtures are JavaScript). */
export function fixture(name: string): Promise<any> {
  const url = new URL(`./fixtures/${name}.mjs`, import.meta.url).href;
  return import(/* @vite-ignore */ url);
}

/** Temporary folders for one test file, each removed after the test that made it. */
export function useTempDirs(): (prefix: string) => string {
  const made: string[] = [];
  afterEach(() => {
    for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
  });
  return (prefix) => {
    const dir = mkdtempSync(join(tmpdir(), prefix));
    made.push(dir);
    return dir;
  };
}
