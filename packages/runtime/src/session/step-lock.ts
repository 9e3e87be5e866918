/**
 * The step lock: a FIFO async mutex. A step, a command and a lifecycle hook each hold it for
 * their whole run, so a command never runs inside a step, and everything runs in arrival order.
 */
export class StepLock {
  private tail: Promise<unknown> = Promise.resolve();
  private held = false;

  /** True while some task holds the lock. */
  get locked(): boolean {
    return this.held;
  }

  /** Runs `fn` once every earlier task has finished; settles with its outcome. */
  run<T>(fn: () => T | Promise<T>): Promise<T> {
    const result = this.tail.then(async () => {
      this.held = true;
      try {
        return await fn();
      } finally {
        this.held = false;
      }
    });
    this.tail = result.then(noop, noop);
    return result;
  }
}

function noop(): void {}
