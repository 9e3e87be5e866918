/**
 * Entry point of a rank process (`node dist/process/child-main.js --reactor-runner=<prefix> --rank=<n>`).
 * Wires {@link RankLoop} to the IPC channel and makes sure the rank never outlives its parent.
 * @internal
 */
import type { ChildMessage } from '../protocol.js';
import { RankLoop } from './rank-loop.js';

/** How often a rank checks that its parent still exists (backs up the IPC 'disconnect' event). */
const PARENT_WATCHDOG_MS = 500;

if (typeof process.send !== 'function') {
  console.error('child-main.js is started by DistributedRunner with an IPC channel; do not run it directly.');
  process.exit(2);
}

const parentPid = process.ppid;
const loop = new RankLoop({
  send: (msg: ChildMessage) => {
    if (process.connected) process.send!(msg);
  },
  exit: (code) => process.exit(code),
});

function orphaned(): void {
  loop.orphaned();
  process.exit(0);
}

process.on('message', (msg) => {
  loop.handle(msg).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
});
process.on('disconnect', orphaned);
setInterval(() => {
  if (process.ppid !== parentPid) orphaned();
}, PARENT_WATCHDOG_MS).unref();
