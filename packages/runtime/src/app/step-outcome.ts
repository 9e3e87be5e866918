/**
 * What one `generate()` call produced: its result, or the error it threw, and how long it
 * took. `processOutput(outcome)` decides what to do with it.
 */
export class StepOutcome<R = unknown> {
  constructor(
    /** The model's result; `undefined` when it threw. */
    readonly result: R | undefined,
    /** What `generate()` threw, if it did. */
    readonly error: unknown,
    /** Wall time of `generate()`, ms. */
    readonly elapsedMs: number,
    /**
     * This step's number in the session (1, 2, ...: the steps that called `generate()`). A model
     * whose output lags its input sets `Output.inputStep` from it (`outcome.step - 1` for a
     * worker that returns the previous call's frames), so `applied` names the right frame.
     */
    readonly step: number = 0,
  ) {}

  /** True when `generate()` threw. */
  get failed(): boolean {
    return this.error !== undefined;
  }
}
