/**
 * An app's model runner, as readiness and its clients see it: the one place for the readiness of
 * a self-healing runner (`@reactor/distributed`'s `SelfHealingRunner`, read structurally: the app
 * model does not depend on the runner package) and for the message clients get while a new runner
 * starts ({@link RunnerRestarting}).
 */
import { ReadinessCode } from './readiness.js';
import type { AppReadiness } from '../app/reactor-app.js';

/** What {@link runnerReadiness} reads of a `SelfHealingRunner`. */
export interface RunnerHealth {
  /** Ranks stuck in a call (`rank`, how long, in which phase). */
  readonly stalledRanks: readonly { readonly rank: number; readonly sinceMs: number; readonly phase: string }[];
  /** The rebuild in flight, if any. */
  readonly rebuilding: unknown;
  /** The current runner (undefined before `start()`). */
  readonly runner: { readonly healthy: boolean } | undefined;
  /** Why the last rebuild failed. */
  readonly problem: string | undefined;
}

/** How {@link runnerReadiness} names the runner. */
export interface RunnerReadinessOptions {
  /** How messages name the runner, e.g. `the video runner`. */
  name: string;
  /** The message for a broken runner when no rebuild failed (default: `<name> is not running`). */
  unhealthy?: string;
}

/**
 * The readiness of an app whose model runs behind a self-healing runner: a stalled rank first
 * (`rank_stalled`, one reason each: it stays named while the runner that has it is being
 * replaced, a stalled rank is not a passing state), then `runner_restarting` while a new runner
 * starts, `runner_unhealthy` while none runs or it is broken (a failed rebuild's reason first),
 * else `true`.
 */
export function runnerReadiness(runners: RunnerHealth, options: RunnerReadinessOptions): AppReadiness {
  const stalled = runners.stalledRanks;
  if (stalled.length > 0) {
    return stalled.map((s) => ({
      code: ReadinessCode.RankStalled,
      message: `rank ${s.rank} has made no progress for ${(s.sinceMs / 1000).toFixed(1)} s (${s.phase})`,
    }));
  }
  if (runners.rebuilding) return { code: ReadinessCode.RunnerRestarting, message: `${options.name} is restarting` };
  const runner = runners.runner;
  if (!runner) return { code: ReadinessCode.RunnerUnhealthy, message: `${options.name} is not running` };
  if (!runner.healthy) return { code: ReadinessCode.RunnerUnhealthy, message: runners.problem ?? options.unhealthy ?? `${options.name} is not running` };
  return true;
}

/**
 * The reason a `runner_restarting` message carries (an app declares that message class itself,
 * `class RunnerRestarting { constructor(readonly reason: string) {} }`, so that `reactor types`
 * reads its field types from the app's own declarations): `reason` is the error's first sentence
 * (`SelfHealingRunner`'s `onRestarting`).
 */
export function runnerRestartingReason(reason: string): string {
  return `${reason}; a new runner is starting`;
}
