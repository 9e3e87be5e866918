/**
 * The step lock: a FIFO async mutex. A step, a command and a lifecycle hook each hold it for
 * their whole run, so a command never runs inside a step, and everything runs in arrival order.
 */
export class StepLock {
  private tail: Promise<unknown> = Promise.resolve();
  #holder: string | undefined;

  /** What holds the lock now (the label given to {@link run}), or undefined when it is free. */
  get holder(): string | undefined {
    return this.#holder;
  }

  /** True while some task holds the lock. */
  get locked(): boolean {
    return this.#holder !== undefined;
  }

  /**
   * Runs `fn` once every earlier task has finished; settles with its outcome.
   * @param holder what `fn` is (`step`, `task`), readable as {@link holder} while it runs.
   */
  run<T>(fn: () => T | Promise<T>, holder = 'task'): Promise<T> {
    const result = this.tail.then(async () => {
      this.#holder = holder;
      try {
        return await fn();
      } finally {
        this.#holder = undefined;
      }
    });
    this.tail = result.then(noop, noop);
    return result;
  }
}

function noop(): void {}
