/** A rank's side of `runner.snapshot()` / `runner.restore()`: the worker's optional hooks, or a coded refusal. */
import { DistributedError, DistributedErrorCode } from '../errors.js';
import type { DistributedWorker } from './distributed-worker.js';

/** The worker implements no `snapshot()` / `restore()` (code `snapshot_unsupported`). */
export class SnapshotUnsupportedError extends DistributedError {
  constructor(message: string) {
    super(DistributedErrorCode.SnapshotUnsupported, message);
  }
}

/** The worker's `snapshot()`, or `snapshot_unsupported`. */
export async function snapshotOf(worker: DistributedWorker): Promise<unknown> {
  if (typeof worker.snapshot !== 'function') {
    throw new SnapshotUnsupportedError(
      `${worker.constructor.name} has no snapshot(): implement snapshot() (typed arrays and plain data) and restore(snapshot) to take snapshots (docs/snapshots.md)`,
    );
  }
  return worker.snapshot();
}

/** The worker's `restore(value)`, or `snapshot_unsupported`. */
export async function restoreInto(worker: DistributedWorker, value: unknown): Promise<void> {
  if (typeof worker.restore !== 'function') {
    throw new SnapshotUnsupportedError(`${worker.constructor.name} has no restore(snapshot): implement it beside snapshot() (docs/snapshots.md)`);
  }
  await worker.restore(value);
}
