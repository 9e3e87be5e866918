/**
 * Shutdown on parent exit and on SIGINT/SIGTERM/SIGHUP, without changing what those signals do:
 * when the application installed no handler of its own, the signal is re-raised after cleanup so
 * the process still dies of it.
 * @internal
 */

/** What the hooks need from a live runner. */
export interface ExitHookTarget {
  /** Synchronous: SIGKILL every rank group and unlink every segment (runs inside 'exit'). */
  killNow(): void;
  /** Asynchronous teardown without asking the ranks (a signal is not a time to wait). */
  terminate(): Promise<void>;
}

const SIGNALS: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
const live = new Set<ExitHookTarget>();
let installed = false;

function onExit(): void {
  for (const t of live) t.killNow();
  live.clear();
}

function onSignal(signal: NodeJS.Signals): void {
  const targets = [...live];
  void Promise.allSettled(targets.map((t) => t.terminate())).then(() => {
    const othersListen = process.listeners(signal).some((l) => l !== signalListener);
    uninstall();
    if (!othersListen) process.kill(process.pid, signal);
  });
}

const signalListener = onSignal as (signal: NodeJS.Signals) => void;

function install(): void {
  if (installed) return;
  installed = true;
  process.on('exit', onExit);
  for (const s of SIGNALS) process.on(s, signalListener);
}

function uninstall(): void {
  if (!installed) return;
  installed = false;
  process.off('exit', onExit);
  for (const s of SIGNALS) process.off(s, signalListener);
}

/** Registers a live runner; hooks are installed while at least one is registered. */
export function registerExitHook(t: ExitHookTarget): void {
  live.add(t);
  install();
}

export function unregisterExitHook(t: ExitHookTarget): void {
  live.delete(t);
  if (live.size === 0) uninstall();
}
