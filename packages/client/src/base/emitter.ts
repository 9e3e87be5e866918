/** A listener for one event type. */
export type Listener<T> = (value: T) => void;

/**
 * A minimal typed event emitter that works in browsers and Node alike.
 * Listener errors are isolated: one throwing listener never stops the others
 * (the error is reported with `queueMicrotask` so it still surfaces).
 */
export class TypedEmitter<E extends object> {
  readonly #listeners = new Map<keyof E, Set<Listener<never>>>();

  /**
   * Adds a listener; returns a function that removes it.
   * @example client.on('frame', (f) => draw(f));
   */
  on<K extends keyof E>(type: K, listener: Listener<E[K]>): () => void {
    let set = this.#listeners.get(type);
    if (!set) this.#listeners.set(type, (set = new Set()));
    set.add(listener as Listener<never>);
    return () => this.off(type, listener);
  }

  /** Adds a listener that runs at most once. */
  once<K extends keyof E>(type: K, listener: Listener<E[K]>): () => void {
    const off = this.on(type, (v) => {
      off();
      listener(v);
    });
    return off;
  }

  /** Removes a listener added with {@link on}. */
  off<K extends keyof E>(type: K, listener: Listener<E[K]>): void {
    this.#listeners.get(type)?.delete(listener as Listener<never>);
  }

  /** Number of listeners for a type. */
  listenerCount(type: keyof E): number {
    return this.#listeners.get(type)?.size ?? 0;
  }

  protected emit<K extends keyof E>(type: K, value: E[K]): void {
    const set = this.#listeners.get(type);
    if (!set) return;
    for (const l of [...set]) {
      try {
        (l as Listener<E[K]>)(value);
      } catch (err) {
        queueMicrotask(() => {
          throw err;
        });
      }
    }
  }

  protected removeAllListeners(): void {
    this.#listeners.clear();
  }
}
