/**
 * Shutdown on parent exit and on SIGINT/SIGTERM/SIGHUP, without changing what those signals do:
 * when the application installed no handler of its own, the ranks are torn down and the signal
 * is re-raised so the process still dies of it; when it did, the application shuts the runner
 * down itself (within {@link SIGNAL_DEFER_MS}) and process exit is the backstop.
 * The listeners are the process signal registry's (`@reactor/log`: `onProcessSignal`,
 * `onProcessExit`); "the application handles it" is `signalHandledElsewhere`.
 * @internal
 */
import { SHUTDOWN_SIGNALS, onProcessExit, onProcessSignal, shutdownHeldUntil, signalHandledElsewhere } from '@reactor/log';

/** What the hooks need from a live runner. */
export interface ExitHookTarget {
  /** Synchronous: SIGKILL every rank group and unlink every segment (runs inside 'exit'). */
  killNow(): void;
  /** Asynchronous teardown without asking the ranks (a signal is not a time to wait). */
  terminate(): Promise<void>;
}

const live = new Set<ExitHookTarget>();
/** Removes the registrations (null while none). */
let installed: (() => void) | null = null;

function onExit(): void {
  for (const t of live) t.killNow();
  live.clear();
}

/**
 * How long a runner waits, after a signal the application handles itself, for the application
 * to shut it down in order (a server ends its session, the app's `unload()` calls `shutdown()`)
 * before it tears the ranks down anyway, counted from the signal or from the end of a drain the
 * application announced (`holdShutdown` of `@reactor/log`). Process exit tears them down at once.
 */
export const SIGNAL_DEFER_MS = 10_000;

function onSignal(signal: NodeJS.Signals): void {
  if (signalHandledElsewhere(signal, signalListener)) {
    // The application handles this signal: tearing the ranks down now would fail the step in
    // flight and turn an orderly shutdown into a crash. Give it time, past a drain it announced
    // (`holdShutdown`: a session may run to its drain deadline); 'exit' is the backstop.
    const backstop = (): void => {
      const wait = shutdownHeldUntil() + SIGNAL_DEFER_MS - Date.now();
      if (wait > 0) {
        setTimeout(backstop, wait).unref();
        return;
      }
      for (const t of live) void t.terminate();
    };
    setTimeout(backstop, SIGNAL_DEFER_MS).unref();
    return;
  }
  const targets = [...live];
  void Promise.allSettled(targets.map((t) => t.terminate())).then(() => {
    uninstall();
    process.kill(process.pid, signal);
  });
}

const signalListener = onSignal as (signal: NodeJS.Signals) => void;

function install(): void {
  if (installed) return;
  const offExit = onProcessExit(onExit);
  const offSignals = onProcessSignal(SHUTDOWN_SIGNALS, signalListener);
  installed = () => {
    offExit();
    offSignals();
  };
}

function uninstall(): void {
  installed?.();
  installed = null;
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
