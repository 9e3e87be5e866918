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
  ) {}

  /** True when `generate()` threw. */
  get failed(): boolean {
    return this.error !== undefined;
  }
}
