/**
 * Entry point of a rank process (`node dist/process/child-main.js --reactor-runner=<prefix> --rank=<n>`).
 * Wires {@link RankLoop} to the IPC channel and makes sure the rank never outlives its parent,
 * however the parent dies: the IPC channel's 'disconnect', a failed send (EPIPE when the parent
 * died mid-step), a broken stdout/stderr pipe, or (backstop) a watchdog on `ppid`. Each path
 * unlinks the runner's segments before the rank exits.
 * @internal
 */
import { consoleLogger } from '@reactor/log';
import type { ChildMessage } from '../protocol.js';
import { RankLoop } from './rank-loop.js';

/** How often a rank checks that its parent still exists (backs up the IPC 'disconnect' event). */
const PARENT_WATCHDOG_MS = 500;

const log = consoleLogger({ name: 'reactor/distributed rank' });

if (typeof process.send !== 'function') {
  log.error('child-main.js is started by DistributedRunner with an IPC channel; do not run it directly.');
  process.exit(2);
}

const parentPid = process.ppid;
let leaving = false;

/** The parent is gone (or its channel broke): clean up what nobody else will, then exit. */
function orphaned(): void {
  if (leaving) return;
  leaving = true;
  loop.orphaned();
  process.exit(0);
}

const loop = new RankLoop({
  send: (msg: ChildMessage) => {
    if (!process.connected) return;
    // The callback turns a failed write (EPIPE: the parent died mid-step) into a clean exit
    // instead of an unhandled 'error' event.
    process.send!(msg, undefined, {}, (err: Error | null) => {
      if (err) orphaned();
    });
  },
  exit: (code) => process.exit(code),
  warn: (line) => process.stderr.write(`${line}\n`),
  stopSelf: () => process.kill(process.pid, 'SIGSTOP'),
});

process.on('message', (msg) => {
  loop.handle(msg).catch((err: unknown) => {
    log.error(err instanceof Error ? (err.stack ?? err.message) : String(err));
    process.exit(1);
  });
});
process.on('disconnect', orphaned);
// Errors of the IPC channel itself (no callback to report them to) and of the stdio pipes the
// parent reads: after the parent's death they mean only that it is gone.
process.on('error', orphaned);
process.stdout.on('error', orphaned);
process.stderr.on('error', orphaned);
setInterval(() => {
  if (process.ppid !== parentPid) orphaned();
}, PARENT_WATCHDOG_MS).unref();
