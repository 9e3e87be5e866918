/**
 * The one owner of the process's signal and exit listeners. Entry points (`reactor run`,
 * `reactor dev`, `installShutdownHandlers`) and libraries (the runner's cleanup) register here
 * instead of calling `process.on('SIGTERM', ...)`: the registry installs one process listener per
 * signal while someone is registered, and answers the question a library's cleanup asks, "does
 * anyone else handle this signal?", so that no package reads `process.listeners()` itself.
 * One registry per process, even with two copies of this package loaded (a `Symbol.for` slot).
 */

/** The signals a serving process stops on: a terminal's Ctrl-C, a process manager's stop, a closed terminal. */
export const SHUTDOWN_SIGNALS: readonly NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];

type SignalHandler = (signal: NodeJS.Signals) => void;

interface Registry {
  handlers: Map<NodeJS.Signals, { handler: SignalHandler; once: boolean }[]>;
  listeners: Map<NodeJS.Signals, SignalHandler>;
  exitHandlers: Set<() => void>;
  exitListener: (() => void) | null;
  /** `Date.now()` until which the handler of a signal shuts down in order ({@link holdShutdown}); 0: none announced. */
  heldUntil?: number;
}

const SLOT = Symbol.for('@reactor/log.process-signals');

function registry(): Registry {
  const g = globalThis as { [SLOT]?: Registry };
  return (g[SLOT] ??= { handlers: new Map(), listeners: new Map(), exitHandlers: new Set(), exitListener: null });
}

function dispatch(signal: NodeJS.Signals): void {
  const r = registry();
  const entries = [...(r.handlers.get(signal) ?? [])];
  for (const e of entries) {
    if (e.once) remove(signal, e.handler);
    e.handler(signal);
  }
}

function remove(signal: NodeJS.Signals, handler: SignalHandler): void {
  const r = registry();
  const list = (r.handlers.get(signal) ?? []).filter((e) => e.handler !== handler);
  if (list.length > 0) {
    r.handlers.set(signal, list);
    return;
  }
  r.handlers.delete(signal);
  const listener = r.listeners.get(signal);
  if (listener) process.off(signal, listener);
  r.listeners.delete(signal);
}

/**
 * Calls `handler` on each of `signals`. While any handler is registered for a signal, its default
 * action (the process dies) does not happen: the handler decides.
 * @param options.once remove the handler of a signal after its first delivery (as `process.once`)
 * @returns a function that removes the handler from every signal
 */
export function onProcessSignal(signals: readonly NodeJS.Signals[], handler: SignalHandler, options: { once?: boolean } = {}): () => void {
  const r = registry();
  for (const s of signals) {
    const list = r.handlers.get(s) ?? [];
    list.push({ handler, once: options.once === true });
    r.handlers.set(s, list);
    if (!r.listeners.has(s)) {
      const listener: SignalHandler = (sig) => dispatch(sig);
      r.listeners.set(s, listener);
      process.on(s, listener);
    }
  }
  return () => {
    for (const s of signals) remove(s, handler);
  };
}

/** Whether anything but `handler` handles `signal`: another registered handler, or a listener an application put on `process` itself. */
export function signalHandledElsewhere(signal: NodeJS.Signals, handler: SignalHandler): boolean {
  const r = registry();
  if ((r.handlers.get(signal) ?? []).some((e) => e.handler !== handler)) return true;
  const own = r.listeners.get(signal);
  return process.listeners(signal).some((l) => l !== own);
}

/** Calls `handler` (synchronous) when the process exits. @returns a function that removes it */
export function onProcessExit(handler: () => void): () => void {
  const r = registry();
  r.exitHandlers.add(handler);
  if (!r.exitListener) {
    r.exitListener = () => {
      for (const h of [...registry().exitHandlers]) h();
    };
    process.on('exit', r.exitListener);
  }
  return () => {
    r.exitHandlers.delete(handler);
    if (r.exitHandlers.size === 0 && r.exitListener) {
      process.off('exit', r.exitListener);
      r.exitListener = null;
    }
  };
}

/**
 * Announces that the process's own signal handler shuts down in order until `untilMs`
 * (`Date.now()` time): a drain that lets a running session finish. Libraries' backstops (the
 * runner tearing its ranks down after a signal someone else handles) wait past it instead of
 * cutting the session in the middle of its drain. The latest deadline wins.
 */
export function holdShutdown(untilMs: number): void {
  const r = registry();
  r.heldUntil = Math.max(r.heldUntil ?? 0, untilMs);
}

/** The deadline {@link holdShutdown} announced (`Date.now()` time), or 0. */
export function shutdownHeldUntil(): number {
  return registry().heldUntil ?? 0;
}
