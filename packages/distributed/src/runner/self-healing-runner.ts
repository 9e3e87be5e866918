import type { Logger } from '@reactor/log';
import { WorkerStalledError } from '../errors.js';
import type { CallOptions, DistributedRunner, StallInfo } from './distributed-runner.js';

/** Options of a {@link SelfHealingRunner}. */
export interface SelfHealingRunnerOptions<TInput, TResult, TArgs> {
  /** Builds a new, unstarted runner: at `start()` and at every rebuild. */
  create: () => DistributedRunner<TInput, TResult, TArgs>;
  logger: Logger;
  /** How messages name the runner, e.g. `the video runner`. */
  name: string;
  /** A runner broke while no call ran and a new one is starting: `reason` is the error's first sentence. */
  onRestarting?: (reason: string) => void;
  /** Before a rebuild's new runner starts: forget what the old ranks reported. */
  onRebuild?: () => void;
  /**
   * A rank that makes no progress for the runner's `stallMs` (default 5 s) during `generate()`
   * fails the call at once with a `WorkerStalledError` naming it, and a new runner is built, so
   * the session hears of it within seconds rather than at the call's deadline (`callTimeoutMs`,
   * 30 s). Default true; set false (or raise the runner's `stallMs`) for a model whose steps
   * legitimately block a rank's event loop longer.
   */
  failOnStall?: boolean;
}

/**
 * A {@link DistributedRunner} that an app keeps alive: when the runner breaks while no call runs
 * (its `unhealthy` event: a rank died between steps), a new one is built at once, so sessions and
 * their clients stay; a failure during a call is the caller's to report, and `rebuild()` then
 * builds the next one in the background. A rebuild that fails is kept as {@link problem} for
 * readiness and refused steps; the next `healIfBroken()` tries again.
 *
 * @example
 * ```ts
 * this.runners = new SelfHealingRunner({
 *   name: 'the video runner',
 *   logger: this.logger,
 *   create: () => new DistributedRunner(VideoWorker, { worldSize: 2, loadArgs }),
 *   onRestarting: (reason) => this.send(new RunnerRestarting(`${reason}; a new runner is starting`)),
 * });
 * await this.runners.start();
 * ```
 */
export class SelfHealingRunner<TInput = unknown, TResult = unknown, TArgs = unknown> {
  #runner: DistributedRunner<TInput, TResult, TArgs> | undefined;
  #rebuilding: Promise<void> | undefined;
  #problem: string | undefined;
  /** `generate()` calls waiting for the runner (several with `maxInFlight`): a failure then is the step's to report. */
  #inCall = 0;
  /** The stall that failed the last call, kept until the runner that had it is replaced. */
  #stalls: StallInfo[] = [];

  constructor(private readonly options: SelfHealingRunnerOptions<TInput, TResult, TArgs>) {}

  /** The current runner (undefined before `start()`). */
  get runner(): DistributedRunner<TInput, TResult, TArgs> | undefined {
    return this.#runner;
  }

  /** The rebuild in flight, if any (never rejects). */
  get rebuilding(): Promise<void> | undefined {
    return this.#rebuilding;
  }

  /**
   * Ranks stuck in a call: the current runner's, or those that failed the last call while the
   * runner that has them is being replaced (for readiness: a stalled rank is not a passing state).
   */
  get stalledRanks(): StallInfo[] {
    return this.#stalls.length > 0 ? [...this.#stalls] : (this.#runner?.stalledRanks ?? []);
  }

  /** Why the last rebuild failed (cleared by the next one that succeeds). */
  get problem(): string | undefined {
    return this.#problem;
  }

  /**
   * Builds and starts a runner.
   * @throws whatever the runner's `start()` throws (the runner is shut down then)
   */
  async start(): Promise<void> {
    const runner = this.options.create();
    this.#runner = runner;
    runner.on('unhealthy', (err) => this.onUnhealthy(runner, err));
    await runner.start();
  }

  /**
   * The current runner's `generate()`; a runner that breaks meanwhile is not rebuilt behind the
   * caller's back, except for a stalled rank (see {@link SelfHealingRunnerOptions.failOnStall}):
   * the call fails at the `stall` event and a new runner is built at once.
   */
  async generate(input: TInput, options?: CallOptions): Promise<TResult> {
    const runner = this.#runner!;
    this.#inCall++;
    let counted = true;
    const uncount = (): void => {
      if (counted) this.#inCall--;
      counted = false;
    };
    let onStall: ((info: StallInfo) => void) | undefined;
    try {
      const call = runner.generate(input, options);
      if (this.options.failOnStall === false) return await call;
      // Settled by the rebuild's shutdown once the stall has failed the call.
      call.catch(() => undefined);
      const stalled = new Promise<never>((_, reject) => {
        onStall = (info) => {
          this.#stalls = [info];
          reject(
            new WorkerStalledError(
              'generate()',
              [info.rank],
              [info.phase],
              info.sinceMs,
              `The call failed at once and ${this.options.name} is being rebuilt (raise the runner's stallMs, or set failOnStall: false, if a step legitimately blocks that long).`,
            ),
          );
        };
        runner.on('stall', onStall);
      });
      try {
        return await Promise.race([call, stalled]);
      } catch (err) {
        if (err instanceof WorkerStalledError && runner === this.#runner) {
          this.options.logger.warn({ err }, `${this.options.name} has a stalled rank; building a new one`);
          uncount();
          void this.rebuild();
        }
        throw err;
      }
    } finally {
      if (onStall) runner.off('stall', onStall);
      uncount();
    }
  }

  /** Why a step cannot run now (restarting, not loaded, a failed rebuild), or undefined when it can. */
  refusal(): string | undefined {
    if (this.#rebuilding) return 'the runner is restarting';
    if (!this.#runner) return 'the model is not loaded';
    if (!this.#runner.healthy && this.#problem !== undefined) return this.#problem;
    return undefined;
  }

  private onUnhealthy(runner: DistributedRunner<TInput, TResult, TArgs>, err: Error): void {
    if (runner !== this.#runner || this.#inCall > 0 || this.#rebuilding) return;
    this.options.logger.warn({ err }, 'the runner broke between calls; building a new one');
    void this.rebuild();
    // The first sentence says what happened (which rank, how); the rest is advice for the app's author.
    this.options.onRestarting?.(err.message.split(/\.(\s|$)/)[0]!);
  }

  /** Shuts the current runner down and starts a new one; never rejects (a failure is kept in {@link problem}). */
  rebuild(): Promise<void> {
    this.#rebuilding ??= (async () => {
      try {
        await this.#runner?.shutdown();
        this.#stalls = [];
        this.options.onRebuild?.();
        await this.start();
        this.#problem = undefined;
        this.options.logger.info('the new runner is up');
      } catch (err) {
        this.#problem = `${this.options.name} could not be restarted: ${(err as Error).message}`;
        this.options.logger.error({ err }, 'restarting the runner failed; the next session tries again');
      } finally {
        this.#rebuilding = undefined;
      }
    })();
    return this.#rebuilding;
  }

  /** Waits for a rebuild in flight, then rebuilds a runner that is broken (at a session's start). */
  async healIfBroken(): Promise<void> {
    await this.#rebuilding;
    if (this.#runner && !this.#runner.healthy) await this.rebuild();
  }

  /** Waits for a rebuild in flight, then shuts the runner down. */
  async shutdown(): Promise<void> {
    await this.#rebuilding;
    await this.#runner?.shutdown();
  }
}
