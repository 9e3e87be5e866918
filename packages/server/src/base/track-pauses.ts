/**
 * Which outbound tracks one connection paused (`pause_track`): kept once per connection, and read
 * by whichever media path sends its frames now (the WebSocket queue, the WebRTC session), so a
 * path that takes over mid-pause needs nothing replayed to know it.
 */
export class TrackPauses {
  readonly #paused = new Set<number>();

  /** Whether the track (`schema.tracks` index) is paused. */
  has(trackIndex: number): boolean {
    return this.#paused.has(trackIndex);
  }

  /** Pauses the track; true when it was not paused. */
  pause(trackIndex: number): boolean {
    if (this.#paused.has(trackIndex)) return false;
    this.#paused.add(trackIndex);
    return true;
  }

  /** Resumes the track; true when it was paused. */
  resume(trackIndex: number): boolean {
    return this.#paused.delete(trackIndex);
  }

  /** The paused tracks' indices, in the order they were paused. */
  list(): number[] {
    return [...this.#paused];
  }

  [Symbol.iterator](): IterableIterator<number> {
    return this.#paused.values();
  }
}
